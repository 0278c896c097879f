//! The binary delivery each pod gets, through the real HTTPS server: the
//! architecture decision (pinned by nodeSelector or by node affinity, a
//! single-architecture cluster, a mixed one, nodes of unknown architecture,
//! an architecture no binary is shipped for) and each source's fall-backs
//! (an API server that drops `volumes[].image`, a runtime too old for image
//! volumes, a node without a runtime version). The cluster facts are set up
//! in the server's cache as its watches would fill it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_common;

use http_common::{TestServer, job_pod, patch_of, review, warnings_of};
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_cluster::image_volume_probe::ImageVolumeProbe;
use kube_prestop_cluster::node_facts::NodeWatch;
use kube_prestop_cluster::sidecar_configmap::SidecarConfigMaps;
use kube_prestop_engine::Support;
use kube_prestop_engine::delivery::NodeFacts;
use kube_prestop_server::FailureMode;
use serde_json::{Value, json};

const CM_AMD64: &str = "kube-prestop-sidecar-aaaaaaaaaaaa";
const CM_ARM64: &str = "kube-prestop-sidecar-bbbbbbbbbbbb";
const NEW: &str = "containerd://2.4.2";
const OLD: &str = "containerd://1.7.22";

fn node(arch: Option<&str>, runtime: &str) -> NodeFacts {
    NodeFacts {
        architecture: arch.map(str::to_owned),
        runtime_version: runtime.to_owned(),
        kubelet_version: "v1.37.2".to_owned(),
    }
}

/// A server whose cache knows `nodes`, the image-volume probe's answer
/// `api` and both architectures' ConfigMaps in every namespace.
async fn server(nodes: Vec<(&str, NodeFacts)>, api: Support, mode: FailureMode) -> TestServer {
    let cache = ClusterCache::disconnected()
        .with_sidecar_config_maps(SidecarConfigMaps::fixed(CM_AMD64, "amd64"))
        .with_sidecar_config_maps(SidecarConfigMaps::fixed(CM_ARM64, "arm64"))
        .with_nodes(NodeWatch::fixed(nodes))
        .with_image_volume_probe(ImageVolumeProbe::fixed(api));
    TestServer::start_with_cache(cache, |c| c.failure_mode = mode).await
}

fn pod_with(spec: Value) -> Value {
    let mut pod = job_pod();
    for (k, v) in spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

fn selector(arch: &str) -> Value {
    json!({"nodeSelector": {"kubernetes.io/arch": arch}})
}

fn affinity(arch: &str) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]}
        ]}]
    }}}})
}

