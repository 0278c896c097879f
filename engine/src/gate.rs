//! The start gate of each sidecar (pure): which postStart handler holds the
//! pod's next containers until the watcher is armed, its port, and the
//! annotations that keep a service mesh's proxy off that port.
//!
//! The default is the exec of `post-start`. `kube-prestop.io/gate:
//! http-get` asks for the `httpGet` gate: one request from the kubelet to
//! the pod's IP, without timeout or retry, sent as soon as the runtime has
//! started the sidecar; a refused or reset connection makes the kubelet
//! restart the sidecar (`docs/facts.md` K14), which is what happens when
//! the watcher is not scheduled before the request (a CPU-starved node).
//! A mesh proxy that takes every inbound port would answer or refuse the
//! kubelet's plain-text request in the watcher's place; under Istio's
//! `STRICT` mutual TLS it refuses it on every restart. So a pod that
//! already carries a mesh's proxy or its injection marks gets the exec gate
//! whatever it asks, and an `httpGet` gate's port is excluded from the
//! meshes' inbound redirection, for a mesh injected after this webhook.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube_prestop_contract as contract;

use super::annotations::StartGate;

/// Istio's pod annotation: inbound ports its redirection leaves alone
/// (comma-separated; istio.io "Resource Annotations",
/// `traffic.sidecar.istio.io/excludeInboundPorts`).
pub const ISTIO_EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
/// Linkerd's pod annotation: inbound ports its proxy skips (comma-separated
/// ports or ranges; linkerd.io "Proxy Configuration",
/// `config.linkerd.io/skip-inbound-ports`).
pub const LINKERD_SKIP_INBOUND_PORTS: &str = "config.linkerd.io/skip-inbound-ports";

/// Containers a mesh injects as its proxy (Istio, Linkerd).
const MESH_PROXY_CONTAINERS: [&str; 2] = ["istio-proxy", "linkerd-proxy"];
/// Annotation and label prefixes a mesh's injector writes or reads.
const MESH_MARK_PREFIXES: [&str; 5] = [
    "sidecar.istio.io/",
    "security.istio.io/",
    "istio.io/",
    "linkerd.io/",
    "config.linkerd.io/",
];

/// The gate each sidecar gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `httpGet` gates on these ports, one per sidecar in order.
    HttpGet(Vec<u16>),
    /// The exec gate, and why (for the log; `None` when asked for).
    Exec(Option<&'static str>),
    /// No gate ([`StartGate::None`]): no postStart handler.
    None,
}

impl Plan {
    /// The port of sidecar `k`, when it has an `httpGet` gate.
    pub fn port(&self, k: usize) -> Option<u16> {
        match self {
            Self::HttpGet(p) => p.get(k).copied(),
            Self::Exec(_) | Self::None => None,
        }
    }
}

/// The gate of `sidecars` sidecars of `pod` (spec `spec`), `requested` by
/// the annotation ([`StartGate`]). None when asked for (no port, so no
/// exception); the exec gate when asked for (the default), and instead of `http-get` for a `hostNetwork` pod (the port would be the node's), for a pod with a
/// mesh's proxy or injection marks ([`mesh_of`]), and when the pod declares
/// nearly every port above [`contract::GATE_PORT_BASE`].
pub fn plan(pod: &Pod, spec: &PodSpec, requested: StartGate, sidecars: usize) -> Plan {
    match requested {
        StartGate::None => return Plan::None,
        StartGate::Exec => return Plan::Exec(None),
        StartGate::HttpGet => {}
    }
    if spec.host_network == Some(true) {
        return Plan::Exec(Some("hostNetwork"));
    }
    if let Some(mesh) = mesh_of(pod, spec) {
        return Plan::Exec(Some(mesh));
    }
    let ports = ports(spec, sidecars);
    if ports.len() < sidecars {
        return Plan::Exec(Some("no free port"));
    }
    Plan::HttpGet(ports)
}

/// The mesh whose proxy or marks `pod` carries: `"istio"` or `"linkerd"`.
pub fn mesh_of(pod: &Pod, spec: &PodSpec) -> Option<&'static str> {
    // Every proxy name and mark prefix names its mesh: Linkerd's say so.
    let mesh = |name: &str| {
        if name.contains("linkerd") {
            "linkerd"
        } else {
            "istio"
        }
    };
    let meta = &pod.metadata;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .find(|n| MESH_PROXY_CONTAINERS.contains(n))
        .or_else(|| {
            meta.annotations
                .iter()
                .flatten()
                .chain(meta.labels.iter().flatten())
                .map(|(k, _)| k.as_str())
                .find(|k| MESH_MARK_PREFIXES.iter().any(|p| k.starts_with(p)))
        })
        .map(mesh)
}

