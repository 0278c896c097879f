//! The admission path from raw body bytes to the response body: parse the
//! AdmissionReview, run the engine, build the JSON Patch, serialize.
//!
//! Besides "no panic, no hang", every answer is checked against the
//! contract of the handler: HTTP 200 with an `admission.k8s.io/v1`
//! AdmissionReview echoing the request uid, or HTTP 400 with
//! `{"error": ...}`; a patch, when present, is base64 of a JSON Patch that
//! applies to the request's object and yields something that parses as a
//! Pod.
#![no_main]

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube_prestop_engine::EngineConfig;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_metrics::labels::DecisionLabel;
use kube_prestop_server::admission::{FailureMode, review};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let cache = ClusterCache::disconnected();
    let config = EngineConfig::default();
    // The failure mode only changes the answer on engine errors; alternate
    // by the first byte so both paths are covered.
    let mode = if data.first().is_some_and(|b| b % 2 == 1) {
        FailureMode::Deny
    } else {
        FailureMode::Allow
    };
    let outcome = review(data, &cache, &config, mode);
    let body: Value = match serde_json::from_slice(&outcome.body()) {
        Ok(v) => v,
        Err(e) => panic!("response body is not JSON: {e}"),
    };
    match outcome.status().as_u16() {
        400 => {
            assert_eq!(outcome.decision, DecisionLabel::Invalid);
            assert!(
                body.get("error").and_then(Value::as_str).is_some(),
                "{body}"
            );
        }
        200 => check_review(data, &body, mode),
        other => panic!("unexpected HTTP status {other}: {body}"),
    }
});

fn check_review(data: &[u8], body: &Value, mode: FailureMode) {
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{body}");
    assert_eq!(body["kind"], "AdmissionReview", "{body}");
    let response = &body["response"];
    // A 200 means the body was a JSON AdmissionReview with a request uid.
    let request: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => panic!("answered 200 to a body that is not JSON: {e}"),
    };
    assert_eq!(response["uid"], request["request"]["uid"], "{body}");
    let allowed = response["allowed"].as_bool();
    if mode == FailureMode::Allow {
        assert_eq!(allowed, Some(true), "fail-open answered a denial: {body}");
    }
    let Some(patch) = response.get("patch") else {
        return;
    };
    assert_eq!(response["patchType"], "JSONPatch", "{body}");
    let Some(b64) = patch.as_str() else {
        panic!("patch is not a base64 string: {body}")
    };
    let bytes = match base64::engine::general_purpose::STANDARD.decode(b64) {
        Ok(b) => b,
        Err(e) => panic!("patch is not base64: {e}"),
    };
    let patch: json_patch::Patch = match serde_json::from_slice(&bytes) {
        Ok(p) => p,
        Err(e) => panic!("patch is not a JSON Patch: {e}"),
    };
    // The patch is computed between the pod as k8s-openapi serializes it and
    // the mutated pod: apply it to that normal form of the request object.
    let object = &request["request"]["object"];
    let pod: Pod = match serde_json::from_value(object.clone()) {
        Ok(p) => p,
        Err(e) => panic!("a patch for an object that is not a Pod: {e}"),
    };
    let mut doc = match serde_json::to_value(&pod) {
        Ok(v) => v,
        Err(e) => panic!("cannot serialize the pod: {e}"),
    };
    if let Err(e) = json_patch::patch(&mut doc, &patch) {
        panic!("the patch does not apply: {e}");
    }
    if let Err(e) = serde_json::from_value::<Pod>(doc) {
        panic!("the patched object is not a Pod: {e}");
    }
}
