//! The admission decision for one request body: parse the AdmissionReview,
//! run the engine on pod CREATEs, answer with a JSON Patch. Pure apart from
//! reading the cluster cache; no I/O, no panics.

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status, TypeMeta};
use serde_json::Value;

use super::labels;
use crate::cluster_cache::ClusterCache;
use crate::engine::{self, ClusterContext, Decision, EngineConfig, EngineError};

/// What to do with a pod the engine cannot handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FailureMode {
    /// Admit the pod unmodified, with an admission warning (default: a bug
    /// of ours never blocks a Job's pods).
    #[default]
    Allow,
    /// Deny the pod (fail closed).
    Deny,
}

/// The outcome of one request, ready to be sent, counted and logged.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// 200 for every AdmissionReview answer, 400 when the body is not one.
    pub http_status: u16,
    /// Response body (an AdmissionReview, or `{"error": "..."}` on 400).
    pub body: Vec<u8>,
    /// `inject`, `skip`, `ignored`, `error` or `invalid` (HTTP 400).
    pub decision: &'static str,
    /// Machine-readable reason (metric label).
    pub reason: String,
    /// Human-readable detail for the log line (error message), if any.
    pub detail: Option<String>,
    /// Request facts for the log line.
    pub request: RequestFacts,
}

/// What the log line says about the request.
#[derive(Debug, Clone, Default)]
pub struct RequestFacts {
    /// `request.uid`.
    pub uid: String,
    /// `request.namespace`.
    pub namespace: String,
    /// Controlling owner as `Kind/name`, or empty.
    pub owner: String,
    /// Pod name, else `generateName`, else empty.
    pub pod: String,
    /// `request.operation` (`CREATE`, ...).
    pub operation: String,
    /// `request.resource` as `group/version/resource`.
    pub resource: String,
    /// Unknown `kube-prestop.io/` annotation keys of the pod (most likely
    /// misspelt; ignored, and sent back as admission warnings),
    /// comma-separated; empty when there are none.
    pub unknown_annotations: String,
}

/// Decide on one request body.
pub fn review(
    body: &[u8],
    cache: &ClusterCache,
    config: &EngineConfig,
    failure_mode: FailureMode,
) -> Outcome {
    let (request, object) = match parse(body) {
        Ok(parsed) => parsed,
        Err(message) => return bad_request(message),
    };
    let mut facts = RequestFacts {
        uid: request.uid.clone(),
        namespace: request.namespace.clone().unwrap_or_default(),
        operation: format!("{:?}", request.operation).to_uppercase(),
        resource: format!(
            "{}/{}/{}",
            request.resource.group, request.resource.version, request.resource.resource
        ),
        ..RequestFacts::default()
    };
    let mut response = base_response(&request);

    let is_pods = request.resource.group.is_empty()
        && request.resource.resource == "pods"
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    if !is_pods {
        return answer(response, "ignored", "other_resource", None, facts);
    }
    if !matches!(request.operation, Operation::Create) {
        return answer(response, "ignored", "other_operation", None, facts);
    }

    let pod: Pod = match object.map(serde_json::from_value::<Pod>) {
        Some(Ok(pod)) => pod,
        Some(Err(e)) => {
            let msg = format!("the pod object does not parse: {e}");
            let refusal = Refusal::internal();
            return failure(response, failure_mode, "invalid_pod", msg, refusal, facts);
        }
        None => {
            let msg = "the request has no object".to_owned();
            let refusal = Refusal::internal();
            return failure(response, failure_mode, "invalid_pod", msg, refusal, facts);
        }
    };
    // Misspelt annotations never block the pod: a warning for each, on
    // whatever answer the pod gets (the API server shows them to the client
    // even when it refuses the pod).
    let unknown = engine::annotations::unknown_annotations(pod.metadata.annotations.as_ref());
    facts.unknown_annotations = unknown
        .iter()
        .map(|u| u.key.as_str())
        .collect::<Vec<_>>()
        .join(",");
    if !unknown.is_empty() {
        response.warnings = Some(
            unknown
                .iter()
                .map(|u| format!("kube-prestop: {u}"))
                .collect(),
        );
    }
    facts.owner = owner_of(&pod);
    facts.pod = pod
        .metadata
        .name
        .clone()
        .or_else(|| pod.metadata.generate_name.clone())
        .unwrap_or_default();
    let namespace = request
        .namespace
        .clone()
        .or_else(|| pod.metadata.namespace.clone())
        .unwrap_or_else(|| "default".to_owned());
    let context = ClusterContext {
        limit_ranges: cache.limit_ranges(&namespace),
        namespace,
    };

    // A panic in the engine is a bug of ours: treat it like an engine error
    // so the failure mode decides, instead of dropping the connection.
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine::inject(&pod, &context, config)
    }));
    let Ok(decided) = decided else {
        let msg = "internal error in the injection engine".to_owned();
        let refusal = Refusal::internal();
        return failure(response, failure_mode, "engine_panic", msg, refusal, facts);
    };
    match decided {
        Ok(Decision::Skip(reason)) => {
            answer(response, "skip", &labels::skip_reason(&reason), None, facts)
        }
        Ok(Decision::Inject(mutated)) => match patch_between(&pod, &mutated) {
            Ok(patch) if patch.0.is_empty() => answer(response, "inject", "no_change", None, facts),
            Ok(patch) => match response.clone().with_patch(patch) {
                Ok(patched) => answer(patched, "inject", "injected", None, facts),
                Err(e) => {
                    let refusal = Refusal::internal();
                    failure(
                        response,
                        failure_mode,
                        "patch_error",
                        e.to_string(),
                        refusal,
                        facts,
                    )
                }
            },
            Err(e) => {
                let refusal = Refusal::internal();
                failure(
                    response,
                    failure_mode,
                    "patch_error",
                    e.to_string(),
                    refusal,
                    facts,
                )
            }
        },
        Err(e) => {
            let reason = labels::engine_error(&e);
            let refusal = Refusal::of(&e);
            failure(
                response,
                failure_mode,
                &reason,
                e.to_string(),
                refusal,
                facts,
            )
        }
    }
}

