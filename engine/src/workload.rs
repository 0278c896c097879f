//! Workload kinds: the batch systems whose pods the operator chooses to
//! inject, each recognised the way that system marks the pods it creates,
//! and the containers of its own that are never watched.
//!
//! Every rule comes from the system's own source, at the version named
//! (`docs/platforms.md`, "Batch systems by workload kind", has the same
//! table for users):
//!
//! | kind | a pod is matched when | never watched |
//! |---|---|---|
//! | [`WorkloadKind::Job`] | an ownerReference `kind: Job`, `apiVersion: batch/v1` (the Job controller's `controllerRef`, kubernetes `pkg/controller/job`) | — |
//! | [`WorkloadKind::ArgoWorkflows`] | an ownerReference `kind: Workflow` of group `argoproj.io` **and** a non-empty label `workflows.argoproj.io/workflow` (argo-workflows v4.0.5 `workflow/controller/workflowpod.go` `createWorkflowPod`; `workflow/common/common.go` `LabelKeyWorkflow`) | `wait` and `artifact-plugin-*` (`common.IsArgoSidecar`); its init containers (`init`, `init-artifact-*`) are init containers, never watched anyway |
//! | [`WorkloadKind::Volcano`] | an ownerReference `kind: Job` of group `batch.volcano.sh` (volcano v1.15.1 `pkg/controllers/job/job_controller_util.go` `createJobPod`, `helpers.JobKind`) | — |
//! | [`WorkloadKind::Spark`] | label `spark-role` `driver` or `executor` (apache/spark `resource-managers/kubernetes/core/.../k8s/Constants.scala` `SPARK_ROLE_LABEL`, `SPARK_POD_DRIVER_ROLE`, `SPARK_POD_EXECUTOR_ROLE`) | — |
//! | [`WorkloadKind::Armada`] | a non-empty label `armada_job_id` (armada v0.22.7 `internal/executor/domain/pod_metadata.go` `JobId`, set by `internal/executor/util/kubernetes_object.go` `CreatePodFromExecutorApiJob`) | — |
//! | [`WorkloadKind::KueuePod`] | label `kueue.x-k8s.io/managed: "true"` (kueue v0.17.0 `pkg/constants/constants.go` `ManagedByKueueLabelKey`/`Value`, set by `pkg/controller/jobs/pod/pod_webhook.go` `Default`) | — |
//!
//! A look-alike never matches: a `kind: Job` owner of another group than
//! the one named, a label with an empty or other value.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::EngineError;

/// A kind of batch workload whose pods the operator chooses to inject
/// (`--workload-kinds`; [`WorkloadKind::DEFAULT`]: Job only). How each is
/// matched and its sources: the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    /// Pods of a `batch/v1` Job (so of a CronJob, a JobSet, ...).
    Job,
    /// Pods of an Argo Workflows Workflow (a step's pod).
    ArgoWorkflows,
    /// Pods of a Volcano `batch.volcano.sh` Job.
    Volcano,
    /// Spark on Kubernetes driver and executor pods.
    Spark,
    /// Pods the Armada executor creates.
    Armada,
    /// Plain pods managed by Kueue (its pod integration).
    KueuePod,
}

/// `argoproj.io`'s Workflow kind, as its pods' ownerReference names it
/// (argo-workflows v4.0.5 `pkg/apis/workflow/register.go` `WorkflowKind`).
const ARGO_WORKFLOW_KIND: &str = "Workflow";
/// Group of Argo's Workflow (`pkg/apis/workflow/register.go` `Group`).
const ARGO_GROUP: &str = "argoproj.io";
/// Label on every workflow pod: the Workflow's name
/// (`workflow/common/common.go` `LabelKeyWorkflow`).
pub const ARGO_WORKFLOW_LABEL: &str = "workflows.argoproj.io/workflow";
/// Argo's container that waits for `main` and saves its outputs
/// (`workflow/common/common.go` `WaitContainerName`).
pub const ARGO_WAIT_CONTAINER: &str = "wait";
/// Prefix of Argo's artifact-plugin sidecars
/// (`workflow/common/common.go` `ArtifactPluginSidecarPrefix`).
pub const ARGO_ARTIFACT_PLUGIN_PREFIX: &str = "artifact-plugin-";
/// Prefix of Argo's per-container kill-command annotation: the command
/// (a JSON array of strings, `%d` replaced by the signal number) the
/// controller execs in that container instead of `argoexec kill SIGNAL 1`
/// (`workflow/common/common.go` `AnnotationKeyKillCmd`;
/// `workflow/signal/signal.go` `SignalContainer`).
pub const ARGO_KILL_COMMAND_ANNOTATION_PREFIX: &str = "workflows.argoproj.io/kill-cmd-";

