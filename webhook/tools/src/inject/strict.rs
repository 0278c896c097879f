//! Strict typing of Kubernetes documents: k8s-openapi types ignore unknown
//! fields, so the typed value is serialized again and compared with the
//! input; a key the round trip lost is an unknown (or misspelt) field.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a document does not type-check.
#[derive(Debug)]
pub enum StrictError {
    /// serde could not build the type (wrong value type, missing field):
    /// the message, and the path from the document root to the value it is
    /// about (as [`UnknownField`](Self::UnknownField)'s; empty when serde
    /// names no place).
    Invalid(String, Vec<String>),
    /// A field the type does not have; the path from the document root.
    UnknownField(Vec<String>),
}

/// Deserialize `value` as `T`, refusing unknown fields.
pub fn from_value_strict<T: DeserializeOwned + Serialize>(value: &Value) -> Result<T, StrictError> {
    let typed: T = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let path = e
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => Some(format!("[{index}]")),
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        StrictError::Invalid(e.into_inner().to_string(), path)
    })?;
    let round = serde_json::to_value(&typed)
        .map_err(|e| StrictError::Invalid(e.to_string(), Vec::new()))?;
    let mut path = Vec::new();
    if find_unknown(value, &round, &mut path) {
        return Err(StrictError::UnknownField(path));
    }
    Ok(typed)
}

/// Depth-first search for a key of `input` missing from `round`. Null
/// input values do not count (they are "unset" to Kubernetes as well).
fn find_unknown(input: &Value, round: &Value, path: &mut Vec<String>) -> bool {
    match (input, round) {
        (Value::Object(inp), Value::Object(out)) => {
            for (key, value) in inp {
                if value.is_null() {
                    continue;
                }
                path.push(key.clone());
                match out.get(key) {
                    None => return true,
                    Some(o) => {
                        if find_unknown(value, o, path) {
                            return true;
                        }
                    }
                }
                path.pop();
            }
            false
        }
        (Value::Object(inp), _) => {
            // An object became something else (or vanished): its first
            // non-null key is the unknown one.
            if let Some((key, _)) = inp.iter().find(|(_, v)| !v.is_null()) {
                path.push(key.clone());
                return true;
            }
            false
        }
        (Value::Array(inp), Value::Array(out)) => {
            for (index, (i, o)) in inp.iter().zip(out.iter()).enumerate() {
                path.push(format!("[{index}]"));
                if find_unknown(i, o, path) {
                    return true;
                }
                path.pop();
            }
            false
        }
        _ => false,
    }
}

/// `spec.template.spec.containers[0].imagePullPolcy`.
pub fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if !segment.starts_with('[') && !out.is_empty() {
            out.push('.');
        }
        out.push_str(segment);
    }
    out
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn reports_unknown_container_field() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "creationTimestamp": null},
            "spec": {"containers": [{"name": "a", "image": "x", "imagePullPolcy": "Always"}]}});
        match from_value_strict::<Pod>(&pod) {
            Err(StrictError::UnknownField(path)) => {
                assert_eq!(display_path(&path), "spec.containers[0].imagePullPolcy");
            }
            other => panic!("unexpected: {other:?}"),
        }
    }

    #[test]
    fn accepts_known_fields() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": 1}}}],
                     "volumes": [{"name": "v", "emptyDir": {}}]}, "status": {}});
        assert!(from_value_strict::<Pod>(&pod).is_ok());
    }
}
