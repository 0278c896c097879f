//! The injection engine: a pure function from a Pod, what the cluster told us
//! and the configuration to a [`Decision`]. No I/O, no clock, no randomness:
//! the same input always gives the same output.
//!
//! * [`review`]: a Pod at admission (CREATE): the whole [`Verdict`] (skip
//!   reason or mutation, the JSON Patch operations, the delivery, the
//!   warnings), as the admission server and `inject` use it.
//! * [`review_template`]: the same for a pod template (Job, CronJob), as
//!   the webhook would see the pods created from it.
//! * [`inject`]: a Pod at admission, as the mutated pod.
//! * [`plan`]: the same decision, with the changes as data instead of a
//!   mutated pod; [`patch::json_patch`] renders them as the webhook's JSON
//!   Patch.
//! * [`inject_template`]: a pod template (Job, CronJob), as the webhook would
//!   inject the pods created from it.
//!
//! Modules, one job each: [`select`] (which pods and containers),
//! [`workload`] (the batch systems' pods, by how each marks them),
//! [`annotations`] (per-pod settings, status), [`names`] (names of what we
//! add), [`resources`] (QoS class, LimitRanges), [`mutate`] (the mutation),
//! [`patch`] (the mutation as a JSON Patch), [`gate`] (each sidecar's start
//! gate: httpGet or exec, its port, the meshes' exclusions), [`delivery`] (where the
//! sidecar binary comes from),
//! [`quantity`] (Kubernetes quantities), [`config`] (configuration),
//! [`shown`] (a pod's or request's string as errors, warnings and logs show
//! it: cut, with its length, control characters escaped).
//! `ANNOTATIONS.md` beside this file is the user-facing annotation table.

use k8s_openapi::api::core::v1::{LimitRange, Pod, PodTemplateSpec};

use shown::{MAX_SHOWN_NAME_CHARS, MAX_SHOWN_VALUE_CHARS, shown};

pub mod annotations;
pub mod config;
pub mod delivery;
pub mod gate;
pub mod image_reference;
pub mod mutate;
pub mod names;
pub mod patch;
pub mod quantity;
pub mod resources;
pub mod select;
pub mod shown;
pub mod verdict;
pub mod workload;

pub use config::{EngineConfig, ResourceDefaults};
pub use delivery::{BinaryFacts, Delivery, NodeArchitectures, SidecarBinarySource, Support};
pub use mutate::Mutation;
pub use resources::QosClass;
pub use select::SkipReason;
pub use verdict::{Verdict, Warning};
pub use workload::WorkloadKind;

/// Largest pod, in bytes of JSON, that injection may make: 1.5 MiB. etcd
/// refuses a write over its `--max-request-bytes` (default 1.5 MiB,
/// `DefaultMaxRequestBytes` in etcd's `server/embed/config.go`, v3.5 and
/// v3.6). The webhook checks the pod it makes against it after rendering
/// the patch; the engine refuses earlier ([`EngineError::PodTooLarge`]) a
/// mutation that would add more than this by itself, before building it.
pub const MAX_PATCHED_POD_BYTES: usize = 1536 * 1024;

/// Everything the engine needs to know about the cluster, gathered by the
/// caller (from a reflector cache in the server, from flags in `inject`).
#[derive(Debug, Clone, Default)]
pub struct ClusterContext {
    /// Namespace of the pod (from the admission request; pods from
    /// `generateName` may have none in their metadata). When empty, the
    /// pod's `metadata.namespace` is used.
    pub namespace: String,
    /// LimitRanges of that namespace (only `type: Container` items are used).
    pub limit_ranges: Vec<LimitRange>,
    /// What decides where the sidecar binary comes from
    /// ([`delivery::choose`]): the ConfigMaps per architecture that exist
    /// in that namespace (each `binaryData` holds one architecture's binary
    /// under `contract::BINARY_CONFIG_MAP_KEY`; the server's
    /// `sidecar_configmap` module creates them), the nodes' architectures,
    /// whether image volumes work. The default knows nothing: the install
    /// init container.
    pub binary: BinaryFacts,
}

/// The engine's answer for a Pod.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Leave the pod unchanged (the webhook answers with an empty patch).
    Skip(SkipReason),
    /// The mutated pod.
    Inject(Box<Pod>),
}

/// The engine's answer for a Pod, with the changes as data (see [`plan`]).
#[derive(Debug, Clone)]
pub enum Plan {
    /// Leave the pod unchanged (the webhook answers with an empty patch).
    Skip(SkipReason),
    /// The changes to make; [`Mutation::apply`] makes them.
    Inject(Box<Mutation>),
}

