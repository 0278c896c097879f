//! Machine-readable labels of engine outcomes, for metrics and logs.
//!
//! Kept in one place so the mapping follows the engine's `as_str()` names.

use crate::engine::{EngineError, SkipReason};

/// The metric/log label of a skip reason.
pub fn skip_reason(reason: &SkipReason) -> String {
    snake(&format!("{reason:?}"))
}

/// The metric/log label of an engine error.
pub fn engine_error(error: &EngineError) -> String {
    let debug = format!("{error:?}");
    let variant = debug.split(['(', ' ', '{']).next().unwrap_or("error");
    snake(variant)
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
