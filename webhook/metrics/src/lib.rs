//! Prometheus metrics of the admission server (`prometheus-client`), served
//! in the text exposition format on the plain-HTTP metrics port.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `kube_prestop_admissions_total` | counter | `decision`, `reason` | admission reviews answered |
//! | `kube_prestop_admission_duration_seconds` | histogram | | time to answer a `/mutate` request (reading the body included), in seconds |
//! | `kube_prestop_certificate_expiry_timestamp_seconds` | gauge | | `notAfter` of the serving certificate, Unix seconds |
//! | `kube_prestop_certificate_reloads_total` | counter | `result` (`success`, `error`) | reloads of changed certificate files |
//! | `kube_prestop_sidecar_configmap_creations_total` | counter | `result` (`created`, `exists`, `error`) | attempts to create the sidecar-binary ConfigMap in a namespace |
//! | `kube_prestop_sidecar_configmap_refusals_total` | counter | `reason` (`unselected`, `excluded`) | creations of the sidecar-binary ConfigMap not attempted because the namespace may not be written (no request sent) |
//! | `kube_prestop_injections_total` | counter | `sidecar_binary` (`imageVolume`, `configMap`, `installContainer`) | pods injected (patch sent; dry runs not counted), by where their sidecar binary comes from |
//!
//! Every known label combination of the counters (each decision with each
//! of its reasons, see [`labels::admission_outcomes`], both reload
//! results, the three creation results, the two refusal reasons and the
//! three binary sources) is created
//! at zero when the registry is made, so the series exist before their
//! first event.
//!
//! A leaf of the crate: it depends on no other module of it. The label
//! values live in [`labels`]; the modules that count events use them.

pub mod labels;

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use labels::{CreationOutcome, DecisionLabel, RELOAD_RESULTS, Refusal, SIDECAR_BINARY_SOURCES};

/// Labels of `kube_prestop_admissions_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// [`DecisionLabel::as_str`]: `inject`, `skip`, `ignored` (not a pod CREATE), `error` (engine
    /// error or unreadable pod; admitted or denied per the failure mode) or
    /// `invalid` (not an AdmissionReview: HTTP 400; too large: HTTP 413).
    pub decision: String,
    /// Machine-readable reason: the engine's skip reason or error kind, or
    /// `injected`, `no_change`, `other_resource`, `other_operation`,
    /// `invalid_pod`, `engine_panic`, `patch_error`, `serialize`,
    /// `bad_request`, `body_too_large` (every pair:
    /// [`labels::admission_outcomes`]).
    pub reason: String,
}

/// All metrics of the process, cheap to clone (shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    admissions: Family<AdmissionLabels, Counter>,
    duration: Histogram,
    cert_expiry: Gauge,
    cert_reloads: Family<ReloadLabels, Counter>,
    sidecar_configmap_creations: Family<CreationLabels, Counter>,
    sidecar_configmap_refusals: Family<RefusalLabels, Counter>,
    injections: Family<InjectionLabels, Counter>,
}

/// Labels of `kube_prestop_injections_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InjectionLabels {
    /// One of [`SIDECAR_BINARY_SOURCES`].
    pub sidecar_binary: String,
}

/// Labels of `kube_prestop_certificate_reloads_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `success` or `error`.
    pub result: String,
}

/// Labels of `kube_prestop_sidecar_configmap_creations_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreationLabels {
    /// `created` (201), `exists` (409 AlreadyExists) or `error` (any other
    /// answer, or none within the timeout): [`CreationOutcome::label`].
    pub result: String,
}

/// Labels of `kube_prestop_sidecar_configmap_refusals_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// `unselected` or `excluded`: [`Refusal::label`].
    pub reason: String,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Histogram buckets in seconds: 0.5 ms .. ~2 s. Admission is a pure