/// Argo's kill-command annotation for `container`.
pub fn argo_kill_command_annotation(container: &str) -> String {
    format!("{ARGO_KILL_COMMAND_ANNOTATION_PREFIX}{container}")
}
/// Group of Volcano's Job (volcano v1.15.1
/// `staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/register.go`
/// `GroupName`).
const VOLCANO_GROUP: &str = "batch.volcano.sh";
/// Spark's role label and its two values (`Constants.scala`).
pub const SPARK_ROLE_LABEL: &str = "spark-role";
const SPARK_ROLES: [&str; 2] = ["driver", "executor"];
/// Armada's job id label (`internal/executor/domain/pod_metadata.go`).
pub const ARMADA_JOB_ID_LABEL: &str = "armada_job_id";
/// Kueue's managed label and its only value (`pkg/constants/constants.go`).
pub const KUEUE_MANAGED_LABEL: &str = "kueue.x-k8s.io/managed";
const KUEUE_MANAGED_VALUE: &str = "true";

impl WorkloadKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Job,
        Self::ArgoWorkflows,
        Self::Volcano,
        Self::Spark,
        Self::Armada,
        Self::KueuePod,
    ];

    /// The kinds enabled when none are configured: Job only.
    pub const DEFAULT: [Self; 1] = [Self::Job];

    /// The name the operator writes (`--workload-kinds`, the chart's
    /// `webhook.workloadKinds`), e.g. `argo-workflows`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::ArgoWorkflows => "argo-workflows",
            Self::Volcano => "volcano",
            Self::Spark => "spark",
            Self::Armada => "armada",
            Self::KueuePod => "kueue-pod",
        }
    }

    /// Every accepted name, comma-separated: `job, argo-workflows, ...`.
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(Self::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether `meta` (a pod's, or a pod template's) is marked the way this
    /// system marks the pods it creates (the module documentation).
    pub fn matches(&self, meta: &ObjectMeta) -> bool {
        match self {
            Self::Job => has_owner(meta, "Job", |v| v == "batch/v1"),
            Self::ArgoWorkflows => {
                has_owner(meta, ARGO_WORKFLOW_KIND, |v| in_group(v, ARGO_GROUP))
                    && label(meta, ARGO_WORKFLOW_LABEL).is_some_and(|v| !v.is_empty())
            }
            Self::Volcano => has_owner(meta, "Job", |v| in_group(v, VOLCANO_GROUP)),
            Self::Spark => label(meta, SPARK_ROLE_LABEL).is_some_and(|v| SPARK_ROLES.contains(&v)),
            Self::Armada => label(meta, ARMADA_JOB_ID_LABEL).is_some_and(|v| !v.is_empty()),
            Self::KueuePod => label(meta, KUEUE_MANAGED_LABEL) == Some(KUEUE_MANAGED_VALUE),
        }
    }

    /// Whether `container` (a regular container's name) belongs to the
    /// system itself and is never watched in its pods, whatever preStop it
    /// declares: Argo's `wait` and `artifact-plugin-*` sidecars
    /// (`common.IsArgoSidecar`). The other systems add no regular container
    /// of their own (Volcano's plugins add init containers at most, which
    /// are never watched).
    pub fn never_watched(&self, container: &str) -> bool {
        match self {
            Self::ArgoWorkflows => {
                container == ARGO_WAIT_CONTAINER
                    || container.starts_with(ARGO_ARTIFACT_PLUGIN_PREFIX)
            }
            Self::Job | Self::Volcano | Self::Spark | Self::Armada | Self::KueuePod => false,
        }
    }

    /// The system's name for people, e.g. `Argo Workflows`.
    pub fn title(&self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::ArgoWorkflows => "Argo Workflows",
            Self::Volcano => "Volcano",
            Self::Spark => "Spark",
            Self::Armada => "Armada",
            Self::KueuePod => "Kueue",
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkloadKind {
    type Err = EngineError;

    /// Parses a name of [`WorkloadKind::as_str`] (exactly, after trimming
    /// blanks). Errors: [`EngineError::InvalidConfig`] naming the value and
    /// every accepted name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim();
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| {
                EngineError::InvalidConfig(format!(
                    "workload kind {s:?} is not one of: {}",
                    Self::names()
                ))
            })
    }
}

