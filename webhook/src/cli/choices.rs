//! The values of the enumerated flags (`--log-format`, `--failure-mode`,
//! `--sidecar-binary-source`, `--workload-kinds`, `-o/--output`) as clap
//! sees them, and their one mapping onto the domain
//! types, which know nothing of the command line.
//!
//! Each variant's doc comment is the help text of that value
//! (`--help` lists them under "Possible values").

use clap::ValueEnum;

use kube_prestop_engine::{SidecarBinarySource, WorkloadKind};

use crate::logging::LogFormat;
use kube_prestop_server::FailureMode;
use kube_prestop_tools::inject::OutputFormat;

/// Values of `--log-format`; see [`LogFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormatFlag {
    /// Human-readable lines (`tracing-subscriber`'s full formatter).
    #[default]
    Text,
    /// One JSON object per line, fields flattened to the top level.
    Json,
}

impl From<LogFormatFlag> for LogFormat {
    fn from(flag: LogFormatFlag) -> Self {
        match flag {
            LogFormatFlag::Text => Self::Text,
            LogFormatFlag::Json => Self::Json,
        }
    }
}

/// Values of `--failure-mode`; see [`FailureMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum FailureModeFlag {
    /// Admit the pod without injection, with an admission warning and the
    /// `kube-prestop.io/skipped` annotation (default: a bug of ours never
    /// blocks a Job's pods).
    #[default]
    Allow,
    /// Deny the pod (fail closed).
    Deny,
}

impl From<FailureModeFlag> for FailureMode {
    fn from(flag: FailureModeFlag) -> Self {
        match flag {
            FailureModeFlag::Allow => Self::Allow,
            FailureModeFlag::Deny => Self::Deny,
        }
    }
}

/// Values of `--sidecar-binary-source`; see [`SidecarBinarySource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum SidecarBinarySourceFlag {
    /// The image volume where the API server keeps it and every node's
    /// runtime mounts it, else the ConfigMap of the pod's architecture, else
    /// the install init container.
    #[default]
    #[value(name = "auto")]
    Auto,
    /// The image volume, else the install init container (no ConfigMaps).
    #[value(name = "imageVolume")]
    ImageVolume,
    /// The ConfigMap of the pod's architecture where it is known, else the
    /// install init container.
    #[value(name = "configMap")]
    ConfigMap,
    /// Always the install init container.
    #[value(name = "installContainer")]
    InstallContainer,
}

impl From<SidecarBinarySourceFlag> for SidecarBinarySource {
    fn from(flag: SidecarBinarySourceFlag) -> Self {
        match flag {
            SidecarBinarySourceFlag::Auto => Self::Auto,
            SidecarBinarySourceFlag::ImageVolume => Self::ImageVolume,
            SidecarBinarySourceFlag::ConfigMap => Self::ConfigMap,
            SidecarBinarySourceFlag::InstallContainer => Self::InstallContainer,
        }
    }
}

/// Values of `--workload-kinds`; see [`WorkloadKind`] (how each system's
/// pods are recognised, with sources: docs/platforms.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKindFlag {
    /// Pods owned by a batch/v1 Job (CronJobs, JobSets, ... included).
    Job,
    /// Argo Workflows step pods (owner Workflow, label
    /// workflows.argoproj.io/workflow); Argo's wait container is never
    /// watched.
    ArgoWorkflows,
    /// Pods owned by a Volcano Job (batch.volcano.sh).
    Volcano,
    /// Spark driver and executor pods (label spark-role).
    Spark,
    /// Armada executor pods (label armada_job_id).
    Armada,
    /// Plain pods managed by Kueue (label kueue.x-k8s.io/managed=true).
    KueuePod,
}

impl From<WorkloadKindFlag> for WorkloadKind {
    fn from(flag: WorkloadKindFlag) -> Self {
        match flag {
            WorkloadKindFlag::Job => Self::Job,
            WorkloadKindFlag::ArgoWorkflows => Self::ArgoWorkflows,
            WorkloadKindFlag::Volcano => Self::Volcano,
            WorkloadKindFlag::Spark => Self::Spark,
            WorkloadKindFlag::Armada => Self::Armada,
            WorkloadKindFlag::KueuePod => Self::KueuePod,
        }
    }
}

/// Values of `inject -o/--output`; see [`OutputFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormatFlag {
    /// YAML documents separated by `---`.
    #[default]
    Yaml,
    /// JSON: the object for a single document, a `v1` `List` for several.
    Json,
}

impl From<OutputFormatFlag> for OutputFormat {
    fn from(flag: OutputFormatFlag) -> Self {
        match flag {
            OutputFormatFlag::Yaml => Self::Yaml,
            OutputFormatFlag::Json => Self::Json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag values and the domain defaults agree, and each value maps
    /// onto the domain variant of the same name.
    #[test]
    fn defaults_and_names_agree() {
        assert_eq!(
            LogFormat::from(LogFormatFlag::default()),
            LogFormat::default()
        );
        assert_eq!(
            FailureMode::from(FailureModeFlag::default()),
            FailureMode::default()
        );
        assert_eq!(
            OutputFormat::from(OutputFormatFlag::default()),
            OutputFormat::default()
        );
        for flag in LogFormatFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            let domain = format!("{:?}", LogFormat::from(*flag)).to_lowercase();
            assert_eq!(name.as_deref(), Some(domain.as_str()));
        }
        for flag in FailureModeFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            let domain = format!("{:?}", FailureMode::from(*flag)).to_lowercase();
            assert_eq!(name.as_deref(), Some(domain.as_str()));
        }
        assert_eq!(
            SidecarBinarySource::from(SidecarBinarySourceFlag::default()),
            SidecarBinarySource::default()
        );
        for flag in SidecarBinarySourceFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(
                name.as_deref(),
                Some(SidecarBinarySource::from(*flag).as_str())
            );
        }
        // Every kind has a flag value, named as the engine names it.
        assert_eq!(
            WorkloadKindFlag::value_variants().len(),
            WorkloadKind::ALL.len()
        );
        for flag in WorkloadKindFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(WorkloadKind::from(*flag).as_str()));
        }
        for flag in OutputFormatFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            let domain = format!("{:?}", OutputFormat::from(*flag)).to_lowercase();
            assert_eq!(name.as_deref(), Some(domain.as_str()));
        }
    }
}
