//! Flags of `check`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse_duration;
use kube_prestop_tools::check::CheckOptions;

/// Flags of `check` (see [`kube_prestop_tools::check`]).
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Name of the MutatingWebhookConfiguration to check (the chart's
    /// release name).
    #[arg(long, default_value = "kube-prestop")]
    pub webhook_config: String,
    /// Also run a small test Job in this namespace (it must be labelled
    /// kube-prestop.io/inject=enabled) and check that its preStop ran; the
    /// Job is deleted afterwards.
    #[arg(long, value_name = "NAMESPACE")]
    pub run_job: Option<String>,
    /// Image of the test pods; it needs `sh`.
    #[arg(long, default_value = "busybox:1.36")]
    pub image: String,
    /// Longest wait for the test Job.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Kubeconfig of the cluster (default: the KUBECONFIG environment
    /// variable, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl CheckArgs {
    /// What to check.
    pub fn options(&self) -> CheckOptions {
        CheckOptions {
            webhook_config: self.webhook_config.clone(),
            image: self.image.clone(),
            run_job: self.run_job.clone(),
            job_timeout: self.timeout,
        }
    }
}