/// The engine's answer for a pod template.
#[derive(Debug, Clone)]
pub enum TemplateDecision {
    /// Leave the template unchanged.
    Skip(SkipReason),
    /// The mutated template.
    Inject(Box<PodTemplateSpec>),
}

/// Who will own the pods created from a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerHint {
    /// A `batch/v1` Job (a Job's or a CronJob's `jobTemplate`'s pod
    /// template): at admission the Job controller's pods carry an
    /// ownerReference to the Job, so they count as
    /// [`WorkloadKind::Job`]'s (when that kind is enabled).
    Job,
    /// No known owner: only the template's own ownerReferences and labels
    /// ([`workload::matching`]) and the opt-in annotation count (a bare Pod,
    /// a Deployment's template, ...).
    Unowned,
}

/// A pod the engine cannot handle. The server admits it uninjected with a
/// warning naming the error and the annotation
/// [`annotations::SKIPPED`] (or denies it, if configured to).
///
/// The fields keep the pod's strings whole; the messages show each through
/// [`shown::shown`] (values at most [`MAX_SHOWN_VALUE_CHARS`] characters,
/// names [`MAX_SHOWN_NAME_CHARS`], then cut with their length; control
/// characters escaped), so that a message stays a few hundred bytes
/// whatever the pod carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The pod is malformed (e.g. it has no spec).
    #[error("invalid pod: {0}")]
    Invalid(String),
    /// The engine configuration is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A `kube-prestop.io/` annotation has an invalid value.
    #[error(
        "invalid annotation {annotation}: {:?}: {reason}",
        shown(.value, MAX_SHOWN_VALUE_CHARS)
    )]
    InvalidAnnotation {
        /// The annotation key, e.g. `kube-prestop.io/sidecar-cpu-limit`.
        annotation: String,
        /// Its value, as written.
        value: String,
        /// What is wrong with it (the pod's strings it names already shown
        /// through [`shown::shown`]).
        reason: String,
    },
    /// A cpu or memory quantity in the pod or a LimitRange does not parse.
    #[error(
        "invalid quantity at {}: {:?}",
        shown(.location, MAX_SHOWN_VALUE_CHARS),
        shown(.value, MAX_SHOWN_VALUE_CHARS)
    )]
    InvalidQuantity {
        /// Where it was, e.g. `container "main" limits.cpu`.
        location: String,
        /// The quantity as written.
        value: String,
    },
    /// No sidecar resources satisfy every LimitRange of the namespace.
    #[error("LimitRange {limit_range:?} cannot be satisfied for {resource}: {detail}")]
    LimitRangeUnsatisfiable {
        /// Name of the LimitRange whose constraint fails.
        limit_range: String,
        /// `cpu` or `memory`.
        resource: String,
        /// The failing constraint.
        detail: String,
    },
    /// The pod's node architecture is known at admission (pinned with
    /// `kubernetes.io/arch`, or every node's) and no sidecar binary is
    /// shipped for it.
    #[error(
        "no sidecar binary for architecture {:?} (from {field}); shipped: {shipped}",
        shown(.architecture, MAX_SHOWN_NAME_CHARS)
    )]
    UnsupportedArchitecture {
        /// The architecture, as written.
        architecture: String,
        /// Where it comes from: the pod's field, or `every node of the cluster`.
        field: String,
        /// The shipped architectures, comma-separated.
        shipped: String,
    },
    /// The mutation alone would take the pod over [`MAX_PATCHED_POD_BYTES`]:
    /// each sidecar's [`contract::FLAG_STARTED_AFTER`](kube_prestop_contract::FLAG_STARTED_AFTER)
    /// names every container started after it (the pod's containers and the
    /// later sidecars; not with `hostPID`), and each sidecar mounts every
    /// watched container's state volume, so both grow with the square of
    /// the number of watched containers. Found from the names' lengths
    /// before any of the mutation is built ([`mutate::build`]).
    #[error(
        "the injected pod would be over the {max_bytes}-byte bound kept below etcd's request \
         limit: the --started-after lists and state-volume mounts of its {sidecars} sidecars \
         (each names every container started after it, of the pod's {containers} and the \
         later sidecars, and mounts every watched container's state volume) alone would add \
         {bytes} bytes; watch fewer containers (kube-prestop.io/containers)"
    )]
    PodTooLarge {
        /// Sidecars the pod would get (one per watched container).
        sidecars: usize,
        /// Containers of the pod (`spec.containers`).
        containers: usize,
        /// Bytes of the `--started-after` values and the state-volume
        /// mounts alone (a lower bound of what the mutation adds).
        bytes: usize,
        /// [`MAX_PATCHED_POD_BYTES`].
        max_bytes: usize,
    },
    /// A watched container already mounts something under
    /// `/.kube-prestop`, where our volumes go (its identifying mount among
    /// them).
    #[error(
        "container {:?} already mounts {:?}, which kube-prestop needs",
        shown(.container, MAX_SHOWN_NAME_CHARS),
        shown(.path, MAX_SHOWN_VALUE_CHARS)
    )]
    MountPathConflict {
        /// The container.
        container: String,
        /// Its conflicting mount path.
        path: String,
        /// Where, as an API field path:
        /// `spec.containers[I].volumeMounts[J].mountPath`.
        field: String,
    },
}

