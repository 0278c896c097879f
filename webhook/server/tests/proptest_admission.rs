//! The admission decision (`server::admission::review`, raw body bytes to
//! response) in the normal test suite, with the oracle of the `admission`
//! fuzz target (fuzz/fuzz_targets/admission.rs):
//!
//! * every committed fuzz seed and every regression input
//!   (`fuzz/seeds/admission/*`, `fuzz/regressions/admission/*`: crash
//!   inputs found by `scripts/fuzz.sh` go there) is answered per contract;
//! * property: reviews whose `request.object` is an arbitrary JSON value, or
//!   a generated pod-like object with wrong-typed fields, and arbitrary
//!   truncations of a valid body, never panic and are answered per
//!   contract: HTTP 200 with an AdmissionReview echoing the uid (allowed
//!   when failing open) or HTTP 400 `{"error": ...}`; a patch, when present,
//!   applies and yields a Pod.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::EngineConfig;
use kube_prestop_metrics::labels;
use kube_prestop_server::admission::{FailureMode, ParseBudget, review};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// Runs one body through the handler and checks the contract; returns the
/// HTTP status.
fn check_body(data: &[u8], mode: FailureMode) -> u16 {
    let outcome = review(
        data,
        &ClusterCache::disconnected(),
        &EngineConfig::default(),
        mode,
        &ParseBudget::default(),
    );
    let body: Value = serde_json::from_slice(&outcome.body()).expect("response body is JSON");
    // Every outcome is one of the series pre-registered in the metrics.
    assert!(
        labels::admission_outcomes().contains(&(outcome.decision, outcome.reason)),
        "({}, {}) is not in metrics::labels::admission_outcomes",
        outcome.decision,
        outcome.reason
    );
    match outcome.status().as_u16() {
        400 => {
            assert_eq!(outcome.decision, labels::DecisionLabel::Invalid);
            assert!(body["error"].is_string(), "{body}");
        }
        200 => {
            assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{body}");
            assert_eq!(body["kind"], "AdmissionReview", "{body}");
            let request: Value = serde_json::from_slice(data).expect("200 only for JSON");
            let response = &body["response"];
            assert_eq!(response["uid"], request["request"]["uid"], "{body}");
            if mode == FailureMode::Allow {
                assert_eq!(response["allowed"], true, "fail-open denied: {body}");
            }
            if let Some(patch) = response.get("patch") {
                assert_eq!(response["patchType"], "JSONPatch");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(patch.as_str().expect("patch is base64 text"))
                    .unwrap();
                let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
                let pod: Pod = serde_json::from_value(request["request"]["object"].clone())
                    .expect("patch only for a Pod");
                let mut doc = serde_json::to_value(&pod).unwrap();
                json_patch::patch(&mut doc, &patch).expect("the patch applies");
                let _: Pod = serde_json::from_value(doc).expect("the patched object is a Pod");
            }
        }
        other => panic!("HTTP {other}: {body}"),
    }
    outcome.status().as_u16()
}

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths
}

#[test]
fn fuzz_seeds_and_regressions_are_answered_per_contract() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let seeds = files(&root.join("seeds/admission"));
    assert!(seeds.len() >= 5, "committed seeds missing");
    let mut injected = 0;
    for path in seeds
        .iter()
        .chain(&files(&root.join("regressions/admission")))
    {
        let data = std::fs::read(path).unwrap();
        for mode in [FailureMode::Allow, FailureMode::Deny] {
            let status = check_body(&data, mode);
            if status == 200 {
                let out = review(
                    &data,
                    &ClusterCache::disconnected(),
                    &EngineConfig::default(),
                    mode,
                    &ParseBudget::default(),
                );
                if out.decision == labels::DecisionLabel::Inject {
                    injected += 1;
                }
            }
        }
    }
    assert!(injected >= 2, "no seed was injected");
}

fn envelope(uid: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": object,
            "dryRun": false
        }
    })
}

/// Arbitrary JSON values, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A Job pod with an exec preStop, whose field at a random known path is
/// replaced by an arbitrary value.
fn pod_with_odd_field() -> impl Strategy<Value = Value> {
    let paths = prop::sample::select(vec![
        "/metadata",
        "/metadata/annotations",
        "/metadata/annotations/kube-prestop.io~1sidecar-cpu-limit",
        "/metadata/annotations/kube-prestop.io~1containers",
        "/metadata/ownerReferences",
        "/spec/containers",
        "/spec/containers/0",
        "/spec/containers/0/name",
        "/spec/containers/0/lifecycle/preStop/exec/command",
        "/spec/containers/0/resources",
        "/spec/containers/0/resources/limits/cpu",
        "/spec/containers/0/volumeMounts",
        "/spec/containers/0/env",
        "/spec/initContainers",
        "/spec/volumes",
        "/spec/restartPolicy",
        "/spec/terminationGracePeriodSeconds",
        "/spec/hostPID",
        "/spec/os",
    ]);
    (paths, json_value()).prop_map(|(path, value)| {
        let mut pod = base_pod();
        set_pointer(&mut pod, path, value);
        pod
    })
}

fn base_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "demo-",
            "annotations": {"example.com/a": "b"},
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "demo",
                "uid": "5d3c1f7e-0000-4000-8000-000000000001", "controller": true
            }]
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "work",
                "image": "busybox:1.36",
                "env": [{"name": "A", "value": "1"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo bye"]}}}
            }],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    })
}

/// Sets `pointer` in `doc`, creating objects on the way.
fn set_pointer(doc: &mut Value, pointer: &str, value: Value) {
    let mut cur = doc;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        cur = match cur {
            Value::Array(items) => {
                let idx: usize = part.parse().unwrap();
                if last {
                    items[idx] = value;
                    return;
                }
                &mut items[idx]
            }
            Value::Object(map) => {
                if last {
                    map.insert(part.clone(), value);
                    return;
                }
                map.entry(part.clone()).or_insert_with(|| json!({}))
            }
            _ => return,
        };
    }
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_objects_are_answered_per_contract(object in json_value(), deny in any::<bool>()) {
        let body = envelope("u-any", object).to_string();
        let mode = if deny { FailureMode::Deny } else { FailureMode::Allow };
        prop_assert_eq!(check_body(body.as_bytes(), mode), 200);
    }

    #[test]
    fn pods_with_odd_fields_are_answered_per_contract(pod in pod_with_odd_field(), deny in any::<bool>()) {
        let body = envelope("u-odd", pod).to_string();
        let mode = if deny { FailureMode::Deny } else { FailureMode::Allow };
        prop_assert_eq!(check_body(body.as_bytes(), mode), 200);
    }

    #[test]
    fn truncated_and_flipped_bodies_never_panic(cut in 0usize..2000, flip in any::<(usize, u8)>()) {
        let mut body = envelope("u-cut", base_pod()).to_string().into_bytes();
        let (at, byte) = flip;
        let len = body.len();
        body[at % len] ^= byte;
        body.truncate(cut.min(len));
        check_body(&body, FailureMode::Allow);
    }
}
