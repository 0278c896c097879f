//! The label vocabularies of the metrics: every value a label can take,
//! owned here so that the registry can create each series at zero and the
//! modules that count events name them with these types. The engine's skip
//! reasons and error kinds come from the engine's own stable `as_str()`
//! names, kept behind one function each.

use std::fmt;

use kube_prestop_engine::{Delivery, EngineError, SkipReason};

/// What the webhook did with one admission request: the `decision` label
/// of `kube_prestop_admissions_total` and of the `admission` log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DecisionLabel {
    /// The pod was injected (a patch was sent), or needed no change.
    Inject,
    /// The engine left the pod alone (the reason says why).
    Skip,
    /// Not a pod CREATE: answered allowed, without looking at the object.
    Ignored,
    /// An engine error or an unreadable pod: admitted uninjected (an engine
    /// error's pod annotated with `kube-prestop.io/skipped`) or denied,
    /// per the failure mode.
    Error,
    /// Not an AdmissionReview (HTTP 400), or a body too large (HTTP 413).
    Invalid,
}

impl DecisionLabel {
    /// Every decision, in declaration order.
    pub const ALL: [Self; 5] = [
        Self::Inject,
        Self::Skip,
        Self::Ignored,
        Self::Error,
        Self::Invalid,
    ];

    /// The label value: `inject`, `skip`, `ignored`, `error` or `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inject => "inject",
            Self::Skip => "skip",
            Self::Ignored => "ignored",
            Self::Error => "error",
            Self::Invalid => "invalid",
        }
    }
}

impl fmt::Display for DecisionLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `reason` labels the server itself gives (besides the engine's skip
/// reasons and error labels), one constant each.
pub mod reason {
    /// A patch was sent.
    pub const INJECTED: &str = "injected";
    /// The engine injected, but the patch is empty.
    pub const NO_CHANGE: &str = "no_change";
    /// Not a pod (or a pod subresource).
    pub const OTHER_RESOURCE: &str = "other_resource";
    /// A pod, but not a CREATE.
    pub const OTHER_OPERATION: &str = "other_operation";
    /// The request's object is absent or does not parse as a Pod.
    pub const INVALID_POD: &str = "invalid_pod";
    /// The engine panicked (a bug of ours).
    pub const ENGINE_PANIC: &str = "engine_panic";
    /// The JSON Patch could not be serialized or encoded.
    pub const PATCH_ERROR: &str = "patch_error";
    /// The answer could not be serialized.
    pub const SERIALIZE: &str = "serialize";
    /// The body is not an AdmissionReview.
    pub const BAD_REQUEST: &str = "bad_request";
    /// The body is over the size limit.
    pub const BODY_TOO_LARGE: &str = "body_too_large";
    /// The injected pod would be over the bound kept below etcd's request
    /// limit (answered per the failure mode).
    pub const POD_TOO_LARGE: &str = "pod_too_large";
    /// The request was shed (HTTP 503): the bytes of request bodies in
    /// flight were at their limit; the API server applies the webhook's
    /// `failurePolicy`.
    pub const OVERLOADED: &str = "overloaded";
    /// The server requires a client certificate (`--client-ca-file`) and
    /// the caller presented none (HTTP 401): not the API server.
    pub const UNAUTHENTICATED: &str = "unauthenticated";
}

/// `decision`s and `reason`s the server itself produces (besides the
/// engine's skip reasons and error labels).
const SERVER_OUTCOMES: [(DecisionLabel, &str); 13] = [
    (DecisionLabel::Inject, reason::INJECTED),
    (DecisionLabel::Inject, reason::NO_CHANGE),
    (DecisionLabel::Ignored, reason::OTHER_RESOURCE),
    (DecisionLabel::Ignored, reason::OTHER_OPERATION),
    (DecisionLabel::Error, reason::INVALID_POD),
    (DecisionLabel::Error, reason::ENGINE_PANIC),
    (DecisionLabel::Error, reason::PATCH_ERROR),
    (DecisionLabel::Error, reason::POD_TOO_LARGE),
    (DecisionLabel::Error, reason::OVERLOADED),
    (DecisionLabel::Error, reason::SERIALIZE),
    (DecisionLabel::Invalid, reason::BAD_REQUEST),
    (DecisionLabel::Invalid, reason::BODY_TOO_LARGE),
    (DecisionLabel::Invalid, reason::UNAUTHENTICATED),
];

/// Every (`decision`, `reason`) pair of `kube_prestop_admissions_total`:
/// `skip` with each engine skip reason, `error` with each engine error
/// label, and the server's own outcomes; no duplicates. The metrics
/// registry creates each series at zero at start-up, so dashboards and
/// alerts see it before its first event.
pub fn admission_outcomes() -> Vec<(DecisionLabel, &'static str)> {
    let mut all: Vec<(DecisionLabel, &'static str)> = SkipReason::ALL
        .iter()
        .map(|r| (DecisionLabel::Skip, r.as_str()))
        .chain(
            EngineError::LABELS
                .iter()
                .map(|l| (DecisionLabel::Error, *l)),
        )
        .chain(SERVER_OUTCOMES)
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    all.retain(|pair| seen.insert(*pair));
    all
}

/// The metric/log label of a skip reason, e.g. `not_job_owned`.
pub fn skip_reason(reason: &SkipReason) -> &'static str {
    reason.as_str()
}

/// The metric/log label of an engine error, e.g. `invalid_annotation`.
pub fn engine_error(error: &EngineError) -> &'static str {
    error.as_str()
}

