//! Node objects without a kubelet: created through the API with the labels
//! and `status.nodeInfo` a real node of another architecture or runtime
//! would report, so that the webhook's node watch sees a mixed cluster (or
//! one with an old runtime) beside the real node. Tainted `NoSchedule` and
//! `NoExecute` and cordoned, so nothing is ever scheduled there; deleted
//! when the guard is dropped or [`FakeNode::delete`]d.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::waits::poll_until;

/// Label on every fake node (the suite's own, for cleaning up).
pub const FAKE_NODE_LABEL: &str = "kube-prestop.io/e2e-fake-node";

/// A fake node; deleted on drop (in the background, best effort) unless
/// [`Self::delete`] was called.
pub struct FakeNode {
    client: Client,
    /// The node's name.
    pub name: String,
    deleted: bool,
}

impl FakeNode {
    /// Creates node `name` with `kubernetes.io/arch: arch` (and the same
    /// `status.nodeInfo.architecture`) whose runtime reports
    /// `runtime_version` (e.g. `containerd://1.7.0`) and kubelet `v1.37.2`.
    pub async fn create(
        client: &Client,
        name: &str,
        arch: &str,
        runtime_version: &str,
    ) -> Result<Self> {
        let api = Api::<Node>::all(client.clone());
        // Left over from an interrupted run.
        let _ = api.delete(name, &DeleteParams::default()).await;
        poll_until(Duration::from_secs(30), Duration::from_millis(200), || {
            let api = api.clone();
            async move { Ok(api.get_opt(name).await?.is_none()) }
        })
        .await
        .with_context(|| format!("an old node {name} is still there"))?;
        let status = json!({
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "containerRuntimeVersion": runtime_version,
                "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "",
                "bootID": "", "kernelVersion": "", "machineID": "", "osImage": "", "systemUUID": ""
            }
        });
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/arch": arch,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name,
                    FAKE_NODE_LABEL: "true"
                }
            },
            "spec": {
                "unschedulable": true,
                "taints": [
                    {"key": FAKE_NODE_LABEL, "value": "true", "effect": "NoSchedule"},
                    {"key": FAKE_NODE_LABEL, "value": "true", "effect": "NoExecute"}
                ]
            },
            "status": status
        }))?;
        api.create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        // The status as a kubelet would write it (a create may not keep it).
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("setting the status of node {name}"))?;
        Ok(Self {
            client: client.clone(),
            name: name.to_owned(),
            deleted: false,
        })
    }

    /// Deletes the node and waits until it is gone.
    pub async fn delete(mut self) -> Result<()> {
        self.deleted = true;
        let api = Api::<Node>::all(self.client.clone());
        api.delete(&self.name, &DeleteParams::default()).await?;
        let name = self.name.clone();
        poll_until(Duration::from_secs(30), Duration::from_millis(200), || {
            let api = api.clone();
            let name = name.clone();
            async move { Ok(api.get_opt(&name).await?.is_none()) }
        })
        .await
        .with_context(|| format!("node {} not deleted", self.name))
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let api = Api::<Node>::all(self.client.clone());
        let name = self.name.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            });
        }
    }
}
