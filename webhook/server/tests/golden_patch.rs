//! The webhook's own JSON Patch on every golden case (`engine/tests/golden/`).
//!
//! The webhook does not diff documents: it renders the engine's list of
//! changes as a JSON Patch (`engine::plan` + `engine::patch::json_patch`).
//! For every case this checks, through the whole admission path
//! (`server::admission::review` on an AdmissionReview carrying the input
//! pod, with the case's LimitRanges in the cluster cache), that:
//! * an injected case answers with a patch that, applied to the input as
//!   sent, gives exactly `expected.yaml`, and a second review of that output
//!   answers with no patch;
//! * a skipped case answers allowed with no patch, unless the pod opted in
//!   (`kube-prestop.io/inject: "true"`): then a patch that only writes
//!   `kube-prestop.io/skipped` with the skip reason and the warning's text;
//! * an error case answers allowed (failing open) with a warning and a
//!   patch that only writes `kube-prestop.io/skipped` with the error's
//!   label and the warning's text.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../engine/tests/golden_common/mod.rs"]
mod golden_common;
mod http_common;

use base64::Engine as _;
use golden_common::{Context, cases, read_expected, read_yaml};
use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_cluster::image_volume_probe::ImageVolumeProbe;
use kube_prestop_cluster::node_facts::NodeWatch;
use kube_prestop_cluster::sidecar_configmap::SidecarConfigMaps;
use kube_prestop_engine::Support;
use kube_prestop_engine::delivery::NodeFacts;
use kube_prestop_metrics::labels::DecisionLabel;
use kube_prestop_server::admission::{FailureMode, Outcome, ParseBudget, review};
use serde_json::{Value, json};

/// The AdmissionReview the API server sends for `pod` in `namespace`.
fn body(uid: &str, namespace: &str, pod: &Value) -> Vec<u8> {
    let mut review = http_common::review(uid, "pods", "CREATE", pod.clone());
    review["request"]["namespace"] = json!(namespace);
    serde_json::to_vec(&review).unwrap()
}

