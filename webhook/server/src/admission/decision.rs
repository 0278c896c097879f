//! The decision for one request: which requests the engine sees, its
//! verdict, and the outcome to send, count and log. Pure apart from reading
//! the cluster cache (and scheduling a sidecar ConfigMap's creation through
//! it); no panics (an engine panic is caught and answered per the failure
//! mode).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::value::RawValue;

use super::answer::{self, PATCH_CAPACITY, base_response, base64_string};
use super::error::PodError;
use super::refusal::{self, FailureMode};
use super::wire::{self, Object, operation_name};
use crate::error::{HttpError, json_response};
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::{self as engine, ClusterContext, EngineConfig, Plan, Verdict};
use kube_prestop_metrics::labels::{self, DecisionLabel, reason};

/// Largest pod, in JSON bytes, that the webhook makes by patching: the
/// review as received plus the JSON Patch. etcd refuses a write over its
/// `--max-request-bytes` (default 1.5 MiB, `DefaultMaxRequestBytes` in
/// etcd's `server/embed/config.go`, v3.5 and v3.6), which bounds the stored
/// object; the API server stores pods as protobuf, which is smaller than
/// their JSON, so a pod within this bound in JSON is within etcd's in
/// storage. A patch that would cross it is answered per the failure mode
/// ([`PodError::TooLarge`]) instead of letting the API server fail the pod
/// after our answer, which no `failurePolicy` covers. The engine's own
/// bound (it refuses earlier a mutation that alone would cross it,
/// `EngineError::PodTooLarge`).
pub const MAX_PATCHED_POD_BYTES: usize = engine::MAX_PATCHED_POD_BYTES;

/// An AdmissionReview answer: HTTP 200, `application/json`.
#[derive(Debug, Clone)]
pub struct Answer(Vec<u8>);

impl Answer {
    /// The serialized AdmissionReview.
    pub fn body(&self) -> &[u8] {
        &self.0
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, self.0)
    }
}

/// The outcome of one request, ready to be sent (`result`), counted and
/// logged (the other fields).
#[derive(Debug)]
pub struct Outcome {
    /// The AdmissionReview answer, or the error answered without one.
    pub result: Result<Answer, HttpError>,
    /// What was done (metric and log label).
    pub decision: DecisionLabel,
    /// Machine-readable reason (metric and log label): the engine's skip
    /// reason or error label, or one of [`reason`]'s.
    pub reason: &'static str,
    /// Human-readable detail for the log line (error message), if any.
    pub detail: Option<String>,
    /// Request facts for the log line.
    pub request: RequestFacts,
}

impl Outcome {
    /// The HTTP status it is answered with: 200 for an AdmissionReview,
    /// else [`HttpError::status`].
    pub fn status(&self) -> StatusCode {
        self.result
            .as_ref()
            .map_or_else(HttpError::status, |_| StatusCode::OK)
    }

    /// The body it is answered with: the AdmissionReview, else
    /// [`HttpError::body`].
    pub fn body(&self) -> Vec<u8> {
        match &self.result {
            Ok(answer) => answer.body().to_vec(),
            Err(e) => e.body(),
        }
    }
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
    /// from, one of `metrics::labels::SIDECAR_BINARY_SOURCES`; else empty.
    pub sidecar_binary: &'static str,
    /// For an injected pod: why that delivery (the engine's
    /// `delivery::Choice::why`, naming each earlier one skipped and why);
    /// else empty.
    pub sidecar_binary_why: String,
    /// `request.dryRun`: nothing will be created (the decision is logged,
    /// but not counted as an injection).
    pub dry_run: bool,
}

impl RequestFacts {
    /// The facts the request itself gives.
    fn of(request: &AdmissionRequest<DynamicObject>) -> Self {
        let resource = &request.resource;
        Self {
            uid: request.uid.clone(),
            namespace: request.namespace.clone().unwrap_or_default(),
            operation: operation_name(&request.operation).to_owned(),
            resource: format!(
                "{}/{}/{}",
                resource.group, resource.version, resource.resource
            ),
            dry_run: request.dry_run,
            ..Self::default()
        }
    }

    /// The facts the engine's verdict gives: the unknown annotations and an
    /// opt-in that is skipped.
    fn note(&mut self, verdict: &Verdict) {
        self.unknown_annotations = verdict
            .unknown_annotations()
            .map(|u| u.shown_key())
            .collect::<Vec<_>>()
            .join(",");
        self.opted_in_but_skipped = verdict.opted_in_but_skipped();
    }
}

