//! CPU load beside a measurement: pods that each spin one CPU at a fixed
//! quantity (request = limit), so that the node's CPUs are saturated while
//! the burst or the pod-start bench runs (issue 24's saturated node: four
//! pods of 400m on 2 cores).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::waits::poll_until;
use serde_json::json;

use crate::{POD_TIMEOUT, log};

/// The busy pods of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// How many (0: none).
    pub pods: u32,
    /// Each one's CPU request and limit (a Kubernetes quantity, e.g. `400m`).
    pub cpu: String,
}

/// A pod that spins one CPU at `cpu` (request = limit), in the test image;
/// not Job-owned and not opted in, so never injected.
fn busy_pod(i: u32, cpu: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": format!("busy-{i}") },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "busy",
                "image": kube_prestop_e2e::DEFAULT_TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "while :; do :; done"],
                "resources": {
                    "requests": { "cpu": cpu },
                    "limits": { "cpu": cpu }
                }
            }]
        }
    }))?)
}

/// Creates `load.pods` busy pods in `ns` and waits until all run (at most
/// [`POD_TIMEOUT`]); they go with the namespace. Errors: a refused create,
/// or pods not all running in time.
pub async fn start(client: &Client, ns: &str, load: &Load) -> Result<()> {
    if load.pods == 0 {
        return Ok(());
    }
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    for i in 0..load.pods {
        api.create(&PostParams::default(), &busy_pod(i, &load.cpu)?)
            .await
            .with_context(|| format!("creating busy pod {i}"))?;
    }
    poll_until(POD_TIMEOUT, Duration::from_secs(1), || {
        let api = api.clone();
        async move {
            Ok(api
                .list(&ListParams::default().fields("status.phase=Running"))
                .await?
                .items
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("busy-"))
                })
                .count()
                == usize::try_from(load.pods).unwrap_or(usize::MAX))
        }
    })
    .await
    .context("busy pods did not all run")?;
    log(&format!(
        "{} busy pods of {} CPU running in {ns}",
        load.pods, load.cpu
    ));
    Ok(())
}
