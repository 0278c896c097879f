//! Controlling and observing the installed webhook (the chart's release
//! `kube-prestop` in namespace `kube-prestop`): its pods, logs and replicas
//! (its metrics are in [`crate::metrics`]); scaling and rolling restarts; and server-side dry-run
//! pod creates that ask it what it would do.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::checks::{binary_config_map, binary_delivery, has_install_container, phase};
use crate::test_image;
use crate::waits::{poll_until, poll_until_none};

/// Namespace and release of the installed chart.
pub const WEBHOOK_NAMESPACE: &str = "kube-prestop";

/// Deployment name of the installed chart (release `kube-prestop`).
pub const WEBHOOK_DEPLOYMENT: &str = "kube-prestop";

/// Port of the webhook's plain-HTTP metrics endpoint.
pub const WEBHOOK_METRICS_PORT: u16 = 9090;

/// Label selector of the ConfigMaps the webhook creates to hold the sidecar
/// binary (`sidecarBinary.source=configMap`, the chart's default).
pub const BINARY_CONFIG_MAP_SELECTOR: &str =
    "app.kubernetes.io/managed-by=kube-prestop,app.kubernetes.io/component=sidecar-binary";

/// Webhook pods of the installed chart.
pub async fn webhook_pods(client: &Client) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-prestop"))
        .await?
        .items
        .into_iter()
        .filter(|p| phase(p) == "Running")
        .collect())
}

/// Webhook log lines (all running pods) that mention `needle`.
pub async fn webhook_log_lines(client: &Client, needle: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for pod in webhook_pods(client).await? {
        let name = pod.metadata.name.unwrap_or_default();
        let logs = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
            .logs(&name, &kube::api::LogParams::default())
            .await?;
        out.extend(
            logs.lines()
                .filter(|l| l.contains(needle))
                .map(str::to_owned),
        );
    }
    Ok(out)
}

/// Replicas of the webhook Deployment.
pub async fn webhook_replicas(client: &Client) -> Result<i32> {
    let d = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .get(WEBHOOK_DEPLOYMENT)
        .await?;
    Ok(d.spec.and_then(|s| s.replicas).unwrap_or(1))
}

/// Scales the webhook Deployment.
pub async fn scale_webhook(client: &Client, replicas: i32) -> Result<()> {
    Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .patch(
            WEBHOOK_DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .context("scaling the webhook")?;
    Ok(())
}

/// The annotation `kubectl rollout restart` sets on the pod template.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// Sets (or, with `None`, removes) the pod template's [`RESTARTED_AT`]
/// annotation of the webhook Deployment, as `kubectl rollout restart` does:
/// a new value starts a rolling restart. Returns the previous value.
pub async fn set_webhook_restarted_at(
    client: &Client,
    value: Option<&str>,
) -> Result<Option<String>> {
    let api = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
    let before = api
        .get(WEBHOOK_DEPLOYMENT)
        .await
        .context("reading the webhook Deployment")?
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(RESTARTED_AT).cloned());
    api.patch(
        WEBHOOK_DEPLOYMENT,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "spec": { "template": { "metadata": { "annotations": { RESTARTED_AT: value } } } }
        })),
    )
    .await
    .context("patching the webhook's pod template")?;
    Ok(before)
}

/// Whether the webhook Deployment's rollout is complete (what `kubectl
/// rollout status` waits for, and no replica of an older template left):
/// `Ok(None)` when done, `Ok(Some(state))` while it is not.
pub async fn webhook_rollout_pending(client: &Client) -> Result<Option<String>> {
    let d = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .get(WEBHOOK_DEPLOYMENT)
        .await
        .context("reading the webhook Deployment")?;
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let generation = d.metadata.generation.unwrap_or_default();
    let st = d.status.unwrap_or_default();
    let observed = st.observed_generation.unwrap_or_default();
    let (total, updated, available) = (
        st.replicas.unwrap_or_default(),
        st.updated_replicas.unwrap_or_default(),
        st.available_replicas.unwrap_or_default(),
    );
    let done = observed >= generation && total == want && updated == want && available == want;
    Ok((!done).then(|| {
        format!(
            "generation {generation} (observed {observed}), replicas {total}/{want}, \
             updated {updated}, available {available}"
        )
    }))
}

/// Waits until the webhook's rollout is complete (see [`webhook_rollout_pending`]).
pub async fn wait_webhook_rolled_out(client: &Client, timeout: Duration) -> Result<()> {
    poll_until_none(timeout, Duration::from_millis(500), || {
        let client = client.clone();
        async move { webhook_rollout_pending(&client).await }
    })
    .await
    .context("the webhook Deployment did not roll out")
}