/// Parse the body; the pod object is taken out of the request first, so a
/// malformed pod still yields a request (with its uid) to answer.
fn parse(body: &[u8]) -> Result<(AdmissionRequest<DynamicObject>, Option<Value>), String> {
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    let kind = value.get("kind").and_then(Value::as_str);
    if api_version != Some(META_API_VERSION_V1) || kind != Some(META_KIND) {
        return Err(format!(
            "expected apiVersion {META_API_VERSION_V1} kind {META_KIND}, got apiVersion {} kind {}",
            api_version.unwrap_or("<none>"),
            kind.unwrap_or("<none>")
        ));
    }
    let mut object = None;
    if let Some(request) = value.get_mut("request").and_then(Value::as_object_mut) {
        object = request.remove("object").filter(|o| !o.is_null());
        request.remove("oldObject");
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|_| "the AdmissionReview has no request".to_owned())?;
    if request.uid.is_empty() {
        return Err("the AdmissionReview request has no uid".to_owned());
    }
    Ok((request, object))
}

/// A response echoing the request uid, typed `admission.k8s.io/v1`
/// `AdmissionReview`, allowed, no patch.
fn base_response(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    response.types = TypeMeta {
        api_version: META_API_VERSION_V1.to_owned(),
        kind: META_KIND.to_owned(),
    };
    response
}

/// RFC 6902 patch from the pod as received to the mutated pod, both
/// serialized through the same k8s-openapi type so only the engine's
/// changes show.
fn patch_between(before: &Pod, after: &Pod) -> Result<json_patch::Patch, serde_json::Error> {
    let before = serde_json::to_value(before)?;
    let after = serde_json::to_value(after)?;
    Ok(json_patch::diff(&before, &after))
}

/// `Kind/name` of the controlling owner (else the first owner), or empty.
fn owner_of(pod: &Pod) -> String {
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| owners.first())
        .map(|o| format!("{}/{}", o.kind, o.name))
        .unwrap_or_default()
}

/// How a pod refused under [`FailureMode::Deny`] is reported in
/// `response.status`.
///
/// The API server passes the status on to the client (`ToStatusErr` in
/// k8s.io/apiserver `pkg/admission/plugin/webhook/errors`): it keeps a code
/// ≥ 400 and the reason, and prefixes the message with `admission webhook
/// "<name>" denied the request: `; kubectl prints `Error from server
/// (<reason>): ...` with that message. So a problem the pod's author can fix
/// gets a 4xx naming what to fix, and only faults of ours or of the
/// webhook's configuration get 500 `InternalError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status code: 400, 403, 422 or 500.
    pub code: u16,
    /// Kubernetes `StatusReason`: `BadRequest`, `Forbidden`, `Invalid` or
    /// `InternalError`.
    pub reason: &'static str,
    /// The offending field, as Kubernetes names fields in
    /// `status.details.causes` (e.g. `metadata.annotations[kube-prestop.io/containers]`).
    pub field: Option<String>,
}

