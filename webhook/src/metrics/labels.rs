//! The label vocabularies of the metrics: every value a label can take,
//! owned here so that the registry can create each series at zero and the
//! modules that count events name them with these types. The engine's skip
//! reasons and error kinds come from the engine's own stable `as_str()`
//! names, kept behind one function each.

use kube_prestop_engine::{EngineError, SkipReason};

/// `decision`s and `reason`s the server itself produces (besides the
/// engine's skip reasons and error labels).
const SERVER_OUTCOMES: [(&str, &str); 10] = [
    ("inject", "injected"),
    ("inject", "no_change"),
    ("ignored", "other_resource"),
    ("ignored", "other_operation"),
    ("error", "invalid_pod"),
    ("error", "engine_panic"),
    ("error", "patch_error"),
    ("error", "serialize"),
    ("invalid", "bad_request"),
    ("invalid", "body_too_large"),
];

/// Every (`decision`, `reason`) pair of `kube_prestop_admissions_total`:
/// `skip` with each engine skip reason, `error` with each engine error
/// label, and the server's own outcomes; no duplicates. The metrics
/// registry creates each series at zero at start-up, so dashboards and
/// alerts see it before its first event.
pub fn admission_outcomes() -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<(&'static str, &'static str)> = SkipReason::ALL
        .iter()
        .map(|r| ("skip", r.as_str()))
        .chain(EngineError::LABELS.iter().map(|l| ("error", *l)))
        .chain(SERVER_OUTCOMES)
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    all.retain(|pair| seen.insert(*pair));
    all
}

/// The metric/log label of a skip reason, e.g. `not_job_owned`.
pub fn skip_reason(reason: &SkipReason) -> String {
    reason.as_str().to_owned()
}

/// The metric/log label of an engine error, e.g. `invalid_annotation`.
pub fn engine_error(error: &EngineError) -> String {
    error.as_str().to_owned()
}

/// Values of `sidecar_binary` in `kube_prestop_injections_total`: the
/// binary mounted from the namespace's ConfigMap, or copied by the install
/// init container (the chart's `sidecarBinary.source` values).
pub const SIDECAR_BINARY_SOURCES: [&str; 2] = ["configMap", "installContainer"];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_outcome_labels() {
        let labels: Vec<_> = CreationOutcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["created", "exists", "error"]);
    }
}