/// A Job-like pod (opted in, with an exec preStop) for server-side dry-run
/// creates that ask the webhook what it would do.
fn probe_pod() -> Result<Pod> {
    probe_pod_with(json!({}))
}

/// [`probe_pod`] with `spec` keys merged into its spec (e.g. a
/// `nodeSelector`).
pub fn probe_pod_with(spec: serde_json::Value) -> Result<Pod> {
    let mut pod = json!({
        "metadata": {
            "generateName": "webhook-probe-",
            "annotations": { "kube-prestop.io/inject": "true" }
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": test_image(),
                "imagePullPolicy": "Never",
                "command": ["true"],
                "lifecycle": { "preStop": { "exec": { "command": ["true"] } } }
            }]
        }
    });
    if let (Some(target), Some(extra)) = (pod["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            target.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(pod)?)
}

/// What a server-side dry-run create of `pod` in `ns` comes back as (the
/// webhook's answer applied).
pub async fn dry_run(client: &Client, ns: &str, pod: &Pod) -> Result<Pod> {
    let pp = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .create(&pp, pod)
        .await?)
}

/// Waits until dry-run creates of `pod` in `ns` come back with the binary
/// delivered by `want` (a [`binary_delivery`] label) five times in a row
/// (every webhook replica has seen what changed: each has its own
/// watches), and returns the last one.
pub async fn wait_delivery(
    client: &Client,
    ns: &str,
    pod: &Pod,
    want: &str,
    timeout: Duration,
) -> Result<Pod> {
    let last = std::sync::Arc::new(std::sync::Mutex::new((0u32, None::<Pod>, String::new())));
    let seen = last.clone();
    poll_until(timeout, Duration::from_millis(200), move || {
        let last = last.clone();
        async move {
            let created = dry_run(client, ns, pod).await?;
            let Ok(mut l) = last.lock() else {
                bail!("poisoned lock");
            };
            let got = binary_delivery(&created);
            l.0 = if got == want { l.0 + 1 } else { 0 };
            l.2 = got.to_owned();
            l.1 = Some(created);
            Ok(l.0 >= 5)
        }
    })
    .await
    .with_context(|| {
        let got = seen.lock().map(|l| l.2.clone()).unwrap_or_default();
        format!("dry-run pods in {ns} are not given the binary by {want} (last: {got})")
    })?;
    let pod = seen.lock().ok().and_then(|mut l| l.1.take());
    pod.context("no dry-run answer kept")
}

/// Waits until a server-side dry-run create of a Job-like pod in the labelled
/// namespace `ns` comes back injected: the webhook serves again.
pub async fn wait_webhook_serving(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let probe = probe_pod()?;
    poll_until(timeout, Duration::from_secs(1), || {
        let pods = pods.clone();
        let probe = probe.clone();
        async move {
            let pp = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let created = pods.create(&pp, &probe).await?;
            Ok(crate::container_names(&created).contains(&crate::sidecar_name("main")))
        }
    })
    .await
    .context("the webhook does not inject (dry run)")
}

/// The sidecar-binary ConfigMaps the webhook made in `ns`.
pub async fn binary_config_maps(client: &Client, ns: &str) -> Result<Vec<ConfigMap>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(BINARY_CONFIG_MAP_SELECTOR))
        .await?
        .items)
}

/// Waits until server-side dry-run creates of a Job-like pod in the labelled
/// namespace `ns` come back with the binary from a ConfigMap three times in
/// a row (each webhook replica learns of the ConfigMap from its own watch),
/// and returns the ConfigMap's name.
pub async fn wait_injects_from_config_map(
    client: &Client,
    ns: &str,
    timeout: Duration,
) -> Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let probe = probe_pod()?;
    let streak = std::sync::Arc::new(std::sync::Mutex::new((0u32, String::new())));
    let seen = streak.clone();
    poll_until(timeout, Duration::from_millis(200), move || {
        let pods = pods.clone();
        let probe = probe.clone();
        let streak = streak.clone();
        async move {
            let pp = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let created = pods.create(&pp, &probe).await?;
            let from = binary_config_map(&created);
            let Ok(mut s) = streak.lock() else {
                bail!("poisoned lock");
            };
            match from {
                Some(name) if !has_install_container(&created) => {
                    s.0 += 1;
                    s.1 = name;
                }
                _ => s.0 = 0,
            }
            Ok(s.0 >= 3)
        }
    })
    .await
    .context("the webhook does not mount the sidecar binary from a ConfigMap (dry run)")?;
    let name = seen.lock().map(|s| s.1.clone()).unwrap_or_default();
    Ok(name)
}