impl Refusal {
    /// A fault of ours or of the webhook's configuration: 500 `InternalError`.
    pub fn internal() -> Self {
        Self {
            code: 500,
            reason: "InternalError",
            field: None,
        }
    }

    /// The refusal for an engine error:
    /// * an invalid `kube-prestop.io/*` annotation: 422 `Invalid`, with the
    ///   annotation as the field (as the API server reports invalid field
    ///   values);
    /// * a watched container already mounting our paths: 422 `Invalid`;
    /// * a malformed pod (no spec): 400 `BadRequest`;
    /// * no sidecar resources fit the namespace's LimitRanges: 403
    ///   `Forbidden` (what the LimitRanger admission plugin answers for a
    ///   container outside a LimitRange);
    /// * invalid webhook configuration, or a quantity we cannot parse in an
    ///   object the API server accepted: 500 `InternalError`.
    pub fn of(error: &EngineError) -> Self {
        let user = |code, reason, field| Self {
            code,
            reason,
            field,
        };
        match error {
            EngineError::InvalidAnnotation { annotation, .. } => user(
                422,
                "Invalid",
                Some(format!("metadata.annotations[{annotation}]")),
            ),
            EngineError::MountPathConflict { .. } => user(422, "Invalid", None),
            EngineError::Invalid(_) => user(400, "BadRequest", None),
            EngineError::LimitRangeUnsatisfiable { .. } => user(403, "Forbidden", None),
            EngineError::InvalidConfig(_) | EngineError::InvalidQuantity { .. } => Self::internal(),
        }
    }

    fn status(&self, message: &str) -> Status {
        let status = Status::failure(message, self.reason).with_code(self.code);
        match &self.field {
            None => status,
            Some(field) => status.with_details(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: "Pod".to_owned(),
                uid: String::new(),
                causes: vec![StatusCause {
                    reason: "FieldValueInvalid".to_owned(),
                    message: message.to_owned(),
                    field: field.clone(),
                }],
                retry_after_seconds: 0,
            }),
        }
    }
}

fn failure(
    response: AdmissionResponse,
    mode: FailureMode,
    reason: &str,
    message: String,
    refusal: Refusal,
    facts: RequestFacts,
) -> Outcome {
    let response = match mode {
        FailureMode::Allow => {
            let mut r = response;
            r.warnings.get_or_insert_with(Vec::new).insert(
                0,
                format!("kube-prestop: pod admitted without the preStop sidecar: {message}"),
            );
            r
        }
        FailureMode::Deny => {
            let mut r = response;
            r.allowed = false;
            r.result = refusal.status(&format!(
                "kube-prestop: cannot inject the preStop sidecar (failure mode deny): {message}"
            ));
            r
        }
    };
    answer(response, "error", reason, Some(message), facts)
}

fn answer(
    response: AdmissionResponse,
    decision: &'static str,
    reason: &str,
    detail: Option<String>,
    request: RequestFacts,
) -> Outcome {
    let review = response.into_review();
    match serde_json::to_value(&review)
        .map(patch_as_base64)
        .and_then(|v| serde_json::to_vec(&v))
    {
        Ok(body) => Outcome {
            http_status: 200,
            body,
            decision,
            reason: reason.to_owned(),
            detail,
            request,
        },
        // Serializing plain data cannot fail; answer 500-ish JSON regardless.
        Err(e) => Outcome {
            http_status: 500,
            body: error_body(&format!("cannot serialize the response: {e}")),
            decision: "error",
            reason: "serialize".to_owned(),
            detail: Some(e.to_string()),
            request,
        },
    }
}

