//! What the nodes say about themselves that decides a pod's binary delivery
//! (`engine::delivery`): each node's architecture (`kubernetes.io/arch`,
//! else `status.nodeInfo.architecture`) and its kubelet and container
//! runtime versions (`status.nodeInfo`), from one watch on Node objects
//! across the cluster (kube-runtime's watcher with its default backoff).
//! Each event is reduced to those three strings at once (the objects are
//! dropped), and the cluster-wide summary ([`NodeSummary`]) is recomputed
//! only when a node's facts change, so admission reads one small value.
//!
//! Needs RBAC `list` and `watch` on `nodes`. Without a cluster, or before
//! the first list, the summary knows nothing (install init container).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, watcher};
use kube_prestop_engine::Support;
use kube_prestop_engine::delivery::{
    ARCH_LABEL, NodeArchitectures, NodeFacts, NodeSummary, summarize_nodes,
};

/// The nodes' facts, kept current by a watch (or fixed, in tests). Cheap to
/// clone (shared state).
#[derive(Clone)]
pub struct NodeWatch {
    state: Arc<RwLock<State>>,
}

struct State {
    nodes: BTreeMap<String, NodeFacts>,
    /// The nodes listed so far by a relist in progress.
    relist: Option<BTreeMap<String, NodeFacts>>,
    synced: bool,
    summary: NodeSummary,
}

impl std::fmt::Debug for NodeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.read();
        f.debug_struct("NodeWatch")
            .field("nodes", &s.nodes.len())
            .field("synced", &s.synced)
            .finish()
    }
}

/// The facts of one Node object: its [`ARCH_LABEL`] label, else
/// `status.nodeInfo.architecture`; its runtime and kubelet versions (empty
/// when it reports none).
pub fn facts_of(node: &Node) -> NodeFacts {
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    let architecture = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ARCH_LABEL))
        .filter(|a| !a.is_empty())
        .cloned()
        .or_else(|| {
            info.map(|i| i.architecture.clone())
                .filter(|a| !a.is_empty())
        });
    NodeFacts {
        architecture,
        runtime_version: info
            .map(|i| i.container_runtime_version.clone())
            .unwrap_or_default(),
        kubelet_version: info.map(|i| i.kubelet_version.clone()).unwrap_or_default(),
    }
}

impl NodeWatch {
    fn with(state: State) -> Self {
        Self {
            state: Arc::new(RwLock::new(state)),
        }
    }

    /// Nothing is watched: the architectures are unknown and image volumes
    /// are not counted on; `why` says why (for the log lines).
    pub fn disabled(why: &str) -> Self {
        Self::with(State {
            nodes: BTreeMap::new(),
            relist: None,
            synced: false,
            summary: NodeSummary {
                architectures: NodeArchitectures::Unknown(why.to_owned()),
                runtimes: Support::No(why.to_owned()),
            },
        })
    }

