//! What parsing a pod will cost in memory, estimated from its JSON text
//! before it is parsed, and the budget those estimates are charged to.
//!
//! Why: a review's pod is parsed into k8s-openapi structs, and those are
//! large next to the JSON that fills them. A `Volume` is 3,208 bytes
//! whatever it holds, a `Container` 2,120 (k8s-openapi 0.29, feature
//! `v1_33`, on 64-bit targets; `largest_element_types_fit_their_weights`
//! checks them), so `{"name":"v1"}` in `spec.volumes` costs about 200 times
//! its 14 bytes, and a vector's capacity can be twice its length. A pod of
//! 530 KB (30,000 such volumes, well under the API server's 3 MiB request
//! limit) took the webhook's resident memory to 134 MiB, past the chart's
//! 128 MiB limit; the body budget ([`crate::body`]) counts only the JSON's
//! bytes. So the pod's JSON is first walked once without building anything
//! ([`estimate`]), and its estimate must fit in [`ParseBudget`] before the
//! pod is parsed.
//!
//! The estimate is an upper bound, not a measurement: every element of a
//! list counts twice the size of its element type ([`Weights`]: the three
//! large ones by where they are in the pod, any other at most
//! [`OTHER_ELEMENT_BYTES`]), every JSON object as a map node
//! ([`OBJECT_BYTES`], a `BTreeMap` leaf of `String`s or `serde_json::Value`s,
//! as labels, annotations and `fieldsV1` are), every member
//! [`MEMBER_BYTES`], every string its length and a `String`'s header.
//! Ordinary pods come to tens or hundreds of KiB.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use tokio::sync::OwnedSemaphorePermit;

use crate::budget::{ByteBudget, UNIT};

/// Bytes counted for each element of `spec.volumes` (a `Volume` is 3,208
/// bytes), times two for the vector's spare capacity.
pub const VOLUME_ELEMENT_BYTES: usize = 2 * 3_264;
/// Bytes counted for each element of `spec.containers`,
/// `spec.initContainers` and `spec.ephemeralContainers` (a `Container` is
/// 2,120 bytes, an `EphemeralContainer` 2,144), times two.
pub const CONTAINER_ELEMENT_BYTES: usize = 2 * 2_176;
/// Bytes counted for each element of any other list: twice the largest
/// other element type a pod holds (`ContainerStatus`, 752 bytes).
pub const OTHER_ELEMENT_BYTES: usize = 2 * 768;
/// Bytes counted for each JSON object: a `BTreeMap` leaf node of eleven
/// `(String, String)` or `(String, Value)` entries is about 630 bytes.
pub const OBJECT_BYTES: usize = 640;
/// Bytes counted for each member of an object, beside its key's string.
pub const MEMBER_BYTES: usize = 64;
/// Bytes counted for each string beside its length (a `String`'s header).
pub const STRING_BYTES: usize = 24;

/// What parsing one pod is estimated to cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cost {
    /// The estimate, bytes.
    pub bytes: usize,
    /// The part of it that is the pod's (`request.object`), bytes: all of
    /// it for [`estimate`].
    pub pod_bytes: usize,
    /// The longest of the pod's lists: its path (`spec.volumes`) and its
    /// number of elements; `None` for a pod without lists. Named when the
    /// pod is refused, since that is nearly always what made it costly.
    pub longest_list: Option<(String, usize)>,
}

/// Estimates what parsing `raw`, a pod's JSON text, costs (see the module
/// docs). One pass; nothing is built but the name of the longest list.
///
/// # Errors
///
/// What serde_json says of text that is not JSON, or nests deeper than its
/// recursion limit (128): the pod would not parse either.
pub fn estimate(raw: &str) -> Result<Cost, serde_json::Error> {
    walk(&mut serde_json::Deserializer::from_str(raw), Place::Root)
}

/// Estimates what parsing `body`, a whole AdmissionReview, costs: its pod
/// (`request.object`) as [`estimate`] does, and every other field by the
/// same rules (`request.options` and `request.userInfo.extra` are parsed
/// too, the first into a `serde_json::Value`). Lists of the pod are named
/// from the pod (`spec.volumes`), others from the review
/// (`request.options`).
///
/// # Errors
///
/// As [`estimate`].
pub fn estimate_review(body: &[u8]) -> Result<Cost, serde_json::Error> {
    walk(
        &mut serde_json::Deserializer::from_slice(body),
        Place::Review,
    )
}

