//! The injection engine: a pure function from a Pod and the configuration to
//! a decision. No I/O happens here.

use k8s_openapi::api::core::v1::{LimitRange, Pod};

/// Everything the engine needs to know about the cluster, gathered by the
/// caller (from a reflector cache in the server, from flags in `inject`).
#[derive(Debug, Clone, Default)]
pub struct ClusterContext {
    /// Namespace of the pod (from the admission request; pods from
    /// `generateName` may have none in their metadata).
    pub namespace: String,
    /// LimitRanges of that namespace.
    pub limit_ranges: Vec<LimitRange>,
}

/// Engine configuration (install image, default sidecar resources, ...).
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// Image of the install init container.
    pub install_image: String,
}

/// Why a pod is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Placeholder until the engine lands.
    NoExecPreStop,
}

/// The engine's answer.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Leave the pod unchanged.
    Skip(SkipReason),
    /// The mutated pod.
    Inject(Box<Pod>),
}

/// A pod the engine cannot handle.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Placeholder until the engine lands.
    #[error("invalid pod: {0}")]
    Invalid(String),
}

/// Decide whether to inject `pod` and build the mutated pod.
pub fn inject(
    _pod: &Pod,
    _cluster: &ClusterContext,
    _config: &EngineConfig,
) -> Result<Decision, EngineError> {
    Ok(Decision::Skip(SkipReason::NoExecPreStop))
}
