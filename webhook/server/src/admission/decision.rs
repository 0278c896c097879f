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

use super::annotations_view::AnnotationsView;
use super::answer::{self, PATCH_CAPACITY, base_response, base64_string};
use super::cost::{self, Cost, NotParsed, ParseBudget};
use super::error::PodError;
use super::refusal::{self, FailureMode};
use super::wire::{self, Object, ReviewError, operation_name};
use crate::error::{HttpError, json_response};
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::{
    self as engine, ClusterContext, EngineConfig, Plan, Verdict, Warning, annotations,
};
use kube_prestop_metrics::labels::{self, DecisionLabel, reason};
use tokio::sync::OwnedSemaphorePermit;

/// The API server's bound on a object's annotations, keys and values
/// together, in bytes: `TotalAnnotationSizeLimitB` (256 KiB), checked by
/// `ValidateAnnotationsSize` in k8s.io/apimachinery
/// `pkg/api/validation/objectmeta.go` when the pod is validated, after
/// admission (apimachinery v0.37.2).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Largest pod, in JSON bytes, that the webhook makes by patching: the
/// pod as received (`request.object`'s JSON, not the whole review) plus the
/// JSON Patch. etcd refuses a write over its
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

/// Decide on one request body: estimate what parsing it costs and take
/// that from `budget` (held until the answer is made), parse it, hand a
/// pod CREATE to the engine, and render its verdict. A review that does
/// not fit in what is left of `budget` is shed (HTTP 503), one whose pod
/// alone is over [`ParseBudget::max_per_review`] is answered without
/// parsing the pod ([`PodError::TooCostly`], the failure mode decides;
/// under `allow` it is annotated like any pod the engine refused, from its
/// annotations scanned, [`AnnotationsView::scan`]).
pub fn review(
    body: &[u8],
    cache: &ClusterCache,
    config: &EngineConfig,
    failure_mode: FailureMode,
    budget: &ParseBudget,
) -> Outcome {
    let (_held, too_costly) = match reserve(body, budget) {
        Ok(reserved) => reserved,
        Err(e) => return refused(e, RequestFacts::default()),
    };
    let wire::Parsed {
        request,
        object,
        object_bytes,
    } = match wire::parse(body, too_costly.as_ref().map(|(cost, _)| cost.clone())) {
        Ok(parsed) => parsed,
        Err(e) => return refused(HttpError::from(e), RequestFacts::default()),
    };
    let max_bytes = too_costly.map_or(0, |(_, max)| max);
    let mut facts = RequestFacts::of(&request);
    let mut response = base_response(&request);
    let pod = match admitted_pod(&request, object, max_bytes) {
        Ok(pod) => pod,
        Err(Err(ignored)) => {
            return answer(&response, None, DecisionLabel::Ignored, ignored, facts);
        }
        Err(Ok((error, annotations))) => {
            let annotate = annotations.as_ref().map(|view| Annotate {
                view,
                pod_bytes: object_bytes,
            });
            return failure(response, failure_mode, error, "", annotate, facts);
        }
    };
    facts.owner = owner_of(&pod);
    facts.pod = pod_name(&pod);
    let context = context_for(cache, &request, &pod);
    // A panic in the engine is a bug of ours: treat it like an engine error
    // so the failure mode decides, instead of dropping the connection.
    let Ok(verdict) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine::review(&pod, &context, config)
    })) else {
        let error = PodError::EnginePanic;
        return failure(response, failure_mode, error, "", None, facts);
    };
    facts.note(&verdict);
    let warnings: Vec<String> = verdict.warnings.iter().map(ToString::to_string).collect();
    response.warnings = (!warnings.is_empty()).then_some(warnings);
    let write = Write {
        cache,
        context: &context,
        pod_bytes: object_bytes,
        dry_run: request.dry_run,
    };
    render(response, failure_mode, &pod, &verdict, &write, facts)
}

/// What parsing `body` is estimated to cost ([`cost::estimate_review`]),
/// taken from `budget` and held by the permit returned. When the whole
/// review is over [`ParseBudget::max_per_review`], only the review around
/// its pod is taken, and the pod's cost and that bound are returned: the
/// pod is then not parsed. Errors: not JSON (400), no room left now
/// ([`HttpError::ParsingOverloaded`], 503), or the review around its pod
/// alone over the bound ([`ReviewError::TooCostly`], 400).
fn reserve(
    body: &[u8],
    budget: &ParseBudget,
) -> Result<(OwnedSemaphorePermit, Option<(Cost, usize)>), HttpError> {
    let cost = cost::estimate_review(body).map_err(ReviewError::NotJson)?;
    let refusal = |e: NotParsed, longest_list: Option<(String, usize)>| match e {
        NotParsed::Spent {
            bytes,
            budget_bytes,
        } => HttpError::ParsingOverloaded {
            bytes,
            budget_bytes,
        },
        NotParsed::TooCostly { bytes, max_bytes } => HttpError::from(ReviewError::TooCostly {
            bytes,
            max_bytes,
            longest_list,
        }),
    };
    match budget.take(cost.bytes) {
        Ok(held) => Ok((held, None)),
        Err(NotParsed::TooCostly { max_bytes, .. }) => {
            let around = cost.bytes.saturating_sub(cost.pod_bytes);
            let held = budget
                .take(around)
                .map_err(|e| refusal(e, cost.longest_list.clone()))?;
            Ok((held, Some((cost, max_bytes))))
        }
        Err(e) => Err(refusal(e, cost.longest_list)),
    }
}