    /// These nodes, listed, never changing (tests).
    pub fn fixed<'a>(nodes: impl IntoIterator<Item = (&'a str, NodeFacts)>) -> Self {
        let this = Self::disabled("the node watch has not listed yet");
        this.apply(&watcher::Event::Init);
        for (name, facts) in nodes {
            this.fold(watcher::Event::InitApply((name.to_owned(), facts)));
        }
        this.apply(&watcher::Event::InitDone);
        this
    }

    /// Watch the nodes on `client` in a background task (must be called
    /// inside a tokio runtime).
    pub fn start(client: kube::Client) -> Self {
        let this = Self::disabled("the node watch has not listed yet");
        let api = kube::Api::<Node>::all(client);
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let watching = this.clone();
        tokio::spawn(async move {
            stream
                .for_each(|event| {
                    match event {
                        Ok(event) => watching.apply(&event),
                        Err(e) => tracing::warn!(
                            error = %e,
                            "node watch error (node architectures and runtimes); retrying with backoff"
                        ),
                    }
                    std::future::ready(())
                })
                .await;
        });
        this
    }

    /// Fold one watch event in.
    pub fn apply(&self, event: &watcher::Event<Node>) {
        let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
        self.fold(match event {
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
            watcher::Event::InitApply(n) => watcher::Event::InitApply((name(n), facts_of(n))),
            watcher::Event::Apply(n) => watcher::Event::Apply((name(n), facts_of(n))),
            watcher::Event::Delete(n) => watcher::Event::Delete((name(n), facts_of(n))),
        });
    }

    fn fold(&self, event: watcher::Event<(String, NodeFacts)>) {
        let mut s = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let changed = match event {
            watcher::Event::Init => {
                s.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply((name, facts)) => {
                if let Some(relist) = s.relist.as_mut() {
                    relist.insert(name, facts);
                }
                false
            }
            watcher::Event::InitDone => {
                if let Some(listed) = s.relist.take() {
                    s.nodes = listed;
                }
                s.synced = true;
                true
            }
            watcher::Event::Apply((name, facts)) => {
                s.nodes.get(&name) != Some(&facts) && {
                    s.nodes.insert(name, facts);
                    true
                }
            }
            watcher::Event::Delete((name, _)) => s.nodes.remove(&name).is_some(),
        };
        if changed && s.synced {
            let summary = summarize_nodes(s.nodes.iter().map(|(n, f)| (n.as_str(), f)));
            if summary != s.summary {
                log_summary(&summary, s.nodes.len());
                s.summary = summary;
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cluster-wide summary (a small clone).
    pub fn summary(&self) -> NodeSummary {
        self.read().summary.clone()
    }

    /// Whether the watch has listed the nodes at least once.
    pub fn is_synced(&self) -> bool {
        self.read().synced
    }
}

fn log_summary(summary: &NodeSummary, nodes: usize) {
    let architectures = match &summary.architectures {
        NodeArchitectures::Known(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        NodeArchitectures::Unknown(why) => format!("unknown: {why}"),
    };
    let runtimes = match &summary.runtimes {
        Support::Yes => "every node mounts image volumes".to_owned(),
        Support::No(why) => format!("not every node mounts image volumes: {why}"),
    };
    tracing::info!(nodes, architectures, runtimes, "node facts changed");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, NodeSystemInfo};
    use kube::api::ObjectMeta;

    fn node(name: &str, label: Option<&str>, info_arch: &str, runtime: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: label.map(|a| [(ARCH_LABEL.to_owned(), a.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    architecture: info_arch.to_owned(),
                    container_runtime_version: runtime.to_owned(),
                    kubelet_version: "v1.37.2".to_owned(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        }
    }

    #[test]
    fn label_first_then_node_info() {
        let f = facts_of(&node("a", Some("arm64"), "amd64", "containerd://2.4.2"));
        assert_eq!(f.architecture.as_deref(), Some("arm64"));
        let f = facts_of(&node("a", None, "amd64", ""));
        assert_eq!(f.architecture.as_deref(), Some("amd64"));
        assert_eq!(f.runtime_version, "");
        let f = facts_of(&Node::default());
        assert_eq!(f.architecture, None);
        assert_eq!(f.kubelet_version, "");
    }

    #[test]
    fn unknown_until_listed_then_follows_the_nodes() {
        let w = NodeWatch::disabled("the node watch has not listed yet");
        assert!(matches!(
            w.summary().architectures,
            NodeArchitectures::Unknown(_)
        ));
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(node(
            "real",
            Some("amd64"),
            "amd64",
            "containerd://2.4.2",
        )));
        // Mid-list: still unknown.
        assert!(!w.is_synced());
        assert!(matches!(w.summary().runtimes, Support::No(_)));
        w.apply(&watcher::Event::InitDone);
        let s = w.summary();
        assert_eq!(s.runtimes, Support::Yes);
        assert_eq!(
            s.architectures,
            NodeArchitectures::Known(["amd64".to_owned()].into())
        );
        // An arm64 node with an old runtime joins: mixed, no image volumes.
        w.apply(&watcher::Event::Apply(node(
            "fake",
            Some("arm64"),
            "arm64",
            "containerd://1.7.0",
        )));
        let s = w.summary();
        assert!(matches!(&s.runtimes, Support::No(why) if why.contains("node fake")));
        assert_eq!(
            s.architectures,
            NodeArchitectures::Known(["amd64".to_owned(), "arm64".to_owned()].into())
        );
        // It leaves again.
        w.apply(&watcher::Event::Delete(node("fake", None, "", "")));
        assert_eq!(w.summary().runtimes, Support::Yes);
        // A relist without the real node: no nodes.
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitDone);
        assert!(matches!(
            w.summary().architectures,
            NodeArchitectures::Unknown(_)
        ));
    }

    #[test]
    fn fixed_nodes() {
        let w = NodeWatch::fixed([(
            "n",
            NodeFacts {
                architecture: Some("arm64".to_owned()),
                runtime_version: "cri-o://1.30.0".to_owned(),
                kubelet_version: "v1.37.0".to_owned(),
            },
        )]);
        assert!(w.is_synced());
        assert!(
            matches!(w.summary().runtimes, Support::No(why) if why.contains("older than 1.31"))
        );
    }
}
