//! The one client factory of the webhook's cluster-facing parts: an
//! explicit kubeconfig file (`--kubeconfig`), else kube-rs's inference
//! (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).
//! The callers decide what a missing configuration means: `serve` runs
//! without a cluster ([`optional_client`]), `check` fails ([`client`]).

use std::path::Path;

/// Failure to find, read or use a client configuration: the one error type
/// of client creation, for `serve` and `check` alike.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The explicitly given kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file given with `--kubeconfig`.
        path: String,
        /// kube's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given and none could be inferred (no `KUBECONFIG`, no
    /// `~/.kube/config`, not in a pod).
    #[error("no kubeconfig or in-cluster configuration: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// A client could not be built from the configuration (TLS settings,
    /// proxy, authentication plugin).
    #[error("kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// The client configuration from `kubeconfig` when given, else inferred.
///
/// # Errors
/// [`ClientError::Kubeconfig`] for a given file that cannot be read or
/// used; [`ClientError::Infer`] when none is given and none is found.
pub async fn config(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
    match kubeconfig {
        Some(path) => {
            let to_err = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(to_err)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(to_err)
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer),
    }
}

/// A client for `kubeconfig`, else for the inferred configuration.
///
/// # Errors
/// Every [`ClientError`]: a cluster is required.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let config = config(kubeconfig).await?;
    kube::Client::try_from(config).map_err(ClientError::Client)
}

/// The client `serve` uses: `None` when `disabled` (`--no-cluster`) or
/// when no kubeconfig was given and none is found (both logged as
/// warnings: LimitRanges are then taken as empty and no ConfigMap is
/// delivered).
///
/// # Errors
/// [`ClientError::Kubeconfig`] for a given file that cannot be used;
/// [`ClientError::Client`] when the found configuration gives no client.
pub async fn optional_client(
    kubeconfig: Option<&Path>,
    disabled: bool,
) -> Result<Option<kube::Client>, ClientError> {
    if disabled {
        tracing::warn!("running without a cluster (--no-cluster): LimitRanges are taken as empty");
        return Ok(None);
    }
    let config = match config(kubeconfig).await {
        Ok(config) => config,
        Err(ClientError::Infer(e)) => {
            tracing::warn!(error = %e, "no kubeconfig or in-cluster configuration: LimitRanges are taken as empty");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    kube::Client::try_from(config)
        .map(Some)
        .map_err(ClientError::Client)
}
