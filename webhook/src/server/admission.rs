//! The admission decision for one request body: parse the AdmissionReview,
//! run the engine on pod CREATEs, answer with a JSON Patch. Pure apart from
//! reading the cluster cache; no I/O, no panics.
//!
//! Cost per review matters (every pod CREATE in enabled namespaces waits for
//! it), so the body is parsed once, straight into typed values: the pod
//! object is kept as raw JSON text while the envelope is read, then parsed
//! into a k8s-openapi `Pod` (never through `serde_json::Value`); the JSON
//! Patch is built from the engine's own list of changes and serialized
//! straight from the k8s-openapi values ([`engine::patch::operations`])
//! instead of diffing whole documents; and the answer is serialized in one
//! pass.

use std::collections::HashMap;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, Status, TypeMeta};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::labels;
use crate::cluster_cache::ClusterCache;
use kube_prestop_engine::{self as engine, ClusterContext, EngineConfig, EngineError, Plan};

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
    /// The pod asked for injection (`kube-prestop.io/inject: "true"`) and
    /// is skipped anyway: it got an admission warning, which a controller
    /// creating the pod (the Job controller) drops, so the log line is the
    /// place it shows.
    pub opted_in_but_skipped: bool,
    /// For an injected pod (patch sent): where its sidecar binary comes
    /// from, one of `metrics::SIDECAR_BINARY_SOURCES`; else empty.
    pub sidecar_binary: &'static str,
    /// `request.dryRun`: nothing will be created (the decision is logged,
    /// but not counted as an injection).
    pub dry_run: bool,
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
        operation: operation_name(&request.operation).to_owned(),
        resource: format!(
            "{}/{}/{}",
            request.resource.group, request.resource.version, request.resource.resource
        ),
        ..RequestFacts::default()
    };
    let mut response = base_response(&request);
    facts.dry_run = request.dry_run;

    let is_pods = request.resource.group.is_empty()
        && request.resource.resource == "pods"
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    if !is_pods {
        return answer(response, "ignored", "other_resource", None, facts);
    }
    if !matches!(request.operation, Operation::Create) {
        return answer(response, "ignored", "other_operation", None, facts);
    }

    let pod: Pod = match object {
        Object::Pod(pod) => pod,
        Object::Invalid(e) => {
            let msg = format!("the pod object does not parse: {e}");
            let refusal = Refusal::internal();
            return failure(response, failure_mode, "invalid_pod", msg, refusal, facts);
        }
        Object::Absent => {
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
    // Looked up without side effects: a creation is scheduled below, only
    // for a pod that is injected without it.
    let context = ClusterContext {
        limit_ranges: cache.limit_ranges(&namespace),
        sidecar_config_map: cache.sidecar_config_map(&namespace, true),
        namespace,
    };

    // A panic in the engine is a bug of ours: treat it like an engine error
    // so the failure mode decides, instead of dropping the connection.
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine::plan(&pod, &context, config).map(|plan| match plan {
            Plan::Skip(reason) => Decided::Skip(reason),
            Plan::Inject(mutation) => {
                let operations = engine::patch::operations(&pod, &mutation);
                if operations.is_empty() {
                    return Decided::NoChange;
                }
                let mut patch = Vec::with_capacity(PATCH_CAPACITY);
                match serde_json::to_writer(&mut patch, &operations)
                    .and_then(|()| base64_string(&patch))
                {
                    Ok(patch) => Decided::Patch(patch),
                    Err(e) => Decided::PatchError(e.to_string()),
                }
            }
        })
    }));
    let Ok(decided) = decided else {
        let msg = "internal error in the injection engine".to_owned();
        let refusal = Refusal::internal();
        return failure(response, failure_mode, "engine_panic", msg, refusal, facts);
    };
    match decided {
        Ok(Decided::Skip(reason)) => {
            if let Some(warning) = opt_in_warning(&pod, &reason) {
                response.warnings.get_or_insert_with(Vec::new).push(warning);
                facts.opted_in_but_skipped = true;
            }
            answer(response, "skip", &labels::skip_reason(&reason), None, facts)
        }
        Ok(Decided::NoChange) => answer(response, "inject", "no_change", None, facts),
        Ok(Decided::Patch(patch)) => {
            let [from_config_map, from_install] = crate::metrics::SIDECAR_BINARY_SOURCES;
            if context.sidecar_config_map.is_some() {
                facts.sidecar_binary = from_config_map;
            } else {
                facts.sidecar_binary = from_install;
                // The namespace's ConfigMap, for its next pods (not for a
                // dry run, which must have no side effects).
                cache.sidecar_config_map(&context.namespace, request.dry_run);
            }
            answer_with_patch(response, &patch, facts)
        }
        Ok(Decided::PatchError(e)) => {
            let refusal = Refusal::internal();
            failure(response, failure_mode, "patch_error", e, refusal, facts)
        }
        Err(e) => {
            let reason = labels::engine_error(&e);
            let refusal = Refusal {
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                ..Refusal::of(&e)
            };
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

/// The admission warning for a pod that asked for injection with
/// `kube-prestop.io/inject: "true"` and is skipped anyway (e.g.
/// `restartPolicy: Always`, no exec preStop): `None` for every other pod,
/// and for a pod skipped because it is injected already (the API server's
/// second call under `reinvocationPolicy: IfNeeded`).
fn opt_in_warning(pod: &Pod, reason: &engine::SkipReason) -> Option<String> {
    let opted_in = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| matches!(engine::annotations::inject_value(a), Ok(Some(true))));
    (opted_in && *reason != engine::SkipReason::AlreadyInjected).then(|| {
        format!(
            "kube-prestop: {} is \"true\" but the pod is not injected: {reason}",
            engine::annotations::INJECT
        )
    })
}

/// The engine's decision with its JSON Patch rendered.
enum Decided {
    Skip(engine::SkipReason),
    /// Injected, but the patch is empty.
    NoChange,
    /// The JSON Patch, as a JSON string of its base64 (see
    /// [`base64_string`]).
    Patch(Box<RawValue>),
    /// The patch could not be serialized or encoded: why.
    PatchError(String),
}

/// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Initial capacity of the JSON Patch buffer: a one-container Job pod's
/// patch is about 2.4 kB; growing a `Vec` from serde_json's default of 128
/// bytes took five reallocations.
const PATCH_CAPACITY: usize = 4096;

/// An AdmissionReview as received: the fields of kube's
/// `AdmissionReview`/`AdmissionRequest` with the same types (so the same
/// bodies are accepted and refused), except that `request.object` is `O`
/// (the `Pod` itself, or its raw JSON text) and `request.oldObject` is
/// skipped (never used).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<O> {
    api_version: String,
    kind: String,
    request: Option<WireRequest<O>>,
}