/// Walks the one JSON value of `de`, which starts at `place`.
fn walk<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    place: Place,
) -> Result<Cost, serde_json::Error> {
    let mut tally = Tally::default();
    Walk {
        tally: &mut tally,
        place,
        at: At::named(""),
    }
    .deserialize(&mut *de)?;
    de.end()?;
    if place == Place::Root {
        tally.pod_bytes = tally.bytes;
    }
    Ok(Cost {
        bytes: tally.bytes,
        pod_bytes: tally.pod_bytes,
        longest_list: tally.longest,
    })
}

/// The running estimate.
#[derive(Default)]
struct Tally {
    bytes: usize,
    /// Bytes counted inside the pod object.
    pod_bytes: usize,
    /// The longest list so far: its name ([`At::name`]) and length.
    longest: Option<(String, usize)>,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// Where a value is in the pod, as far as the weights care.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The AdmissionReview.
    Review,
    /// Its `request`.
    Request,
    /// The pod object.
    Root,
    /// `spec`.
    Spec,
    /// A list of volumes (`spec.volumes`).
    Volumes,
    /// A list of containers of some kind.
    Containers,
    /// Anywhere else.
    Other,
}

/// What an element of a list at `place` counts.
fn element_bytes(place: Place) -> usize {
    match place {
        Place::Volumes => VOLUME_ELEMENT_BYTES,
        Place::Containers => CONTAINER_ELEMENT_BYTES,
        Place::Review | Place::Request | Place::Root | Place::Spec | Place::Other => {
            OTHER_ELEMENT_BYTES
        }
    }
}

/// The place and name of the value under `key` of an object at `place`
/// (`Other` and no name below the few places the weights know).
fn child(place: Place, key: &str) -> Option<(Place, &'static str)> {
    Some(match (place, key) {
        (Place::Review, "request") => (Place::Request, "request"),
        (Place::Request, "object") => (Place::Root, ""),
        (Place::Root, "spec") => (Place::Spec, "spec"),
        (Place::Root, "metadata") => (Place::Other, "metadata"),
        (Place::Root, "status") => (Place::Other, "status"),
        (Place::Spec, "volumes") => (Place::Volumes, "spec.volumes"),
        (Place::Spec, "containers") => (Place::Containers, "spec.containers"),
        (Place::Spec, "initContainers") => (Place::Containers, "spec.initContainers"),
        (Place::Spec, "ephemeralContainers") => (Place::Containers, "spec.ephemeralContainers"),
        _ => return None,
    })
}

/// Where a value is, for naming a list: the deepest named place above it
/// (`spec.containers`), the key it sits under, and what holds that key.
#[derive(Clone, Copy)]
struct At<'de> {
    prefix: &'static str,
    key: Option<&'de str>,
    /// What the object holding `key` is.
    holder: Holder,
    /// The value is an element of the named place's own list.
    element_of_named: bool,
}

/// The object that holds a key, seen from the named place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// The named place itself (`spec`).
    Named,
    /// An element of the named list (`spec.containers[*]`).
    ElementOfNamed,
    /// Deeper.
    Deeper,
}

impl At<'_> {
    /// The named place itself.
    fn named(prefix: &'static str) -> Self {
        Self {
            prefix,
            key: None,
            holder: Holder::Named,
            element_of_named: false,
        }
    }

    /// `spec.volumes`, `spec.containers[*].env`, `request.options`,
    /// `command (under spec.containers)`.
    fn name(&self) -> String {
        match (self.key, self.holder) {
            (None, _) => self.prefix.to_owned(),
            (Some(key), Holder::Named) if self.prefix.is_empty() => key.to_owned(),
            (Some(key), Holder::Named) => format!("{}.{key}", self.prefix),
            (Some(key), Holder::ElementOfNamed) => format!("{}[*].{key}", self.prefix),
            (Some(key), Holder::Deeper) if self.prefix.is_empty() => key.to_owned(),
            (Some(key), Holder::Deeper) => format!("{key} (under {})", self.prefix),
        }
    }
}

