//! Where one pod's sidecar binary comes from (`docs/ARCHITECTURE.md` §3,
//! "Where the binary comes from"): the install image mounted as an image volume, the namespace's ConfigMap
//! for the pod's node architecture, or the install init container. Pure:
//! the caller gathers the facts ([`BinaryFacts`]: node architectures and
//! runtimes from a watch, whether the API server keeps `volumes[].image`,
//! the ConfigMaps that exist), this module decides and says why.
//!
//! The one rule it never breaks: a binary of the wrong architecture. A
//! ConfigMap holds one architecture's binary, so it is mounted only when the
//! pod's node architecture is known at admission: the pod pins
//! `kubernetes.io/arch` ([`pinned_architecture`]), or every node of the
//! cluster has the same one. An image volume and the install init
//! container come from a multi-platform image, which the node's runtime
//! resolves for its own platform.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::PodSpec;

use super::EngineError;

/// The node label naming a node's CPU architecture, Go's `GOARCH` (`amd64`,
/// `arm64`, ...), set by the kubelet from `runtime.GOARCH`
/// (`k8s.io/api/core/v1` `LabelArchStable`).
pub const ARCH_LABEL: &str = "kubernetes.io/arch";

/// The architectures kube-prestop ships a sidecar binary for (the install
/// image's `/architectures/<arch>/`), by their [`ARCH_LABEL`] values.
pub const SHIPPED_ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// The operator's choice of binary delivery (the chart's
/// `sidecarBinary.source`, the webhook's `--sidecar-binary-source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum SidecarBinarySource {
    /// The image volume where it works, else the ConfigMap where the
    /// architecture is known and it exists, else the install init container.
    #[default]
    Auto,
    /// The image volume where it works, else the install init container
    /// (no ConfigMaps: no ConfigMap RBAC needed).
    ImageVolume,
    /// The ConfigMap where the architecture is known and it exists, else
    /// the install init container.
    ConfigMap,
    /// Always the install init container.
    InstallContainer,
}

impl SidecarBinarySource {
    /// Every value, in the order the docs list them.
    pub const ALL: [Self; 4] = [
        Self::Auto,
        Self::ImageVolume,
        Self::ConfigMap,
        Self::InstallContainer,
    ];

    /// The value as the chart and the flag write it: `auto`, `imageVolume`,
    /// `configMap`, `installContainer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::ImageVolume => "imageVolume",
            Self::ConfigMap => "configMap",
            Self::InstallContainer => "installContainer",
        }
    }

    /// Parses [`Self::as_str`]'s values (exactly). `None` otherwise.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether this source may mount an image volume.
    pub fn may_use_image_volume(self) -> bool {
        matches!(self, Self::Auto | Self::ImageVolume)
    }

    /// Whether this source may mount a ConfigMap.
    pub fn may_use_config_map(self) -> bool {
        matches!(self, Self::Auto | Self::ConfigMap)
    }
}

impl fmt::Display for SidecarBinarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether something works, and if not, why (for the log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// It works.
    Yes,
    /// It does not, or it is not known to: why.
    No(String),
}

impl Default for Support {
    /// Not known: nothing has said it works.
    fn default() -> Self {
        Self::No("not checked".to_owned())
    }
}

/// The architectures of the cluster's nodes, as the caller's node watch
/// sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeArchitectures {
    /// Not known (no watch, not listed yet, no nodes, or a node without an
    /// architecture): why.
    Unknown(String),
    /// Every node's architecture (at least one).
    Known(BTreeSet<String>),
}

impl Default for NodeArchitectures {
    fn default() -> Self {
        Self::Unknown("the nodes are not watched".to_owned())
    }
}

