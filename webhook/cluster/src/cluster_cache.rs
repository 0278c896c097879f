//! What the engine needs from the cluster, cached: every namespace's
//! LimitRanges, kept current by a kube-runtime reflector (one watch on
//! LimitRange across namespaces); which namespaces hold the sidecar
//! binary's ConfigMap of each architecture ([`SidecarConfigMaps`], when
//! enabled); the nodes' architectures and runtimes ([`NodeWatch`]); whether
//! the API server keeps image volumes ([`ImageVolumeProbe`]). Admission reads
//! the cache ([`ClusterCache::binary_facts`]) and never calls the API
//! server itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::LimitRange;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::image_volume_probe::ImageVolumeProbe;
use crate::node_facts::NodeWatch;
use crate::sidecar_configmap::SidecarConfigMaps;
use kube_prestop_engine::{BinaryFacts, Support};

/// Cached LimitRanges, or none at all when running without a cluster; the
/// sidecar binary's ConfigMaps per architecture (none unless
/// [`Self::with_sidecar_config_maps`]); the node facts (unknown unless
/// [`Self::with_nodes`]); the API server's image-volume support (no unless
/// [`Self::with_image_volume_probe`]).
#[derive(Clone)]
pub struct ClusterCache {
    store: Option<Store<LimitRange>>,
    synced: Arc<AtomicBool>,
    sidecar_config_maps: BTreeMap<String, SidecarConfigMaps>,
    nodes: NodeWatch,
    image_volume_probe: ImageVolumeProbe,
}

impl std::fmt::Debug for ClusterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCache")
            .field("connected", &self.store.is_some())
            .field("synced", &self.is_synced())
            .field("sidecar_config_maps", &self.sidecar_config_maps)
            .field("nodes", &self.nodes)
            .field("image_volume_probe", &self.image_volume_probe)
            .finish()
    }
}

impl ClusterCache {
    /// No cluster: every namespace has no LimitRanges; always synced.
    pub fn disconnected() -> Self {
        Self {
            store: None,
            synced: Arc::new(AtomicBool::new(true)),
            sidecar_config_maps: BTreeMap::new(),
            nodes: NodeWatch::disabled("the nodes are not watched"),
            image_volume_probe: not_probed(),
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
            sidecar_config_maps: BTreeMap::new(),
            nodes: NodeWatch::disabled("the nodes are not watched"),
            image_volume_probe: not_probed(),
        }
    }

    /// The same cache, answering for the architecture of
    /// `sidecar_config_maps`' binary from them (ignored when disabled).
    pub fn with_sidecar_config_maps(mut self, sidecar_config_maps: SidecarConfigMaps) -> Self {
        if let Some(arch) = sidecar_config_maps.architecture() {
            self.sidecar_config_maps
                .insert(arch.to_owned(), sidecar_config_maps);
        }
        self
    }

    /// The same cache, with the node facts from `nodes`.
    pub fn with_nodes(mut self, nodes: NodeWatch) -> Self {
        self.nodes = nodes;
        self
    }

    /// The same cache, with the API server's image-volume support from
    /// `api`.
    pub fn with_image_volume_probe(mut self, api: ImageVolumeProbe) -> Self {
        self.image_volume_probe = api;
        self
    }

    /// The node facts this cache reads.
    pub fn nodes(&self) -> &NodeWatch {
        &self.nodes
    }

    /// Everything the engine decides a pod's binary delivery from, for a
    /// pod in `namespace`: the ConfigMaps ready there (looked up without
    /// side effects), the nodes' architectures, and whether image volumes
    /// work (the API server keeps them and every node's runtime mounts
    /// them). Memory reads only.
    pub fn binary_facts(&self, namespace: &str) -> BinaryFacts {
        let config_maps = self
            .sidecar_config_maps
            .iter()
            .filter_map(|(arch, maps)| maps.ready_name(namespace).map(|name| (arch.clone(), name)))
            .collect();
        let summary = self.nodes.summary();
        let image_volumes = match (self.image_volume_probe.support(), summary.runtimes) {
            (Support::Yes, Support::Yes) => Support::Yes,
            (Support::No(why), _) | (Support::Yes, Support::No(why)) => Support::No(why),
        };
        BinaryFacts {
            config_maps,
            node_architectures: summary.architectures,
            image_volumes,
        }
    }

    /// Schedule the creation of `architecture`'s sidecar-binary ConfigMap in
    /// `namespace` when it is missing there (see
    /// [`SidecarConfigMaps::schedule_creation`]; nothing on a dry run,
    /// nothing for an architecture without a binary).
    pub fn ensure_sidecar_config_map(&self, namespace: &str, architecture: &str, dry_run: bool) {
        if dry_run {
            return;
        }
        if let Some(maps) = self.sidecar_config_maps.get(architecture) {
            maps.schedule_creation(namespace);
        }
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

/// The API server's image-volume support before anything was probed.
fn not_probed() -> ImageVolumeProbe {
    ImageVolumeProbe::fixed(Support::No(
        "the API server is not probed (no cluster, or image volumes not allowed by --sidecar-binary-source)"
            .to_owned(),
    ))
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
        let facts = cache.binary_facts("default");
        assert!(facts.config_maps.is_empty());
        assert!(matches!(facts.image_volumes, Support::No(_)));
    }

    /// Image volumes count only when the API server keeps them and every
    /// node's runtime mounts them; the ConfigMaps are per architecture.
    #[test]
    fn binary_facts_combine_api_nodes_and_config_maps() {
        use kube_prestop_engine::delivery::NodeFacts;
        let node = |rt: &str| NodeFacts {
            architecture: Some("amd64".to_owned()),
            runtime_version: rt.to_owned(),
            kubelet_version: "v1.37.2".to_owned(),
        };
        let cache = ClusterCache::disconnected()
            .with_sidecar_config_maps(SidecarConfigMaps::fixed("cm-a", "amd64"))
            .with_sidecar_config_maps(SidecarConfigMaps::fixed("cm-b", "arm64"))
            .with_nodes(NodeWatch::fixed([("n", node("containerd://2.4.2"))]));
        let facts = cache.binary_facts("ns");
        assert_eq!(facts.config_maps.len(), 2);
        assert_eq!(facts.config_maps["arm64"], "cm-b");
        // The API server was not probed: no image volumes.
        assert!(matches!(facts.image_volumes, Support::No(_)));
        let cache = cache.with_image_volume_probe(ImageVolumeProbe::fixed(Support::Yes));
        assert_eq!(cache.binary_facts("ns").image_volumes, Support::Yes);
        let cache = cache.with_nodes(NodeWatch::fixed([("n", node("containerd://1.7.0"))]));
        assert!(matches!(
            cache.binary_facts("ns").image_volumes,
            Support::No(why) if why.contains("older than 2.1")
        ));
    }
}
