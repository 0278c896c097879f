//! Machine-readable labels of engine outcomes, for metrics and logs: the
//! engine's own stable `as_str()` names, kept behind one function each.

use crate::engine::{EngineError, SkipReason};

/// The metric/log label of a skip reason, e.g. `not_job_owned`.
pub fn skip_reason(reason: &SkipReason) -> String {
    reason.as_str().to_owned()
}

/// The metric/log label of an engine error, e.g. `invalid_annotation`.
pub fn engine_error(error: &EngineError) -> String {
    error.as_str().to_owned()
}
