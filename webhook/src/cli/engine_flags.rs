//! Engine configuration flags shared by `serve` and `inject`, and their
//! one mapping onto [`EngineConfig`].

use clap::Args;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use kube_prestop_engine::{EngineConfig, EngineError};

use super::choices::{SidecarBinarySourceFlag, WorkloadKindFlag};

/// Engine flags; an unset flag keeps the value of [`EngineConfig::default`].
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// Image of the install init container (holds the static sidecar
    /// binary). Default: ghcr.io/kube-prestop/kube-prestop-sidecar:<version>.
    #[arg(long, env = "KUBE_PRESTOP_INSTALL_IMAGE")]
    pub install_image: Option<String>,
    /// imagePullPolicy of the install init container: Always, IfNotPresent
    /// or Never. Default: IfNotPresent.
    #[arg(long, env = "KUBE_PRESTOP_INSTALL_IMAGE_PULL_POLICY")]
    pub install_image_pull_policy: Option<String>,
    /// Namespace the webhook runs in; its pods are never injected. Default:
    /// kube-prestop (in a pod, set it from the downward API).
    #[arg(long, env = "KUBE_PRESTOP_WEBHOOK_NAMESPACE")]
    pub webhook_namespace: Option<String>,
    /// Default CPU request of each sidecar (quantity, cores). Default: 10m.
    #[arg(long, env = "KUBE_PRESTOP_SIDECAR_CPU_REQUEST")]
    pub sidecar_cpu_request: Option<String>,
    /// Default memory request of each sidecar (quantity, bytes). Default: 32Mi.
    #[arg(long, env = "KUBE_PRESTOP_SIDECAR_MEMORY_REQUEST")]
    pub sidecar_memory_request: Option<String>,
    /// Default CPU limit of each sidecar (quantity, cores). Default: 200m.
    #[arg(long, env = "KUBE_PRESTOP_SIDECAR_CPU_LIMIT")]
    pub sidecar_cpu_limit: Option<String>,
    /// Default memory limit of each sidecar (quantity, bytes). Default: 256Mi.
    #[arg(long, env = "KUBE_PRESTOP_SIDECAR_MEMORY_LIMIT")]
    pub sidecar_memory_limit: Option<String>,
    /// Where injected pods get the sidecar binary from; each falls back to
    /// the next of image volume, ConfigMap, install init container where it
    /// cannot be used (see docs/reference.md). Default: auto.
    #[arg(long, value_enum, env = "KUBE_PRESTOP_SIDECAR_BINARY_SOURCE")]
    pub sidecar_binary_source: Option<SidecarBinarySourceFlag>,
    /// Architectures (kubernetes.io/arch values, comma-separated) the
    /// install image has a binary for; a pod pinned to another one is not
    /// injected (failure mode applies). Default: amd64,arm64.
    #[arg(long, value_delimiter = ',', env = "KUBE_PRESTOP_ARCHITECTURES")]
    pub architectures: Option<Vec<String>>,
    /// Workload kinds (comma-separated) whose pods are injected without the
    /// kube-prestop.io/inject: "true" annotation, each recognised the way
    /// that system marks its pods (docs/platforms.md); a kind not named
    /// here needs the annotation. Default: job.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        env = "KUBE_PRESTOP_WORKLOAD_KINDS"
    )]
    pub workload_kinds: Option<Vec<WorkloadKindFlag>>,
}

fn set(target: &mut String, value: Option<&String>) {
    if let Some(v) = value {
        target.clone_from(v);
    }
}

fn set_quantity(target: &mut Quantity, value: Option<&String>) {
    if let Some(v) = value {
        *target = Quantity(v.clone());
    }
}

impl EngineArgs {
    /// The engine configuration these flags describe, validated.
    ///
    /// Errors: [`EngineError::InvalidConfig`] as
    /// [`EngineConfig::validate`]: naming the flag, the value and what is
    /// allowed (an install image that is not an image reference, an
    /// unknown pull policy, invalid resources, a webhook namespace that is
    /// not a DNS-1123 label, architectures the images do not ship, empty or
    /// repeated, no workload kind).
    pub fn engine_config(&self) -> Result<EngineConfig, EngineError> {
        let mut config = EngineConfig::default();
        set(&mut config.install_image, self.install_image.as_ref());
        set(
            &mut config.install_image_pull_policy,
            self.install_image_pull_policy.as_ref(),
        );
        set(
            &mut config.webhook_namespace,
            self.webhook_namespace.as_ref(),
        );
        let sidecar = &mut config.sidecar_resources;
        set_quantity(&mut sidecar.cpu_request, self.sidecar_cpu_request.as_ref());
        set_quantity(
            &mut sidecar.memory_request,
            self.sidecar_memory_request.as_ref(),
        );
        set_quantity(&mut sidecar.cpu_limit, self.sidecar_cpu_limit.as_ref());
        set_quantity(
            &mut sidecar.memory_limit,
            self.sidecar_memory_limit.as_ref(),
        );
        if let Some(source) = self.sidecar_binary_source {
            config.sidecar_binary_source = source.into();
        }
        if let Some(archs) = &self.architectures {
            // Empty entries are kept, so that validation refuses them.
            config.shipped_architectures = archs.iter().map(|a| a.trim().to_owned()).collect();
        }
        if let Some(kinds) = &self.workload_kinds {
            config.workload_kinds = kinds.iter().map(|k| (*k).into()).collect();
        }
        config.validate()?;
        Ok(config)
    }
}