impl EngineError {
    /// Every value of [`EngineError::as_str`], in declaration order.
    pub const LABELS: [&'static str; 8] = [
        "invalid_pod",
        "invalid_config",
        "invalid_annotation",
        "invalid_quantity",
        "limit_range_unsatisfiable",
        "unsupported_architecture",
        "pod_too_large",
        "mount_path_conflict",
    ];

    /// Stable snake_case label for metrics and logs, e.g. `invalid_annotation`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_pod",
            Self::InvalidConfig(_) => "invalid_config",
            Self::InvalidAnnotation { .. } => "invalid_annotation",
            Self::InvalidQuantity { .. } => "invalid_quantity",
            Self::LimitRangeUnsatisfiable { .. } => "limit_range_unsatisfiable",
            Self::UnsupportedArchitecture { .. } => "unsupported_architecture",
            Self::PodTooLarge { .. } => "pod_too_large",
            Self::MountPathConflict { .. } => "mount_path_conflict",
        }
    }
}

fn decide(
    pod: &Pod,
    kinds: &[WorkloadKind],
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> Result<Plan, EngineError> {
    config.validate()?;
    let Some(spec) = pod.spec.as_ref() else {
        return Err(EngineError::Invalid("pod has no spec".to_owned()));
    };
    let namespace = if cluster.namespace.is_empty() {
        pod.metadata.namespace.as_deref().unwrap_or_default()
    } else {
        cluster.namespace.as_str()
    };
    let input = select::SelectInput {
        namespace,
        webhook_namespace: &config.webhook_namespace,
        kinds,
    };
    match select::select(pod, spec, input)? {
        select::Selection::Skip(reason) => Ok(Plan::Skip(reason)),
        select::Selection::Watch(watched, overrides) => {
            let mutation = mutate::build(pod, &watched, &overrides, cluster, config)?;
            Ok(Plan::Inject(Box::new(mutation)))
        }
    }
}

/// Applies a plan to a copy of `pod`.
fn apply(pod: &Pod, plan: Plan) -> Decision {
    match plan {
        Plan::Skip(reason) => Decision::Skip(reason),
        Plan::Inject(mutation) => {
            let mut out = pod.clone();
            mutation.apply(&mut out);
            Decision::Inject(Box::new(out))
        }
    }
}

/// The engine's whole answer for `pod`, a Pod at admission (CREATE): the
/// decision as [`plan`] makes it, with the admission warnings (unknown
/// annotations, an opt-in that is skipped) whatever the decision, errors
/// included. `pod` is only read. Never fails: an [`EngineError`] is the
/// verdict's `plan`.
pub fn review(pod: &Pod, cluster: &ClusterContext, config: &EngineConfig) -> Verdict {
    Verdict::new(pod, plan(pod, cluster, config))
}

/// [`review`] for a pod template, `owner` telling who will own the pods
/// created from it (see [`OwnerHint`]), with the pod the verdict was made
/// for: the template's `metadata` and `spec` as a Pod's. The verdict's
/// operations are against that pod (paths from its root).
pub fn review_template(
    template: &PodTemplateSpec,
    owner: OwnerHint,
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> (Pod, Verdict) {
    let pod = template_pod(template);
    let kinds = template_kinds(&pod, owner, config);
    let verdict = Verdict::new(&pod, decide(&pod, &kinds, cluster, config));
    (pod, verdict)
}

/// The enabled workload kinds the pods of a template will be of: those its
/// metadata matches, and [`WorkloadKind::Job`] for a Job's template when
/// that kind is enabled.
fn template_kinds(pod: &Pod, owner: OwnerHint, config: &EngineConfig) -> Vec<WorkloadKind> {
    let mut kinds = workload::matching(&pod.metadata, &config.workload_kinds);
    if owner == OwnerHint::Job
        && config.workload_kinds.contains(&WorkloadKind::Job)
        && !kinds.contains(&WorkloadKind::Job)
    {
        kinds.insert(0, WorkloadKind::Job);
    }
    kinds
}

/// A pod template as the Pod the controller will create from it.
fn template_pod(template: &PodTemplateSpec) -> Pod {
    Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: template.spec.clone(),
        status: None,
    }
}

/// Decides whether to inject `pod` (a Pod at admission, CREATE) like
/// [`inject`], but returns the changes instead of the mutated pod, leaving
/// `pod` untouched: [`Mutation::apply`] on `pod` gives [`inject`]'s pod, and
/// [`patch::json_patch`] the JSON Patch that makes the same changes.
///
/// Errors: as [`inject`].
pub fn plan(
    pod: &Pod,
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> Result<Plan, EngineError> {
    let kinds = workload::matching(&pod.metadata, &config.workload_kinds);
    decide(pod, &kinds, cluster, config)
}

/// Decides whether to inject `pod` (a Pod at admission, CREATE) and builds
/// the mutated pod.
///
/// The pod is injected without an opt-in when it is of a workload kind of
/// `config.workload_kinds` ([`workload`]; by default a Job's: an
/// ownerReference `kind: Job`, `apiVersion: batch/v1`). The pod's name is
/// never used (pods from `generateName` have none at admission).
///
/// Errors: see [`EngineError`]; every variant is a property of the input, never
/// a transient condition.
pub fn inject(
    pod: &Pod,
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> Result<Decision, EngineError> {
    Ok(apply(pod, plan(pod, cluster, config)?))
}

/// Injects a pod template exactly as the webhook would inject the pods
/// created from it, `owner` telling who will own them (see [`OwnerHint`]).
///
/// The template's `metadata` and `spec` become a Pod's; `cluster.namespace`
/// should be the namespace the workload goes to. Errors: as [`inject`]; a
/// template without `spec` is [`EngineError::Invalid`].
pub fn inject_template(
    template: &PodTemplateSpec,
    owner: OwnerHint,
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> Result<TemplateDecision, EngineError> {
    let pod = template_pod(template);
    let kinds = template_kinds(&pod, owner, config);
    Ok(match apply(&pod, decide(&pod, &kinds, cluster, config)?) {
        Decision::Skip(reason) => TemplateDecision::Skip(reason),
        Decision::Inject(pod) => {
            let pod = *pod;
            TemplateDecision::Inject(Box::new(PodTemplateSpec {
                metadata: Some(pod.metadata),
                spec: pod.spec,
            }))
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn errors_show_the_pods_strings_cut_and_escaped() {
        let huge = "z".repeat(2_000_000);
        let errors = [
            EngineError::InvalidQuantity {
                location: format!("container {huge:?} limits.cpu"),
                value: huge.clone(),
            },
            EngineError::UnsupportedArchitecture {
                architecture: huge.clone(),
                field: "spec.nodeSelector[kubernetes.io/arch]".into(),
                shipped: "amd64,arm64".into(),
            },
            EngineError::MountPathConflict {
                container: huge.clone(),
                path: format!("/.kube-prestop/{huge}"),
                field: "spec.containers[0].volumeMounts[0].mountPath".into(),
            },
        ];
        for e in errors {
            let message = e.to_string();
            assert!(message.len() < 1000, "{} bytes", message.len());
            assert!(message.contains("...(2000000 bytes)"), "{message}");
        }
        let e = EngineError::MountPathConflict {
            container: "main\nFAKE".into(),
            path: "/.kube-prestop\u{1b}[2J".into(),
            field: "spec.containers[0].volumeMounts[0].mountPath".into(),
        };
        assert_eq!(
            e.to_string(),
            "container \"main\\nFAKE\" already mounts \"/.kube-prestop\\u{1b}[2J\", which \
             kube-prestop needs"
        );
    }
    use k8s_openapi::api::core::v1::{Container, ExecAction, Lifecycle, LifecycleHandler, PodSpec};

    fn template() -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox".into()),
                    lifecycle: Some(Lifecycle {
                        pre_stop: Some(LifecycleHandler {
                            exec: Some(ExecAction {
                                command: Some(vec!["echo".into(), "bye".into()]),
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    fn cluster() -> ClusterContext {
        ClusterContext {
            namespace: "default".into(),
            ..Default::default()
        }
    }

    #[test]
    fn template_of_a_job_is_injected_and_idempotent() {
        let config = EngineConfig::default();
        let out = match inject_template(&template(), OwnerHint::Job, &cluster(), &config).unwrap() {
            TemplateDecision::Inject(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            out.spec
                .as_ref()
                .unwrap()
                .init_containers
                .as_ref()
                .unwrap()
                .len(),
            2
        );
        assert!(matches!(
            inject_template(&out, OwnerHint::Job, &cluster(), &config).unwrap(),
            TemplateDecision::Skip(SkipReason::AlreadyInjected)
        ));
    }

    #[test]
    fn pure_same_input_same_output() {
        let config = EngineConfig::default();
        let run = || match inject_template(&template(), OwnerHint::Job, &cluster(), &config) {
            Ok(TemplateDecision::Inject(t)) => serde_json::to_string(&t).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn unowned_template_is_skipped() {
        assert!(matches!(
            inject_template(
                &template(),
                OwnerHint::Unowned,
                &cluster(),
                &EngineConfig::default()
            )
            .unwrap(),
            TemplateDecision::Skip(SkipReason::NotJobOwned)
        ));
    }

    /// A Job's template counts as a Job's only while that kind is enabled;
    /// a template marked as another system's pods counts when that is.
    #[test]
    fn template_kinds_follow_the_enabled_set() {
        let mut config = EngineConfig::default();
        let injected = |t: &PodTemplateSpec, owner, config: &EngineConfig| {
            matches!(
                inject_template(t, owner, &cluster(), config).unwrap(),
                TemplateDecision::Inject(_)
            )
        };
        assert!(injected(&template(), OwnerHint::Job, &config));
        let mut spark = template();
        spark.metadata = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            labels: Some([("spark-role".to_owned(), "driver".to_owned())].into()),
            ..Default::default()
        });
        assert!(!injected(&spark, OwnerHint::Unowned, &config));
        config.workload_kinds = [WorkloadKind::Spark].into();
        assert!(injected(&spark, OwnerHint::Unowned, &config));
        assert!(!injected(&template(), OwnerHint::Job, &config));
        config.workload_kinds.clear();
        let e = inject_template(&spark, OwnerHint::Unowned, &cluster(), &config).unwrap_err();
        assert_eq!(e.as_str(), "invalid_config");
    }

    #[test]
    fn missing_spec_and_bad_config_are_errors() {
        let t = PodTemplateSpec::default();
        let e =
            inject_template(&t, OwnerHint::Job, &cluster(), &EngineConfig::default()).unwrap_err();
        assert_eq!(e.as_str(), "invalid_pod");
        let config = EngineConfig {
            install_image: String::new(),
            ..Default::default()
        };
        let e = inject_template(&template(), OwnerHint::Job, &cluster(), &config).unwrap_err();
        assert_eq!(e.as_str(), "invalid_config");
    }

    #[test]
    fn every_error_label_is_listed() {
        let all = [
            EngineError::Invalid(String::new()),
            EngineError::InvalidConfig(String::new()),
            EngineError::InvalidAnnotation {
                annotation: String::new(),
                value: String::new(),
                reason: String::new(),
            },
            EngineError::InvalidQuantity {
                location: String::new(),
                value: String::new(),
            },
            EngineError::LimitRangeUnsatisfiable {
                limit_range: String::new(),
                resource: String::new(),
                detail: String::new(),
            },
            EngineError::UnsupportedArchitecture {
                architecture: String::new(),
                field: String::new(),
                shipped: String::new(),
            },
            EngineError::PodTooLarge {
                sidecars: 0,
                containers: 0,
                bytes: 0,
                max_bytes: 0,
            },
            EngineError::MountPathConflict {
                container: String::new(),
                path: String::new(),
                field: String::new(),
            },
        ];
        for e in &all {
            // A new variant fails to compile here: add it above and to LABELS.
            match e {
                EngineError::Invalid(_)
                | EngineError::InvalidConfig(_)
                | EngineError::InvalidAnnotation { .. }
                | EngineError::InvalidQuantity { .. }
                | EngineError::LimitRangeUnsatisfiable { .. }
                | EngineError::UnsupportedArchitecture { .. }
                | EngineError::PodTooLarge { .. }
                | EngineError::MountPathConflict { .. } => {}
            }
        }
        let labels: Vec<&str> = all.iter().map(EngineError::as_str).collect();
        assert_eq!(labels, EngineError::LABELS);
    }

    #[test]
    fn namespace_falls_back_to_metadata() {
        let mut t = template();
        t.metadata = Some(Default::default());
        t.metadata.as_mut().unwrap().namespace = Some("kube-system".into());
        let c = ClusterContext::default();
        assert!(matches!(
            inject_template(&t, OwnerHint::Job, &c, &EngineConfig::default()).unwrap(),
            TemplateDecision::Skip(SkipReason::NamespaceExcluded)
        ));
    }
}