/// The kinds of `enabled` that `meta` matches, in declaration order.
pub fn matching(meta: &ObjectMeta, enabled: &BTreeSet<WorkloadKind>) -> Vec<WorkloadKind> {
    enabled
        .iter()
        .copied()
        .filter(|k| k.matches(meta))
        .collect()
}

/// The kind among `kinds` that never watches `container`, if any.
pub fn owning_system(kinds: &[WorkloadKind], container: &str) -> Option<WorkloadKind> {
    kinds.iter().copied().find(|k| k.never_watched(container))
}

/// Whether an ownerReference has this `kind` and an `apiVersion` `version`
/// accepts.
fn has_owner(meta: &ObjectMeta, kind: &str, version: impl Fn(&str) -> bool) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind && version(&o.api_version))
}

/// Whether `api_version` (`group/version`) is of `group`, any version.
fn in_group(api_version: &str, group: &str) -> bool {
    api_version
        .split_once('/')
        .is_some_and(|(g, v)| g == group && !v.is_empty())
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owned(api_version: &str, kind: &str) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "o".into(),
                uid: "u".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    fn labelled(mut meta: ObjectMeta, key: &str, value: &str) -> ObjectMeta {
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        meta
    }

    /// The kinds `meta` matches among all of them.
    fn kinds(meta: &ObjectMeta) -> Vec<WorkloadKind> {
        matching(meta, &WorkloadKind::ALL.into_iter().collect())
    }

    #[test]
    fn names_round_trip_and_are_distinct() {
        for kind in WorkloadKind::ALL {
            assert_eq!(kind.as_str().parse::<WorkloadKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        let names: BTreeSet<_> = WorkloadKind::ALL.iter().map(WorkloadKind::as_str).collect();
        assert_eq!(names.len(), WorkloadKind::ALL.len());
        assert_eq!(
            " spark ".parse::<WorkloadKind>().unwrap(),
            WorkloadKind::Spark
        );
    }

    #[test]
    fn a_bad_name_names_the_value_and_the_accepted_list() {
        for bad in ["Job", "argo", "", "kueue"] {
            match bad.parse::<WorkloadKind>() {
                Err(EngineError::InvalidConfig(m)) => {
                    assert_eq!(
                        m,
                        format!(
                            "workload kind {bad:?} is not one of: job, argo-workflows, volcano, spark, armada, kueue-pod"
                        )
                    );
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn job_is_batch_v1_only() {
        assert_eq!(kinds(&owned("batch/v1", "Job")), [WorkloadKind::Job]);
        // Volcano's Job has the same kind in another group: Volcano, not Job.
        assert_eq!(
            kinds(&owned("batch.volcano.sh/v1alpha1", "Job")),
            [WorkloadKind::Volcano]
        );
        assert!(kinds(&owned("batch/v1beta1", "Job")).is_empty());
        assert!(kinds(&owned("batch/v1", "CronJob")).is_empty());
        assert!(kinds(&owned("apps/v1", "ReplicaSet")).is_empty());
        assert!(kinds(&ObjectMeta::default()).is_empty());
    }

    #[test]
    fn volcano_is_its_group_only() {
        let volcano = WorkloadKind::Volcano;
        assert!(volcano.matches(&owned("batch.volcano.sh/v1alpha1", "Job")));
        assert!(volcano.matches(&owned("batch.volcano.sh/v1", "Job")));
        assert!(!volcano.matches(&owned("batch.volcano.sh/v1alpha1", "PodGroup")));
        assert!(!volcano.matches(&owned("batch.volcano.sh", "Job")));
        assert!(!volcano.matches(&owned("batch/v1", "Job")));
        assert!(!volcano.matches(&owned("xbatch.volcano.sh/v1alpha1", "Job")));
        // Volcano's labels alone (copied onto other pods) are not its Job.
        assert!(!volcano.matches(&labelled(ObjectMeta::default(), "volcano.sh/job-name", "j")));
    }

    #[test]
    fn argo_needs_the_workflow_owner_and_its_label() {
        let argo = WorkloadKind::ArgoWorkflows;
        let owner = owned("argoproj.io/v1alpha1", "Workflow");
        let pod = labelled(owner.clone(), ARGO_WORKFLOW_LABEL, "wf");
        assert!(argo.matches(&pod));
        assert_eq!(kinds(&pod), [argo]);
        assert!(!argo.matches(&owner), "owner without the label");
        assert!(!argo.matches(&labelled(owner, ARGO_WORKFLOW_LABEL, "")));
        assert!(!argo.matches(&labelled(ObjectMeta::default(), ARGO_WORKFLOW_LABEL, "wf")));
        for (version, kind) in [
            ("argoproj.io/v1alpha1", "CronWorkflow"),
            ("example.com/v1alpha1", "Workflow"),
        ] {
            let other = labelled(owned(version, kind), ARGO_WORKFLOW_LABEL, "wf");
            assert!(!argo.matches(&other), "{version} {kind}");
        }
    }

    #[test]
    fn spark_driver_and_executor_only() {
        let spark = WorkloadKind::Spark;
        for role in ["driver", "executor"] {
            assert!(spark.matches(&labelled(ObjectMeta::default(), SPARK_ROLE_LABEL, role)));
        }
        for role in ["", "Driver", "shuffle"] {
            let meta = labelled(ObjectMeta::default(), SPARK_ROLE_LABEL, role);
            assert!(!spark.matches(&meta), "{role:?}");
        }
        assert!(!spark.matches(&labelled(ObjectMeta::default(), "spark-app-selector", "x")));
    }

    #[test]
    fn armada_needs_a_job_id() {
        let armada = WorkloadKind::Armada;
        let id = "01hqz8x2x5h0c3k9z6r5m4n3p2";
        assert!(armada.matches(&labelled(ObjectMeta::default(), ARMADA_JOB_ID_LABEL, id)));
        assert!(!armada.matches(&labelled(ObjectMeta::default(), ARMADA_JOB_ID_LABEL, "")));
        // An annotation of that name is not what the executor sets.
        let annotated = ObjectMeta {
            annotations: Some([(ARMADA_JOB_ID_LABEL.to_owned(), id.to_owned())].into()),
            ..Default::default()
        };
        assert!(!armada.matches(&annotated));
    }

    #[test]
    fn kueue_needs_managed_true() {
        let kueue = WorkloadKind::KueuePod;
        assert!(kueue.matches(&labelled(
            ObjectMeta::default(),
            KUEUE_MANAGED_LABEL,
            "true"
        )));
        for value in ["", "false", "True", "yes"] {
            let meta = labelled(ObjectMeta::default(), KUEUE_MANAGED_LABEL, value);
            assert!(!kueue.matches(&meta), "{value:?}");
        }
        // The queue-name label alone: Kueue's own webhook decides, and adds
        // the managed label when it takes the pod.
        assert!(!kueue.matches(&labelled(
            ObjectMeta::default(),
            "kueue.x-k8s.io/queue-name",
            "q"
        )));
    }

    #[test]
    fn only_enabled_kinds_match() {
        let pod = labelled(
            labelled(
                owned("argoproj.io/v1alpha1", "Workflow"),
                ARGO_WORKFLOW_LABEL,
                "wf",
            ),
            KUEUE_MANAGED_LABEL,
            "true",
        );
        let default: BTreeSet<_> = WorkloadKind::DEFAULT.into_iter().collect();
        assert!(matching(&pod, &default).is_empty());
        assert_eq!(
            kinds(&pod),
            [WorkloadKind::ArgoWorkflows, WorkloadKind::KueuePod]
        );
        let volcano_owned = owned("batch.volcano.sh/v1alpha1", "Job");
        assert!(matching(&volcano_owned, &default).is_empty());
    }

    #[test]
    fn never_watched_containers() {
        let argo = WorkloadKind::ArgoWorkflows;
        assert!(argo.never_watched("wait"));
        assert!(argo.never_watched("artifact-plugin-s3"));
        assert!(!argo.never_watched("main"));
        assert!(!argo.never_watched("waiter"));
        for kind in WorkloadKind::ALL.into_iter().filter(|k| *k != argo) {
            assert!(!kind.never_watched("wait"), "{kind}");
        }
        assert_eq!(
            owning_system(&[WorkloadKind::KueuePod, argo], "wait"),
            Some(argo)
        );
        assert_eq!(owning_system(&[WorkloadKind::Job], "wait"), None);
    }
}