/// One value, walked: counts it and everything in it.
struct Walk<'t, 'de> {
    tally: &'t mut Tally,
    place: Place,
    at: At<'de>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.tally.add(s.len() + STRING_BYTES);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let weight = element_bytes(self.place);
        let inside = At {
            element_of_named: self.at.key.is_none(),
            ..self.at
        };
        let mut n = 0usize;
        while seq
            .next_element_seed(Walk {
                tally: &mut *self.tally,
                place: Place::Other,
                at: inside,
            })?
            .is_some()
        {
            n += 1;
            self.tally.add(weight);
        }
        if n > 0 && self.tally.longest.as_ref().is_none_or(|(_, m)| n > *m) {
            self.tally.longest = Some((self.at.name(), n));
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.tally.add(OBJECT_BYTES);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            self.tally.add(MEMBER_BYTES + key.len() + STRING_BYTES);
            let known = match self.place {
                Place::Review | Place::Request | Place::Root | Place::Spec => {
                    child(self.place, &key)
                }
                Place::Volumes | Place::Containers | Place::Other => None,
            };
            let holder = if self.at.key.is_none() && !self.at.element_of_named {
                Holder::Named
            } else if self.at.element_of_named {
                Holder::ElementOfNamed
            } else {
                Holder::Deeper
            };
            let (place, at) = match known {
                Some((place, prefix)) => (place, At::named(prefix)),
                None => (
                    Place::Other,
                    At {
                        prefix: self.at.prefix,
                        key: Some(match key {
                            KeyText::Borrowed(k) => k,
                            KeyText::Escaped { .. } => "(a key with escapes)",
                        }),
                        holder,
                        element_of_named: false,
                    },
                ),
            };
            let before = self.tally.bytes;
            map.next_value_seed(Walk {
                tally: &mut *self.tally,
                place,
                at,
            })?;
            if place == Place::Root {
                let pod = self.tally.bytes - before;
                self.tally.pod_bytes = self.tally.pod_bytes.saturating_add(pod);
            }
        }
        Ok(())
    }
}

/// An object's key: borrowed from the JSON text, or, when it had escapes
/// (then serde_json must unescape it into a buffer), its length and, if
/// the unescaped key is one of [`KNOWN_KEYS`], that key. The parsers match
/// field names after unescaping (`"sp\u0065c"` is `spec` to them), so the
/// places the weights know must be told by the unescaped key too: an
/// escaped `spec` or `volumes` once had its volumes counted at the weight
/// of any other element.
struct Key<'de>(KeyText<'de>);

enum KeyText<'de> {
    Borrowed(&'de str),
    Escaped {
        len: usize,
        known: Option<&'static str>,
    },
}

/// The keys [`child`] knows.
const KNOWN_KEYS: [&str; 9] = [
    "request",
    "object",
    "spec",
    "metadata",
    "status",
    "volumes",
    "containers",
    "initContainers",
    "ephemeralContainers",
];

impl KeyText<'_> {
    fn len(&self) -> usize {
        match self {
            Self::Borrowed(k) => k.len(),
            Self::Escaped { len, .. } => *len,
        }
    }
}

impl std::ops::Deref for KeyText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Self::Borrowed(k) => k,
            Self::Escaped { known, .. } => known.unwrap_or(""),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(KeyText::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(KeyText::Escaped {
                    len: s.len(),
                    known: KNOWN_KEYS.into_iter().find(|k| *k == s),
                }))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// `; its longest list, spec.volumes, has 30000 entries` for
/// `Some(("spec.volumes", 30000))`, else nothing: the end of the messages
/// that refuse a review or a pod for its cost. The path holds a key of the
/// review as sent, so it is shown cut and escaped
/// ([`kube_prestop_engine::shown::shown`], at most 128 characters).
pub fn longest_list_note(longest: Option<&(String, usize)>) -> String {
    use kube_prestop_engine::shown::{MAX_SHOWN_VALUE_CHARS, shown};
    longest.map_or_else(String::new, |(path, n)| {
        format!(
            "; its longest list, {}, has {n} entries",
            shown(path, MAX_SHOWN_VALUE_CHARS)
        )
    })
}