/// in-memory computation; the apiserver's default webhook timeout is 10 s.
const DURATION_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let admissions = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "kube_prestop_admissions",
            "Admission reviews answered, by decision and reason",
            admissions.clone(),
        );
        let duration = Histogram::new(DURATION_BUCKETS);
        registry.register_with_unit(
            "kube_prestop_admission_duration",
            "Time to answer an admission review",
            Unit::Seconds,
            duration.clone(),
        );
        let cert_expiry = Gauge::default();
        registry.register_with_unit(
            "kube_prestop_certificate_expiry_timestamp",
            "notAfter of the serving certificate as a Unix timestamp",
            Unit::Seconds,
            cert_expiry.clone(),
        );
        let cert_reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "kube_prestop_certificate_reloads",
            "Reloads of changed serving certificate files, by result",
            cert_reloads.clone(),
        );
        let sidecar_configmap_creations = Family::<CreationLabels, Counter>::default();
        registry.register(
            "kube_prestop_sidecar_configmap_creations",
            "Attempts to create the sidecar-binary ConfigMap in a namespace, by result",
            sidecar_configmap_creations.clone(),
        );
        let sidecar_configmap_refusals = Family::<RefusalLabels, Counter>::default();
        registry.register(
            "kube_prestop_sidecar_configmap_refusals",
            "Creations of the sidecar-binary ConfigMap not attempted because the namespace may not be written (not selected by --namespace-selector, or excluded), by reason",
            sidecar_configmap_refusals.clone(),
        );
        let injections = Family::<InjectionLabels, Counter>::default();
        registry.register(
            "kube_prestop_injections",
            "Pods injected, by where their sidecar binary comes from (imageVolume: the install image mounted as an image volume; configMap: mounted from the namespace's ConfigMap for the pod's architecture; installContainer: copied by the install init container)",
            injections.clone(),
        );
        // Every known series exists from the start, at zero: a counter that
        // appears only with its first event hides it from `rate()` and
        // `absent()`-style alerts until then.
        for (decision, reason) in labels::admission_outcomes() {
            // The returned guard is the family's read lock: release it.
            drop(admissions.get_or_create(&AdmissionLabels {
                decision: decision.as_str().to_owned(),
                reason: reason.to_owned(),
            }));
        }
        for result in RELOAD_RESULTS {
            drop(cert_reloads.get_or_create(&ReloadLabels {
                result: result.to_owned(),
            }));
        }
        for outcome in CreationOutcome::ALL {
            drop(sidecar_configmap_creations.get_or_create(&CreationLabels {
                result: outcome.label().to_owned(),
            }));
        }
        for refusal in Refusal::ALL {
            drop(sidecar_configmap_refusals.get_or_create(&RefusalLabels {
                reason: refusal.label().to_owned(),
            }));
        }
        for source in SIDECAR_BINARY_SOURCES {
            drop(injections.get_or_create(&InjectionLabels {
                sidecar_binary: source.to_owned(),
            }));
        }
        Self {
            registry: Arc::new(registry),
            admissions,
            duration,
            cert_expiry,
            cert_reloads,
            sidecar_configmap_creations,
            sidecar_configmap_refusals,
            injections,
        }
    }

    /// Count one injected pod whose sidecar binary comes from
    /// `sidecar_binary` (one of [`SIDECAR_BINARY_SOURCES`]).
    pub fn record_injection(&self, sidecar_binary: &str) {
        self.injections
            .get_or_create(&InjectionLabels {
                sidecar_binary: sidecar_binary.to_owned(),
            })
            .inc();
    }

    /// Count one answered review.
    pub fn record_admission(&self, decision: DecisionLabel, reason: &str, seconds: f64) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                decision: decision.as_str().to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
        self.duration.observe(seconds);
    }

    /// Set the serving certificate's `notAfter` (Unix seconds).
    pub fn set_certificate_expiry(&self, not_after_unix: i64) {
        self.cert_expiry.set(not_after_unix);
    }

    /// Count one reload attempt of changed certificate files.
    pub fn record_certificate_reload(&self, success: bool) {
        let [ok, failed] = RELOAD_RESULTS;
        let result = if success { ok } else { failed };
        self.cert_reloads
            .get_or_create(&ReloadLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Count one attempt to create the sidecar-binary ConfigMap.
    pub fn record_sidecar_configmap_creation(&self, outcome: CreationOutcome) {
        self.sidecar_configmap_creations
            .get_or_create(&CreationLabels {
                result: outcome.label().to_owned(),
            })
            .inc();
    }

    /// Count one creation of the sidecar-binary ConfigMap that was not
    /// attempted, for `refusal`.
    pub fn record_sidecar_configmap_refusal(&self, refusal: Refusal) {
        self.sidecar_configmap_refusals
            .get_or_create(&RefusalLabels {
                reason: refusal.label().to_owned(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
