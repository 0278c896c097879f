//! The decision for one request: which requests the engine sees, what it
//! says, and the outcome to send, count and log. Pure apart from reading the
//! cluster cache; no panics (an engine panic is caught and answered per the
//! failure mode).

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionResponse, Operation};
use serde_json::value::RawValue;

use super::answer::{self, PATCH_CAPACITY, base_response, base64_string};
use super::error::PodError;
use super::refusal::{self, FailureMode};
use super::wire::{self, Object, operation_name};
use crate::error::HttpError;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::{self as engine, ClusterContext, EngineConfig, Plan};
use kube_prestop_metrics::labels::{self, Decision, reason};

/// The outcome of one request, ready to be sent, counted and logged.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// 200 for every AdmissionReview answer, else [`HttpError::status`]
    /// (400 when the body is not an AdmissionReview).
    pub http_status: u16,
    /// Response body (an AdmissionReview, or `{"error": "..."}` otherwise).
    pub body: Vec<u8>,
    /// What was done (metric and log label).
    pub decision: Decision,
    /// Machine-readable reason (metric and log label): the engine's skip
    /// reason or error label, or one of [`reason`]'s.
    pub reason: &'static str,
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

/// Decide on one request body.
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
        return answer(
            &response,
            None,
            Decision::Ignored,
            reason::OTHER_RESOURCE,
            facts,
        );
    }
    if !matches!(request.operation, Operation::Create) {
        return answer(
            &response,
            None,
            Decision::Ignored,
            reason::OTHER_OPERATION,
            facts,
        );
    }

    let pod: Pod = match object {
        Object::Pod(pod) => pod,
        Object::Invalid(e) => {
            let error = PodError::Unparsable(e);
            return failure(response, failure_mode, error, "", facts);
        }
        Object::Absent => return failure(response, failure_mode, PodError::NoObject, "", facts),
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
        binary: cache.binary_facts(&namespace),
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
                    Ok(patch) => Decided::Patch(patch, Box::new(mutation.binary.clone())),
                    Err(e) => Decided::PatchError(e),
                }
            }
        })
    }));
    let Ok(decided) = decided else {
        return failure(response, failure_mode, PodError::EnginePanic, "", facts);
    };
    match decided {
        Ok(Decided::Skip(reason)) => {
            if let Some(warning) = opt_in_warning(&pod, &reason) {
                response.warnings.get_or_insert_with(Vec::new).push(warning);
                facts.opted_in_but_skipped = true;
            }
            let reason = labels::skip_reason(&reason);
            answer(&response, None, Decision::Skip, reason, facts)
        }
        Ok(Decided::NoChange) => {
            answer(&response, None, Decision::Inject, reason::NO_CHANGE, facts)
        }
        Ok(Decided::Patch(patch, choice)) => {
            facts.sidecar_binary = labels::sidecar_binary(&choice.delivery);
            facts.sidecar_binary_why = choice.why;
            // The ConfigMap this pod would have mounted, for the
            // namespace's next pods (not for a dry run, which must have no
            // side effects).
            if let Some(arch) = choice.missing_config_map.as_deref() {
                cache.ensure_sidecar_config_map(&context.namespace, arch, request.dry_run);
            }
            answer(
                &response,
                Some(&patch),
                Decision::Inject,
                reason::INJECTED,
                facts,
            )
        }
        Ok(Decided::PatchError(e)) => {
            failure(response, failure_mode, PodError::Patch(e), "", facts)
        }
        Err(e) => {
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            failure(response, failure_mode, PodError::Engine(e), pod_name, facts)
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
    /// [`base64_string`]), and where the binary comes from.
    Patch(Box<RawValue>, Box<engine::delivery::Choice>),
    /// The patch could not be serialized or encoded: why.
    PatchError(serde_json::Error),
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
    let mut outcome = answer(&response, None, Decision::Error, error.reason(), facts);
    outcome.detail.get_or_insert_with(|| error.to_string());
    outcome
}

/// An AdmissionReview answer: `response` with `patch` (see
/// [`base64_string`]), if any.
fn answer(
    response: &AdmissionResponse,
    patch: Option<&RawValue>,
    decision: Decision,
    reason: &'static str,
    request: RequestFacts,
) -> Outcome {
    match answer::encode(response, patch) {
        Ok(body) => Outcome {
            http_status: 200,
            body,
            decision,
            reason,
            detail: None,
            request,
        },
        // Serializing plain data cannot fail; answered regardless.
        Err(e) => {
            let detail = e.to_string();
            let mut outcome = refused(HttpError::Serialize(e), request);
            outcome.detail = Some(detail);
            outcome
        }
    }
}

/// An answer that is not an AdmissionReview.
fn refused(error: HttpError, request: RequestFacts) -> Outcome {
    // Every error `review` returns is counted (see `HttpError::labels`).
    let (decision, reason) = error
        .labels()
        .unwrap_or((Decision::Invalid, reason::BAD_REQUEST));
    Outcome {
        http_status: error.status().as_u16(),
        body: error.body(),
        decision,
        reason,
        detail: Some(error.to_string()),
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
            assert_eq!(out.http_status, 400, "{}", String::from_utf8_lossy(body));
        }
    }
}