/// `response.patch` as the API server's own encoding of a `[]byte` field:
/// a base64 string (kube serializes `Vec<u8>` as an array of numbers).
fn patch_as_base64(mut review: Value) -> Value {
    use base64::Engine as _;
    if let Some(patch) = review.pointer_mut("/response/patch")
        && let Some(items) = patch.as_array()
    {
        let bytes: Vec<u8> = items
            .iter()
            .filter_map(Value::as_u64)
            .filter_map(|n| u8::try_from(n).ok())
            .collect();
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    review
}

fn bad_request(message: String) -> Outcome {
    Outcome {
        http_status: 400,
        body: error_body(&message),
        decision: "invalid",
        reason: "bad_request".to_owned(),
        detail: Some(message),
        request: RequestFacts::default(),
    }
}

/// `{"error": "..."}`.
pub fn error_body(message: &str) -> Vec<u8> {
    let value = serde_json::json!({ "error": message });
    value.to_string().into_bytes()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_pointers_escape_slash_and_tilde() {
        let before: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"keep": "1"}},
            "spec": {"containers": []}
        }))
        .unwrap();
        let mut after = before.clone();
        let labels = after.metadata.labels.get_or_insert_default();
        labels.insert("example.com/team".into(), "a".into());
        labels.insert("odd~key".into(), "b".into());
        let patch = patch_between(&before, &after).unwrap();
        let paths: Vec<String> = serde_json::to_value(&patch)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["path"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            paths.contains(&"/metadata/labels/example.com~1team".to_owned()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"/metadata/labels/odd~0key".to_owned()),
            "{paths:?}"
        );
        let mut doc = serde_json::to_value(&before).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, serde_json::to_value(&after).unwrap());
    }

    #[test]
    fn patch_is_sent_as_base64() {
        let request: AdmissionRequest<DynamicObject> = serde_json::from_value(json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {}
        }))
        .unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap();
        let response = base_response(&request).with_patch(patch).unwrap();
        let outcome = answer(
            response,
            "inject",
            "injected",
            None,
            RequestFacts::default(),
        );
        let body: Value = serde_json::from_slice(&outcome.body).unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(body["response"]["uid"], "u1");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        // base64 of [{"op":"add","path":"/a","value":1}]
        assert_eq!(
            body["response"]["patch"],
            "W3sib3AiOiJhZGQiLCJwYXRoIjoiL2EiLCJ2YWx1ZSI6MX1d"
        );
    }

    #[test]
    fn owner_prefers_the_controller() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "2", "controller": true}
            ]}
        }))
        .unwrap();
        assert_eq!(owner_of(&pod), "Job/j");
        assert_eq!(owner_of(&Pod::default()), "");
    }

    #[test]
    fn refusals_are_4xx_for_the_pods_faults_and_500_for_ours() {
        let annotation = EngineError::InvalidAnnotation {
            annotation: "kube-prestop.io/sidecar-cpu-limit".into(),
            value: "lots".into(),
            reason: "not a Kubernetes quantity".into(),
        };
        let r = Refusal::of(&annotation);
        assert_eq!((r.code, r.reason), (422, "Invalid"));
        assert_eq!(
            r.field.as_deref(),
            Some("metadata.annotations[kube-prestop.io/sidecar-cpu-limit]")
        );
        let mount = EngineError::MountPathConflict {
            container: "c".into(),
            path: "/.kube-prestop".into(),
        };
        assert_eq!(Refusal::of(&mount).code, 422);
        assert_eq!(Refusal::of(&EngineError::Invalid("x".into())).code, 400);
        let limit_range = EngineError::LimitRangeUnsatisfiable {
            limit_range: "lr".into(),
            resource: "cpu".into(),
            detail: "d".into(),
        };
        assert_eq!(
            (
                Refusal::of(&limit_range).code,
                Refusal::of(&limit_range).reason
            ),
            (403, "Forbidden")
        );
        let quantity = EngineError::InvalidQuantity {
            location: "l".into(),
            value: "v".into(),
        };
        for internal in [EngineError::InvalidConfig("x".into()), quantity] {
            assert_eq!(Refusal::of(&internal), Refusal::internal(), "{internal}");
        }
        assert_eq!(
            (Refusal::internal().code, Refusal::internal().reason),
            (500, "InternalError")
        );
    }

    #[test]
    fn parse_errors_never_panic() {
        for body in [
            &b""[..],
            b"null",
            b"{}",
            b"\xff\xfe",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[]}"#,
        ] {
            let out = review(
                body,
                &ClusterCache::disconnected(),
                &EngineConfig::default(),
                FailureMode::Allow,
            );
            assert_eq!(out.http_status, 400, "{}", String::from_utf8_lossy(body));
        }
    }
}
