//! The engine's whole answer for one pod: what to do (skip with its reason,
//! or the mutation), the admission warnings, and the error when the pod
//! cannot be handled. The admission server and `inject` both take it as it
//! is: the server renders [`Verdict::operations`] as its JSON Patch and
//! sends [`Verdict::warnings`]; `inject` applies [`Verdict::patch`] to the
//! document and prints the same warnings with their lines.

use std::fmt;

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;

use crate::annotations::{self, UnknownAnnotation};
use crate::delivery::Choice;
use crate::patch::{self, Operation};
use crate::{EngineError, Plan, SkipReason};

/// One admission warning the engine decided on. Displays as the text the
/// webhook sends (`kube-prestop: ...`; the API server shows it to the
/// client, e.g. `kubectl apply`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// An unknown `kube-prestop.io/` annotation (most likely misspelt): it is
    /// ignored, and never blocks the pod.
    UnknownAnnotation(UnknownAnnotation),
    /// This many more unknown `kube-prestop.io/` annotations than the
    /// [`annotations::MAX_UNKNOWN_ANNOTATIONS_LISTED`] listed before it,
    /// ignored too.
    MoreUnknownAnnotations(usize),
    /// The pod asked for injection (`kube-prestop.io/inject: "true"`) and is
    /// skipped anyway, for this reason. Never for a pod skipped because it
    /// is injected already (the API server's second call under
    /// `reinvocationPolicy: IfNeeded`).
    OptedInButSkipped(SkipReason),
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownAnnotation(unknown) => write!(f, "kube-prestop: {unknown}"),
            Self::MoreUnknownAnnotations(more) => write!(
                f,
                "kube-prestop: {more} more unknown {} annotations are ignored (only the first {} are listed)",
                annotations::PREFIX,
                annotations::MAX_UNKNOWN_ANNOTATIONS_LISTED
            ),
            Self::OptedInButSkipped(reason) => write!(
                f,
                "kube-prestop: {} is \"true\" but the pod is not injected: {reason}",
                annotations::INJECT
            ),
        }
    }
}

/// The engine's answer for a pod (see [`crate::review`]).
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Skip (with the reason) or inject (with the mutation); the error when
    /// the pod cannot be handled (the caller's failure mode decides).
    pub plan: Result<Plan, EngineError>,
    /// Warnings, in order: one per unknown annotation (key order, the first
    /// [`annotations::MAX_UNKNOWN_ANNOTATIONS_LISTED`]), the count of the
    /// others, then the opt-in one. Present whatever the plan, errors included.
    pub warnings: Vec<Warning>,
}

impl Verdict {
    /// Builds the verdict for `pod` from its `plan`: the warnings follow
    /// from the pod's annotations and the plan.
    pub fn new(pod: &Pod, plan: Result<Plan, EngineError>) -> Self {
        let pod_annotations = pod.metadata.annotations.as_ref();
        let unknown = annotations::unknown_annotations(pod_annotations);
        let mut warnings: Vec<Warning> = unknown
            .listed
            .into_iter()
            .map(Warning::UnknownAnnotation)
            .collect();
        if unknown.more > 0 {
            warnings.push(Warning::MoreUnknownAnnotations(unknown.more));
        }
        if let Ok(Plan::Skip(reason)) = &plan {
            let opted_in = pod_annotations
                .is_some_and(|a| matches!(annotations::inject_value(a), Ok(Some(true))));
            if opted_in && *reason != SkipReason::AlreadyInjected {
                warnings.push(Warning::OptedInButSkipped(*reason));
            }
        }
        Self { plan, warnings }
    }

    /// Why the pod is skipped, when it is.
    pub fn skip_reason(&self) -> Option<&SkipReason> {
        match &self.plan {
            Ok(Plan::Skip(reason)) => Some(reason),
            _ => None,
        }
    }

    /// Where the injected pod's sidecar binary comes from, and why; `None`
    /// unless the pod is injected.
    pub fn delivery(&self) -> Option<&Choice> {
        match &self.plan {
            Ok(Plan::Inject(mutation)) => Some(&mutation.binary),
            _ => None,
        }
    }

    /// The unknown annotations listed among the warnings (at most
    /// [`annotations::MAX_UNKNOWN_ANNOTATIONS_LISTED`]).
    pub fn unknown_annotations(&self) -> impl Iterator<Item = &UnknownAnnotation> {
        self.warnings.iter().filter_map(|w| match w {
            Warning::UnknownAnnotation(unknown) => Some(unknown),
            Warning::MoreUnknownAnnotations(_) | Warning::OptedInButSkipped(_) => None,
        })
    }

    /// Whether the pod opted in and is skipped anyway (a warning a
    /// controller creating the pod drops, so the caller logs it).
    pub fn opted_in_but_skipped(&self) -> bool {
        self.warnings
            .iter()
            .any(|w| matches!(w, Warning::OptedInButSkipped(_)))
    }

