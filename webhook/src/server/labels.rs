//! Machine-readable labels of engine outcomes, for metrics and logs: the
//! engine's own stable `as_str()` names, kept behind one function each.

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
