//! Selection: which pods are injected, and which of their containers are
//! watched (`docs/ARCHITECTURE.md` §3, "Selection").

use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube_prestop_contract as contract;

use super::EngineError;
use super::annotations::{self, PodOverrides};
use super::workload::{self, WorkloadKind};

/// Namespace never injected, whatever its labels: `kube-system`.
pub const KUBE_SYSTEM: &str = "kube-system";

/// Why a pod is left alone. The server answers with an empty patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The pod's namespace is `kube-system` or the webhook's own namespace.
    NamespaceExcluded,
    /// Annotation `kube-prestop.io/inject: "false"`.
    OptedOut,
    /// Not a pod of an enabled workload kind (`engine::workload`; by
    /// default a `batch/v1` Job's) and not opted in with
    /// `kube-prestop.io/inject: "true"`. The label keeps its first name,
    /// `not_job_owned`.
    NotJobOwned,
    /// `restartPolicy` is `Always` or unset (the API default is `Always`):
    /// containers are restarted, never "exit on their own" for good.
    RestartPolicyAlways,
    /// No regular container has a non-empty `lifecycle.preStop.exec.command`
    /// (`httpGet`, `tcpSocket` and `sleep` handlers are not watched).
    NoExecPreStop,
    /// A Windows pod (`spec.os.name: windows`, or a
    /// `kubernetes.io/os: windows` node selector): no shared PID namespace.
    WindowsPod,
    /// The pod already carries our sidecar or wrapped preStop commands: a
    /// second pass changes nothing (`reinvocationPolicy: IfNeeded`).
    AlreadyInjected,
}

impl SkipReason {
    /// Stable snake_case label for metrics and logs, e.g. `not_job_owned`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NamespaceExcluded => "namespace_excluded",
            Self::OptedOut => "opted_out",
            Self::NotJobOwned => "not_job_owned",
            Self::RestartPolicyAlways => "restart_policy_always",
            Self::NoExecPreStop => "no_exec_prestop",
            Self::WindowsPod => "windows_pod",
            Self::AlreadyInjected => "already_injected",
        }
    }

    /// Every reason, in the order the rules are checked.
    pub const ALL: [SkipReason; 7] = [
        Self::NamespaceExcluded,
        Self::AlreadyInjected,
        Self::OptedOut,
        Self::WindowsPod,
        Self::NotJobOwned,
        Self::RestartPolicyAlways,
        Self::NoExecPreStop,
    ];
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NamespaceExcluded => {
                "the namespace is kube-system or the webhook's own namespace"
            }
            Self::OptedOut => "the pod is opted out with kube-prestop.io/inject: \"false\"",
            Self::NotJobOwned => {
                "the pod is not of an enabled workload kind (by default: owned by a Job) and not opted in with kube-prestop.io/inject: \"true\""
            }
            Self::RestartPolicyAlways => {
                "the pod's restartPolicy is Always (or unset), not Never or OnFailure"
            }
            Self::NoExecPreStop => {
                "no regular container has a lifecycle.preStop.exec command (httpGet, tcpSocket and sleep handlers are not supported)"
            }
            Self::WindowsPod => "the pod is a Windows pod",
            Self::AlreadyInjected => "the pod is already injected",
        })
    }
}

/// Whether the pod carries kube-prestop's parts: an init container running
/// the sidecar's `watch` or `install` command, or a preStop command wrapped
/// by `contract::prestop_command`. The status annotation alone does not count
/// (it may have been copied from another pod without the containers).
pub fn is_injected(spec: &PodSpec) -> bool {
    let ours = |c: &Container| {
        c.command.as_deref().is_some_and(|cmd| {
            cmd == contract::install_command().as_slice()
                || (cmd
                    .first()
                    .is_some_and(|bin| contract::BINARY_PATHS.contains(&bin.as_str()))
                    && cmd.get(1).map(String::as_str) == Some(contract::SUBCOMMAND_WATCH))
        })
    };
    spec.init_containers.iter().flatten().any(ours)
        || spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| {
                exec_prestop(c).is_some_and(|cmd| contract::parse_prestop_command(cmd).is_some())
            })
}

/// The container's non-empty `lifecycle.preStop.exec.command`, if any.
pub fn exec_prestop(c: &Container) -> Option<&[String]> {
    c.lifecycle
        .as_ref()?
        .pre_stop
        .as_ref()?
        .exec
        .as_ref()?
        .command
        .as_deref()
        .filter(|cmd| !cmd.is_empty())
}