/// What the caller knows about the sidecar binary's deliveries in the pod's
/// cluster and namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinaryFacts {
    /// The ConfigMaps holding the binary that exist in the pod's namespace,
    /// by architecture ([`ARCH_LABEL`] value → ConfigMap name); each holds
    /// only that architecture's binary.
    pub config_maps: BTreeMap<String, String>,
    /// The cluster's node architectures.
    pub node_architectures: NodeArchitectures,
    /// Whether an image volume works on every node: the API server keeps
    /// `spec.volumes[].image` and every node's runtime mounts image volumes
    /// (see [`runtime_supports_image_volumes`]).
    pub image_volumes: Support,
}

/// What one node reports that the decision uses (from `Node` objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's [`ARCH_LABEL`] label, else `status.nodeInfo.architecture`;
    /// `None` when it has neither.
    pub architecture: Option<String>,
    /// `status.nodeInfo.containerRuntimeVersion`, e.g. `containerd://2.4.2`
    /// (empty when the node reports none).
    pub runtime_version: String,
    /// `status.nodeInfo.kubeletVersion`, e.g. `v1.37.2` (empty when the
    /// node reports none).
    pub kubelet_version: String,
}

/// The cluster-wide facts [`BinaryFacts`] takes from the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// Every node's architecture, or why it is not known.
    pub architectures: NodeArchitectures,
    /// Whether every node's runtime mounts image volumes, or the first node
    /// (by name) whose does not, and why.
    pub runtimes: Support,
}

/// Sums up the nodes (name → facts): their architectures, and whether every
/// runtime mounts image volumes. No nodes: both unknown.
pub fn summarize_nodes<'a>(
    nodes: impl IntoIterator<Item = (&'a str, &'a NodeFacts)>,
) -> NodeSummary {
    let mut architectures = BTreeSet::new();
    let mut unknown_arch: Option<String> = None;
    let mut runtimes = Support::Yes;
    let mut any = false;
    for (name, node) in nodes {
        any = true;
        match node.architecture.as_deref() {
            Some(a) if !a.is_empty() => {
                architectures.insert(a.to_owned());
            }
            _ => {
                unknown_arch.get_or_insert_with(|| {
                    format!("node {name} has no {ARCH_LABEL} label and reports no architecture")
                });
            }
        }
        if runtimes == Support::Yes
            && let Err(why) = kubelet_supports_image_volumes(&node.kubelet_version)
                .and_then(|()| runtime_supports_image_volumes(&node.runtime_version))
        {
            runtimes = Support::No(format!("node {name}: {why}"));
        }
    }
    if !any {
        return NodeSummary {
            architectures: NodeArchitectures::Unknown("no nodes".to_owned()),
            runtimes: Support::No("no nodes".to_owned()),
        };
    }
    NodeSummary {
        architectures: match unknown_arch {
            Some(why) => NodeArchitectures::Unknown(why),
            None => NodeArchitectures::Known(architectures),
        },
        runtimes,
    }
}

/// Oldest containerd that mounts image volumes: 2.1 (its CRI plugin's
/// image-volume support, `internal/cri/server/container_image_mount.go`).
pub const MIN_CONTAINERD: (u64, u64) = (2, 1);
/// Oldest CRI-O that mounts image volumes: 1.31.
pub const MIN_CRIO: (u64, u64) = (1, 31);

