//! Where the webhook's subcommands find their cluster: an explicit
//! kubeconfig file (`--kubeconfig`), else kube-rs's inference
//! (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).
//! The callers decide what a missing configuration means: `serve` runs
//! without a cluster, `check` fails.

use std::path::Path;

/// Failure to find or read a client configuration.
#[derive(Debug, thiserror::Error)]
pub enum KubeConfigError {
    /// The explicitly given kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file given with `--kubeconfig`.
        path: String,
        /// kube's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given and none could be inferred.
    #[error("no kubeconfig or in-cluster configuration: {0}")]
    Infer(#[source] kube::config::InferConfigError),
}

/// The client configuration from `kubeconfig` when given, else inferred.
///
/// # Errors
/// [`KubeConfigError::Kubeconfig`] for a given file that cannot be read or
/// used; [`KubeConfigError::Infer`] when none is given and none is found.
pub async fn load(kubeconfig: Option<&Path>) -> Result<kube::Config, KubeConfigError> {
    match kubeconfig {
        Some(path) => {
            let to_err = |source| KubeConfigError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(to_err)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(to_err)
        }
        None => kube::Config::infer().await.map_err(KubeConfigError::Infer),
    }
}