/// Whether the pod is a Windows pod: `spec.os.name: windows`, or a node
/// selector `kubernetes.io/os: windows`.
pub fn is_windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
        || spec
            .node_selector
            .as_ref()
            .and_then(|s| s.get("kubernetes.io/os"))
            .is_some_and(|os| os == "windows")
}

/// Everything selection needs besides the pod spec.
#[derive(Debug, Clone, Copy)]
pub struct SelectInput<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The webhook's own namespace.
    pub webhook_namespace: &'a str,
    /// The enabled workload kinds the pod is (or will be) of
    /// ([`workload::matching`]); empty: none.
    pub kinds: &'a [WorkloadKind],
}

/// The outcome of selection.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Do not inject.
    Skip(SkipReason),
    /// Inject, watching these indices of `spec.containers` (in spec order)
    /// with the validated annotations.
    Watch(Vec<usize>, Box<PodOverrides>),
}

/// Applies the selection rules in this order: namespace excluded, already
/// injected, annotations parsed (errors here), opted out, Windows, workload
/// kind, restartPolicy, exec preStop. In a pod of an enabled workload kind
/// the system's own containers ([`WorkloadKind::never_watched`], e.g. Argo's
/// `wait`) are never watched, whatever preStop they declare.
///
/// Errors: [`EngineError::InvalidAnnotation`] for a malformed annotation,
/// when `kube-prestop.io/containers` names a container that is not a
/// regular container with an exec preStop or is one the system never lets
/// be watched, or when `kube-prestop.io/run-on` or
/// `kube-prestop.io/hook-root` names a container that is not watched.
pub fn select(pod: &Pod, spec: &PodSpec, input: SelectInput<'_>) -> Result<Selection, EngineError> {
    if input.namespace == KUBE_SYSTEM
        || (!input.webhook_namespace.is_empty() && input.namespace == input.webhook_namespace)
    {
        return Ok(Selection::Skip(SkipReason::NamespaceExcluded));
    }
    if is_injected(spec) {
        return Ok(Selection::Skip(SkipReason::AlreadyInjected));
    }
    // Only the opt-in/opt-out annotation decides whether the pod is ours;
    // the others are read once it is, so that a pod skipped anyway is never
    // refused (failure mode deny) over an annotation that would do nothing.
    let inject = match pod.metadata.annotations.as_ref() {
        Some(annotations) => annotations::inject_value(annotations)?,
        None => None,
    };
    if inject == Some(false) {
        return Ok(Selection::Skip(SkipReason::OptedOut));
    }
    if is_windows(spec) {
        return Ok(Selection::Skip(SkipReason::WindowsPod));
    }
    if input.kinds.is_empty() && inject != Some(true) {
        return Ok(Selection::Skip(SkipReason::NotJobOwned));
    }
    if !matches!(spec.restart_policy.as_deref(), Some("Never" | "OnFailure")) {
        return Ok(Selection::Skip(SkipReason::RestartPolicyAlways));
    }
    let candidates: Vec<usize> = spec
        .containers
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            exec_prestop(c).is_some() && workload::owning_system(input.kinds, &c.name).is_none()
        })
        .map(|(i, _)| i)
        .collect();
    if candidates.is_empty() {
        return Ok(Selection::Skip(SkipReason::NoExecPreStop));
    }
    let overrides = PodOverrides::parse(pod.metadata.annotations.as_ref())?;
    let watched = match &overrides.containers {
        None => candidates,
        Some(names) => {
            if let Some(missing) = names.iter().find(|n| {
                !candidates
                    .iter()
                    .any(|&i| spec.containers.get(i).is_some_and(|c| &c.name == *n))
            }) {
                let shown = annotations::shown_name(missing);
                let reason = match workload::owning_system(input.kinds, missing) {
                    Some(kind) => format!(
                        "{shown:?} belongs to {} itself and is never watched",
                        kind.title()
                    ),
                    None => format!(
                        "{shown:?} is not a regular container with a lifecycle.preStop.exec command"
                    ),
                };
                return Err(EngineError::InvalidAnnotation {
                    annotation: annotations::CONTAINERS.to_owned(),
                    value: names.join(","),
                    reason,
                });
            }
            candidates
                .into_iter()
                .filter(|&i| {
                    spec.containers
                        .get(i)
                        .is_some_and(|c| names.contains(&c.name))
                })
                .collect()
        }
    };
    if watched.is_empty() {
        return Ok(Selection::Skip(SkipReason::NoExecPreStop));
    }
    // Per-container settings may name only watched containers.
    let named = [
        (
            annotations::RUN_ON,
            overrides
                .run_on
                .as_ref()
                .map(|p| p.names().collect::<Vec<_>>()),
        ),
        (
            annotations::HOOK_ROOT,
            overrides
                .hook_root
                .as_ref()
                .map(|p| p.names().collect::<Vec<_>>()),
        ),
    ];
    for (key, names) in named {
        let Some(names) = names else { continue };
        if let Some(stray) = names.iter().find(|n| {
            !watched
                .iter()
                .any(|&i| spec.containers.get(i).is_some_and(|c| c.name == **n))
        }) {
            return Err(EngineError::InvalidAnnotation {
                annotation: key.to_owned(),
                value: pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .cloned()
                    .unwrap_or_default(),
                reason: format!(
                    "{:?} is not a watched container",
                    annotations::shown_name(stray)
                ),
            });
        }
    }
    Ok(Selection::Watch(watched, Box::new(overrides)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler, PodOS,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn exec_container(name: &str, cmd: &[&str]) -> Container {
        Container {
            name: name.into(),
            lifecycle: Some(Lifecycle {
                pre_stop: Some(LifecycleHandler {
                    exec: Some(ExecAction {
                        command: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn job_pod(containers: Vec<Container>) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    api_version: "batch/v1".into(),
                    kind: "Job".into(),
                    name: "j".into(),
                    uid: "u".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                restart_policy: Some("Never".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn run(pod: &Pod) -> Result<Selection, EngineError> {
        run_ns(pod, "default")
    }

    fn run_ns(pod: &Pod, ns: &str) -> Result<Selection, EngineError> {
        run_with(pod, ns, &WorkloadKind::DEFAULT)
    }

    /// Selection with these workload kinds enabled.
    fn run_with(pod: &Pod, ns: &str, enabled: &[WorkloadKind]) -> Result<Selection, EngineError> {
        let kinds = workload::matching(&pod.metadata, &enabled.iter().copied().collect());
        select(
            pod,
            pod.spec.as_ref().unwrap(),
            SelectInput {
                namespace: ns,
                webhook_namespace: "kube-prestop",
                kinds: &kinds,
            },
        )
    }

    fn skip(pod: &Pod) -> SkipReason {
        match run(pod).unwrap() {
            Selection::Skip(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn annotate(pod: &mut Pod, k: &str, v: &str) {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
    }

    #[test]
    fn selects_exec_prestop_containers() {
        let pod = job_pod(vec![
            exec_container("a", &["x"]),
            Container {
                name: "b".into(),
                ..Default::default()
            },
            exec_container("c", &["y"]),
            exec_container("empty", &[]),
        ]);
        assert_eq!(
            run(&pod).unwrap(),
            Selection::Watch(vec![0, 2], Box::default())
        );
    }

    #[test]
    fn namespaces() {
        let pod = job_pod(vec![exec_container("a", &["x"])]);
        for ns in ["kube-system", "kube-prestop"] {
            assert_eq!(
                run_ns(&pod, ns).unwrap(),
                Selection::Skip(SkipReason::NamespaceExcluded)
            );
        }
    }

    #[test]
    fn ownership_and_opt_in_out() {
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        pod.metadata.owner_references.as_mut().unwrap()[0].kind = "ReplicaSet".into();
        assert_eq!(skip(&pod), SkipReason::NotJobOwned);
        // Wrong group.
        pod.metadata.owner_references.as_mut().unwrap()[0] = OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Job".into(),
            ..Default::default()
        };
        assert_eq!(skip(&pod), SkipReason::NotJobOwned);
        annotate(&mut pod, annotations::INJECT, "true");
        assert!(matches!(run(&pod).unwrap(), Selection::Watch(..)));
        annotate(&mut pod, annotations::INJECT, "false");
        assert_eq!(skip(&pod), SkipReason::OptedOut);
        annotate(&mut pod, annotations::INJECT, "maybe");
        assert!(matches!(
            run(&pod),
            Err(EngineError::InvalidAnnotation { .. })
        ));
    }

    /// An Argo Workflows step's pod: owned by its Workflow, labelled with
    /// it, `wait` (Argo's) before `main` (the user's), both with a preStop.
    fn argo_pod() -> Pod {
        let mut pod = job_pod(vec![
            exec_container("wait", &["argoexec", "x"]),
            exec_container("main", &["upload"]),
        ]);
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "argoproj.io/v1alpha1".into(),
            kind: "Workflow".into(),
            name: "wf".into(),
            uid: "u".into(),
            ..Default::default()
        }]);
        pod.metadata.labels =
            Some([(workload::ARGO_WORKFLOW_LABEL.to_owned(), "wf".to_owned())].into());
        pod
    }

    #[test]
    fn a_kind_not_enabled_behaves_as_before() {
        let argo = argo_pod();
        assert_eq!(skip(&argo), SkipReason::NotJobOwned);
        // Opted in without the kind enabled: as before, every container
        // with an exec preStop, wait included.
        let mut opted = argo.clone();
        annotate(&mut opted, annotations::INJECT, "true");
        match run(&opted).unwrap() {
            Selection::Watch(w, _) => assert_eq!(w, vec![0, 1]),
            other => panic!("{other:?}"),
        }
        // A Volcano Job's pod is not a batch/v1 Job's.
        let mut volcano = job_pod(vec![exec_container("a", &["x"])]);
        volcano.metadata.owner_references.as_mut().unwrap()[0].api_version =
            "batch.volcano.sh/v1alpha1".into();
        assert_eq!(skip(&volcano), SkipReason::NotJobOwned);
        let enabled = [WorkloadKind::Job, WorkloadKind::Volcano];
        assert!(matches!(
            run_with(&volcano, "default", &enabled).unwrap(),
            Selection::Watch(..)
        ));
        // Job not enabled: a Job's pod needs the opt-in.
        let job = job_pod(vec![exec_container("a", &["x"])]);
        match run_with(&job, "default", &[WorkloadKind::Spark]).unwrap() {
            Selection::Skip(r) => assert_eq!(r, SkipReason::NotJobOwned),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn argo_wait_is_never_watched_when_argo_is_enabled() {
        let enabled = [WorkloadKind::Job, WorkloadKind::ArgoWorkflows];
        let pod = argo_pod();
        assert_eq!(
            run_with(&pod, "default", &enabled).unwrap(),
            Selection::Watch(vec![1], Box::default())
        );
        // Only wait has a preStop: nothing to watch.
        let mut only_wait = pod.clone();
        only_wait.spec.as_mut().unwrap().containers[1].lifecycle = None;
        match run_with(&only_wait, "default", &enabled).unwrap() {
            Selection::Skip(r) => assert_eq!(r, SkipReason::NoExecPreStop),
            other => panic!("{other:?}"),
        }
        // Naming wait is an error that says why.
        let mut named = pod.clone();
        annotate(&mut named, annotations::CONTAINERS, "main,wait");
        match run_with(&named, "default", &enabled) {
            Err(EngineError::InvalidAnnotation { value, reason, .. }) => {
                assert_eq!(value, "main,wait");
                assert_eq!(
                    reason,
                    "\"wait\" belongs to Argo Workflows itself and is never watched"
                );
            }
            other => panic!("{other:?}"),
        }
        // An artifact-plugin sidecar is Argo's too.
        let mut plugin = pod;
        plugin.spec.as_mut().unwrap().containers[0].name = "artifact-plugin-s3".into();
        assert_eq!(
            run_with(&plugin, "default", &enabled).unwrap(),
            Selection::Watch(vec![1], Box::default())
        );
    }

    /// A malformed sidecar annotation matters only on a pod that would be
    /// injected: one skipped anyway is skipped, never an error (which
    /// failure mode deny would turn into a refused pod).
    #[test]
    fn other_annotations_are_read_only_for_pods_to_inject() {
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        annotate(&mut pod, annotations::SIDECAR_CPU_REQUEST, "lots");
        annotate(&mut pod, annotations::CONTAINERS, "a,,Not_A_Name");
        assert!(matches!(
            run(&pod),
            Err(EngineError::InvalidAnnotation { .. })
        ));
        let mut always = pod.clone();
        always.spec.as_mut().unwrap().restart_policy = Some("Always".into());
        assert_eq!(skip(&always), SkipReason::RestartPolicyAlways);
        let mut replica = pod.clone();
        replica.metadata.owner_references.as_mut().unwrap()[0].kind = "ReplicaSet".into();
        assert_eq!(skip(&replica), SkipReason::NotJobOwned);
        let mut no_prestop = pod.clone();
        no_prestop.spec.as_mut().unwrap().containers[0].lifecycle = None;
        assert_eq!(skip(&no_prestop), SkipReason::NoExecPreStop);
        annotate(&mut pod, annotations::INJECT, "false");
        assert_eq!(skip(&pod), SkipReason::OptedOut);
    }

    #[test]
    fn restart_policies() {
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        for (policy, injected) in [
            (Some("Never"), true),
            (Some("OnFailure"), true),
            (Some("Always"), false),
            (None, false),
        ] {
            pod.spec.as_mut().unwrap().restart_policy = policy.map(str::to_owned);
            assert_eq!(
                matches!(run(&pod).unwrap(), Selection::Watch(..)),
                injected,
                "{policy:?}"
            );
        }
        pod.spec.as_mut().unwrap().restart_policy = None;
        assert_eq!(skip(&pod), SkipReason::RestartPolicyAlways);
    }

    #[test]
    fn http_prestop_and_none() {
        let mut c = exec_container("a", &["x"]);
        let handler = c.lifecycle.as_mut().unwrap().pre_stop.as_mut().unwrap();
        handler.exec = None;
        handler.http_get = Some(HTTPGetAction {
            port: IntOrString::Int(8080),
            ..Default::default()
        });
        assert_eq!(skip(&job_pod(vec![c])), SkipReason::NoExecPreStop);
        assert_eq!(
            skip(&job_pod(vec![Container {
                name: "a".into(),
                ..Default::default()
            }])),
            SkipReason::NoExecPreStop
        );
    }

    #[test]
    fn windows() {
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        pod.spec.as_mut().unwrap().os = Some(PodOS {
            name: "windows".into(),
        });
        assert_eq!(skip(&pod), SkipReason::WindowsPod);
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        pod.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/os".to_owned(), "windows".to_owned())].into());
        assert_eq!(skip(&pod), SkipReason::WindowsPod);
    }

    #[test]
    fn already_injected() {
        let wrapped = contract::prestop_command("a", &["x".to_owned()]);
        let wrapped: Vec<&str> = wrapped.iter().map(String::as_str).collect();
        assert_eq!(
            skip(&job_pod(vec![exec_container("a", &wrapped)])),
            SkipReason::AlreadyInjected
        );
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        pod.spec.as_mut().unwrap().init_containers = Some(vec![Container {
            name: "whatever".into(),
            command: Some(contract::watch_command("a", &[], &["x".to_owned()])),
            ..Default::default()
        }]);
        assert_eq!(skip(&pod), SkipReason::AlreadyInjected);
        // The status annotation alone is not enough.
        let mut pod = job_pod(vec![exec_container("a", &["x"])]);
        annotate(&mut pod, annotations::STATUS, annotations::STATUS_INJECTED);
        assert!(matches!(run(&pod).unwrap(), Selection::Watch(..)));
    }

    #[test]
    fn containers_annotation() {
        let mut pod = job_pod(vec![
            exec_container("a", &["x"]),
            exec_container("b", &["y"]),
        ]);
        annotate(&mut pod, annotations::CONTAINERS, "b");
        match run(&pod).unwrap() {
            Selection::Watch(w, _) => assert_eq!(w, vec![1]),
            other => panic!("{other:?}"),
        }
        annotate(&mut pod, annotations::CONTAINERS, "b,c");
        match run(&pod) {
            Err(EngineError::InvalidAnnotation {
                annotation, value, ..
            }) => {
                assert_eq!(annotation, annotations::CONTAINERS);
                assert_eq!(value, "b,c");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_on_and_hook_root_name_only_watched_containers() {
        let mut pod = job_pod(vec![
            exec_container("a", &["x"]),
            exec_container("b", &["y"]),
        ]);
        annotate(&mut pod, annotations::CONTAINERS, "b");
        annotate(&mut pod, annotations::RUN_ON, "b=failure");
        annotate(&mut pod, annotations::HOOK_ROOT, "container");
        match run(&pod).unwrap() {
            Selection::Watch(w, o) => {
                assert_eq!(w, vec![1]);
                assert_eq!(o.run_on_for("b"), contract::RunOn::Failure);
                assert_eq!(o.hook_root_for("b"), contract::HookRoot::Container);
            }
            other => panic!("{other:?}"),
        }
        for key in [annotations::RUN_ON, annotations::HOOK_ROOT] {
            let mut p = pod.clone();
            let v = if key == annotations::RUN_ON {
                "a=success"
            } else {
                "a=container"
            };
            annotate(&mut p, key, v);
            match run(&p) {
                Err(EngineError::InvalidAnnotation {
                    annotation,
                    value,
                    reason,
                }) => {
                    assert_eq!(annotation, key);
                    assert_eq!(value, v);
                    assert_eq!(reason, "\"a\" is not a watched container");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn labels_are_stable_and_distinct() {
        let labels: std::collections::BTreeSet<_> =
            SkipReason::ALL.iter().map(SkipReason::as_str).collect();
        assert_eq!(labels.len(), SkipReason::ALL.len());
        assert_eq!(SkipReason::NotJobOwned.as_str(), "not_job_owned");
        assert!(!SkipReason::OptedOut.to_string().is_empty());
    }
}