/// Whether a node's runtime, as `status.nodeInfo.containerRuntimeVersion`
/// reports it (`<name>://<version>`), mounts image volumes: containerd ≥
/// [`MIN_CONTAINERD`] or CRI-O ≥ [`MIN_CRIO`]. Kubernetes 1.35–1.37 offer
/// no node-declared feature for image volumes (the kubelet's
/// `nodedeclaredfeatures` registry has none), so the runtime's name and
/// version are all there is.
///
/// Errors: why not, naming the runtime and version: an empty value, one
/// without `://`, an unparsable version, an older version, another runtime.
pub fn runtime_supports_image_volumes(runtime_version: &str) -> Result<(), String> {
    let value = runtime_version.trim();
    if value.is_empty() {
        return Err("the node reports no container runtime version".to_owned());
    }
    let Some((name, version)) = value.split_once("://") else {
        return Err(format!(
            "container runtime version {value:?} is not <runtime>://<version>"
        ));
    };
    let min = match name {
        "containerd" => MIN_CONTAINERD,
        "cri-o" => MIN_CRIO,
        other => {
            return Err(format!(
                "container runtime {other} is not known to mount image volumes (containerd >= 2.1 or CRI-O >= 1.31 do)"
            ));
        }
    };
    let Some(found) = major_minor(version) else {
        return Err(format!("{name} version {version:?} does not parse"));
    };
    if found < min {
        return Err(format!(
            "{name} {version} is older than {}.{}, the first to mount image volumes",
            min.0, min.1
        ));
    }
    Ok(())
}

/// Oldest kubelet whose `ImageVolume` feature gate is on by default: 1.35
/// (`pkg/features/kube_features.go`: alpha 1.31, beta off 1.33, beta on
/// 1.35, GA and locked on 1.36). A 1.33 or 1.34 kubelet may have it
/// switched on, but the node does not say so: it is not counted on.
pub const MIN_KUBELET: (u64, u64) = (1, 35);

/// Whether a node's kubelet, as `status.nodeInfo.kubeletVersion` reports
/// it (`v1.37.2`), mounts image volumes by default (≥ [`MIN_KUBELET`]).
///
/// Errors: why not: empty, unparsable or older.
pub fn kubelet_supports_image_volumes(kubelet_version: &str) -> Result<(), String> {
    let v = kubelet_version.trim();
    if v.is_empty() {
        return Err("the node reports no kubelet version".to_owned());
    }
    match major_minor(v) {
        None => Err(format!("kubelet version {v:?} does not parse")),
        Some(found) if found < MIN_KUBELET => Err(format!(
            "kubelet {v} is older than {}.{}, the first with image volumes on by default",
            MIN_KUBELET.0, MIN_KUBELET.1
        )),
        Some(_) => Ok(()),
    }
}

/// `major.minor` of a version such as `2.4.2`, `v1.31.0-rc.1` or `1.7.22-k3s1`.
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split('.');
    let num = |s: Option<&str>| -> Option<u64> {
        let s = s?;
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((num(parts.next())?, num(parts.next())?))
}

/// The architecture a pod pins with `kubernetes.io/arch`, and where: a
/// `nodeSelector` entry, or required node affinity in which every
/// `nodeSelectorTerm` (they are ORed) has an `In` expression on the label
/// with one value, the same in every term. `None` when the pod does not pin
/// one (several values, `NotIn`, preferred affinity only...).
pub fn pinned_architecture(spec: &PodSpec) -> Option<(String, &'static str)> {
    if let Some(arch) = spec.node_selector.as_ref().and_then(|s| s.get(ARCH_LABEL)) {
        return Some((arch.clone(), "spec.nodeSelector[kubernetes.io/arch]"));
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let mut pinned: Option<&String> = None;
    for term in terms {
        let single = term.match_expressions.iter().flatten().find_map(|e| {
            match (e.key.as_str(), e.operator.as_str(), e.values.as_deref()) {
                (ARCH_LABEL, "In", Some([one])) => Some(one),
                _ => None,
            }
        })?;
        match pinned {
            Some(p) if p != single => return None,
            _ => pinned = Some(single),
        }
    }
    pinned.map(|a| {
        (
            a.clone(),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        )
    })
}

/// How one pod gets the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The install image mounted as an image volume.
    ImageVolume,
    /// The ConfigMap `name`, holding the binary of `architecture`.
    ConfigMap {
        /// The ConfigMap's name in the pod's namespace.
        name: String,
        /// The architecture of its binary (the pod's node architecture).
        architecture: String,
    },
    /// Copied by the install init container.
    InstallContainer,
}