/// See [`WireReview`]; fields as in kube's `AdmissionRequest`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<O> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    object: Option<O>,
    #[serde(default, rename = "oldObject")]
    _old_object: Option<IgnoredAny>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// `request.object` of a parsed review.
// Lives on the stack for one call and is moved once; boxing the Pod would
// cost one more allocation per review.
#[allow(clippy::large_enum_variant)]
enum Object {
    /// A Pod (or something that parses as one: only pod requests use it).
    Pod(Pod),
    /// Not a Pod: why.
    Invalid(String),
    /// Absent or null.
    Absent,
}

/// Parse the body. A malformed pod still yields a request (with its uid) to
/// answer: the common case, a well-formed review of a well-formed pod, is
/// parsed in one pass straight into a `Pod`; only when that fails is the
/// body parsed again with the object kept as raw JSON text, to tell a
/// malformed review (400) from a malformed object (an answer).
fn parse(body: &[u8]) -> Result<(AdmissionRequest<DynamicObject>, Object), String> {
    if let Ok(review) = serde_json::from_slice::<WireReview<Pod>>(body) {
        let (request, pod) = into_request(review)?;
        return Ok((request, pod.map_or(Object::Absent, Object::Pod)));
    }
    let review: WireReview<Box<RawValue>> =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON AdmissionReview: {e}"))?;
    let (request, raw) = into_request(review)?;
    let object = match raw {
        None => Object::Absent,
        Some(raw) => match serde_json::from_str::<Pod>(raw.get()) {
            Ok(pod) => Object::Pod(pod),
            Err(e) => Object::Invalid(e.to_string()),
        },
    };
    Ok((request, object))
}

/// Checks the review's type and uid; kube's request and the object.
fn into_request<O>(
    review: WireReview<O>,
) -> Result<(AdmissionRequest<DynamicObject>, Option<O>), String> {
    if review.api_version != META_API_VERSION_V1 || review.kind != META_KIND {
        return Err(format!(
            "expected apiVersion {META_API_VERSION_V1} kind {META_KIND}, got apiVersion {} kind {}",
            review.api_version, review.kind
        ));
    }
    let Some(r) = review.request else {
        return Err("the AdmissionReview has no request".to_owned());
    };
    if r.uid.is_empty() {
        return Err("the AdmissionReview request has no uid".to_owned());
    }
    let request = AdmissionRequest {
        types: TypeMeta {
            api_version: review.api_version,
            kind: review.kind,
        },
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: None,
        old_object: None,
        dry_run: r.dry_run,
        options: r.options,
    };
    Ok((request, r.object))
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
    /// The pod's `metadata.name` for `status.details.name` (empty for a pod
    /// from `generateName`, as the API server has no name yet either):
    /// kubectl prints `The Pod "<name>" is invalid: <field>: <message>`.
    pub pod_name: String,
}

