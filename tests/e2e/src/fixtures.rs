//! What a scenario sets up: pod and Job builders with tiny resources and the
//! records mount ([`crate::records`]), namespace labels, and image tags in the
//! node's containerd.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::records::Records;
use crate::test_image;

/// containerd's socket of the local cluster (for tagging images).
pub fn containerd_socket() -> PathBuf {
    std::env::var_os("KUBE_PRESTOP_CONTAINERD_SOCK").map_or_else(
        || PathBuf::from("/var/lib/kube-prestop/cluster/containerd/containerd.sock"),
        PathBuf::from,
    )
}

/// Requests of every test container: 10m CPU, 16Mi memory.
pub fn tiny_resources() -> Value {
    json!({ "requests": { "cpu": "10m", "memory": "16Mi" } })
}

/// A container running `sh -c command` with `sh -c prestop` as its preStop exec
/// handler, the records mount and tiny requests.
pub fn container(name: &str, command: &str, prestop: &str) -> Value {
    json!({
        "name": name,
        "image": test_image(),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        "lifecycle": { "preStop": { "exec": { "command": ["sh", "-c", prestop] } } },
        "resources": tiny_resources(),
        "volumeMounts": [Records::mount()]
    })
}

/// A pod spec: `restartPolicy: Never`, grace 10 s, the records volume.
pub fn pod_spec(records: &Records, containers: Vec<Value>) -> Value {
    json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 10,
        "containers": containers,
        "volumes": [records.volume()]
    })
}

/// Sets `value` at the JSON object key `key` (objects only).
pub fn set(target: &mut Value, key: &str, value: Value) {
    if let Some(obj) = target.as_object_mut() {
        obj.insert(key.to_owned(), value);
    }
}

/// A Job (`backoffLimit: 0`) with the given pod spec; `extra` keys are merged
/// into the Job's spec (e.g. completions, activeDeadlineSeconds).
pub fn job(name: &str, pod_spec: Value, extra: Value) -> Result<Job> {
    let mut spec = json!({ "backoffLimit": 0, "template": { "spec": pod_spec } });
    if let Some(obj) = extra.as_object() {
        for (k, v) in obj {
            set(&mut spec, k, v.clone());
        }
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": spec
    }))?)
}

/// Adds labels to a namespace.
pub async fn label_namespace(client: &Client, ns: &str, labels: Value) -> Result<()> {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": labels } })),
        )
        .await
        .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// Tags an image already in the node's containerd under a second name.
pub async fn tag_image(source: &str, target: &str) -> Result<()> {
    let sock = containerd_socket();
    let (source, target) = (source.to_owned(), target.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io", "images", "tag", "--force", &source, &target])
            .output()
    })
    .await?
    .context("running ctr images tag")?;
    ensure!(
        out.status.success(),
        "ctr images tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
