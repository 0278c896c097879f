//! The mutation as an RFC 6902 JSON Patch against the pod as received.
//!
//! The webhook answers with a patch, and the engine knows exactly what it
//! changes ([`Mutation`]), so the patch is built from that knowledge: only
//! the added containers, volume, mounts, annotations and label are serialized,
//! nothing is diffed. Appends use the `-` index (so the user's entries are
//! never rewritten); a list or map the pod does not have yet is added
//! whole. Operations that would change nothing (an annotation, the label or
//! `shareProcessNamespace` already set to our value) are left out.
//!
//! [`operations`] is the one rendering. Its [`Operation`]s borrow their
//! values from the mutation and serialize exactly like json-patch's own
//! `PatchOperation` (`{"op":"add","path":...,"value":...}`, pointers
//! escaped by jsonptr), so serializing them writes the patch straight from
//! the k8s-openapi values, with no `serde_json::Value` trees in between
//! (they were half of the webhook's cost per review). [`json_patch`] gives
//! the same patch as a `json_patch::Patch`.
//!
//! Applied to the pod it was planned for, the patch gives exactly
//! [`Mutation::apply`]'s pod (tested on every golden case, by property
//! tests, and by parsing and applying it with json-patch).

use json_patch::Patch;
use json_patch::jsonptr::{PointerBuf, Token};
use k8s_openapi::api::core::v1::{Container, Pod, Volume, VolumeMount};
use serde::{Serialize, Serializer};

use super::mutate::Mutation;

/// One operation of the mutation's JSON Patch; serializes as RFC 6902.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Operation<'a> {
    /// Add `value` at `path` (a member is set, `-` appends to a list).
    Add {
        /// Where, as a JSON Pointer.
        path: PointerBuf,
        /// What.
        value: OpValue<'a>,
    },
    /// Replace the existing value at `path` with `value`.
    Replace {
        /// Where, as a JSON Pointer.
        path: PointerBuf,
        /// What.
        value: OpValue<'a>,
    },
    /// Remove the existing value at `path` (an annotation of the pod).
    Remove {
        /// Where, as a JSON Pointer.
        path: PointerBuf,
    },
}

