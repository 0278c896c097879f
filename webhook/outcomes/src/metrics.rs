//! The exporter's Prometheus registry (its own process, so its own
//! registry; the admission server's metrics are `kube-prestop-metrics`).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `kube_prestop_hook_outcomes_total` | counter | `outcome`, `late`, `namespace`, `owner_kind` | hook runs, each counted once, by outcome ([`OutcomeLabel`]), whether the run was late (`true`, `false`: [`late_label`]), the pod's namespace and owner kind ([`OwnerKind`]) |
//! | `kube_prestop_hook_outcome_messages_unreadable_total` | counter | `reason` ([`Unreadable`]) | sidecar messages (or lines of one) that could not be read, and pods that reached the per-pod key limit |
//! | `kube_prestop_outcomes_tracked_pods` | gauge | | live pods the exporter holds counted keys for |
//! | `kube_prestop_outcomes_watch_errors_total` | counter | | errors of the pod watch (it retries with backoff) |
//!
//! The unreadable reasons exist at zero from the start; the outcome series
//! appear with their namespace's first count.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::read::{OutcomeLabel, OwnerKind, Unreadable};
use crate::tracker::Count;

/// The `late` label's value: `"true"` for a late run (instance `0-0`, the
/// run its watcher never saw, whose hook ran at the pod's end with
/// `KUBE_PRESTOP_LATE=1`), else `"false"`. Two values, so the label at most
/// doubles the outcome series.
pub const fn late_label(late: bool) -> &'static str {
    if late { "true" } else { "false" }
}

/// Labels of `kube_prestop_hook_outcomes_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// [`OutcomeLabel::as_str`].
    pub outcome: &'static str,
    /// [`late_label`]: `true` or `false`.
    pub late: &'static str,
    /// The pod's namespace.
    pub namespace: String,
    /// [`OwnerKind::as_str`].
    pub owner_kind: &'static str,
}

/// Labels of `kube_prestop_hook_outcome_messages_unreadable_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnreadableLabels {
    /// [`Unreadable::as_str`].
    pub reason: &'static str,
}

/// The exporter's metrics; cheap to clone (shared handles).
#[derive(Clone)]
pub struct OutcomeMetrics {
    registry: Arc<Registry>,
    outcomes: Family<OutcomeLabels, Counter>,
    unreadable: Family<UnreadableLabels, Counter>,
    tracked_pods: Gauge,
    watch_errors: Counter,
}

impl std::fmt::Debug for OutcomeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutcomeMetrics").finish_non_exhaustive()
    }
}

impl Default for OutcomeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl OutcomeMetrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "kube_prestop_hook_outcomes",
            "Hook runs of injected pods, each counted once, by outcome (ran: exit 0; failed: another exit, a signal, not found or not executable; skipped-prestop, skipped-run-on, abandoned, cut by the grace period, missed, unknown), late (true: the run its sidecar never saw, instance 0-0, answered at the pod's end with KUBE_PRESTOP_LATE=1), namespace and owner kind",
            outcomes.clone(),
        );
        let unreadable = Family::<UnreadableLabels, Counter>::default();
        registry.register(
            "kube_prestop_hook_outcome_messages_unreadable",
            "Sidecar termination messages or lines that could not be read, by reason (too_large, no_header, bad_line), and pods that reached the per-pod key limit (too_many_runs)",
            unreadable.clone(),
        );
        let tracked_pods = Gauge::default();
        registry.register(
            "kube_prestop_outcomes_tracked_pods",
            "Live injected pods the outcome exporter holds counted keys for",
            tracked_pods.clone(),
        );
        let watch_errors = Counter::default();
        registry.register(
            "kube_prestop_outcomes_watch_errors",
            "Errors of the outcome exporter's pod watch (retried with backoff)",
            watch_errors.clone(),
        );
        for reason in Unreadable::ALL {
            drop(unreadable.get_or_create(&UnreadableLabels {
                reason: reason.as_str(),
            }));
        }
        Self {
            registry: Arc::new(registry),
            outcomes,
            unreadable,
            tracked_pods,
            watch_errors,
        }
    }

    /// Adds one count.
    pub fn record(&self, count: &Count) {
        match count {
            Count::Outcome {
                outcome,
                late,
                namespace,
                owner_kind,
            } => self.record_outcome(*outcome, *late, namespace, *owner_kind),
            Count::Unreadable(reason) => {
                self.unreadable
                    .get_or_create(&UnreadableLabels {
                        reason: reason.as_str(),
                    })
                    .inc();
            }
        }
    }

    fn record_outcome(
        &self,
        outcome: OutcomeLabel,
        late: bool,
        namespace: &str,
        owner_kind: OwnerKind,
    ) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
                late: late_label(late),
                namespace: namespace.to_owned(),
                owner_kind: owner_kind.as_str(),
            })
            .inc();
    }

    /// Sets the tracked pods gauge.
    pub fn set_tracked_pods(&self, pods: usize) {
        self.tracked_pods
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    /// Counts one watch error.
    pub fn record_watch_error(&self) {
        self.watch_errors.inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn counts_are_exposed_with_their_labels() {
        let m = OutcomeMetrics::new();
        let text = m.encode().unwrap();
        assert!(
            text.contains(
                "kube_prestop_hook_outcome_messages_unreadable_total{reason=\"no_header\"} 0"
            ),
            "{text}"
        );
        assert!(
            !text.contains("kube_prestop_hook_outcomes_total{"),
            "{text}"
        );
        let ran = Count::Outcome {
            outcome: OutcomeLabel::Missed,
            late: false,
            namespace: "jobs".into(),
            owner_kind: OwnerKind::Workflow,
        };
        m.record(&ran);
        m.record(&ran);
        m.record(&Count::Outcome {
            outcome: OutcomeLabel::Ran,
            late: true,
            namespace: "jobs".into(),
            owner_kind: OwnerKind::Job,
        });
        m.record(&Count::Unreadable(Unreadable::BadLine));
        m.set_tracked_pods(7);
        let text = m.encode().unwrap();
        assert!(
            text.contains("kube_prestop_hook_outcomes_total{outcome=\"missed\",late=\"false\",namespace=\"jobs\",owner_kind=\"Workflow\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kube_prestop_hook_outcomes_total{outcome=\"ran\",late=\"true\",namespace=\"jobs\",owner_kind=\"Job\"} 1"),
            "{text}"
        );
        // Only the series counted: no `late="false"` twin of a late count.
        assert_eq!(
            text.matches("kube_prestop_hook_outcomes_total{").count(),
            2,
            "{text}"
        );
        assert!(
            text.contains(
                "kube_prestop_hook_outcome_messages_unreadable_total{reason=\"bad_line\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("kube_prestop_outcomes_tracked_pods 7"),
            "{text}"
        );
        assert!(
            text.contains("kube_prestop_outcomes_watch_errors_total 0"),
            "{text}"
        );
    }
}