/// Decide on one request body: parse it, hand a pod CREATE to the engine,
/// and render its verdict.
pub fn review(
    body: &[u8],
    cache: &ClusterCache,
    config: &EngineConfig,
    failure_mode: FailureMode,
) -> Outcome {
    let (request, object) = match wire::parse(body) {
        Ok(parsed) => parsed,
        Err(e) => return refused(HttpError::from(e), RequestFacts::default()),
    };
    let mut facts = RequestFacts::of(&request);
    let mut response = base_response(&request);
    let pod = match admitted_pod(&request, object) {
        Ok(pod) => pod,
        Err(Err(ignored)) => {
            return answer(&response, None, DecisionLabel::Ignored, ignored, facts);
        }
        Err(Ok(error)) => return failure(response, failure_mode, error, "", facts),
    };
    facts.owner = owner_of(&pod);
    facts.pod = pod_name(&pod);
    let context = context_for(cache, &request, &pod);
    // A panic in the engine is a bug of ours: treat it like an engine error
    // so the failure mode decides, instead of dropping the connection.
    let Ok(verdict) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine::review(&pod, &context, config)
    })) else {
        return failure(response, failure_mode, PodError::EnginePanic, "", facts);
    };
    facts.note(&verdict);
    let warnings: Vec<String> = verdict.warnings.iter().map(ToString::to_string).collect();
    response.warnings = (!warnings.is_empty()).then_some(warnings);
    let write = Write {
        cache,
        context: &context,
        review_bytes: body.len(),
        dry_run: request.dry_run,
    };
    render(response, failure_mode, &pod, &verdict, &write, facts)
}

/// What rendering an injection needs beside the verdict: where to schedule
/// a missing ConfigMap, and the review's size and dry-run flag.
struct Write<'a> {
    cache: &'a ClusterCache,
    context: &'a ClusterContext,
    review_bytes: usize,
    dry_run: bool,
}

/// The engine's verdict on `pod` as an AdmissionReview answer.
fn render(
    response: AdmissionResponse,
    failure_mode: FailureMode,
    pod: &Pod,
    verdict: &Verdict,
    write: &Write<'_>,
    facts: RequestFacts,
) -> Outcome {
    match &verdict.plan {
        Err(e) => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let error = PodError::Engine(e.clone());
            failure(response, failure_mode, error, &name, facts)
        }
        Ok(Plan::Skip(skipped)) => {
            let reason = labels::skip_reason(skipped);
            answer(&response, None, DecisionLabel::Skip, reason, facts)
        }
        Ok(Plan::Inject(_)) => match injected(pod, verdict, write) {
            Ok(patch) => inject_answer(&response, patch, verdict, facts),
            Err(error) => failure(response, failure_mode, error, "", facts),
        },
    }
}

/// The pod of a pod CREATE; `Err(Err(reason))` for a request that is not
/// one (ignored), `Err(Ok(error))` for one without a usable pod.
fn admitted_pod(
    request: &AdmissionRequest<DynamicObject>,
    object: Object,
) -> Result<Pod, Result<PodError, &'static str>> {
    let is_pods = request.resource.group.is_empty()
        && request.resource.resource == "pods"
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    if !is_pods {
        return Err(Err(reason::OTHER_RESOURCE));
    }
    if !matches!(request.operation, Operation::Create) {
        return Err(Err(reason::OTHER_OPERATION));
    }
    match object {
        Object::Pod(pod) => Ok(pod),
        Object::Invalid(e) => Err(Ok(PodError::Unparsable(e))),
        Object::Absent => Err(Ok(PodError::NoObject)),
    }
}

/// What the engine needs about the cluster for a pod in the request's
/// namespace (else the pod's, else `default`), read from the caches
/// without side effects.
fn context_for(
    cache: &ClusterCache,
    request: &AdmissionRequest<DynamicObject>,
    pod: &Pod,
) -> ClusterContext {
    let namespace = request
        .namespace
        .clone()
        .or_else(|| pod.metadata.namespace.clone())
        .unwrap_or_else(|| "default".to_owned());
    ClusterContext {
        limit_ranges: cache.limit_ranges(&namespace),
        binary: cache.binary_facts(&namespace),
        namespace,
    }
}

/// The injected pod's JSON Patch, rendered (a JSON string of its base64,
/// see [`base64_string`]) and checked against [`MAX_PATCHED_POD_BYTES`]
/// (the review's size is an upper bound of the pod's JSON).
/// Schedules the creation of the ConfigMap the pod would have mounted, for
/// the namespace's next pods (not on a dry run, which must have no side
/// effects).
fn injected(
    pod: &Pod,
    verdict: &Verdict,
    write: &Write<'_>,
) -> Result<Option<Box<RawValue>>, PodError> {
    let operations = verdict.operations(pod);
    if operations.is_empty() {
        return Ok(None);
    }
    let mut patch = Vec::with_capacity(PATCH_CAPACITY);
    serde_json::to_writer(&mut patch, &operations).map_err(PodError::Patch)?;
    let bytes = write.review_bytes.saturating_add(patch.len());
    if bytes > MAX_PATCHED_POD_BYTES {
        return Err(PodError::TooLarge {
            bytes,
            max_bytes: MAX_PATCHED_POD_BYTES,
        });
    }
    let patch = base64_string(&patch).map_err(PodError::Patch)?;
    if let Some(arch) = verdict
        .delivery()
        .and_then(|c| c.missing_config_map.as_deref())
    {
        let namespace = &write.context.namespace;
        write
            .cache
            .ensure_sidecar_config_map(namespace, arch, write.dry_run);
    }
    Ok(Some(patch))
}

