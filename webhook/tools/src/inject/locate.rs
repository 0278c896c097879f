//! Lines of the keys of a document, from the YAML parser's own source
//! locations (serde-saphyr's [`Spanned`]), so that errors point at the
//! offending field (an annotation, an unknown field) rather than at the
//! document.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// The shape of a parsed document: mappings with the 1-based line of each
/// key (relative to the text parsed), sequences, and scalars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLines {
    /// A mapping: key, line of the key, value.
    Map(Vec<(String, u64, KeyLines)>),
    /// A sequence.
    Seq(Vec<KeyLines>),
    /// A scalar (or anything else without keys).
    Leaf,
}

impl KeyLines {
    /// Parses `text` (one YAML or JSON document). `None` when the parser
    /// cannot give locations for it (e.g. a mapping used as a key).
    pub fn parse(text: &str) -> Option<Self> {
        serde_saphyr::from_str::<Self>(text).ok()
    }

    /// Line of the deepest key of `path` that exists (`[i]` segments index
    /// sequences; a mapping item counts as being on the line of its first
    /// key), or `None` when not even the first one does.
    pub fn line_of(&self, path: &[String]) -> Option<u64> {
        let mut node = self;
        let mut line = None;
        for segment in path {
            let (next, key_line) = match (node, index_of(segment)) {
                (Self::Seq(items), Some(i)) => match items.get(i) {
                    Some(item) => (item, item.first_key_line()),
                    None => break,
                },
                (Self::Map(entries), None) => match entries.iter().find(|(k, _, _)| k == segment) {
                    Some((_, l, value)) => (value, Some(*l)),
                    None => break,
                },
                _ => break,
            };
            line = key_line.or(line);
            node = next;
        }
        line
    }

    /// Line of a mapping's first key (where a sequence item starts).
    fn first_key_line(&self) -> Option<u64> {
        match self {
            Self::Map(entries) => entries.first().map(|(_, l, _)| *l),
            _ => None,
        }
    }
}

/// `3` for a path segment `[3]`.
fn index_of(segment: &str) -> Option<usize> {
    segment.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// A mapping key as text, whatever its scalar type (`1: x`, `true: y`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                Ok(Key(String::new()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for KeyLines {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = KeyLines;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a YAML node")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyLines, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<Key>>()? {
                    let value = map.next_value::<KeyLines>()?;
                    entries.push((key.value.0, key.referenced.line(), value));
                }
                Ok(KeyLines::Map(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyLines, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<KeyLines>()? {
                    items.push(item);
                }
                Ok(KeyLines::Seq(items))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<KeyLines, D::Error> {
                KeyLines::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<KeyLines, D::Error> {
                KeyLines::deserialize(d)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_i128<E: de::Error>(self, _: i128) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_u128<E: de::Error>(self, _: u128) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
            fn visit_none<E: de::Error>(self) -> Result<KeyLines, E> {
                Ok(KeyLines::Leaf)
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn lines_of_nested_keys_in_block_yaml() {
        let text = "\
# comment
apiVersion: batch/v1
kind: Job
spec:
  template:
    metadata:
      annotations:
        example.com/x: \"1\"
        kube-prestop.io/sidecar-cpu-limit: lots
    spec:
      containers:
      - name: a
        image: x
      - name: b
        imagePullPolcy: Always
";
        let lines = KeyLines::parse(text).unwrap();
        let annotation = path(&[
            "spec",
            "template",
            "metadata",
            "annotations",
            "kube-prestop.io/sidecar-cpu-limit",
        ]);
        assert_eq!(lines.line_of(&annotation), Some(9));
        let field = path(&[
            "spec",
            "template",
            "spec",
            "containers",
            "[1]",
            "imagePullPolcy",
        ]);
        assert_eq!(lines.line_of(&field), Some(15));
        // A missing tail: the deepest key that exists.
        assert_eq!(lines.line_of(&path(&["spec", "nope"])), Some(4));
        assert_eq!(lines.line_of(&path(&["nope"])), None);
    }

    #[test]
    fn lines_in_flow_style_and_json() {
        let json = "{\n  \"metadata\": {\n    \"annotations\": {\"a\": \"1\",\n      \"kube-prestop.io/inject\": \"maybe\"}\n  }\n}";
        let lines = KeyLines::parse(json).unwrap();
        let p = path(&["metadata", "annotations", "kube-prestop.io/inject"]);
        assert_eq!(lines.line_of(&p), Some(4));
        let lines = KeyLines::parse("items: [{a: 1}, {b: 2}]\n").unwrap();
        assert_eq!(lines.line_of(&path(&["items", "[1]", "b"])), Some(1));
        let lines = KeyLines::parse("items:\n- a: 1\n- b: 2\n  c: 3\n").unwrap();
        assert_eq!(lines.line_of(&path(&["items", "[1]"])), Some(3));
        assert_eq!(lines.line_of(&path(&["items", "[1]", "c"])), Some(4));
    }
}
