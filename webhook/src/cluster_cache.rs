//! What the engine needs from the cluster, cached: every namespace's
//! LimitRanges, kept current by a kube-runtime reflector (one watch on
//! LimitRange across namespaces), and which namespaces hold the sidecar
//! binary's ConfigMap ([`SidecarConfigMaps`], when enabled). Admission reads
//! the cache and never calls the API server itself.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::kube_config::{self, KubeConfigError};
use crate::sidecar_configmap::SidecarConfigMaps;

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

/// Cached LimitRanges, or none at all when running without a cluster; and
/// the sidecar binary's ConfigMaps (disabled unless
/// [`Self::with_sidecar_config_maps`]).
#[derive(Clone)]
pub struct ClusterCache {
    store: Option<Store<LimitRange>>,
    synced: Arc<AtomicBool>,
    sidecar_config_maps: SidecarConfigMaps,
}

impl std::fmt::Debug for ClusterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCache")
            .field("connected", &self.store.is_some())
            .field("synced", &self.is_synced())
            .field("sidecar_config_maps", &self.sidecar_config_maps)
            .finish()
    }
}

impl ClusterCache {
    /// No cluster: every namespace has no LimitRanges; always synced.
    pub fn disconnected() -> Self {
        Self {
            store: None,
            synced: Arc::new(AtomicBool::new(true)),
            sidecar_config_maps: SidecarConfigMaps::disabled(),
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
        Self::from_store(store)
    }

    /// A cache reading `store`, which something else keeps current. Reports
    /// synced once the store is ready (its writer saw the initial list).
    /// Must be called inside a tokio runtime.
    pub fn from_store(store: Store<LimitRange>) -> Self {
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
            sidecar_config_maps: SidecarConfigMaps::disabled(),
        }
    }

    /// The same cache, answering [`Self::sidecar_config_map`] from
    /// `sidecar_config_maps`.
    pub fn with_sidecar_config_maps(mut self, sidecar_config_maps: SidecarConfigMaps) -> Self {
        self.sidecar_config_maps = sidecar_config_maps;
        self
    }

    /// The sidecar binary's ConfigMap in `namespace` when it exists there
    /// (see [`SidecarConfigMaps::config_map_for`]: unless `dry_run`, a miss
    /// schedules its creation in the background). `None` when disabled.
    pub fn sidecar_config_map(&self, namespace: &str, dry_run: bool) -> Option<String> {
        self.sidecar_config_maps.config_map_for(namespace, dry_run)
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
        Ok(match Self::client(kubeconfig, disabled).await? {
            Some(client) => Self::start(client),
            None => Self::disconnected(),
        })
    }

    /// The cluster client [`Self::connect`] uses: `None` with `disabled` or
    /// when no configuration is found (both logged as warnings).
    pub async fn client(
        kubeconfig: Option<&Path>,
        disabled: bool,
    ) -> Result<Option<kube::Client>, ClusterCacheError> {
        if disabled {
            tracing::warn!(
                "running without a cluster (--no-cluster): LimitRanges are taken as empty"
            );
            return Ok(None);
        }
        let config = match kube_config::load(kubeconfig).await {
            Ok(config) => config,
            Err(KubeConfigError::Kubeconfig { path, source }) => {
                return Err(ClusterCacheError::Kubeconfig { path, source });
            }
            Err(KubeConfigError::Infer(e)) => {
                tracing::warn!(error = %e, "no kubeconfig or in-cluster configuration: LimitRanges are taken as empty");
                return Ok(None);
            }
        };
        Ok(Some(kube::Client::try_from(config)?))
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use std::time::{Duration, Instant};

    fn limit_range(namespace: &str, name: &str) -> LimitRange {
        LimitRange {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    #[tokio::test]
    async fn ready_after_initial_list_and_filtered_by_namespace() {
        let (store, mut writer) = reflector::store::<LimitRange>();
        let cache = ClusterCache::from_store(store);
        assert!(!cache.is_synced());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(limit_range("a", "one")));
        writer.apply_watcher_event(&watcher::Event::InitApply(limit_range("a", "two")));
        writer.apply_watcher_event(&watcher::Event::InitApply(limit_range("b", "three")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cache.is_synced() {
            assert!(Instant::now() < deadline, "never synced");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut names: Vec<_> = cache
            .limit_ranges("a")
            .into_iter()
            .filter_map(|lr| lr.metadata.name)
            .collect();
        names.sort();
        assert_eq!(names, ["one", "two"]);
        assert_eq!(cache.limit_ranges("b").len(), 1);
        assert!(cache.limit_ranges("c").is_empty());
        writer.apply_watcher_event(&watcher::Event::Delete(limit_range("b", "three")));
        assert!(cache.limit_ranges("b").is_empty());
    }

    #[test]
    fn disconnected_is_synced_and_empty() {
        let cache = ClusterCache::disconnected();
        assert!(cache.is_synced());
        assert!(cache.limit_ranges("default").is_empty());
    }
}
