//! Engine configuration flags shared by `serve` and `inject`, and their
//! one mapping onto [`EngineConfig`].

use clap::Args;

use crate::engine::EngineConfig;

/// Engine flags; unset flags keep [`EngineConfig::default`].
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// Image of the install init container (holds the static sidecar binary).
    #[arg(long, env = "KUBE_PRESTOP_INSTALL_IMAGE")]
    pub install_image: Option<String>,
}

impl EngineArgs {
    /// The engine configuration these flags describe.
    pub fn engine_config(&self) -> EngineConfig {
        let mut config = EngineConfig::default();
        if let Some(image) = &self.install_image {
            config.install_image.clone_from(image);
        }
        config
    }
}