/// The first `n` ports from [`contract::GATE_PORT_BASE`] up that no
/// container, init container or ephemeral container of the pod declares,
/// as `containerPort` or `hostPort`.
pub fn ports(spec: &PodSpec, n: usize) -> Vec<u16> {
    let declared: BTreeSet<i32> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .flat_map(|p| [Some(p.container_port), p.host_port])
        .flatten()
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .flat_map(|c| c.ports.iter().flatten())
                .map(|p| p.container_port),
        )
        .collect();
    (contract::GATE_PORT_BASE..=u16::MAX)
        .filter(|p| !declared.contains(&i32::from(*p)))
        .take(n)
        .collect()
}

/// The meshes' exclusion annotations for `ports`, each appended to the
/// pod's own value of it (comma-separated; a port already listed is not
/// repeated). Empty for no ports.
pub fn mesh_exclusions(pod: &Pod, ports: &[u16]) -> Vec<(String, String)> {
    if ports.is_empty() {
        return Vec::new();
    }
    [ISTIO_EXCLUDE_INBOUND_PORTS, LINKERD_SKIP_INBOUND_PORTS]
        .into_iter()
        .map(|key| {
            let own = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .map_or("", |v| v.trim());
            let mut items: Vec<String> = own
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            for p in ports {
                let p = p.to_string();
                if !items.contains(&p) {
                    items.push(p);
                }
            }
            (key.to_owned(), items.join(","))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> (Pod, PodSpec) {
        let pod: Pod = serde_json::from_value(v).unwrap();
        let spec = pod.spec.clone().unwrap();
        (pod, spec)
    }

    #[test]
    fn http_get_when_asked_exec_where_the_port_would_not_reach_the_watcher() {
        let (p, s) = pod(json!({"spec": {"containers": [{"name": "main"}]}}));
        assert_eq!(
            plan(&p, &s, StartGate::HttpGet, 2),
            Plan::HttpGet(vec![17430, 17431])
        );
        assert_eq!(plan(&p, &s, StartGate::Exec, 1), Plan::Exec(None));
        assert_eq!(plan(&p, &s, StartGate::None, 2), Plan::None);
        assert_eq!(Plan::None.port(0), None);
        let main = json!([{"name": "main"}]);
        for (why, v) in [
            (
                "hostNetwork",
                json!({"spec": {"hostNetwork": true, "containers": main}}),
            ),
            (
                "istio",
                json!({"spec": {"containers": [{"name": "main"}, {"name": "istio-proxy"}]}}),
            ),
            (
                "linkerd",
                json!({"spec": {"initContainers": [{"name": "linkerd-proxy"}], "containers": main}}),
            ),
            (
                "istio",
                json!({
                    "metadata": {"annotations": {"sidecar.istio.io/status": "{}"}},
                    "spec": {"containers": main}
                }),
            ),
            (
                "linkerd",
                json!({
                    "metadata": {"labels": {"linkerd.io/control-plane-ns": "linkerd"}},
                    "spec": {"containers": main}
                }),
            ),
        ] {
            let (p, s) = pod(v.clone());
            assert_eq!(
                plan(&p, &s, StartGate::HttpGet, 1),
                Plan::Exec(Some(why)),
                "{v}"
            );
        }
    }

    #[test]
    fn ports_skip_every_declared_one() {
        let (_, s) = pod(json!({"spec": {
            "initContainers": [{"name": "i", "ports": [{"containerPort": 17431}]}],
            "containers": [{"name": "main", "ports": [
                {"containerPort": 17430}, {"containerPort": 80, "hostPort": 17432}
            ]}],
            "ephemeralContainers": [{"name": "e", "ports": [{"containerPort": 17434}]}]
        }}));
        assert_eq!(ports(&s, 2), vec![17433, 17435]);
        // Nearly every port declared: fewer than asked, and the exec gate.
        let all: Vec<_> = (17430..=65535)
            .map(|p| json!({"containerPort": p}))
            .collect();
        let (p, s) = pod(json!({"spec": {"containers": [{"name": "main", "ports": all}]}}));
        assert!(ports(&s, 1).is_empty());
        assert_eq!(
            plan(&p, &s, StartGate::HttpGet, 1),
            Plan::Exec(Some("no free port"))
        );
    }

    #[test]
    fn exclusions_append_to_the_pods_own() {
        let (p, _) = pod(json!({
            "metadata": {"annotations": {
                ISTIO_EXCLUDE_INBOUND_PORTS: "8080, 17430",
                LINKERD_SKIP_INBOUND_PORTS: ""
            }},
            "spec": {"containers": [{"name": "main"}]}
        }));
        assert_eq!(
            mesh_exclusions(&p, &[17430, 17431]),
            vec![
                (
                    ISTIO_EXCLUDE_INBOUND_PORTS.to_owned(),
                    "8080,17430,17431".to_owned()
                ),
                (
                    LINKERD_SKIP_INBOUND_PORTS.to_owned(),
                    "17430,17431".to_owned()
                ),
            ]
        );
        assert!(mesh_exclusions(&p, &[]).is_empty());
    }
}