impl Refusal {
    /// A fault of ours or of the webhook's configuration: 500 `InternalError`.
    pub fn internal() -> Self {
        Self {
            code: 500,
            reason: "InternalError",
            field: None,
            pod_name: String::new(),
        }
    }

    /// The refusal for an engine error:
    /// * an invalid `kube-prestop.io/*` annotation: 422 `Invalid`, with the
    ///   annotation as the field (as the API server reports invalid field
    ///   values);
    /// * a watched container already mounting our paths: 422 `Invalid`, with
    ///   the mount's `mountPath` as the field;
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
            pod_name: String::new(),
        };
        match error {
            EngineError::InvalidAnnotation { annotation, .. } => user(
                422,
                "Invalid",
                Some(format!("metadata.annotations[{annotation}]")),
            ),
            EngineError::MountPathConflict { field, .. } => {
                user(422, "Invalid", Some(field.clone()))
            }
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
                name: self.pod_name.clone(),
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
    outcome(&response, None, decision, reason, detail, request)
}

/// An injection: `response` with `patch` (see [`base64_string`]).
fn answer_with_patch(
    response: AdmissionResponse,
    patch: &RawValue,
    request: RequestFacts,
) -> Outcome {
    outcome(&response, Some(patch), "inject", "injected", None, request)
}