    /// The JSON Patch operations that inject `pod`, the pod this verdict was
    /// made for; empty unless injected (and when the pod already has every
    /// change). Borrowed from the mutation: serializing them writes the
    /// patch without intermediate trees ([`patch::operations`]).
    pub fn operations<'a>(&'a self, pod: &Pod) -> Vec<Operation<'a>> {
        match &self.plan {
            Ok(Plan::Inject(mutation)) => patch::operations(pod, mutation),
            _ => Vec::new(),
        }
    }

    /// [`Self::operations`] as a `json_patch::Patch`.
    ///
    /// # Errors
    /// A value that cannot be serialized (not expected for the k8s-openapi
    /// types used; returned rather than assumed).
    pub fn patch(&self, pod: &Pod) -> Result<Patch, serde_json::Error> {
        match &self.plan {
            Ok(Plan::Inject(mutation)) => patch::json_patch(pod, mutation),
            _ => Ok(Patch(Vec::new())),
        }
    }

    /// `pod` with the mutation applied (`None` unless injected).
    pub fn injected(&self, pod: &Pod) -> Option<Pod> {
        match &self.plan {
            Ok(Plan::Inject(mutation)) => {
                let mut out = pod.clone();
                mutation.as_ref().clone().apply(&mut out);
                Some(out)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, restart_policy: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": annotations},
            "spec": {
                "restartPolicy": restart_policy,
                "containers": [{
                    "name": "main", "image": "busybox",
                    "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
                }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn unknown_annotations_past_the_first_few_are_one_warning() {
        let keys: Vec<String> = (0..20)
            .map(|i| format!("kube-prestop.io/x{i:02}"))
            .collect();
        let annotations: serde_json::Map<String, serde_json::Value> =
            keys.iter().map(|k| (k.clone(), json!("v"))).collect();
        let p = pod(serde_json::Value::Object(annotations), "Never");
        let v = Verdict::new(&p, Ok(Plan::Skip(SkipReason::NotJobOwned)));
        let n = annotations::MAX_UNKNOWN_ANNOTATIONS_LISTED;
        assert_eq!(v.warnings.len(), n + 1);
        assert_eq!(v.warnings[n], Warning::MoreUnknownAnnotations(20 - n));
        assert_eq!(
            v.warnings[n].to_string(),
            format!(
                "kube-prestop: 15 more unknown kube-prestop.io/ annotations are ignored (only the first {n} are listed)"
            )
        );
        assert_eq!(v.unknown_annotations().count(), n);
    }

    #[test]
    fn opted_in_but_skipped_is_a_warning_after_the_unknown_annotations() {
        let p = pod(
            json!({"kube-prestop.io/inject": "true", "kube-prestop.io/contianers": "main"}),
            "Always",
        );
        let v = crate::review(&p, &crate::ClusterContext::default(), &Default::default());
        assert_eq!(v.skip_reason(), Some(&SkipReason::RestartPolicyAlways));
        assert!(v.opted_in_but_skipped());
        assert_eq!(v.unknown_annotations().count(), 1);
        let texts: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
        assert!(
            texts[0].starts_with("kube-prestop: unknown annotation kube-prestop.io/contianers")
        );
        assert!(texts[1].starts_with(
            "kube-prestop: kube-prestop.io/inject is \"true\" but the pod is not injected: "
        ));
        assert!(v.operations(&p).is_empty());
        assert!(v.delivery().is_none());
        assert!(v.injected(&p).is_none());
    }

    #[test]
    fn injected_verdict_carries_delivery_operations_and_no_warning() {
        let p = pod(json!({"kube-prestop.io/inject": "true"}), "Never");
        let v = crate::review(&p, &crate::ClusterContext::default(), &Default::default());
        assert!(v.warnings.is_empty());
        assert!(v.skip_reason().is_none());
        assert!(v.delivery().is_some());
        let patched = {
            let mut value = serde_json::to_value(&p).unwrap();
            json_patch::patch(&mut value, &v.patch(&p).unwrap()).unwrap();
            value
        };
        assert_eq!(
            patched,
            serde_json::to_value(v.injected(&p).unwrap()).unwrap()
        );
    }

    #[test]
    fn an_error_keeps_the_warnings() {
        let p = pod(
            json!({"kube-prestop.io/inject": "true", "kube-prestop.io/nope": "x",
                   "kube-prestop.io/run-on": "sometimes"}),
            "Never",
        );
        let v = crate::review(&p, &crate::ClusterContext::default(), &Default::default());
        assert!(v.plan.is_err());
        assert_eq!(v.unknown_annotations().count(), 1);
        assert!(!v.opted_in_but_skipped());
    }
}