impl Delivery {
    /// Every label, in [`Self::label`]'s order of precedence.
    pub const LABELS: [&'static str; 3] = ["imageVolume", "configMap", "installContainer"];

    /// Stable label for metrics and logs: `imageVolume`, `configMap`,
    /// `installContainer` (the chart's source names).
    pub fn label(&self) -> &'static str {
        match self {
            Self::ImageVolume => "imageVolume",
            Self::ConfigMap { .. } => "configMap",
            Self::InstallContainer => "installContainer",
        }
    }
}

/// The decision for one pod: the delivery, why, and what the caller may do
/// about a ConfigMap that would have served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The delivery.
    pub delivery: Delivery,
    /// Why this one and not an earlier one of the order, for the log.
    pub why: String,
    /// The pod's node architecture when known at admission.
    pub architecture: Option<String>,
    /// The architecture whose ConfigMap the pod would have mounted had it
    /// existed in the namespace (the caller creates it for the next pods).
    pub missing_config_map: Option<String>,
}

/// Chooses the delivery for a pod with `spec`, from `source` (the
/// operator's choice), `facts` and the `shipped` architectures, in this
/// order: image volume, ConfigMap, install init container; each skipped
/// one named in [`Choice::why`].
///
/// Errors: [`EngineError::UnsupportedArchitecture`] when the pod's node
/// architecture is known (pinned, or every node's) and is not in `shipped`:
/// no delivery has a binary for it.
pub fn choose(
    spec: &PodSpec,
    source: SidecarBinarySource,
    facts: &BinaryFacts,
    shipped: &[String],
) -> Result<Choice, EngineError> {
    let (architecture, known_from) = match pinned_architecture(spec) {
        Some((arch, field)) => (Some(arch), Ok(field)),
        None => match &facts.node_architectures {
            NodeArchitectures::Known(set) if set.len() == 1 => {
                (set.iter().next().cloned(), Ok("every node of the cluster"))
            }
            NodeArchitectures::Known(set) => (
                None,
                Err(format!(
                    "the pod does not pin {ARCH_LABEL} and the nodes have several architectures ({})",
                    set.iter().map(String::as_str).collect::<Vec<_>>().join(",")
                )),
            ),
            NodeArchitectures::Unknown(why) => (
                None,
                Err(format!(
                    "the pod does not pin {ARCH_LABEL} and the nodes' architecture is not known ({why})"
                )),
            ),
        },
    };
    if let (Some(arch), Ok(field)) = (&architecture, &known_from)
        && !shipped.iter().any(|s| s == arch)
    {
        return Err(EngineError::UnsupportedArchitecture {
            architecture: arch.clone(),
            field: (*field).to_owned(),
            shipped: shipped.join(","),
        });
    }
    let mut skipped: Vec<String> = Vec::new();
    if source.may_use_image_volume() {
        match &facts.image_volumes {
            Support::Yes => {
                return Ok(Choice {
                    delivery: Delivery::ImageVolume,
                    why: format!("source {source}: image volumes work on every node"),
                    architecture,
                    missing_config_map: None,
                });
            }
            Support::No(why) => skipped.push(format!("no image volume: {why}")),
        }
    } else {
        skipped.push(format!("no image volume: source {source}"));
    }
    if source.may_use_config_map() {
        match (&architecture, &known_from) {
            (Some(arch), Ok(field)) => match facts.config_maps.get(arch) {
                Some(name) => {
                    skipped.push(format!("architecture {arch} from {field}"));
                    return Ok(Choice {
                        delivery: Delivery::ConfigMap {
                            name: name.clone(),
                            architecture: arch.clone(),
                        },
                        why: skipped.join("; "),
                        architecture,
                        missing_config_map: None,
                    });
                }
                None => {
                    skipped.push(format!(
                        "no ConfigMap: none for {arch} (from {field}) in the namespace yet"
                    ));
                    let missing = Some(arch.clone());
                    return Ok(Choice {
                        delivery: Delivery::InstallContainer,
                        why: skipped.join("; "),
                        architecture,
                        missing_config_map: missing,
                    });
                }
            },
            (_, Err(why)) => skipped.push(format!("no ConfigMap: {why}")),
            (None, Ok(_)) => skipped.push("no ConfigMap: architecture unknown".to_owned()),
        }
    } else {
        skipped.push(format!("no ConfigMap: source {source}"));
    }
    Ok(Choice {
        delivery: Delivery::InstallContainer,
        why: skipped.join("; "),
        architecture,
        missing_config_map: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };

    fn shipped() -> Vec<String> {
        SHIPPED_ARCHITECTURES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    }

    fn selector(arch: &str) -> PodSpec {
        PodSpec {
            node_selector: Some([(ARCH_LABEL.to_owned(), arch.to_owned())].into()),
            ..Default::default()
        }
    }

    fn term(op: &str, values: &[&str]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: ARCH_LABEL.to_owned(),
                operator: op.to_owned(),
                values: Some(values.iter().map(|s| (*s).to_owned()).collect()),
            }]),
            match_fields: None,
        }
    }

    fn affinity(terms: Vec<NodeSelectorTerm>) -> PodSpec {
        PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: terms,
                    }),
                    preferred_during_scheduling_ignored_during_execution: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn facts(archs: &[&str], image_volumes: Support, config_maps: &[(&str, &str)]) -> BinaryFacts {
        BinaryFacts {
            config_maps: config_maps
                .iter()
                .map(|(a, n)| ((*a).to_owned(), (*n).to_owned()))
                .collect(),
            node_architectures: if archs.is_empty() {
                NodeArchitectures::default()
            } else {
                NodeArchitectures::Known(archs.iter().map(|s| (*s).to_owned()).collect())
            },
            image_volumes,
        }
    }

    const CMS: &[(&str, &str)] = &[("amd64", "cm-amd64"), ("arm64", "cm-arm64")];

    fn no() -> Support {
        Support::No("containerd 1.7.0 is older than 2.1".to_owned())
    }

    fn pick(spec: &PodSpec, source: SidecarBinarySource, f: &BinaryFacts) -> Choice {
        choose(spec, source, f, &shipped()).unwrap()
    }

    #[test]
    fn pinned_by_node_selector_or_single_value_affinity() {
        assert_eq!(
            pinned_architecture(&selector("arm64")),
            Some(("arm64".into(), "spec.nodeSelector[kubernetes.io/arch]"))
        );
        let one = affinity(vec![term("In", &["amd64"]), term("In", &["amd64"])]);
        assert_eq!(pinned_architecture(&one).unwrap().0, "amd64");
        for not_pinned in [
            affinity(vec![term("In", &["amd64", "arm64"])]),
            affinity(vec![term("In", &["amd64"]), term("In", &["arm64"])]),
            affinity(vec![term("NotIn", &["arm64"])]),
            affinity(vec![term("In", &["amd64"]), NodeSelectorTerm::default()]),
            affinity(vec![]),
            PodSpec::default(),
        ] {
            assert_eq!(pinned_architecture(&not_pinned), None, "{not_pinned:?}");
        }
    }

    #[test]
    fn kubelet_versions() {
        for ok in ["v1.35.0", "v1.37.2", "v1.36.0-rc.0", "1.40.1"] {
            assert_eq!(kubelet_supports_image_volumes(ok), Ok(()), "{ok}");
        }
        for bad in ["", "v1.34.9", "v1.33.0", "vX"] {
            assert!(kubelet_supports_image_volumes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runtime_versions() {
        for ok in [
            "containerd://2.1.0",
            "containerd://2.4.2",
            "containerd://v2.1.0-rc.1",
            "cri-o://1.31.0",
            "cri-o://1.34.2",
        ] {
            assert_eq!(runtime_supports_image_volumes(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("", "reports no container runtime version"),
            ("containerd://1.7.22-k3s1", "older than 2.1"),
            ("containerd://2.0.5", "older than 2.1"),
            ("cri-o://1.30.9", "older than 1.31"),
            ("docker://28.0.1", "docker is not known"),
            ("containerd://", "does not parse"),
            ("containerd 2.1", "is not <runtime>://<version>"),
        ] {
            let e = runtime_supports_image_volumes(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn node_summary() {
        let n = |arch: Option<&str>, rt: &str| NodeFacts {
            architecture: arch.map(str::to_owned),
            runtime_version: rt.to_owned(),
            kubelet_version: "v1.37.2".to_owned(),
        };
        let a = n(Some("amd64"), "containerd://2.4.2");
        let b = n(Some("arm64"), "containerd://1.7.0");
        let s = summarize_nodes([("a", &a)]);
        assert_eq!(s.runtimes, Support::Yes);
        assert_eq!(
            s.architectures,
            NodeArchitectures::Known(["amd64".to_owned()].into())
        );
        let s = summarize_nodes([("a", &a), ("b", &b)]);
        assert!(matches!(&s.runtimes, Support::No(w) if w.starts_with("node b: containerd 1.7.0")));
        assert_eq!(
            s.architectures,
            NodeArchitectures::Known(["amd64".to_owned(), "arm64".to_owned()].into())
        );
        let c = n(None, "");
        let s = summarize_nodes([("a", &a), ("c", &c)]);
        assert!(matches!(&s.architectures, NodeArchitectures::Unknown(w) if w.contains("node c")));
        assert!(
            matches!(&s.runtimes, Support::No(w) if w.contains("no container runtime version"))
        );
        let old = NodeFacts {
            kubelet_version: "v1.34.1".to_owned(),
            ..a.clone()
        };
        let s = summarize_nodes([("a", &a), ("old", &old)]);
        assert!(
            matches!(&s.runtimes, Support::No(w) if w.contains("node old: kubelet v1.34.1 is older than 1.35")),
            "{s:?}"
        );
        let s = summarize_nodes(std::iter::empty());
        assert!(matches!(s.architectures, NodeArchitectures::Unknown(_)));
        assert!(matches!(s.runtimes, Support::No(_)));
    }

    #[test]
    fn auto_prefers_the_image_volume() {
        let c = pick(
            &PodSpec::default(),
            SidecarBinarySource::Auto,
            &facts(&["amd64", "arm64"], Support::Yes, CMS),
        );
        assert_eq!(c.delivery, Delivery::ImageVolume);
        let c = pick(
            &PodSpec::default(),
            SidecarBinarySource::ImageVolume,
            &facts(&[], Support::Yes, &[]),
        );
        assert_eq!(c.delivery, Delivery::ImageVolume);
    }

    #[test]
    fn single_arch_cluster_gets_its_config_map() {
        for source in [SidecarBinarySource::Auto, SidecarBinarySource::ConfigMap] {
            let c = pick(&PodSpec::default(), source, &facts(&["arm64"], no(), CMS));
            assert_eq!(
                c.delivery,
                Delivery::ConfigMap {
                    name: "cm-arm64".into(),
                    architecture: "arm64".into()
                },
                "{source}"
            );
            assert!(c.why.contains("every node of the cluster"), "{}", c.why);
        }
    }

    #[test]
    fn mixed_cluster_unpinned_gets_the_install_container() {
        let c = pick(
            &PodSpec::default(),
            SidecarBinarySource::Auto,
            &facts(&["amd64", "arm64"], no(), CMS),
        );
        assert_eq!(c.delivery, Delivery::InstallContainer);
        assert!(
            c.why.contains("several architectures (amd64,arm64)"),
            "{}",
            c.why
        );
        assert!(c.why.contains("containerd 1.7.0"), "{}", c.why);
        assert_eq!(c.missing_config_map, None);
    }

    #[test]
    fn mixed_cluster_pinned_gets_the_config_map_of_its_arch() {
        let f = facts(&["amd64", "arm64"], no(), CMS);
        let c = pick(&selector("amd64"), SidecarBinarySource::Auto, &f);
        assert_eq!(
            c.delivery,
            Delivery::ConfigMap {
                name: "cm-amd64".into(),
                architecture: "amd64".into()
            }
        );
        let c = pick(
            &affinity(vec![term("In", &["arm64"])]),
            SidecarBinarySource::ConfigMap,
            &f,
        );
        assert_eq!(
            c.delivery,
            Delivery::ConfigMap {
                name: "cm-arm64".into(),
                architecture: "arm64".into()
            }
        );
        // Unknown node architectures: a pinned pod still knows its own.
        let c = pick(
            &selector("arm64"),
            SidecarBinarySource::Auto,
            &facts(&[], no(), CMS),
        );
        assert_eq!(c.delivery.label(), "configMap");
    }

    #[test]
    fn missing_config_map_is_reported_for_creation() {
        let c = pick(
            &selector("arm64"),
            SidecarBinarySource::ConfigMap,
            &facts(&["amd64"], Support::Yes, &[("amd64", "cm-amd64")]),
        );
        assert_eq!(c.delivery, Delivery::InstallContainer);
        assert_eq!(c.missing_config_map.as_deref(), Some("arm64"));
        assert!(
            c.why.contains("no image volume: source configMap"),
            "{}",
            c.why
        );
    }

    #[test]
    fn image_volume_source_falls_back_to_the_install_container() {
        let c = pick(
            &selector("amd64"),
            SidecarBinarySource::ImageVolume,
            &facts(&["amd64"], no(), CMS),
        );
        assert_eq!(c.delivery, Delivery::InstallContainer);
        assert!(c.why.contains("containerd 1.7.0"), "{}", c.why);
        assert!(
            c.why.contains("no ConfigMap: source imageVolume"),
            "{}",
            c.why
        );
    }

    #[test]
    fn install_container_source_never_mounts() {
        let c = pick(
            &selector("amd64"),
            SidecarBinarySource::InstallContainer,
            &facts(&["amd64"], Support::Yes, CMS),
        );
        assert_eq!(c.delivery, Delivery::InstallContainer);
        assert_eq!(c.missing_config_map, None);
    }

    #[test]
    fn unshipped_architecture_is_an_error() {
        let e = choose(
            &selector("s390x"),
            SidecarBinarySource::Auto,
            &facts(&["amd64"], Support::Yes, CMS),
            &shipped(),
        )
        .unwrap_err();
        assert_eq!(e.as_str(), "unsupported_architecture");
        let msg = e.to_string();
        assert!(
            msg.contains("s390x")
                && msg.contains("spec.nodeSelector")
                && msg.contains("amd64,arm64"),
            "{msg}"
        );
        // A single-architecture cluster of an unshipped architecture.
        let e = choose(
            &PodSpec::default(),
            SidecarBinarySource::Auto,
            &facts(&["ppc64le"], Support::Yes, CMS),
            &shipped(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("every node of the cluster"), "{e}");
        // A mixed cluster with an unshipped node: not known for this pod.
        let c = pick(
            &PodSpec::default(),
            SidecarBinarySource::Auto,
            &facts(&["amd64", "s390x"], no(), CMS),
        );
        assert_eq!(c.delivery, Delivery::InstallContainer);
    }

    #[test]
    fn source_names_round_trip() {
        for s in SidecarBinarySource::ALL {
            assert_eq!(SidecarBinarySource::parse(s.as_str()), Some(s));
        }
        assert_eq!(SidecarBinarySource::parse("Auto"), None);
        assert_eq!(SidecarBinarySource::default(), SidecarBinarySource::Auto);
    }
}
