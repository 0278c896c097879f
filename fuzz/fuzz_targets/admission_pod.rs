//! Structure-aware variant of `admission`: the input is the pod object
//! only (JSON), inside a fixed, valid AdmissionReview for a pod CREATE, so
//! mutations go to the pod instead of breaking the envelope. Same oracle:
//! HTTP 200, uid echoed, allowed when failing open, and a patch that
//! applies to the pod and yields a Pod.
#![no_main]

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube_prestop_engine::EngineConfig;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_server::admission::{FailureMode, review};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(object) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo",
            "operation": "CREATE",
            "userInfo": {},
            "object": object,
        }
    });
    let Ok(bytes) = serde_json::to_vec(&body) else {
        return;
    };
    let outcome = review(
        &bytes,
        &ClusterCache::disconnected(),
        &EngineConfig::default(),
        FailureMode::Allow,
    );
    assert_eq!(
        outcome.status().as_u16(),
        200,
        "{}",
        String::from_utf8_lossy(&outcome.body())
    );
    let answer: Value = match serde_json::from_slice(&outcome.body()) {
        Ok(v) => v,
        Err(e) => panic!("response is not JSON: {e}"),
    };
    let response = &answer["response"];
    assert_eq!(response["uid"], "fuzz");
    assert_eq!(response["allowed"], true, "{answer}");
    let Some(patch) = response.get("patch").and_then(Value::as_str) else {
        return;
    };
    let patch = match base64::engine::general_purpose::STANDARD.decode(patch) {
        Ok(p) => p,
        Err(e) => panic!("patch is not base64: {e}"),
    };
    let patch: json_patch::Patch = match serde_json::from_slice(&patch) {
        Ok(p) => p,
        Err(e) => panic!("not a JSON Patch: {e}"),
    };
    let pod: Pod = match serde_json::from_value(body["request"]["object"].clone()) {
        Ok(p) => p,
        Err(e) => panic!("patched a non-Pod: {e}"),
    };
    let mut doc = match serde_json::to_value(&pod) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    };
    if let Err(e) = json_patch::patch(&mut doc, &patch) {
        panic!("the patch does not apply: {e}");
    }
    if let Err(e) = serde_json::from_value::<Pod>(doc) {
        panic!("the patched object is not a Pod: {e}");
    }
});
