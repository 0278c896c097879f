//! The failure mode and the refusal mapping: what a pod the engine cannot
//! handle gets, an admission with a warning (`allow`) or a refusal whose
//! status names what to fix (`deny`).

use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use kube::core::response::{StatusCause, StatusDetails};
use kube_prestop_engine::EngineError;

use super::error::PodError;

/// What to do with a pod the engine cannot handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Admit the pod without injection, with an admission warning, and, for
    /// an error [`PodError::annotates_the_pod`], a patch that only writes
    /// `kube-prestop.io/skipped` (the warning's text, for a controller's
    /// pods, whose warnings nobody sees) (default: a bug of ours never
    /// blocks a Job's pods).
    #[default]
    Allow,
    /// Deny the pod (fail closed).
    Deny,
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
    /// * no sidecar binary for the pod's architecture: 422 `Invalid` with
    ///   the pod's field that pins it, or 403 `Forbidden` when every node
    ///   has that architecture;
    /// * a mutation that alone would take the pod over the size bound: 413
    ///   `RequestEntityTooLarge`, as [`Refusal::of_pod_error`] for one
    ///   found after the patch is rendered;
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
            EngineError::UnsupportedArchitecture { field, .. } if field.starts_with("spec.") => {
                user(422, "Invalid", Some(field.clone()))
            }
            EngineError::UnsupportedArchitecture { .. } => user(403, "Forbidden", None),
            // As for `PodError::TooLarge`.
            EngineError::PodTooLarge { .. } => user(413, "RequestEntityTooLarge", None),
            EngineError::InvalidConfig(_) | EngineError::InvalidQuantity { .. } => Self::internal(),
        }
    }

    /// The refusal for a pod that cannot be injected: [`Refusal::of`] an
    /// engine error, naming the pod `pod_name` (its `metadata.name`);
    /// 413 `RequestEntityTooLarge` for a pod the patch would take over
    /// [`super::MAX_PATCHED_POD_BYTES`] or that would cost too much memory
    /// to parse ([`PodError::TooCostly`]);
    /// [`Refusal::internal`] for everything else (an unreadable pod object
    /// the API server accepted, a panic, a patch that does not serialize).
    pub fn of_pod_error(error: &PodError, pod_name: &str) -> Self {
        match error {
            PodError::Engine(e) => Self {
                pod_name: pod_name.to_owned(),
                ..Self::of(e)
            },
            // What the API server itself answers for an object over its
            // limits: 413 `RequestEntityTooLarge`; the message names the
            // bound.
            PodError::TooLarge { .. } | PodError::TooCostly { .. } => Self {
                code: 413,
                reason: "RequestEntityTooLarge",
                field: None,
                pod_name: pod_name.to_owned(),
            },
            PodError::Unparsable(_)
            | PodError::NoObject
            | PodError::EnginePanic
            | PodError::Patch(_) => Self::internal(),
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

/// The admission warning of a pod admitted without injection because of
/// `error` (failure mode `allow`).
pub(super) fn allowed_warning(error: &PodError) -> String {
    format!("kube-prestop: pod admitted without the preStop sidecar: {error}")
}

/// `response` for a pod that cannot be injected because of `error`, under
/// `mode`: allowed with the error as the first warning, or refused with
/// [`Refusal::of_pod_error`]'s status. `pod_name` is the pod's
/// `metadata.name` (empty for `generateName`).
pub(super) fn apply(
    mut response: AdmissionResponse,
    mode: FailureMode,
    error: &PodError,
    pod_name: &str,
) -> AdmissionResponse {
    match mode {
        FailureMode::Allow => {
            response
                .warnings
                .get_or_insert_with(Vec::new)
                .insert(0, allowed_warning(error));
        }
        FailureMode::Deny => {
            response.allowed = false;
            response.result = Refusal::of_pod_error(error, pod_name).status(&format!(
                "kube-prestop: cannot inject the preStop sidecar (failure mode deny): {error}"
            ));
        }
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

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
}