/// The bytes of parsed pods in flight across reviews: each review holds
/// its pod's [`Cost`] from before the pod is parsed until it is answered.
/// A pod estimated over half the budget ([`Self::max_per_review`]) is not
/// parsed at all. A byte budget (`budget::ByteBudget`) of at least two KiB
/// (so that half of it is a whole KiB). Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct ParseBudget {
    budget: ByteBudget,
}

/// The smallest parse budget, bytes: two KiB.
const MIN_BYTES: usize = 2 * UNIT;

/// The most one [`ParseBudget::take`] asks of the budget, bytes: `u32::MAX`
/// KiB (tokio's most permits in one), about 4 TiB. A larger estimate is
/// charged this much, less than it is; only a budget over 8 TiB (a
/// `max_per_review` over 4 TiB) lets one that large through.
const MAX_TAKE_BYTES: usize = (u32::MAX as usize).saturating_mul(UNIT);

/// Why a pod's parse is not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotParsed {
    /// Its estimate alone is over [`ParseBudget::max_per_review`].
    TooCostly {
        /// The estimate, bytes.
        bytes: usize,
        /// The bound, bytes.
        max_bytes: usize,
    },
    /// The budget has not that much left now (other reviews hold it).
    Spent {
        /// The estimate, bytes.
        bytes: usize,
        /// The whole budget, bytes.
        budget_bytes: usize,
    },
}

impl Default for ParseBudget {
    /// [`crate::DEFAULT_MAX_INFLIGHT_PARSED_BYTES`].
    fn default() -> Self {
        Self::new(crate::DEFAULT_MAX_INFLIGHT_PARSED_BYTES)
    }
}

impl ParseBudget {
    /// A budget of `bytes` (rounded up to whole KiB, at least two).
    pub fn new(bytes: usize) -> Self {
        Self {
            budget: ByteBudget::new(bytes.max(MIN_BYTES)),
        }
    }

    /// The whole budget, bytes.
    pub fn bytes(&self) -> usize {
        self.budget.bytes()
    }

    /// The most one review's pod may be estimated at: half the budget, so
    /// that one pod never holds it all.
    pub fn max_per_review(&self) -> usize {
        self.bytes() / 2
    }

    /// Takes `bytes` of the budget, held until the permit is dropped.
    /// Never waits: a review that does not fit now is shed, as a body over
    /// the body budget is.
    ///
    /// # Errors
    ///
    /// [`NotParsed`]: over [`Self::max_per_review`], or more than is left.
    pub fn take(&self, bytes: usize) -> Result<OwnedSemaphorePermit, NotParsed> {
        if bytes > self.max_per_review() {
            return Err(NotParsed::TooCostly {
                bytes,
                max_bytes: self.max_per_review(),
            });
        }
        self.budget
            .take(bytes.min(MAX_TAKE_BYTES))
            .ok_or(NotParsed::Spent {
                bytes,
                budget_bytes: self.bytes(),
            })
    }