fn outcome(
    response: &AdmissionResponse,
    patch: Option<&RawValue>,
    decision: &'static str,
    reason: &str,
    detail: Option<String>,
    request: RequestFacts,
) -> Outcome {
    let mut body = Vec::with_capacity(patch.map_or(0, |p| p.get().len()) + 512);
    match serde_json::to_writer(&mut body, &ReviewBody::of(response, patch)) {
        Ok(()) => Outcome {
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

/// The answer as the API server reads it: an `admission.k8s.io/v1`
/// AdmissionReview whose `response` has the fields of kube's
/// `AdmissionResponse`, with `patch` in the API server's encoding of a
/// `[]byte` field, a base64 string (kube would write an array of numbers),
/// and `patchType` when there is a patch.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewBody<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseBody<'a>,
}

/// See [`ReviewBody`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseBody<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    audit_annotations: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

impl<'a> ReviewBody<'a> {
    /// `response` with the JSON Patch `patch` (a JSON string of base64, see
    /// [`base64_string`]). The patch travels apart because kube's
    /// `AdmissionResponse::with_patch` wants it as a `json_patch::Patch`
    /// of `serde_json::Value`s, which is what this module avoids building;
    /// `response.patch` is never set here.
    fn of(response: &'a AdmissionResponse, patch: Option<&'a RawValue>) -> Self {
        Self {
            api_version: META_API_VERSION_V1,
            kind: META_KIND,
            response: ResponseBody {
                uid: &response.uid,
                allowed: response.allowed,
                status: &response.result,
                patch,
                patch_type: patch.map(|_| "JSONPatch"),
                audit_annotations: &response.audit_annotations,
                warnings: response.warnings.as_deref(),
            },
        }
    }
}

/// `bytes` as a JSON string of standard (padded) base64. Base64 has no
/// character JSON escapes, so the string is built as is and checked by
/// serde_json once (a fast scan) instead of going through the escaping
/// serializer character by character.
fn base64_string(bytes: &[u8]) -> Result<Box<RawValue>, serde_json::Error> {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4 + 2);
    text.push('"');
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut text);
    text.push('"');
    RawValue::from_string(text)
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
    use serde_json::{Value, json};

    /// A minimal pod CREATE request with `uid`.
    fn pod_create_request(uid: &str) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {}
        }))
        .unwrap()
    }

    #[test]
    fn patch_is_sent_as_base64() {
        let request = pod_create_request("u1");
        let patch = base64_string(br#"[{"op":"add","path":"/a","value":1}]"#).unwrap();
        let outcome = answer_with_patch(base_response(&request), &patch, RequestFacts::default());
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

    /// The encoding this module had before: kube's own `AdmissionReview`
    /// through `serde_json::Value`, the patch's array of numbers replaced by
    /// base64.
    fn kube_encoding(response: &AdmissionResponse) -> Value {
        let mut review = serde_json::to_value(response.clone().into_review()).unwrap();
        if let Some(patch) = review.pointer_mut("/response/patch") {
            let bytes: Vec<u8> = patch
                .as_array()
                .unwrap()
                .iter()
                .map(|n| u8::try_from(n.as_u64().unwrap()).unwrap())
                .collect();
            *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        review
    }

    #[test]
    fn body_is_kubes_review_with_a_base64_patch() {
        let request = pod_create_request("u1");
        let patch: json_patch::Patch = serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/annotations/a~1b", "value": "x\"y"}]),
        )
        .unwrap();
        let patch_text = serde_json::to_vec(&patch).unwrap();
        let patch_b64 = base64_string(&patch_text).unwrap();
        let mut warned = base_response(&request);
        warned.warnings = Some(vec!["careful".to_owned()]);
        warned
            .audit_annotations
            .insert("k".to_owned(), "v".to_owned());
        let mut denied = base_response(&request);
        denied.allowed = false;
        denied.result = Status::failure("no", "InternalError").with_code(500);
        let patched = base_response(&request).with_patch(patch).unwrap();
        for (response, patch, kube) in [
            (base_response(&request), None, base_response(&request)),
            (base_response(&request), Some(&*patch_b64), patched),
            (warned.clone(), None, warned),
            (denied.clone(), None, denied),
        ] {
            let body = serde_json::to_vec(&ReviewBody::of(&response, patch)).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body, kube_encoding(&kube));
        }
    }

    /// How this module parsed before: the whole body into a `Value`,
    /// `object` and `oldObject` taken out, the rest into kube's
    /// `AdmissionReview`, the object then into a `Pod`.
    fn kube_parse(body: &[u8]) -> Option<(String, Option<Value>)> {
        let mut value: Value = serde_json::from_slice(body).ok()?;
        if value.get("apiVersion").and_then(Value::as_str) != Some(META_API_VERSION_V1)
            || value.get("kind").and_then(Value::as_str) != Some(META_KIND)
        {
            return None;
        }
        let mut object = None;
        if let Some(request) = value.get_mut("request").and_then(Value::as_object_mut) {
            object = request.remove("object").filter(|o| !o.is_null());
            request.remove("oldObject");
        }
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(value).ok()?;
        let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
        // The object as a Pod (round trip), `null` when it is not one.
        let object = object.map(|o| {
            serde_json::from_value::<Pod>(o)
                .map_or(Value::Null, |pod| serde_json::to_value(pod).unwrap())
        });
        (!request.uid.is_empty()).then_some((request.uid, object))
    }

    #[test]
    fn parse_accepts_what_kubes_types_accept() {
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/admission");
        let mut bodies: Vec<Vec<u8>> = std::fs::read_dir(seeds)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(bodies.len() >= 5);
        let base = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "userInfo": {"username": "x", "groups": ["a"], "extra": {"k": ["v"]}},
                "object": {"metadata": {"name": "p"}},
                "oldObject": {"any": ["thing", 1]},
                "options": {"kind": "CreateOptions"},
                "dryRun": true
            }
        });
        let variants: Vec<(&str, Value)> = vec![
            ("", Value::Null),
            (
                "/request/object",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            ),
            ("/request/object/spec", json!({"containers": 5})),
            ("/request/object/kind", json!("Deployment")),
            ("/request/object", Value::Null),
            ("/request/object", json!("not a pod")),
            ("/request/oldObject", json!(5)),
            ("/request/uid", json!("")),
            ("/request/uid", json!(5)),
            ("/request/operation", json!("PATCH")),
            ("/request/userInfo", json!(5)),
            ("/request/userInfo/groups", json!("a")),
            ("/request/kind", json!({"group": ""})),
            ("/request/resource/resource", Value::Null),
            ("/request/subResource", json!("status")),
            ("/request/dryRun", json!("yes")),
            ("/request", Value::Null),
            ("/kind", json!("Other")),
            ("/apiVersion", json!("admission.k8s.io/v1beta1")),
        ];
        for (path, value) in variants {
            let mut body = base.clone();
            if let Some((parent, key)) = path.rsplit_once('/') {
                body.pointer_mut(parent)
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert(key.to_owned(), value);
            }
            bodies.push(serde_json::to_vec(&body).unwrap());
        }
        for body in bodies {
            let old = kube_parse(&body);
            let new = parse(&body).ok().map(|(request, object)| {
                let object = match object {
                    Object::Pod(pod) => Some(serde_json::to_value(pod).unwrap()),
                    Object::Invalid(_) => Some(Value::Null),
                    Object::Absent => None,
                };
                (request.uid, object)
            });
            assert_eq!(new, old, "{}", String::from_utf8_lossy(&body));
        }
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
            field: "spec.containers[0].volumeMounts[1].mountPath".into(),
        };
        assert_eq!(Refusal::of(&mount).code, 422);
        assert_eq!(
            Refusal::of(&mount).field.as_deref(),
            Some("spec.containers[0].volumeMounts[1].mountPath")
        );
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