/// The answer for an injected pod: with its patch, or `no_change` when the
/// pod already has every change.
fn inject_answer(
    response: &AdmissionResponse,
    patch: Option<Box<RawValue>>,
    verdict: &Verdict,
    mut facts: RequestFacts,
) -> Outcome {
    let Some(patch) = patch else {
        return answer(
            response,
            None,
            DecisionLabel::Inject,
            reason::NO_CHANGE,
            facts,
        );
    };
    if let Some(choice) = verdict.delivery() {
        facts.sidecar_binary = labels::sidecar_binary(&choice.delivery);
        facts.sidecar_binary_why = choice.why.clone();
    }
    answer(
        response,
        Some(&patch),
        DecisionLabel::Inject,
        reason::INJECTED,
        facts,
    )
}

/// Pod name, else `generateName`, else empty.
fn pod_name(pod: &Pod) -> String {
    pod.metadata
        .name
        .clone()
        .or_else(|| pod.metadata.generate_name.clone())
        .unwrap_or_default()
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

/// The outcome for a pod that cannot be injected because of `error`: the
/// failure mode decides the answer ([`refusal::apply`]); counted as
/// `error` with the error's reason. `pod_name`: see [`refusal::apply`].
fn failure(
    response: AdmissionResponse,
    mode: FailureMode,
    error: PodError,
    pod_name: &str,
    facts: RequestFacts,
) -> Outcome {
    let response = refusal::apply(response, mode, &error, pod_name);
    let mut outcome = answer(&response, None, DecisionLabel::Error, error.reason(), facts);
    outcome.detail.get_or_insert_with(|| error.to_string());
    outcome
}

/// An AdmissionReview answer: `response` with `patch` (see
/// [`base64_string`]), if any.
fn answer(
    response: &AdmissionResponse,
    patch: Option<&RawValue>,
    decision: DecisionLabel,
    reason: &'static str,
    request: RequestFacts,
) -> Outcome {
    match answer::encode(response, patch) {
        Ok(body) => Outcome {
            result: Ok(Answer(body)),
            decision,
            reason,
            detail: None,
            request,
        },
        // Serializing plain data cannot fail; answered regardless.
        Err(e) => refused(HttpError::Serialize(e), request),
    }
}

/// An answer that is not an AdmissionReview.
fn refused(error: HttpError, request: RequestFacts) -> Outcome {
    // Every error `review` returns is counted (see `HttpError::labels`).
    let (decision, reason) = error
        .labels()
        .unwrap_or((DecisionLabel::Invalid, reason::BAD_REQUEST));
    Outcome {
        detail: Some(error.to_string()),
        result: Err(error),
        decision,
        reason,
        request,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

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
            assert_eq!(out.status().as_u16(), 400, "{}", String::from_utf8_lossy(body));
        }
    }

    /// A Job pod whose watched container has `env_bytes` of env: the
    /// sidecar copies it, so the patch adds as much again.
    fn review_with_env(env_bytes: usize) -> Vec<u8> {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "j-", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": true}
            ]},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox",
                "env": [{"name": "BIG", "value": "x".repeat(env_bytes)}],
                "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
            }]}
        });
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns", "operation": "CREATE", "userInfo": {}, "object": pod
            }
        }))
        .unwrap()
    }

    fn response_of(outcome: &Outcome) -> serde_json::Value {
        serde_json::from_slice::<serde_json::Value>(&outcome.body()).unwrap()["response"].clone()
    }

    #[test]
    fn a_pod_the_patch_would_take_over_the_bound_follows_the_failure_mode() {
        let cache = ClusterCache::disconnected();
        let config = EngineConfig::default();
        // Under the bound: injected.
        let small = review(
            &review_with_env(100 * 1024),
            &cache,
            &config,
            FailureMode::Allow,
        );
        assert_eq!(small.reason, reason::INJECTED);
        // 900 KiB of env, copied into the sidecar: over 1.5 MiB.
        let body = review_with_env(900 * 1024);
        let allowed = review(&body, &cache, &config, FailureMode::Allow);
        assert_eq!(
            (allowed.decision, allowed.reason),
            (DecisionLabel::Error, reason::POD_TOO_LARGE)
        );
        let response = response_of(&allowed);
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_none());
        let warning = response["warnings"][0].as_str().unwrap();
        assert!(
            warning.contains("admitted without the preStop sidecar"),
            "{warning}"
        );
        assert!(
            warning.contains(&MAX_PATCHED_POD_BYTES.to_string()),
            "{warning}"
        );
        let denied = review(&body, &cache, &config, FailureMode::Deny);
        let response = response_of(&denied);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 413);
        assert_eq!(response["status"]["reason"], "RequestEntityTooLarge");
    }
}