/// The delivery of the injected pod: `imageVolume`, `configMap:<name>` or
/// `installContainer`; `none` when not injected (no patch, or one that
/// only writes `kube-prestop.io/skipped`).
async fn delivery(server: &TestServer, pod: Value) -> (String, Value) {
    let (status, body) = server
        .mutate(review("u", "pods", "CREATE", pod.clone()).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let response = body["response"].clone();
    let Some(patch) = patch_of(&response) else {
        return ("none".to_owned(), response);
    };
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    let mut only_skipped = pod;
    only_skipped["metadata"]["annotations"]["kube-prestop.io/skipped"] =
        out["metadata"]["annotations"]["kube-prestop.io/skipped"].clone();
    if out["metadata"]["annotations"]["kube-prestop.io/skipped"].is_string() && out == only_skipped
    {
        return ("none".to_owned(), response);
    }
    let volumes = out["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let bin = volumes.iter().find(|v| v["name"] == "kube-prestop-bin");
    let installs = out["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "kube-prestop-install")
        .count();
    let label = match bin {
        Some(v) if v.get("image").is_some() => {
            // The commands run the binary from the image volume.
            let sidecar = &out["spec"]["initContainers"][0];
            assert_eq!(
                sidecar["command"][0], "/.kube-prestop/bin/kube-prestop-sidecar",
                "{sidecar}"
            );
            assert_eq!(
                out["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][0],
                "/.kube-prestop/bin/kube-prestop-sidecar"
            );
            "imageVolume".to_owned()
        }
        Some(v) if v.get("configMap").is_some() => {
            format!("configMap:{}", v["configMap"]["name"].as_str().unwrap())
        }
        // The install init container's emptyDir.
        Some(v) => {
            assert!(v.get("emptyDir").is_some(), "{v}");
            "installContainer".to_owned()
        }
        None => panic!("no kube-prestop-bin volume: {out}"),
    };
    assert_eq!(installs, usize::from(label == "installContainer"), "{out}");
    (label, response)
}

#[tokio::test]
async fn image_volume_where_the_api_server_keeps_it_and_every_runtime_mounts_it() {
    let s = server(
        vec![
            ("a", node(Some("amd64"), NEW)),
            ("b", node(Some("arm64"), NEW)),
        ],
        Support::Yes,
        FailureMode::Allow,
    )
    .await;
    // Even in a mixed cluster, unpinned: the node's runtime picks the platform.
    assert_eq!(delivery(&s, job_pod()).await.0, "imageVolume");
    assert_eq!(
        delivery(&s, pod_with(selector("arm64"))).await.0,
        "imageVolume"
    );
    let text = s.metrics_text().await;
    assert!(
        text.contains(r#"kube_prestop_injections_total{sidecar_binary="imageVolume"} 2"#),
        "{text}"
    );
}

/// The faults that rule out image volumes fall back to the ConfigMap on a
/// single-architecture cluster (the next delivery), never to a broken pod.
#[tokio::test]
async fn without_image_volumes_a_single_arch_cluster_gets_its_config_map() {
    let dropped = Support::No(
        "the API server dropped spec.volumes[].image from a dry-run pod (feature gate ImageVolume off)"
            .to_owned(),
    );
    for (what, nodes, api) in [
        (
            "API server drops the field",
            vec![("a", node(Some("arm64"), NEW))],
            dropped,
        ),
        (
            "runtime too old",
            vec![("a", node(Some("arm64"), OLD))],
            Support::Yes,
        ),
        (
            "no runtime version",
            vec![("a", node(Some("arm64"), ""))],
            Support::Yes,
        ),
        (
            "CRI-O too old",
            vec![("a", node(Some("arm64"), "cri-o://1.30.4"))],
            Support::Yes,
        ),
    ] {
        let s = server(nodes, api, FailureMode::Allow).await;
        assert_eq!(
            delivery(&s, job_pod()).await.0,
            format!("configMap:{CM_ARM64}"),
            "{what}"
        );
    }
}

#[tokio::test]
async fn mixed_cluster_mounts_a_config_map_only_for_pinned_pods() {
    let s = server(
        vec![
            ("a", node(Some("amd64"), NEW)),
            ("b", node(Some("arm64"), OLD)),
        ],
        Support::Yes,
        FailureMode::Allow,
    )
    .await;
    assert_eq!(delivery(&s, job_pod()).await.0, "installContainer");
    assert_eq!(
        delivery(&s, pod_with(selector("amd64"))).await.0,
        format!("configMap:{CM_AMD64}")
    );
    assert_eq!(
        delivery(&s, pod_with(affinity("arm64"))).await.0,
        format!("configMap:{CM_ARM64}")
    );
    // Two values: not pinned.
    let either = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}
        ]}]
    }}}});
    assert_eq!(delivery(&s, pod_with(either)).await.0, "installContainer");
    let text = s.metrics_text().await;
    assert!(
        text.contains(r#"kube_prestop_injections_total{sidecar_binary="configMap"} 2"#)
            && text
                .contains(r#"kube_prestop_injections_total{sidecar_binary="installContainer"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn nodes_of_unknown_architecture_get_the_install_container_unless_pinned() {
    let s = server(
        vec![
            ("a", node(Some("amd64"), OLD)),
            ("mystery", node(None, OLD)),
        ],
        Support::Yes,
        FailureMode::Allow,
    )
    .await;
    assert_eq!(delivery(&s, job_pod()).await.0, "installContainer");
    assert_eq!(
        delivery(&s, pod_with(selector("amd64"))).await.0,
        format!("configMap:{CM_AMD64}")
    );
    // No nodes known at all (the watch has not listed): the same.
    let s = server(vec![], Support::Yes, FailureMode::Allow).await;
    assert_eq!(delivery(&s, job_pod()).await.0, "installContainer");
}

/// A pod pinned to an architecture no binary is shipped for: admitted
/// unmodified with a warning and counted (failure mode allow), or refused
/// naming the field (deny).
#[tokio::test]
async fn unshipped_architecture_is_admitted_unmodified_or_refused() {
    let nodes = || vec![("a", node(Some("amd64"), NEW))];
    let s = server(nodes(), Support::Yes, FailureMode::Allow).await;
    let pod = pod_with(selector("s390x"));
    let (label, response) = delivery(&s, pod.clone()).await;
    assert_eq!(label, "none");
    assert_eq!(response["allowed"], true);
    // Admitted with only the annotation saying why.
    let mut out = pod;
    json_patch::patch(&mut out, &patch_of(&response).unwrap()).unwrap();
    let note = out["metadata"]["annotations"]["kube-prestop.io/skipped"]
        .as_str()
        .unwrap();
    assert!(
        note.starts_with("unsupported_architecture: pod admitted without the preStop sidecar: "),
        "{note}"
    );
    let warnings = warnings_of(&response).unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("s390x") && w.contains("amd64,arm64")),
        "{warnings:?}"
    );
    let text = s.metrics_text().await;
    assert!(
        text.contains(
            r#"kube_prestop_admissions_total{decision="error",reason="unsupported_architecture"} 1"#
        ),
        "{text}"
    );

    let s = server(nodes(), Support::Yes, FailureMode::Deny).await;
    let (status, body) = s
        .mutate(review("u", "pods", "CREATE", pod_with(selector("s390x"))).to_string())
        .await;
    assert_eq!(status, 200);
    let response = &body["response"];
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 422, "{response}");
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "spec.nodeSelector[kubernetes.io/arch]",
        "{response}"
    );
}
