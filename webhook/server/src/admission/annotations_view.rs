//! What writing [`annotations::SKIPPED`] on a pod depends on in the pod's
//! own annotations ([`AnnotationsView`]), taken from a parsed `Pod` or
//! scanned from the pod's raw JSON without parsing it (a pod too costly to
//! parse, [`super::wire::Object::TooCostly`]). The scan builds nothing per
//! annotation and skips the rest of the pod unread ([`IgnoredAny`]): its
//! memory is that of the largest single key or value (serde_json's scratch
//! buffer, for a string with escapes) plus the current
//! [`annotations::SKIPPED`] value, however many entries the pod has.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use kube_prestop_engine::annotations;

/// A pod's annotations as far as [`annotations::SKIPPED`] is concerned:
/// whether the map is there, the size of the other entries, and the
/// current value. Fixed size apart from that one value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct AnnotationsView {
    /// `metadata.annotations` is a JSON object (absent or `null`: `false`,
    /// as k8s-openapi reads it, `None`): the patch then adds the whole map.
    pub present: bool,
    /// Bytes of the keys and values (UTF-8, as decoded) of every entry but
    /// [`annotations::SKIPPED`], saturating: what the API server's 256 KiB
    /// annotation bound counts besides ours. A key sent twice (no API
    /// server does: it re-encodes the object) is counted twice.
    pub others_bytes: usize,
    /// The current [`annotations::SKIPPED`] value, if any (of a key sent
    /// twice, the last, as a `BTreeMap` keeps it).
    pub skipped: Option<String>,
}

impl AnnotationsView {
    /// The view of a parsed pod.
    pub fn of(pod: &Pod) -> Self {
        let Some(map) = &pod.metadata.annotations else {
            return Self::default();
        };
        Self {
            present: true,
            others_bytes: map
                .iter()
                .filter(|(k, _)| k.as_str() != annotations::SKIPPED)
                .fold(0, |sum: usize, (k, v)| {
                    sum.saturating_add(k.len()).saturating_add(v.len())
                }),
            skipped: map.get(annotations::SKIPPED).cloned(),
        }
    }

    /// Scans `raw`, a pod's JSON text, for its view without parsing the
    /// pod: only `apiVersion` and `kind` (which must be `v1` and `Pod`
    /// when present, as for a `Pod`) and `metadata.annotations` are read,
    /// everything else skipped. As k8s-openapi reads a pod, the last of a
    /// field sent twice counts, and a `null` `metadata` or `annotations`
    /// is absent.
    ///
    /// Errors: `raw` is not a JSON object, `metadata` or `annotations` is
    /// neither an object nor `null`, an annotation's value is not a
    /// string, the JSON is malformed or nested deeper than serde_json's
    /// recursion limit (128), or trailing characters follow the object.
    pub fn scan(raw: &str) -> Result<Self, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(raw);
        let view = de.deserialize_map(PodScan)?;
        de.end()?;
        Ok(view)
    }

    /// The smallest pod that [`kube_prestop_engine::patch::annotation_operations`]
    /// treats as the viewed one for an entry of [`annotations::SKIPPED`]:
    /// annotations only when present, holding only that key's current
    /// value (the function reads nothing else of the pod for it).
    pub fn as_pod(&self) -> Pod {
        let annotations = self.present.then(|| {
            self.skipped
                .iter()
                .map(|v| (annotations::SKIPPED.to_owned(), v.clone()))
                .collect::<BTreeMap<_, _>>()
        });
        Pod {
            metadata: ObjectMeta {
                annotations,
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }
}

/// The pod's fields the scan reads; any other is skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum PodField {
    ApiVersion,
    Kind,
    Metadata,
    #[serde(other)]
    Other,
}

/// `metadata`'s field the scan reads; any other is skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum MetadataField {
    Annotations,
    #[serde(other)]
    Other,
}

/// Visits the pod object.
struct PodScan;