/// What rendering an injection needs beside the verdict: where to schedule
/// a missing ConfigMap, the pod's size and the review's dry-run flag.
struct Write<'a> {
    cache: &'a ClusterCache,
    context: &'a ClusterContext,
    /// Bytes of the pod's JSON as sent (`request.object`'s raw text,
    /// [`wire::Parsed::object_bytes`]), not of the whole review: a review
    /// also carries `userInfo` (its `extra` values are unbounded),
    /// `oldObject` and whitespace, none of which is stored with the pod.
    pod_bytes: usize,
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
            let error = PodError::Engine(e.clone());
            pod_failure(response, failure_mode, pod, error, write, facts)
        }
        Ok(Plan::Skip(skipped)) => {
            let reason = labels::skip_reason(skipped);
            // An opt-in that is skipped: the warning (the last) says why;
            // the annotation keeps it where the Job's author sees it.
            let note = verdict
                .warnings
                .iter()
                .rev()
                .find(|w| matches!(w, Warning::OptedInButSkipped(_)))
                .and_then(|w| {
                    let view = AnnotationsView::of(pod);
                    skipped_patch(&view, reason, &w.to_string(), write.pod_bytes)
                });
            answer(
                &response,
                note.as_deref(),
                DecisionLabel::Skip,
                reason,
                facts,
            )
        }
        Ok(Plan::Inject(_)) => match injected(pod, verdict, write) {
            Ok(patch) => inject_answer(&response, patch, verdict, facts),
            Err(error) => pod_failure(response, failure_mode, pod, error, write, facts),
        },
    }
}

/// The outcome for `pod`, read and reviewed, that cannot be injected
/// because of `error`: [`failure`]'s, with the pod's name and annotations.
fn pod_failure(
    response: AdmissionResponse,
    mode: FailureMode,
    pod: &Pod,
    error: PodError,
    write: &Write<'_>,
    facts: RequestFacts,
) -> Outcome {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let view = AnnotationsView::of(pod);
    let annotate = Some(Annotate {
        view: &view,
        pod_bytes: write.pod_bytes,
    });
    failure(response, mode, error, name, annotate, facts)
}

/// What [`skipped_patch`] needs of a pod admitted without injection: its
/// annotations' view and the bytes of its JSON as sent
/// ([`wire::Parsed::object_bytes`]).
#[derive(Clone, Copy)]
struct Annotate<'a> {
    view: &'a AnnotationsView,
    pod_bytes: usize,
}

/// The JSON Patch (rendered, see [`base64_string`]) that only writes
/// [`annotations::SKIPPED`] on a pod admitted without injection, whose
/// annotations are seen through `view` (of the parsed pod,
/// [`AnnotationsView::of`], or scanned from one too costly to parse,
/// [`AnnotationsView::scan`]): `<reason>: <message>`
/// ([`annotations::skipped_value`]), the message being `warning`, the
/// admission warning's text, without its `kube-prestop: ` prefix. Built
/// like the injection's annotations
/// ([`engine::patch::annotation_operations`], on
/// [`AnnotationsView::as_pod`]). `None` when the pod already
/// has that value, when the pod's JSON as sent (`pod_bytes`,
/// [`wire::Parsed::object_bytes`]) plus the patch would be over
/// [`MAX_PATCHED_POD_BYTES`], when
/// the pod's annotations with it would be over the API server's
/// [`MAX_ANNOTATIONS_BYTES`] (the pod would then be refused at validation,
/// after admission, where it was admitted before), or when it does not
/// serialize (plain strings; not expected): the warning alone then.
fn skipped_patch(
    view: &AnnotationsView,
    reason: &str,
    warning: &str,
    pod_bytes: usize,
) -> Option<Box<RawValue>> {
    let message = warning.strip_prefix("kube-prestop: ").unwrap_or(warning);
    let entry = [(
        annotations::SKIPPED.to_owned(),
        annotations::skipped_value(reason, message),
    )];
    let operations = engine::patch::annotation_operations(&view.as_pod(), &entry);
    if operations.is_empty() {
        return None;
    }
    let ours = entry[0].0.len() + entry[0].1.len();
    if view.others_bytes.saturating_add(ours) > MAX_ANNOTATIONS_BYTES {
        return None;
    }
    let patch = serde_json::to_vec(&operations).ok()?;
    if pod_bytes.saturating_add(patch.len()) > MAX_PATCHED_POD_BYTES {
        return None;
    }
    base64_string(&patch).ok()
}

/// Why a pod CREATE has no usable pod, and the view of its annotations
/// when one was scanned (a pod too costly to parse).
type Unusable = (PodError, Option<AnnotationsView>);