    /// Bytes of the budget in use now (for tests and debugging).
    pub fn in_use_bytes(&self) -> usize {
        self.budget.in_use_bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStatus, EnvVar, EphemeralContainer, Pod, PodAffinityTerm, PodCondition,
        TopologySpreadConstraint, Volume, VolumeProjection, WeightedPodAffinityTerm,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn largest_element_types_fit_their_weights() {
        assert!(2 * size_of::<Volume>() <= VOLUME_ELEMENT_BYTES);
        assert!(2 * size_of::<Container>() <= CONTAINER_ELEMENT_BYTES);
        assert!(2 * size_of::<EphemeralContainer>() <= CONTAINER_ELEMENT_BYTES);
        // The largest other list elements a pod holds (k8s-openapi 0.29,
        // every `Vec<_>` element type of core/v1 and meta/v1 measured: these
        // are the largest reachable from a Pod).
        for size in [
            size_of::<ContainerStatus>(),
            size_of::<VolumeProjection>(),
            size_of::<EnvVar>(),
            size_of::<WeightedPodAffinityTerm>(),
            size_of::<PodAffinityTerm>(),
            size_of::<TopologySpreadConstraint>(),
            size_of::<ManagedFieldsEntry>(),
            size_of::<PodCondition>(),
            size_of::<serde_json::Value>(),
            size_of::<String>(),
        ] {
            assert!(2 * size <= OTHER_ELEMENT_BYTES, "{size}");
        }
    }

    fn volumes(n: usize) -> String {
        let list: Vec<String> = (0..n).map(|i| format!(r#"{{"name":"v{i}"}}"#)).collect();
        format!(
            r#"{{"metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"c"}}],"volumes":[{}]}}}}"#,
            list.join(",")
        )
    }

    #[test]
    fn volumes_count_at_their_weight_and_are_named() {
        let cost = estimate(&volumes(30_000)).unwrap();
        assert!(cost.bytes >= 30_000 * VOLUME_ELEMENT_BYTES, "{cost:?}");
        assert_eq!(cost.longest_list, Some(("spec.volumes".to_owned(), 30_000)));
    }

    #[test]
    fn an_ordinary_job_pod_is_under_a_hundred_kib() {
        let pod = serde_json::json!({
            "metadata": {
                "generateName": "backup-28901234-",
                "namespace": "batch",
                "labels": {"batch.kubernetes.io/job-name": "backup-28901234", "app": "backup"},
                "annotations": {"kube-prestop.io/inject": "true"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                    "name": "backup-28901234", "uid": "0f2b6c1e-3f6a-4a39-9a49-1b2c3d4e5f60",
                    "controller": true, "blockOwnerDeletion": true}]
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "backup",
                    "image": "registry.example/backup:1.4",
                    "command": ["/bin/backup", "--all"],
                    "env": [{"name": "TARGET", "value": "s3://bucket/x"},
                            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                     {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                    "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "/bin/cleanup"]}}}
                }],
                "volumes": [{"name": "data", "emptyDir": {}},
                            {"name": "kube-api-access-abcde", "projected": {"sources": [
                                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
            }
        });
        let json = pod.to_string();
        serde_json::from_str::<Pod>(&json).unwrap();
        let cost = estimate(&json).unwrap();
        assert!(cost.bytes < 100 * 1024, "{cost:?}");
        assert!(cost.bytes > json.len(), "{cost:?}");
    }

    #[test]
    fn lists_elsewhere_count_at_the_other_weight() {
        let env: Vec<String> = (0..1000)
            .map(|i| format!(r#"{{"name":"E{i}","value":"x"}}"#))
            .collect();
        let pod = format!(
            r#"{{"spec":{{"containers":[{{"name":"c","env":[{}]}}]}}}}"#,
            env.join(",")
        );
        let cost = estimate(&pod).unwrap();
        assert!(cost.bytes >= 1000 * (OTHER_ELEMENT_BYTES + OBJECT_BYTES));
        assert!(cost.bytes < 1000 * (VOLUME_ELEMENT_BYTES));
        assert_eq!(
            cost.longest_list,
            Some(("spec.containers[*].env".to_owned(), 1000))
        );
    }

    #[test]
    fn a_review_counts_its_pod_by_the_pods_names_and_the_rest_too() {
        let pod = volumes(1000);
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{pod},"options":{{"a":[{}]}}}}}}"#,
            vec!["{\"b\":1}"; 2000].join(",")
        );
        let review = estimate_review(body.as_bytes()).unwrap();
        let alone = estimate(&pod).unwrap();
        assert!(review.bytes >= alone.bytes + 2000 * (OTHER_ELEMENT_BYTES + OBJECT_BYTES));
        assert_eq!(alone.pod_bytes, alone.bytes);
        // The key "object" is counted with the review, its value with the pod.
        assert_eq!(review.pod_bytes, alone.bytes);
        assert_eq!(
            review.longest_list,
            Some(("a (under request)".to_owned(), 2000))
        );
        let body = format!(r#"{{"request":{{"object":{pod}}}}}"#);
        assert_eq!(
            estimate_review(body.as_bytes()).unwrap().longest_list,
            Some(("spec.volumes".to_owned(), 1000))
        );
    }

    #[test]
    fn a_huge_key_is_shown_cut_in_the_note() {
        let key = "k".repeat(100_000);
        let body = format!(r#"{{"request":{{"options":{{"{key}":[1,2]}}}}}}"#);
        let cost = estimate_review(body.as_bytes()).unwrap();
        let note = longest_list_note(cost.longest_list.as_ref());
        assert!(note.len() < 300, "{}", note.len());
        assert!(note.ends_with("...(100016 bytes), has 2 entries"), "{note}");
    }

    /// The parsers unescape keys before matching field names, so an
    /// escaped `spec`, `volumes` or `object` is the same place to them and
    /// must count the same (it once counted volumes at the weight of any
    /// other element: 14,000 volumes in 241 KB estimated under half the
    /// budget, and two such reviews at once took a debug build to 157 MiB, 54 MiB
    /// once counted right).
    #[test]
    fn escaped_keys_count_as_the_keys_they_spell() {
        let plain = volumes(1000);
        let plain_cost = estimate(&plain).unwrap();
        for escaped in [
            plain.replacen(r#""spec""#, r#""sp\u0065c""#, 1),
            plain.replacen(r#""volumes""#, r#""volum\u0065s""#, 1),
            plain.replacen(r#""volumes""#, r#""\u0076olumes""#, 1),
        ] {
            assert_ne!(escaped, plain);
            let cost = estimate(&escaped).unwrap();
            assert!(
                cost.bytes >= 1000 * VOLUME_ELEMENT_BYTES,
                "{escaped:.80}: {cost:?}"
            );
            assert_eq!(cost.bytes, plain_cost.bytes);
            assert_eq!(cost.longest_list, Some(("spec.volumes".to_owned(), 1000)));
        }
        let body = format!(r#"{{"req\u0075est":{{"obj\u0065ct":{plain}}}}}"#);
        let review = estimate_review(body.as_bytes()).unwrap();
        assert_eq!(review.pod_bytes, plain_cost.bytes);
        assert_eq!(review.longest_list, Some(("spec.volumes".to_owned(), 1000)));
    }

    #[test]
    fn not_json_and_too_deep_are_errors() {
        assert!(estimate("{").is_err());
        assert!(estimate(r#"{"a":1} x"#).is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(estimate(&deep).is_err());
    }

    #[test]
    fn the_budget_refuses_one_pod_over_half_and_sheds_when_spent() {
        let budget = ParseBudget::new(100 * 1024);
        assert_eq!(budget.max_per_review(), 50 * 1024);
        assert!(matches!(
            budget.take(50 * 1024 + 1),
            Err(NotParsed::TooCostly { .. })
        ));
        let a = budget.take(50 * 1024).unwrap();
        let b = budget.take(40 * 1024).unwrap();
        assert_eq!(budget.in_use_bytes(), 90 * 1024);
        assert!(matches!(
            budget.take(20 * 1024),
            Err(NotParsed::Spent { .. })
        ));
        drop(a);
        let _c = budget.take(20 * 1024).unwrap();
        drop(b);
        assert_eq!(budget.in_use_bytes(), 20 * 1024);
    }

    #[test]
    fn the_smallest_budget_is_two_kib_so_half_is_one() {
        for bytes in [0, 1, 1024, 2048] {
            let budget = ParseBudget::new(bytes);
            assert_eq!(budget.bytes(), 2 * 1024, "{bytes}");
            assert_eq!(budget.max_per_review(), 1024, "{bytes}");
        }
        assert_eq!(ParseBudget::new(2049).bytes(), 3 * 1024);
        let budget = ParseBudget::new(0);
        let a = budget.take(0).unwrap();
        let _b = budget.take(1024).unwrap();
        assert!(matches!(budget.take(1), Err(NotParsed::Spent { .. })));
        drop(a);
        assert_eq!(budget.in_use_bytes(), 1024);
    }

    #[test]
    fn an_estimate_over_u32_max_kib_is_charged_u32_max_kib() {
        // Only a budget over 8 TiB lets such an estimate past the half.
        let budget = ParseBudget::new(9 << 40);
        let held = budget.take((4 << 40) + 1024).unwrap();
        assert_eq!(held.num_permits(), u32::MAX as usize);
        assert_eq!(budget.in_use_bytes(), MAX_TAKE_BYTES);
    }

    #[test]
    fn the_default_is_the_flags_default() {
        let budget = ParseBudget::default();
        assert_eq!(budget.bytes(), crate::DEFAULT_MAX_INFLIGHT_PARSED_BYTES);
        assert_eq!(budget.max_per_review(), 32 * 1024 * 1024);
    }
}