/// The response of a 200 answer and its decoded patch, if any.
fn answer_of(case: &str, outcome: &Outcome, uid: &str) -> (Value, Option<json_patch::Patch>) {
    assert_eq!(outcome.status().as_u16(), 200, "{case}");
    let review: Value = serde_json::from_slice(&outcome.body()).unwrap();
    let response = review["response"].clone();
    assert_eq!(response["uid"], uid, "{case}");
    assert_eq!(response["allowed"], true, "{case}: {response}");
    let patch = response.get("patch").map(|p| {
        assert_eq!(response["patchType"], "JSONPatch", "{case}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p.as_str().unwrap())
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    });
    (response, patch)
}

#[tokio::test]
async fn webhook_patch_gives_the_golden_output() {
    let cases = cases();
    assert!(cases.len() >= 20, "golden cases missing");
    let mut injected = 0;
    for dir in cases {
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        let input = read_yaml(&dir.join("input.yaml"));
        let expected = read_expected(&dir.join("expected.yaml"));
        let context = Context::of_case(&dir).unwrap();
        let namespace = context.namespace();
        let config = context
            .engine_config()
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let (store, mut writer) = reflector::store::<LimitRange>();
        for mut lr in context.limit_ranges {
            lr.metadata.namespace = Some(namespace.clone());
            writer.apply_watcher_event(&watcher::Event::Apply(lr));
        }
        let mut cache = ClusterCache::from_store(store);
        for (arch, name) in &context.config_maps {
            cache = cache.with_sidecar_config_maps(SidecarConfigMaps::fixed(name, arch));
        }
        // The nodes the case describes, with a runtime that mounts image
        // volumes exactly when the case says they work.
        let runtime = if context.image_volumes {
            "containerd://2.4.2"
        } else {
            "containerd://1.7.0"
        };
        let node = |architecture: Option<&String>| NodeFacts {
            architecture: architecture.cloned(),
            runtime_version: runtime.to_owned(),
            kubelet_version: "v1.37.2".to_owned(),
        };
        let names: Vec<String> = (0..context.node_architectures.as_ref().map_or(1, Vec::len))
            .map(|i| format!("node-{i}"))
            .collect();
        let nodes: Vec<(&str, NodeFacts)> = match &context.node_architectures {
            Some(archs) => names
                .iter()
                .map(String::as_str)
                .zip(archs.iter().map(|a| node(Some(a))))
                .collect(),
            None if context.image_volumes => vec![("node-0", node(None))],
            None => vec![],
        };
        if !nodes.is_empty() {
            cache = cache.with_nodes(NodeWatch::fixed(nodes));
        }
        if context.image_volumes {
            cache = cache.with_image_volume_probe(ImageVolumeProbe::fixed(Support::Yes));
        }

        let admit = |uid: &str, pod: &Value| {
            review(
                &body(uid, &namespace, pod),
                &cache,
                &config,
                FailureMode::Allow,
                &ParseBudget::default(),
            )
        };
        let outcome = admit("u1", &input);
        let (response, patch) = answer_of(&case, &outcome, "u1");
        if let Some(skip) = expected.get("skip").and_then(Value::as_str) {
            assert_eq!(outcome.decision, DecisionLabel::Skip, "{case}");
            let opted_in = input["metadata"]["annotations"]["kube-prestop.io/inject"] == "true"
                && skip != "already_injected";
            if opted_in {
                let text = format!(
                    "{skip}: kube-prestop.io/inject is \"true\" but the pod is not injected: {}",
                    expected["reason"].as_str().unwrap()
                );
                assert_only_skipped(&case, &input, patch.as_ref(), &text);
            } else {
                assert!(patch.is_none(), "{case}: {response}");
            }
        } else if let Some(error) = expected.get("error").and_then(Value::as_str) {
            assert_eq!(outcome.decision, DecisionLabel::Error, "{case}");
            assert!(response["warnings"].is_array(), "{case}: {response}");
            let text = format!(
                "{error}: pod admitted without the preStop sidecar: {}",
                expected["message"].as_str().unwrap()
            );
            assert_only_skipped(&case, &input, patch.as_ref(), &text);
            // Under deny: refused, no patch.
            let denied = review(
                &body("u3", &namespace, &input),
                &cache,
                &config,
                FailureMode::Deny,
                &ParseBudget::default(),
            );
            let denied: Value = serde_json::from_slice(&denied.body()).unwrap();
            assert_eq!(denied["response"]["allowed"], false, "{case}: {denied}");
            assert!(
                denied["response"].get("patch").is_none(),
                "{case}: {denied}"
            );
        } else {
            assert_eq!(outcome.decision, DecisionLabel::Inject, "{case}");
            let patch = patch.unwrap_or_else(|| panic!("{case}: no patch: {response}"));
            let mut patched = input.clone();
            json_patch::patch(&mut patched, &patch)
                .unwrap_or_else(|e| panic!("{case}: patch does not apply: {e}"));
            assert!(
                patched == expected,
                "{case}: patched input differs from expected.yaml: {}",
                serde_json::to_string_pretty(&json_patch::diff(&expected, &patched)).unwrap()
            );
            // Reinvocation: the output gets no patch.
            let again = admit("u2", &patched);
            let (response, patch) = answer_of(&case, &again, "u2");
            assert!(patch.is_none(), "{case}: second pass patched: {response}");
            injected += 1;
        }
    }
    assert!(injected >= 10, "only {injected} injected cases");
}

/// `patch` applied to `input` gives `input` with only the annotation
/// `kube-prestop.io/skipped: <text>` added.
fn assert_only_skipped(case: &str, input: &Value, patch: Option<&json_patch::Patch>, text: &str) {
    let patch = patch.unwrap_or_else(|| panic!("{case}: no kube-prestop.io/skipped patch"));
    let mut patched = input.clone();
    json_patch::patch(&mut patched, patch)
        .unwrap_or_else(|e| panic!("{case}: patch does not apply: {e}"));
    let mut expected = input.clone();
    let metadata = expected["metadata"].as_object_mut().unwrap();
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if annotations.is_null() {
        *annotations = json!({});
    }
    annotations["kube-prestop.io/skipped"] = json!(text);
    assert!(
        patched == expected,
        "{case}: the patch does more than write kube-prestop.io/skipped: {}",
        serde_json::to_string_pretty(&json_patch::diff(&expected, &patched)).unwrap()
    );
}