/// Values of `sidecar_binary` in `kube_prestop_injections_total`: the
/// install image mounted as an image volume, the binary mounted from the
/// namespace's ConfigMap of the pod's architecture, or copied by the
/// install init container (the engine's `Delivery::LABELS`, the chart's
/// `sidecarBinary.source` names).
pub const SIDECAR_BINARY_SOURCES: [&str; 3] = Delivery::LABELS;

/// The `sidecar_binary` label of a delivery.
pub fn sidecar_binary(delivery: &Delivery) -> &'static str {
    delivery.label()
}

/// Values of `result` in `kube_prestop_certificate_reloads_total`.
pub const RELOAD_RESULTS: [&str; 2] = ["success", "error"];

/// How one attempt to create the sidecar-binary ConfigMap ended: the
/// `result` of `kube_prestop_sidecar_configmap_creations_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreationOutcome {
    /// `201 Created`: the namespace is ready.
    Created,
    /// `409 AlreadyExists`: not an error; the watch decides whether the
    /// existing object counts (it must carry the selector's labels and not
    /// be terminating).
    Exists,
    /// Any other answer, a transport error or a timeout.
    Error,
}

impl CreationOutcome {
    /// Every outcome, in the order of their metric label values.
    pub const ALL: [Self; 3] = [Self::Created, Self::Exists, Self::Error];

    /// The `result` label value: `created`, `exists` or `error`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Exists => "exists",
            Self::Error => "error",
        }
    }
}

/// Why the webhook did not create the sidecar-binary ConfigMap in a
/// namespace where admission (or a deletion) asked for it: the `reason` of
/// `kube_prestop_sidecar_configmap_refusals_total`. No request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The namespace is not (or not yet) selected by the webhook's
    /// `--namespace-selector`, as seen by its watch of Namespaces: a review
    /// the API server would not have sent, or a namespace unlabelled since.
    Unselected,
    /// A namespace the webhook never writes into (`kube-system`, its own),
    /// whatever the selector says.
    Excluded,
}

impl Refusal {
    /// Every reason, in the order of their metric label values.
    pub const ALL: [Self; 2] = [Self::Unselected, Self::Excluded];

    /// The `reason` label value: `unselected` or `excluded`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unselected => "unselected",
            Self::Excluded => "excluded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_labels() {
        let labels: Vec<_> = DecisionLabel::ALL.iter().map(|d| d.to_string()).collect();
        assert_eq!(labels, ["inject", "skip", "ignored", "error", "invalid"]);
        // Every decision has at least one reason.
        let outcomes = admission_outcomes();
        for decision in DecisionLabel::ALL {
            assert!(outcomes.iter().any(|(d, _)| *d == decision), "{decision}");
        }
    }

    #[test]
    fn creation_outcome_labels() {
        let labels: Vec<_> = CreationOutcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["created", "exists", "error"]);
        let labels: Vec<_> = Refusal::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["unselected", "excluded"]);
    }
}