impl<'de> Visitor<'de> for PodScan {
    type Value = AnnotationsView;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Pod object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnnotationsView, A::Error> {
        let mut view = AnnotationsView::default();
        while let Some(field) = map.next_key::<PodField>()? {
            match field {
                PodField::ApiVersion => map.next_value_seed(Exactly("v1"))?,
                PodField::Kind => map.next_value_seed(Exactly("Pod"))?,
                PodField::Metadata => view = map.next_value_seed(Nullable(MetadataScan))?,
                PodField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(view)
    }
}

/// Visits `metadata`.
struct MetadataScan;

impl<'de> Visitor<'de> for MetadataScan {
    type Value = AnnotationsView;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an ObjectMeta object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnnotationsView, A::Error> {
        let mut view = AnnotationsView::default();
        while let Some(field) = map.next_key::<MetadataField>()? {
            match field {
                MetadataField::Annotations => {
                    view = map.next_value_seed(Nullable(AnnotationsScan))?;
                }
                MetadataField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(view)
    }
}

/// Visits `metadata.annotations`, one entry at a time.
struct AnnotationsScan;

impl<'de> Visitor<'de> for AnnotationsScan {
    type Value = AnnotationsView;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnnotationsView, A::Error> {
        let mut view = AnnotationsView {
            present: true,
            ..AnnotationsView::default()
        };
        while let Some(key) = map.next_key::<Key>()? {
            if key.is_skipped {
                view.skipped = Some(map.next_value::<String>()?);
            } else {
                let value = map.next_value::<Len>()?;
                view.others_bytes = view
                    .others_bytes
                    .saturating_add(key.len)
                    .saturating_add(value.0);
            }
        }
        Ok(view)
    }
}

/// An annotation key, read without keeping it: its length in bytes and
/// whether it is [`annotations::SKIPPED`].
struct Key {
    len: usize,
    is_skipped: bool,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(Key {
                    len: s.len(),
                    is_skipped: s == annotations::SKIPPED,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A string value, read without keeping it: its length in bytes.
struct Len(usize);

impl<'de> Deserialize<'de> for Len {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LenVisitor;
        impl Visitor<'_> for LenVisitor {
            type Value = Len;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Len, E> {
                Ok(Len(s.len()))
            }
        }
        d.deserialize_str(LenVisitor)
    }
}

/// A string that must equal `.0` (`apiVersion`, `kind`), compared without
/// keeping it.
struct Exactly(&'static str);

impl<'de> de::DeserializeSeed<'de> for Exactly {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Exactly {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        if s == self.0 {
            Ok(())
        } else {
            Err(E::invalid_value(de::Unexpected::Str(s), &self))
        }
    }
}

/// A JSON object read by visitor `.0`, or `null` (the default view).
struct Nullable<V>(V);

impl<'de, V: Visitor<'de, Value = AnnotationsView>> de::DeserializeSeed<'de> for Nullable<V> {
    type Value = AnnotationsView;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AnnotationsView, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, V: Visitor<'de, Value = AnnotationsView>> Visitor<'de> for Nullable<V> {
    type Value = AnnotationsView;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)?;
        f.write_str(" or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<AnnotationsView, E> {
        Ok(AnnotationsView::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<AnnotationsView, E> {
        Ok(AnnotationsView::default())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<AnnotationsView, D::Error> {
        d.deserialize_map(self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The view of `raw` parsed as a `Pod`, `None` when it does not parse.
    fn parsed(raw: &str) -> Option<AnnotationsView> {
        serde_json::from_str::<Pod>(raw)
            .ok()
            .map(|pod| AnnotationsView::of(&pod))
    }

    /// The scan sees what parsing the pod sees, for pods that parse, and
    /// fails on annotations, `metadata` or pods that do not.
    #[test]
    fn the_scan_agrees_with_the_parsed_pod() {
        let skipped = annotations::SKIPPED;
        for raw in [
            r#"{}"#.to_owned(),
            r#"{"metadata": null}"#.to_owned(),
            r#"{"metadata": {}}"#.to_owned(),
            r#"{"metadata": {"annotations": null}}"#.to_owned(),
            r#"{"metadata": {"annotations": {}}}"#.to_owned(),
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "bc", "é": "ü\n"}}}"#.to_owned(),
            // Escapes: the decoded lengths count, as in a parsed map.
            r#"{"metadata": {"annotations": {"a\u00e9\"": "\u00fc\\n\ud83d\ude00"}}}"#.to_owned(),
            format!(r#"{{"metadata": {{"annotations": {{"x": "y", "{skipped}": "old"}}}}}}"#),
            format!(r#"{{"metadata": {{"annotations": {{"{skipped}": "first", "{skipped}": "last"}}}}}}"#),
            // The last of a field sent twice counts.
            r#"{"metadata": {"annotations": {"a": "b"}, "annotations": null}}"#.to_owned(),
            r#"{"metadata": {"annotations": null, "annotations": {"a": "b"}}}"#.to_owned(),
            r#"{"metadata": {"annotations": {"a": "b"}}, "metadata": {"name": "p"}}"#.to_owned(),
            r#"{"metadata": {"annotations": {"a": "b"}}, "metadata": null}"#.to_owned(),
            // Whatever else: skipped.
            r#"{"spec": {"containers": [{"name": "c", "x": [[[[1]]], {"y": null}]}]}, "status": {}, "extra": [1, "two", {"3": true}]}"#.to_owned(),
            r#"{"metadata": {"managedFields": [{"fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}}}], "annotations": {"a": "b"}}}"#.to_owned(),
            // Not a pod: both fail.
            r#"{"metadata": {"annotations": {"a": 5}}}"#.to_owned(),
            r#"{"metadata": {"annotations": {"a": null}}}"#.to_owned(),
            r#"{"metadata": {"annotations": ["a", "b"]}}"#.to_owned(),
            r#"{"metadata": {"annotations": "a"}}"#.to_owned(),
            r#"{"metadata": 5}"#.to_owned(),
            r#"{"metadata": []}"#.to_owned(),
            r#"{"kind": "Deployment"}"#.to_owned(),
            r#"{"apiVersion": "apps/v1"}"#.to_owned(),
            r#"{"kind": 5}"#.to_owned(),
            r#"[]"#.to_owned(),
            r#""pod""#.to_owned(),
            r#"null"#.to_owned(),
            r#"{"metadata": {"annotations": {"a": "b"}}"#.to_owned(),
            r#"{} {}"#.to_owned(),
        ] {
            assert_eq!(AnnotationsView::scan(&raw).ok(), parsed(&raw), "{raw}");
        }
    }

    /// A key sent twice is counted twice (a parsed map keeps one): no API
    /// server sends one, and counting it can only leave the annotation out.
    #[test]
    fn a_key_sent_twice_is_counted_twice() {
        let raw = r#"{"metadata": {"annotations": {"a": "bc", "a": "de"}}}"#;
        let view = AnnotationsView::scan(raw).unwrap();
        assert_eq!(view.others_bytes, 6);
        assert_eq!(parsed(raw).unwrap().others_bytes, 3);
    }

    /// A pod with `entries` annotations `k<i>: v<i>`, the skipped value
    /// among them, a 2 MB `managedFields` and nesting 100 deep.
    fn crowded_pod(entries: usize) -> (String, usize) {
        let mut map = serde_json::Map::new();
        let mut others = 0;
        for i in 0..entries {
            let (k, v) = (format!("example.com/k{i}"), format!("v{i}"));
            others += k.len() + v.len();
            map.insert(k, json!(v));
        }
        map.insert(annotations::SKIPPED.to_owned(), json!("pod_too_large: x"));
        let deep = (0..100).fold(json!(1), |inner, _| json!([inner]));
        let pod = json!({
            "metadata": {
                "annotations": map,
                "managedFields": [{"fieldsV1": {"f:x": "y".repeat(2_000_000)}}],
            },
            "x-deep": deep,
        });
        (serde_json::to_string(&pod).unwrap(), others)
    }

    /// 300,000 annotations: the view is their total, one flag and the one
    /// value it keeps; nothing per entry is built (the view has no
    /// collection: its size is fixed but for the value kept).
    #[test]
    fn the_scan_of_300000_annotations_keeps_only_their_total() {
        let (raw, others) = crowded_pod(300_000);
        let view = AnnotationsView::scan(&raw).unwrap();
        assert_eq!(
            view,
            AnnotationsView {
                present: true,
                others_bytes: others,
                skipped: Some("pod_too_large: x".to_owned()),
            }
        );
        assert_eq!(parsed(&raw), Some(view));
    }
}