/// The value of an [`Operation`], borrowed from the [`Mutation`];
/// serializes as the value itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OpValue<'a> {
    /// Init containers: a whole `initContainers` list.
    Containers(&'a [Container]),
    /// One init container, appended.
    Container(&'a Container),
    /// A whole `volumes` list.
    Volumes(&'a [Volume]),
    /// One volume, appended.
    Volume(&'a Volume),
    /// A whole `volumeMounts` list.
    Mounts(&'a [VolumeMount]),
    /// One volume mount, appended.
    Mount(&'a VolumeMount),
    /// A command (`preStop.exec.command`).
    Command(&'a [String]),
    /// `shareProcessNamespace`.
    Bool(bool),
    /// One annotation's or label's value.
    Str(&'a str),
    /// A whole `annotations` or `labels` map.
    Annotations(AnnotationMap<'a>),
}

/// Annotations or labels as a JSON object, in the mutation's order (keys are unique).
#[derive(Debug, Clone, PartialEq)]
pub struct AnnotationMap<'a>(pub &'a [(String, String)]);

impl Serialize for AnnotationMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// JSON Pointer from unescaped tokens (`/` and `~` in keys are escaped).
fn pointer<'t>(tokens: impl IntoIterator<Item: Into<Token<'t>>>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

/// Appends `items` to the list at `path`: one `add` at `path/-` per item
/// when the list exists, else one `add` of the whole list.
fn append<'a, T>(
    ops: &mut Vec<Operation<'a>>,
    path: &[&str],
    exists: bool,
    items: &'a [T],
    one: fn(&'a T) -> OpValue<'a>,
    all: fn(&'a [T]) -> OpValue<'a>,
) {
    if exists {
        for item in items {
            let mut p = pointer(path.iter().copied());
            p.push_back("-");
            ops.push(Operation::Add {
                path: p,
                value: one(item),
            });
        }
    } else {
        ops.push(Operation::Add {
            path: pointer(path.iter().copied()),
            value: all(items),
        });
    }
}

/// Appends `mounts` to the `volumeMounts` of `spec.containers[index]`.
fn append_mounts<'a>(
    ops: &mut Vec<Operation<'a>>,
    pod: &Pod,
    index: usize,
    mounts: &'a [VolumeMount],
) {
    let container = pod.spec.as_ref().and_then(|s| s.containers.get(index));
    let index = index.to_string();
    append(
        ops,
        &["spec", "containers", index.as_str(), "volumeMounts"],
        container.is_some_and(|c| c.volume_mounts.is_some()),
        mounts,
        OpValue::Mount,
        OpValue::Mounts,
    );
}

/// The operations that make `mutation`'s changes on `pod`, the pod it was
/// planned for (see the module docs).
pub fn operations<'a>(pod: &Pod, mutation: &'a Mutation) -> Vec<Operation<'a>> {
    let spec = pod.spec.as_ref();
    let mut ops = Vec::with_capacity(4 * mutation.watched.len() + 8);

    for change in &mutation.watched {
        let index = change.index.to_string();
        ops.push(Operation::Replace {
            path: pointer([
                "spec",
                "containers",
                index.as_str(),
                "lifecycle",
                "preStop",
                "exec",
                "command",
            ]),
            value: OpValue::Command(&change.prestop_command),
        });
        append_mounts(&mut ops, pod, change.index, &change.volume_mounts);
    }
    for change in &mutation.other_mounts {
        append_mounts(&mut ops, pod, change.index, &change.volume_mounts);
    }
    append(
        &mut ops,
        &["spec", "initContainers"],
        spec.is_some_and(|s| s.init_containers.is_some()),
        &mutation.init_containers,
        OpValue::Container,
        OpValue::Containers,
    );
    append(
        &mut ops,
        &["spec", "volumes"],
        spec.is_some_and(|s| s.volumes.is_some()),
        &mutation.volumes,
        OpValue::Volume,
        OpValue::Volumes,
    );
    if mutation.share_process_namespace
        && spec.and_then(|s| s.share_process_namespace) != Some(true)
    {
        ops.push(Operation::Add {
            path: pointer(["spec", "shareProcessNamespace"]),
            value: OpValue::Bool(true),
        });
    }

    set_map(
        &mut ops,
        "annotations",
        pod.metadata.annotations.as_ref(),
        &mutation.annotations,
    );
    if let Some(existing) = pod.metadata.annotations.as_ref() {
        for key in &mutation.removed_annotations {
            if existing.contains_key(key) {
                ops.push(Operation::Remove {
                    path: pointer(["metadata", "annotations", key.as_str()]),
                });
            }
        }
    }
    set_map(
        &mut ops,
        "labels",
        pod.metadata.labels.as_ref(),
        &mutation.labels,
    );
    ops
}

/// Sets `entries` in the map `metadata.<field>` (`annotations`, `labels`):
/// the whole map when the pod has none, else one `add` per entry whose
/// value differs.
fn set_map<'a>(
    ops: &mut Vec<Operation<'a>>,
    field: &str,
    existing: Option<&std::collections::BTreeMap<String, String>>,
    entries: &'a [(String, String)],
) {
    if entries.is_empty() {
        return;
    }
    match existing {
        None => ops.push(Operation::Add {
            path: pointer(["metadata", field]),
            value: OpValue::Annotations(AnnotationMap(entries)),
        }),
        Some(existing) => {
            for (key, value) in entries {
                if existing.get(key) != Some(value) {
                    ops.push(Operation::Add {
                        path: pointer(["metadata", field, key.as_str()]),
                        value: OpValue::Str(value),
                    });
                }
            }
        }
    }
}

/// The operations that set `entries` among `pod`'s annotations and change
/// nothing else, as the injection's patch sets its own ([`operations`]):
/// the whole `metadata.annotations` map when the pod has none, else one
/// `add` per entry whose value differs (an `add` of a member replaces an
/// existing value). The webhook writes
/// [`annotations::SKIPPED`](crate::annotations::SKIPPED) with it.
pub fn annotation_operations<'a>(pod: &Pod, entries: &'a [(String, String)]) -> Vec<Operation<'a>> {
    let mut ops = Vec::with_capacity(entries.len());
    set_map(
        &mut ops,
        "annotations",
        pod.metadata.annotations.as_ref(),
        entries,
    );
    ops
}

/// The JSON Patch of `mutation` on `pod` as a `json_patch::Patch`.
///
/// Errors: a value that cannot be serialized (cannot happen for the
/// k8s-openapi types used here; returned rather than assumed).
pub fn json_patch(pod: &Pod, mutation: &Mutation) -> Result<Patch, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(operations(pod, mutation))?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate as engine;
    use crate::annotations;
    use crate::{ClusterContext, EngineConfig, Plan};
    use json_patch::PatchOperation;
    use serde_json::{Value, json};

    fn job_pod(extra_annotations: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "p",
                "annotations": extra_annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1"}]
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main",
                    "image": "busybox",
                    "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
                }]
            }
        }))
        .unwrap()
    }

    fn patch_and_check(pod: &Pod) -> Patch {
        let cluster = ClusterContext {
            namespace: "default".into(),
            ..Default::default()
        };
        let Ok(Plan::Inject(mutation)) = engine::plan(pod, &cluster, &EngineConfig::default())
        else {
            panic!("not injected");
        };
        let patch = json_patch(pod, &mutation).unwrap();
        // The bytes the webhook sends are the same patch.
        let sent: Patch =
            serde_json::from_slice(&serde_json::to_vec(&operations(pod, &mutation)).unwrap())
                .unwrap();
        assert_eq!(sent, patch);
        let mut doc = serde_json::to_value(pod).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        let mut expected = pod.clone();
        mutation.apply(&mut expected);
        assert_eq!(doc, serde_json::to_value(&expected).unwrap());
        patch
    }

    fn paths(patch: &Patch) -> Vec<String> {
        patch
            .0
            .iter()
            .map(|op| match op {
                PatchOperation::Add(a) => a.path.to_string(),
                PatchOperation::Replace(r) => r.path.to_string(),
                PatchOperation::Remove(r) => format!("remove {}", r.path),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn annotation_keys_are_escaped_and_user_keys_untouched() {
        let pod = job_pod(json!({"example.com/team": "a", "odd~key": "b"}));
        let patch = patch_and_check(&pod);
        let paths = paths(&patch);
        assert!(
            paths.contains(&"/metadata/annotations/kube-prestop.io~1status".to_owned()),
            "{paths:?}"
        );
        assert!(
            paths.contains(
                &"/metadata/annotations/kubectl.kubernetes.io~1default-container".to_owned()
            ),
            "{paths:?}"
        );
        assert!(
            !paths
                .iter()
                .any(|p| p.contains("team") || p.contains("odd"))
        );
    }

    #[test]
    fn a_skipped_annotation_is_removed_from_an_injected_pod() {
        // A pod whose manifest carries the annotation of an earlier,
        // uninjected admission: injected now, the annotation would be false.
        let pod = job_pod(json!({"a": "b", "kube-prestop.io/skipped": "mount_path_conflict: x"}));
        let patch = patch_and_check(&pod);
        let paths_ = paths(&patch);
        assert!(
            paths_.contains(&"remove /metadata/annotations/kube-prestop.io~1skipped".to_owned()),
            "{paths_:?}"
        );
        let mut doc = serde_json::to_value(&pod).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert!(
            doc["metadata"]["annotations"]
                .get(annotations::SKIPPED)
                .is_none()
        );
        assert_eq!(doc["metadata"]["annotations"]["a"], "b");
        // Without one: no remove.
        let patch = patch_and_check(&job_pod(json!({"a": "b"})));
        assert!(!paths(&patch).iter().any(|p| p.starts_with("remove")));
    }

    #[test]
    fn the_injected_label_is_added_whole_or_beside_the_users() {
        let mut pod = job_pod(Value::Null);
        pod.metadata.labels = None;
        let patch = patch_and_check(&pod);
        assert!(paths(&patch).contains(&"/metadata/labels".to_owned()));
        pod.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        let patch = patch_and_check(&pod);
        let paths_ = paths(&patch);
        assert!(
            paths_.contains(&"/metadata/labels/kube-prestop.io~1injected".to_owned()),
            "{paths_:?}"
        );
        assert!(!paths_.iter().any(|p| p.contains("team")), "{paths_:?}");
        // Already there: no operation.
        pod.metadata.labels =
            Some([(annotations::INJECTED_LABEL.to_owned(), "true".to_owned())].into());
        let patch = patch_and_check(&pod);
        assert!(!paths(&patch).iter().any(|p| p.contains("labels")));
    }

    #[test]
    fn missing_lists_and_maps_are_added_whole() {
        let mut pod = job_pod(Value::Null);
        pod.metadata.annotations = None;
        let patch = patch_and_check(&pod);
        let paths = paths(&patch);
        for whole in [
            "/metadata/annotations",
            "/spec/initContainers",
            "/spec/volumes",
            "/spec/containers/0/volumeMounts",
        ] {
            assert!(paths.contains(&whole.to_owned()), "{whole}: {paths:?}");
        }
    }

    #[test]
    fn existing_lists_are_appended_to_and_no_op_changes_left_out() {
        let mut pod = job_pod(json!({
            "kube-prestop.io/status": "injected",
            "kubectl.kubernetes.io/default-container": "main"
        }));
        let spec = pod.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![]);
        spec.volumes = Some(vec![]);
        spec.share_process_namespace = Some(true);
        spec.containers[0].volume_mounts = Some(vec![]);
        let patch = patch_and_check(&pod);
        let paths = paths(&patch);
        assert!(paths.contains(&"/spec/initContainers/-".to_owned()));
        assert!(paths.contains(&"/spec/volumes/-".to_owned()));
        assert!(paths.contains(&"/spec/containers/0/volumeMounts/-".to_owned()));
        assert!(!paths.iter().any(|p| p.contains("status")
            || p.contains("default-container")
            || p.contains("shareProcessNamespace")));
        assert!(paths.iter().any(|p| p.contains("version")));
    }

    #[test]
    fn annotation_operations_set_only_those_annotations() {
        let entry = vec![(annotations::SKIPPED.to_owned(), "l: m".to_owned())];
        let apply = |pod: &Pod| {
            let ops = annotation_operations(pod, &entry);
            let patch: Patch = serde_json::from_slice(&serde_json::to_vec(&ops).unwrap()).unwrap();
            let mut doc = serde_json::to_value(pod).unwrap();
            json_patch::patch(&mut doc, &patch).unwrap();
            (paths(&patch), doc)
        };
        // No annotations: the map, whole.
        let mut pod = job_pod(Value::Null);
        pod.metadata.annotations = None;
        let (paths_, doc) = apply(&pod);
        assert_eq!(paths_, ["/metadata/annotations"]);
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({"kube-prestop.io/skipped": "l: m"})
        );
        // Beside the user's, and over an older value.
        let pod = job_pod(json!({"a": "b", "kube-prestop.io/skipped": "old"}));
        let (paths_, doc) = apply(&pod);
        assert_eq!(paths_, ["/metadata/annotations/kube-prestop.io~1skipped"]);
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({"a": "b", "kube-prestop.io/skipped": "l: m"})
        );
        // Already that value: nothing.
        let pod = job_pod(json!({"kube-prestop.io/skipped": "l: m"}));
        assert!(annotation_operations(&pod, &entry).is_empty());
    }
}
