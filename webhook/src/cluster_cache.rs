//! What the engine needs from the cluster, cached: every namespace's
//! LimitRanges, kept current by a kube-runtime reflector (one watch on
//! LimitRange across namespaces). Admission reads the cache and never calls
//! the API server itself.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// Failure to build a client from an explicitly given kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ClusterCacheError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file given with `--kubeconfig`.
        path: String,
        /// kube's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A client could not be built from the configuration.
    #[error("kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// Cached LimitRanges, or none at all when running without a cluster.
#[derive(Clone)]
pub struct ClusterCache {
    store: Option<Store<LimitRange>>,
    synced: Arc<AtomicBool>,
}

impl std::fmt::Debug for ClusterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCache")
            .field("connected", &self.store.is_some())
            .field("synced", &self.is_synced())
            .finish()
    }
}

impl ClusterCache {
    /// No cluster: every namespace has no LimitRanges; always synced.
    pub fn disconnected() -> Self {
        Self {
            store: None,
            synced: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Start the reflector on `client` in a background task (must be called
    /// inside a tokio runtime). The cache reports synced after the watch's
    /// initial list.
    pub fn start(client: kube::Client) -> Self {
        let (store, writer) = reflector::store::<LimitRange>();
        let api = kube::Api::<LimitRange>::all(client);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        tokio::spawn(async move {
            stream
                .for_each(|event| async move {
                    if let Err(e) = event {
                        tracing::warn!(error = %e, "LimitRange watch error; retrying with backoff");
                    }
                })
                .await;
        });
        let synced = Arc::new(AtomicBool::new(false));
        let flag = synced.clone();
        let waiter = store.clone();
        tokio::spawn(async move {
            if waiter.wait_until_ready().await.is_ok() {
                tracing::info!("LimitRange cache synced");
                flag.store(true, Ordering::SeqCst);
            }
        });
        Self {
            store: Some(store),
            synced,
        }
    }

    /// Connect to the cluster when a configuration exists: the explicit
    /// `kubeconfig` file, else `KUBECONFIG`/`~/.kube/config`, else the
    /// in-cluster service account. With `disabled`, or when no
    /// configuration is found, logs a warning and returns
    /// [`Self::disconnected`]. An explicit kubeconfig that cannot be used is
    /// an error.
    pub async fn connect(
        kubeconfig: Option<&Path>,
        disabled: bool,
    ) -> Result<Self, ClusterCacheError> {
        if disabled {
            tracing::warn!(
                "running without a cluster (--no-cluster): LimitRanges are taken as empty"
            );
            return Ok(Self::disconnected());
        }
        let config = match kubeconfig {
            Some(path) => {
                let to_err = |source| ClusterCacheError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                };
                let kc = kube::config::Kubeconfig::read_from(path).map_err(to_err)?;
                kube::Config::from_custom_kubeconfig(
                    kc,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .map_err(to_err)?
            }
            None => match kube::Config::infer().await {
                Ok(config) => config,
                Err(e) => {
                    tracing::warn!(error = %e, "no kubeconfig or in-cluster configuration: LimitRanges are taken as empty");
                    return Ok(Self::disconnected());
                }
            },
        };
        let client = kube::Client::try_from(config)?;
        Ok(Self::start(client))
    }

    /// Whether the initial list has been received (always true when
    /// disconnected).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// The LimitRanges of `namespace` (cloned out of the cache).
    pub fn limit_ranges(&self, namespace: &str) -> Vec<LimitRange> {
        match &self.store {
            None => Vec::new(),
            Some(store) => store
                .state()
                .iter()
                .filter(|lr| lr.metadata.namespace.as_deref() == Some(namespace))
                .map(|lr| (**lr).clone())
                .collect(),
        }
    }
}