/// The pod of a pod CREATE; `Err(Err(reason))` for a request that is not
/// one (ignored), `Err(Ok(unusable))` for one without a usable pod (one not
/// parsed for its cost is told its bound, `max_per_review` bytes).
fn admitted_pod(
    request: &AdmissionRequest<DynamicObject>,
    object: Object,
    max_per_review: usize,
) -> Result<Pod, Result<Unusable, &'static str>> {
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
        Object::Invalid(e) => Err(Ok((PodError::Unparsable(e), None))),
        Object::TooCostly(cost, annotations) => Err(Ok((
            PodError::TooCostly {
                cost,
                max_bytes: max_per_review,
            },
            annotations,
        ))),
        Object::Absent => Err(Ok((PodError::NoObject, None))),
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
/// see [`base64_string`]) and checked against [`MAX_PATCHED_POD_BYTES`]:
/// the pod's JSON as sent ([`Write::pod_bytes`]) plus the patch.
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
    let bytes = write.pod_bytes.saturating_add(patch.len());
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
/// Under [`FailureMode::Allow`], for an error
/// [`PodError::annotates_the_pod`] and a pod whose annotations are known
/// (`annotate`), with the patch that writes [`annotations::SKIPPED`]
/// ([`skipped_patch`]; none when it would take the pod over a bound).
fn failure(
    response: AdmissionResponse,
    mode: FailureMode,
    error: PodError,
    pod_name: &str,
    annotate: Option<Annotate<'_>>,
    facts: RequestFacts,
) -> Outcome {
    let note = match (mode, annotate) {
        (FailureMode::Allow, Some(pod)) if error.annotates_the_pod() => skipped_patch(
            pod.view,
            error.reason(),
            &refusal::allowed_warning(&error),
            pod.pod_bytes,
        ),
        _ => None,
    };
    let response = refusal::apply(response, mode, &error, pod_name);
    let mut outcome = answer(
        &response,
        note.as_deref(),
        DecisionLabel::Error,
        error.reason(),
        facts,
    );
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
                &ParseBudget::default(),
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
        review_of(&pod, false)
    }

    /// A Job pod with `volumes` volumes `{"name": "vN"}`: about 14 bytes of
    /// JSON each, 3,208 bytes each as k8s-openapi `Volume`s.
    fn review_with_volumes(volumes: usize) -> Vec<u8> {
        let volumes: Vec<_> = (0..volumes)
            .map(|i| json!({"name": format!("v{i}")}))
            .collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "j-", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": true}
            ]},
            "spec": {"restartPolicy": "Never", "volumes": volumes, "containers": [{
                "name": "main", "image": "busybox",
                "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
            }]}
        });
        review_of(&pod, false)
    }

    #[test]
    fn a_pod_too_costly_to_parse_is_not_parsed_and_follows_the_failure_mode() {
        let cache = ClusterCache::disconnected();
        let config = EngineConfig::default();
        // 30,000 volumes: 530 KB of JSON, about 96 MiB of typed values.
        let body = review_with_volumes(30_000);
        assert!(body.len() < 600_000);
        let budget = ParseBudget::default();
        let allowed = review(&body, &cache, &config, FailureMode::Allow, &budget);
        assert_eq!(
            (allowed.decision, allowed.reason),
            (DecisionLabel::Error, reason::POD_TOO_LARGE)
        );
        let response = response_of(&allowed);
        assert_eq!(response["allowed"], true);
        assert_eq!(response["uid"], "u");
        let warning = response["warnings"][0].as_str().unwrap();
        for needle in [
            "admitted without the preStop sidecar",
            "its longest list, spec.volumes, has 30000 entries",
            "--max-inflight-parsed-bytes",
            &budget.max_per_review().to_string(),
        ] {
            assert!(warning.contains(needle), "{needle}: {warning}");
        }
        // Nothing held once answered.
        assert_eq!(budget.in_use_bytes(), 0);
        let denied = review(&body, &cache, &config, FailureMode::Deny, &budget);
        let response = response_of(&denied);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 413);
        // A few hundred volumes are parsed and injected as ever.
        let fine = review(
            &review_with_volumes(300),
            &cache,
            &config,
            FailureMode::Allow,
            &budget,
        );
        assert_eq!(fine.reason, reason::INJECTED);
    }

    #[test]
    fn a_review_that_does_not_fit_in_what_is_left_is_shed() {
        let cache = ClusterCache::disconnected();
        let config = EngineConfig::default();
        let body = review_with_volumes(300);
        let cost = cost::estimate_review(&body).unwrap();
        // Other reviews hold all but less than this one's cost.
        let budget = ParseBudget::new(cost.bytes * 4);
        let held = (
            budget.take(cost.bytes * 2).unwrap(),
            budget.take(cost.bytes + 4096).unwrap(),
        );
        let shed = review(&body, &cache, &config, FailureMode::Allow, &budget);
        assert_eq!(shed.status().as_u16(), 503);
        assert_eq!(
            (shed.decision, shed.reason),
            (DecisionLabel::Error, reason::OVERLOADED)
        );
        let text = String::from_utf8(shed.body()).unwrap();
        assert!(text.contains("--max-inflight-parsed-bytes"), "{text}");
        drop(held);
        let served = review(&body, &cache, &config, FailureMode::Allow, &budget);
        assert_eq!(served.reason, reason::INJECTED);
    }

    #[test]
    fn a_review_whose_envelope_alone_is_too_costly_is_refused_unread() {
        let cache = ClusterCache::disconnected();
        let config = EngineConfig::default();
        let mut body: serde_json::Value = serde_json::from_slice(&review_with_volumes(1)).unwrap();
        body["request"]["options"] = json!({"x": vec![json!({"a": 1}); 40_000]});
        let body = serde_json::to_vec(&body).unwrap();
        let out = review(
            &body,
            &cache,
            &config,
            FailureMode::Allow,
            &ParseBudget::default(),
        );
        assert_eq!(out.status().as_u16(), 400);
        let text = String::from_utf8(out.body()).unwrap();
        assert!(text.contains("without its object"), "{text}");
        assert!(text.contains("x (under request)"), "{text}");
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
            &ParseBudget::default(),
        );
        assert_eq!(small.reason, reason::INJECTED);
        // 900 KiB of env, copied into the sidecar: over 1.5 MiB.
        let body = review_with_env(900 * 1024);
        let allowed = review(
            &body,
            &cache,
            &config,
            FailureMode::Allow,
            &ParseBudget::default(),
        );
        assert_eq!(
            (allowed.decision, allowed.reason),
            (DecisionLabel::Error, reason::POD_TOO_LARGE)
        );
        let response = response_of(&allowed);
        assert_eq!(response["allowed"], true);
        let warning = response["warnings"][0].as_str().unwrap();
        // Only the annotation saying why (a few hundred bytes: within the
        // bound).
        let pod = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["request"]["object"]
            .clone();
        let note = skipped_of(&allowed, &pod).unwrap();
        assert_eq!(note, skipped_text(reason::POD_TOO_LARGE, warning));
        assert!(
            warning.contains("admitted without the preStop sidecar"),
            "{warning}"
        );
        assert!(
            warning.contains(&MAX_PATCHED_POD_BYTES.to_string()),
            "{warning}"
        );
        let denied = review(
            &body,
            &cache,
            &config,
            FailureMode::Deny,
            &ParseBudget::default(),
        );
        let response = response_of(&denied);
        assert_eq!(response["allowed"], false);
        assert!(response.get("patch").is_none());
        assert_eq!(response["status"]["code"], 413);
        assert_eq!(response["status"]["reason"], "RequestEntityTooLarge");
    }

    /// The bound is judged on the pod, not on the whole review: a small
    /// pod in a review inflated past the bound by what is not stored with
    /// the pod (whitespace between fields, a large `userInfo.extra` value)
    /// is injected; a pod that is itself that large is still over it.
    /// (Judged on the body, both inflated reviews were `pod_too_large`.)
    #[test]
    fn the_bound_is_judged_on_the_pod_not_the_review() {
        let cache = ClusterCache::disconnected();
        let config = EngineConfig::default();
        let inflation = 1600 * 1024;
        let pod = job_pod(serde_json::Value::Null, None, 0);
        let mut trailing = review_of(&pod, false);
        trailing.extend(std::iter::repeat_n(b' ', inflation));
        let mut extra: serde_json::Value = serde_json::from_slice(&review_of(&pod, false)).unwrap();
        extra["request"]["userInfo"] =
            json!({"username": "u", "extra": {"k": ["x".repeat(inflation)]}});
        let extra = serde_json::to_vec(&extra).unwrap();
        // Whitespace between the review's fields too, before the object.
        let inside = String::from_utf8(review_of(&pod, false)).unwrap().replacen(
            "\"object\":",
            &format!("\"object\":{}", " ".repeat(inflation)),
            1,
        );
        for (what, body) in [
            ("trailing whitespace", trailing),
            ("userInfo.extra", extra),
            ("whitespace before the object", inside.into_bytes()),
        ] {
            assert!(body.len() > MAX_PATCHED_POD_BYTES, "{what}");
            for mode in [FailureMode::Allow, FailureMode::Deny] {
                let out = review(&body, &cache, &config, mode, &ParseBudget::default());
                assert_eq!(
                    (out.decision, out.reason),
                    (DecisionLabel::Inject, reason::INJECTED),
                    "{what} {mode:?}: {:?}",
                    out.detail
                );
                assert_eq!(response_of(&out)["allowed"], true, "{what}");
                assert!(patch_of(&out).is_some(), "{what}");
            }
        }
        // The pod itself that large: still over the bound.
        let big = review_of(&job_pod(serde_json::Value::Null, None, inflation), false);
        let denied = review(
            &big,
            &cache,
            &config,
            FailureMode::Deny,
            &ParseBudget::default(),
        );
        assert_eq!(
            (denied.decision, denied.reason),
            (DecisionLabel::Error, reason::POD_TOO_LARGE)
        );
        assert_eq!(response_of(&denied)["status"]["code"], 413);
    }

    /// A JSON array is not an AdmissionReview, nor is one a `request`
    /// (serde's derive takes a struct from an array of its fields in
    /// order: both were answered 200, the first with a patch): 400, like
    /// any malformed body.
    #[test]
    fn a_json_array_is_not_a_review() {
        let pod = job_pod(serde_json::Value::Null, None, 0);
        let review_value: serde_json::Value =
            serde_json::from_slice(&review_of(&pod, false)).unwrap();
        let r = &review_value["request"];
        let request_array = json!([
            r["uid"],
            r["kind"],
            r["resource"],
            null,
            null,
            null,
            null,
            "",
            r["namespace"],
            r["operation"],
            r["userInfo"],
            r["object"],
            null,
            false,
            null
        ]);
        let top =
            serde_json::to_vec(&json!(["admission.k8s.io/v1", "AdmissionReview", r])).unwrap();
        let top_of_array = serde_json::to_vec(&json!([
            "admission.k8s.io/v1",
            "AdmissionReview",
            request_array
        ]))
        .unwrap();
        let nested = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": request_array
        }))
        .unwrap();
        for (what, body) in [
            ("top level", top),
            ("both", top_of_array),
            ("request", nested),
        ] {
            let out = allow(&body);
            assert_eq!(out.status().as_u16(), 400, "{what}");
            let text = String::from_utf8_lossy(&out.body()).into_owned();
            assert!(
                text.contains("not a JSON AdmissionReview"),
                "{what}: {text}"
            );
            assert!(text.contains("a JSON object"), "{what}: {text}");
        }
        // The same review as an object: injected.
        assert_eq!(allow(&review_of(&pod, false)).reason, reason::INJECTED);
    }

    /// The AdmissionReview of a pod CREATE of `pod` in `ns`.
    fn review_of(pod: &serde_json::Value, dry_run: bool) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns", "operation": "CREATE", "userInfo": {},
                "dryRun": dry_run, "object": pod
            }
        }))
        .unwrap()
    }

    /// A Job pod with `annotations` (`null`: none) whose watched container
    /// mounts `mount_path` (`null`: no mount) and carries `env_bytes` of env.
    fn job_pod(
        annotations: serde_json::Value,
        mount_path: Option<&str>,
        env_bytes: usize,
    ) -> serde_json::Value {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "j-", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": true}
            ]},
            "spec": {"restartPolicy": "Never",
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [{
                "name": "main", "image": "busybox",
                "env": [{"name": "BIG", "value": "x".repeat(env_bytes)}],
                "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
            }]}
        });
        if !annotations.is_null() {
            pod["metadata"]["annotations"] = annotations;
        }
        if let Some(path) = mount_path {
            pod["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "v", "mountPath": path}]);
        }
        pod
    }

    /// A pod that conflicts with our mount path.
    const CONFLICT: Option<&str> = Some("/.kube-prestop/mine");

    fn allow(body: &[u8]) -> Outcome {
        review(
            body,
            &ClusterCache::disconnected(),
            &EngineConfig::default(),
            FailureMode::Allow,
            &ParseBudget::default(),
        )
    }

    /// The decoded JSON Patch of an answer, if any.
    fn patch_of(outcome: &Outcome) -> Option<json_patch::Patch> {
        use base64::Engine as _;
        let response = response_of(outcome);
        let patch = response.get("patch")?;
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch.as_str().unwrap())
            .unwrap();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    /// The `kube-prestop.io/skipped` value the answer's patch writes on
    /// `pod`, checking that it writes nothing else; `None` without a patch.
    fn skipped_of(outcome: &Outcome, pod: &serde_json::Value) -> Option<String> {
        let patch = patch_of(outcome)?;
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let value = patched["metadata"]["annotations"][annotations::SKIPPED]
            .as_str()
            .unwrap()
            .to_owned();
        let mut expected = pod.clone();
        if expected["metadata"].get("annotations").is_none() {
            expected["metadata"]["annotations"] = json!({});
        }
        expected["metadata"]["annotations"][annotations::SKIPPED] = json!(value);
        assert_eq!(patched, expected, "the patch does more than annotate");
        Some(value)
    }

    /// The annotation's value for `reason` and the admission warning
    /// `warning`.
    fn skipped_text(reason: &str, warning: &str) -> String {
        let message = warning.strip_prefix("kube-prestop: ").unwrap();
        format!("{reason}: {message}")
    }

    /// A pod whose annotations are near the API server's 256 KiB bound:
    /// the annotation would take it over and get it refused at validation,
    /// after admission, where it was admitted before; so the warning alone.
    #[test]
    fn no_annotation_past_the_api_servers_annotation_bound() {
        let annotations_with = |bytes: usize| json!({"example.com/big": "x".repeat(bytes)});
        let key = "example.com/big".len();
        let far = job_pod(
            annotations_with(MAX_ANNOTATIONS_BYTES - key - 2_000),
            CONFLICT,
            0,
        );
        let outcome = allow(&review_of(&far, false));
        assert!(skipped_of(&outcome, &far).is_some(), "2,000 bytes of room");
        let near = job_pod(
            annotations_with(MAX_ANNOTATIONS_BYTES - key - 100),
            CONFLICT,
            0,
        );
        let outcome = allow(&review_of(&near, false));
        let response = response_of(&outcome);
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_none(), "past the bound");
        assert!(response["warnings"][0].as_str().is_some());
    }

    #[test]
    fn an_engine_error_under_allow_writes_only_the_skipped_annotation() {
        let pod = job_pod(json!({"example.com/team": "a"}), CONFLICT, 0);
        let outcome = allow(&review_of(&pod, false));
        assert_eq!(
            (outcome.decision, outcome.reason),
            (DecisionLabel::Error, "mount_path_conflict")
        );
        let response = response_of(&outcome);
        assert_eq!(response["allowed"], true);
        // The warning and the log line's detail are kept.
        let warning = response["warnings"][0].as_str().unwrap();
        assert!(
            warning.starts_with("kube-prestop: pod admitted without the preStop sidecar: "),
            "{warning}"
        );
        assert!(
            outcome
                .detail
                .as_deref()
                .unwrap()
                .contains("/.kube-prestop/mine")
        );
        let patch = patch_of(&outcome).unwrap();
        assert_eq!(patch.0.len(), 1, "{patch:?}");
        let note = skipped_of(&outcome, &pod).unwrap();
        assert_eq!(
            note,
            "mount_path_conflict: pod admitted without the preStop sidecar: container \"main\" \
             already mounts \"/.kube-prestop/mine\", which kube-prestop needs"
        );
        assert_eq!(note, skipped_text("mount_path_conflict", warning));
        // The user's annotation kept, beside ours (one `add` of ours).
        let json_patch::PatchOperation::Add(add) = &patch.0[0] else {
            panic!("{patch:?}");
        };
        assert_eq!(
            add.path.to_string(),
            "/metadata/annotations/kube-prestop.io~1skipped"
        );
        // A dry run answers the same.
        let dry = allow(&review_of(&pod, true));
        assert_eq!(skipped_of(&dry, &pod), Some(note));
    }

    #[test]
    fn a_pod_without_annotations_gets_the_map_and_an_old_value_is_replaced() {
        let pod = job_pod(serde_json::Value::Null, CONFLICT, 0);
        let outcome = allow(&review_of(&pod, false));
        let patch = patch_of(&outcome).unwrap();
        let json_patch::PatchOperation::Add(add) = &patch.0[0] else {
            panic!("{patch:?}");
        };
        assert_eq!(add.path.to_string(), "/metadata/annotations");
        let note = skipped_of(&outcome, &pod).unwrap();
        assert!(note.starts_with("mount_path_conflict: "), "{note}");
        // Copied from an older pod: replaced.
        let pod = job_pod(json!({annotations::SKIPPED: "old"}), CONFLICT, 0);
        let outcome = allow(&review_of(&pod, false));
        assert_eq!(skipped_of(&outcome, &pod), Some(note.clone()));
        // Already that value (the API server's second call): no patch.
        let pod = job_pod(json!({annotations::SKIPPED: note}), CONFLICT, 0);
        let outcome = allow(&review_of(&pod, false));
        assert_eq!(outcome.reason, "mount_path_conflict");
        assert!(patch_of(&outcome).is_none());
        // Never reported as an unknown annotation.
        assert_eq!(outcome.request.unknown_annotations, "");
        assert_eq!(
            response_of(&outcome)["warnings"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn under_deny_an_engine_error_is_refused_as_before() {
        let pod = job_pod(json!({"example.com/team": "a"}), CONFLICT, 0);
        let outcome = review(
            &review_of(&pod, false),
            &ClusterCache::disconnected(),
            &EngineConfig::default(),
            FailureMode::Deny,
            &ParseBudget::default(),
        );
        let response = response_of(&outcome);
        assert_eq!(response["allowed"], false);
        assert!(response.get("patch").is_none());
        assert!(response.get("patchType").is_none());
        assert_eq!(response["status"]["code"], 422);
        assert_eq!(response["status"]["reason"], "Invalid");
        assert_eq!(
            response["status"]["details"]["causes"][0]["field"],
            "spec.containers[0].volumeMounts[0].mountPath"
        );
    }

    #[test]
    fn an_opt_in_that_is_skipped_is_annotated_whatever_the_failure_mode() {
        let mut pod = job_pod(json!({"kube-prestop.io/inject": "true"}), None, 0);
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        pod["spec"]["restartPolicy"] = json!("Always");
        for mode in [FailureMode::Allow, FailureMode::Deny] {
            let outcome = review(
                &review_of(&pod, false),
                &ClusterCache::disconnected(),
                &EngineConfig::default(),
                mode,
                &ParseBudget::default(),
            );
            assert_eq!(
                (outcome.decision, outcome.reason),
                (DecisionLabel::Skip, "restart_policy_always")
            );
            assert!(outcome.request.opted_in_but_skipped);
            let response = response_of(&outcome);
            assert_eq!(response["allowed"], true);
            let warning = response["warnings"][0].as_str().unwrap();
            let note = skipped_of(&outcome, &pod).unwrap();
            assert_eq!(note, skipped_text("restart_policy_always", warning));
            assert!(
                note.starts_with(
                    "restart_policy_always: kube-prestop.io/inject is \"true\" but the pod is \
                     not injected: "
                ),
                "{note}"
            );
        }
    }

    #[test]
    fn a_pod_skipped_without_opting_in_is_untouched() {
        // Not a Job's, not opted in.
        let mut bare = job_pod(serde_json::Value::Null, None, 0);
        bare["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        // Opted out, even with our mount path.
        let opted_out = job_pod(json!({"kube-prestop.io/inject": "false"}), CONFLICT, 0);
        // No preStop.
        let mut no_prestop = job_pod(serde_json::Value::Null, None, 0);
        no_prestop["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("lifecycle");
        for pod in [bare, opted_out, no_prestop] {
            let outcome = allow(&review_of(&pod, false));
            assert_eq!(outcome.decision, DecisionLabel::Skip, "{pod}");
            assert!(patch_of(&outcome).is_none(), "{pod}");
        }
    }

    #[test]
    fn a_long_message_is_cut_in_the_skipped_annotation() {
        // An invalid annotation's value is in the message, its start only
        // (128 characters, and the bad entry's 63 in the reason), but each
        // control character is shown escaped (`\u{1b}`, 6 bytes): over
        // 1,024 bytes. (The cut on a character boundary: the engine's
        // `skipped_value` tests.)
        let value = format!("main={}", "\u{1b}".repeat(1500));
        let pod = job_pod(json!({"kube-prestop.io/run-on": value}), None, 0);
        let outcome = allow(&review_of(&pod, false));
        assert_eq!(outcome.reason, "invalid_annotation");
        let warning = response_of(&outcome)["warnings"][0]
            .as_str()
            .unwrap()
            .to_owned();
        let note = skipped_of(&outcome, &pod).unwrap();
        let message = note.strip_prefix("invalid_annotation: ").unwrap();
        assert!(message.len() <= annotations::MAX_SKIPPED_MESSAGE_BYTES);
        assert!(message.len() > annotations::MAX_SKIPPED_MESSAGE_BYTES - 6);
        let kept = message.strip_suffix('…').unwrap();
        assert!(
            skipped_text("invalid_annotation", &warning)
                .starts_with(&format!("invalid_annotation: {kept}"))
        );
    }

    #[test]
    fn no_annotation_that_would_take_the_pod_over_the_bound() {
        // The review just under the bound, after the annotation: patched;
        // just under before it, but over after: the warning only.
        // The pod's JSON is what counts, not the review around it.
        let size = |env: usize| {
            serde_json::to_vec(&job_pod(serde_json::Value::Null, CONFLICT, env))
                .unwrap()
                .len()
        };
        let base = size(0);
        for (room, patched) in [(2000, true), (50, false)] {
            let env = MAX_PATCHED_POD_BYTES - room - base;
            let pod = job_pod(serde_json::Value::Null, CONFLICT, env);
            assert_eq!(size(env), MAX_PATCHED_POD_BYTES - room);
            let body = review_of(&pod, false);
            let outcome = allow(&body);
            assert_eq!(outcome.reason, "mount_path_conflict");
            assert_eq!(patch_of(&outcome).is_some(), patched, "room {room}");
            assert!(response_of(&outcome)["warnings"][0].is_string());
        }
    }

    /// `pod` with 200 more volumes: about 1.3 MB of typed values, over
    /// the 32 KiB that [`too_costly`] lets a pod take.
    fn costly(mut pod: serde_json::Value) -> serde_json::Value {
        let volumes = pod["spec"]["volumes"].as_array_mut().unwrap();
        volumes.extend((0..200).map(|i| json!({"name": format!("v{i}")})));
        pod
    }

    /// The outcome for `body` (of a [`costly`] pod) under a budget so
    /// small that its pod is too costly to parse (its envelope still fits).
    fn too_costly(body: &[u8], mode: FailureMode) -> Outcome {
        let budget = ParseBudget::new(64 * 1024);
        let out = review(
            body,
            &ClusterCache::disconnected(),
            &EngineConfig::default(),
            mode,
            &budget,
        );
        assert_eq!(
            (out.decision, out.reason),
            (DecisionLabel::Error, reason::POD_TOO_LARGE),
            "{:?}",
            out.detail
        );
        assert!(
            out.detail.as_deref().unwrap().contains("to parse"),
            "{:?}",
            out.detail
        );
        assert_eq!(budget.in_use_bytes(), 0);
        out
    }

    /// The warning of an allowed outcome.
    fn warning_of(outcome: &Outcome) -> String {
        let response = response_of(outcome);
        assert_eq!(response["allowed"], true);
        response["warnings"][0].as_str().unwrap().to_owned()
    }

    /// A pod too costly to parse is annotated as an engine error is, from
    /// its annotations scanned in its JSON: the whole map when it has none
    /// (absent or null), one `add` beside the others, an old value
    /// replaced, none when it already has that value.
    #[test]
    fn a_pod_too_costly_to_parse_is_annotated_under_allow() {
        for annotations in [serde_json::Value::Null, json!({"example.com/team": "a"})] {
            let pod = costly(job_pod(annotations.clone(), None, 0));
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
            let warning = warning_of(&outcome);
            assert!(warning.contains("to parse"), "{warning}");
            let note = skipped_of(&outcome, &pod).unwrap();
            assert_eq!(note, skipped_text(reason::POD_TOO_LARGE, &warning));
            let patch = patch_of(&outcome).unwrap();
            assert_eq!(patch.0.len(), 1, "{patch:?}");
            let json_patch::PatchOperation::Add(add) = &patch.0[0] else {
                panic!("{patch:?}");
            };
            let path = if annotations.is_null() {
                "/metadata/annotations"
            } else {
                "/metadata/annotations/kube-prestop.io~1skipped"
            };
            assert_eq!(add.path.to_string(), path);
        }
        // `annotations: null` is no map, as k8s-openapi reads it: the
        // whole map is added.
        let mut pod = costly(job_pod(serde_json::Value::Null, None, 0));
        pod["metadata"]["annotations"] = serde_json::Value::Null;
        let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
        let patch = patch_of(&outcome).unwrap();
        let json_patch::PatchOperation::Add(add) = &patch.0[0] else {
            panic!("{patch:?}");
        };
        assert_eq!(add.path.to_string(), "/metadata/annotations");
        assert!(skipped_of(&outcome, &pod).is_some());
        // A value copied from an older pod: replaced.
        let pod = costly(job_pod(json!({annotations::SKIPPED: "old"}), None, 0));
        let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
        let note = skipped_of(&outcome, &pod).unwrap();
        assert!(note.starts_with("pod_too_large: "), "{note}");
        // Already that value (the API server's second call): no patch. The
        // message names the pod's estimate, which the value itself changes:
        // carry it until it no longer does.
        let mut value = note;
        for _ in 0..5 {
            let pod = costly(job_pod(json!({annotations::SKIPPED: value}), None, 0));
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
            let Some(next) = skipped_of(&outcome, &pod) else {
                let warning = warning_of(&outcome);
                assert_eq!(value, skipped_text(reason::POD_TOO_LARGE, &warning));
                return;
            };
            value = next;
        }
        panic!("the value never settled: {value}");
    }

    #[test]
    fn a_pod_too_costly_to_parse_is_annotated_with_the_default_budget() {
        // 30,000 volumes: about 96 MiB of typed values, over 32 MiB.
        let volumes: Vec<_> = (0..30_000)
            .map(|i| json!({"name": format!("v{i}")}))
            .collect();
        let mut pod = job_pod(json!({"example.com/team": "a"}), None, 0);
        pod["spec"]["volumes"] = json!(volumes);
        let outcome = allow(&review_of(&pod, false));
        assert_eq!(outcome.reason, reason::POD_TOO_LARGE);
        let warning = warning_of(&outcome);
        let note = skipped_of(&outcome, &pod).unwrap();
        assert_eq!(note, skipped_text(reason::POD_TOO_LARGE, &warning));
        assert!(note.contains("spec.volumes, has 30000 entries"), "{note}");
    }

    /// The bounds of the other paths hold: no annotation past the API
    /// server's 256 KiB of annotations, nor past the pod's 1.5 MiB.
    #[test]
    fn a_pod_too_costly_to_parse_is_not_annotated_past_a_bound() {
        let key = "example.com/big".len();
        for (room, patched) in [(2_000, true), (100, false)] {
            let value = "x".repeat(MAX_ANNOTATIONS_BYTES - key - room);
            let pod = costly(job_pod(json!({"example.com/big": value}), None, 0));
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
            assert!(!warning_of(&outcome).is_empty());
            assert_eq!(patch_of(&outcome).is_some(), patched, "room {room}");
        }
        let size = |env: usize| {
            serde_json::to_vec(&costly(job_pod(serde_json::Value::Null, None, env)))
                .unwrap()
                .len()
        };
        let base = size(0);
        for (room, patched) in [(2000, true), (50, false)] {
            let env = MAX_PATCHED_POD_BYTES - room - base;
            let pod = costly(job_pod(serde_json::Value::Null, None, env));
            assert_eq!(size(env), MAX_PATCHED_POD_BYTES - room);
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
            assert!(!warning_of(&outcome).is_empty());
            assert_eq!(patch_of(&outcome).is_some(), patched, "room {room}");
        }
    }

    /// Annotations the scan cannot read (not an object of strings): the
    /// warning alone, as before; never a failed review.
    #[test]
    fn a_pod_too_costly_whose_annotations_do_not_scan_gets_the_warning_only() {
        for annotations in [json!({"a": 5}), json!(["a"]), json!("a")] {
            let pod = costly(job_pod(annotations.clone(), None, 0));
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Allow);
            assert!(!warning_of(&outcome).is_empty(), "{annotations}");
            assert!(patch_of(&outcome).is_none(), "{annotations}");
        }
    }

    #[test]
    fn a_pod_too_costly_to_parse_is_refused_under_deny_without_a_patch() {
        for annotations in [serde_json::Value::Null, json!({"example.com/team": "a"})] {
            let pod = costly(job_pod(annotations, None, 0));
            let outcome = too_costly(&review_of(&pod, false), FailureMode::Deny);
            let response = response_of(&outcome);
            assert_eq!(response["allowed"], false);
            assert!(response.get("patch").is_none());
            assert!(response.get("patchType").is_none());
            assert_eq!(response["status"]["code"], 413);
            assert_eq!(response["status"]["reason"], "RequestEntityTooLarge");
        }
    }

    #[test]
    fn no_annotation_without_a_readable_pod() {
        let unparsable = review_of(&json!({"spec": "not a spec"}), false);
        let mut absent: serde_json::Value = serde_json::from_slice(&unparsable).unwrap();
        absent["request"].as_object_mut().unwrap().remove("object");
        let absent = serde_json::to_vec(&absent).unwrap();
        for body in [unparsable, absent] {
            let outcome = allow(&body);
            assert_eq!(outcome.reason, reason::INVALID_POD);
            let response = response_of(&outcome);
            assert_eq!(response["allowed"], true);
            assert!(response.get("patch").is_none(), "{response}");
            assert!(response["warnings"][0].is_string());
        }
    }
}
