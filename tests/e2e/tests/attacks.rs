//! Attacks on the webhook's trust boundaries (issue 25), on the real local
//! cluster with the chart installed:
//! - an AdmissionReview crafted by someone who can reach the webhook pod
//!   (here through the API server's pods/proxy), for a pod of a namespace
//!   the webhook configuration does not select, makes the webhook write
//!   nothing there (before, it created the ~1 MiB sidecar ConfigMap);
//! - a pod that the patch would take past the documented size bound is
//!   admitted unmodified under the default failure mode (before, the patched
//!   pod was refused by the API server after the webhook answered);
//! - the chart's ValidatingAdmissionPolicy refuses the webhook's ServiceAccount
//!   any ConfigMap but its own sidecar-binary ones in selected namespaces.
//!
//! The flood of maximum-size reviews is measured by `make bench` (webhook
//! part, flood phase; docs/figures.md), not timed here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use kube_prestop_e2e::metrics::{sum, webhook_replica_metrics};
use kube_prestop_e2e::nodes::FakeNode;
use kube_prestop_e2e::waits::poll_until;
use kube_prestop_e2e::webhook::{WEBHOOK_NAMESPACE, webhook_pods};
use kube_prestop_e2e::{
    DEFAULT_TEST_IMAGE, TestNamespace, client, container_names, init_tracing, sidecar_name,
    with_namespace,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// The chart's default HTTPS port of the webhook container.
const WEBHOOK_HTTPS_PORT: u16 = 8443;
const CONFIG_MAP_PREFIX: &str = "kube-prestop-sidecar-";
const REFUSALS: &str = "kube_prestop_sidecar_configmap_refusals_total";

/// A Job-owned pod pinned to amd64 with an exec preStop, in `ns`.
fn pinned_job_pod(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "crafted-", "namespace": ns, "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "crafted", "uid": "00000000-0000-0000-0000-000000000001", "controller": true}
        ]},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "containers": [{
                "name": "main", "image": DEFAULT_TEST_IMAGE,
                "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
            }]
        }
    })
}

fn review(uid: &str, ns: &str, pod: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": pod
        }
    })
}

/// Posts `body` to `/mutate` of webhook pod `pod` through the API server's
/// pods/proxy (the API server does not verify the pod's certificate there).
async fn post_to_webhook_pod(client: &Client, pod: &str, body: &Value) -> Result<Value> {
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{WEBHOOK_NAMESPACE}/pods/https:{pod}:{WEBHOOK_HTTPS_PORT}/proxy/mutate"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(body)?)?;
    let text = client
        .request_text(req)
        .await
        .with_context(|| format!("POST /mutate to webhook pod {pod}"))?;
    serde_json::from_str(&text).with_context(|| format!("answer of {pod}: {text}"))
}

async fn refusals(client: &Client, reason: &str) -> Result<f64> {
    Ok(webhook_replica_metrics(client)
        .await?
        .iter()
        .map(|(_, samples)| {
            sum(samples, REFUSALS, |l| {
                l.get("reason").map(String::as_str) == Some(reason)
            })
        })
        .sum())
}

async fn sidecar_config_maps(client: &Client, ns: &str) -> Result<Vec<String>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .filter(|name| name.starts_with(CONFIG_MAP_PREFIX))
        .collect())
}

/// A review crafted for a pod of an unlabelled namespace, posted straight to
/// every webhook replica: answered, counted as a refused write, and no
/// ConfigMap appears in that namespace. A Node of another architecture
/// (no kubelet) makes the chart's default `auto` source choose the
/// ConfigMap for pods pinned to amd64, as in a mixed cluster.
#[tokio::test]
async fn crafted_review_for_an_unselected_namespace_writes_nothing() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let node = FakeNode::create(&client, "kpt-attack-arm64", "arm64", "containerd://1.7.0").await?;
    let ns = TestNamespace::create(&client, "kpt-attack-unselected", false).await?;
    let result = with_namespace(ns, |ns| {
        let client = client.clone();
        async move {
            let before = refusals(&client, "unselected").await?;
            let pods = webhook_pods(&client).await?;
            ensure!(!pods.is_empty(), "no webhook pod");
            let body = review("crafted-1", &ns, pinned_job_pod(&ns));
            // The node facts reach every replica through its watch; post
            // until a replica answers with the ConfigMap delivery's refusal
            // counted (bounded).
            poll_until(WAIT, Duration::from_millis(500), || {
                let client = client.clone();
                let pods = pods.clone();
                let body = body.clone();
                async move {
                    for pod in &pods {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let answer = post_to_webhook_pod(&client, &name, &body).await?;
                        ensure!(
                            answer["response"]["uid"] == "crafted-1",
                            "{name} did not answer the review: {answer}"
                        );
                    }
                    Ok(refusals(&client, "unselected").await? > before)
                }
            })
            .await
            .context("no replica counted the refused ConfigMap write")?;
            let written = sidecar_config_maps(&client, &ns).await?;
            ensure!(
                written.is_empty(),
                "the webhook wrote {written:?} into {ns}"
            );
            Ok(())
        }
    })
    .await;
    let deleted = node.delete().await;
    result.and(deleted)
}

/// A pod that opts in and whose watched container carries 900 KiB of env:
/// the sidecar would copy it, taking the pod past the 1.5 MiB bound. Under
/// the chart's default failure mode it is admitted unmodified (the API
/// server stores it), and the webhook counts `pod_too_large`.
#[tokio::test]
async fn a_pod_the_patch_would_take_too_large_is_admitted_unmodified() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kpt-attack-oversize", true).await?;
    with_namespace(ns, |ns| {
        let client = client.clone();
        async move {
            let errors = |c: Client| async move {
                Ok::<f64, anyhow::Error>(
                    webhook_replica_metrics(&c)
                        .await?
                        .iter()
                        .map(|(_, s)| {
                            sum(s, "kube_prestop_admissions_total", |l| {
                                l.get("reason").map(String::as_str) == Some("pod_too_large")
                            })
                        })
                        .sum(),
                )
            };
            let before = errors(client.clone()).await?;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "oversize", "annotations": {"kube-prestop.io/inject": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": DEFAULT_TEST_IMAGE, "command": ["true"],
                    "env": [{"name": "BIG", "value": "x".repeat(900 * 1024)}],
                    "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
                }]}
            }))?;
            let created = Api::<Pod>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &pod)
                .await
                .context("the API server refused the pod (before the bound, the patched pod was too large for etcd)")?;
            let names = container_names(&created);
            ensure!(
                !names.contains(&sidecar_name("main")),
                "the oversize pod was injected: {names:?}"
            );
            poll_until(WAIT, Duration::from_millis(500), || {
                let client = client.clone();
                async move { Ok(errors(client).await? > before) }
            })
            .await
            .context("pod_too_large was not counted")?;
            Ok(())
        }
    })
    .await
}

/// The webhook's ServiceAccount as the API server sees it.
const WEBHOOK_ACCOUNT: &str = "system:serviceaccount:kube-prestop:kube-prestop";

/// A client that acts as the webhook's ServiceAccount (impersonation: the
/// test's admin may impersonate anyone).
async fn as_webhook_account() -> Result<Client> {
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(WEBHOOK_ACCOUNT.to_owned());
    Ok(Client::try_from(config)?)
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": { "x": "y" }
    }))
    .expect("a ConfigMap")
}

/// Creates `name` in `ns` as the webhook's account; the API server's error
/// message when refused.
async fn create_as_webhook(account: &Client, ns: &str, name: &str) -> Result<Option<String>> {
    match Api::<ConfigMap>::namespaced(account.clone(), ns)
        .create(&PostParams::default(), &config_map(name))
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 422 => {
            Ok(Some(status.message))
        }
        Err(e) => Err(e.into()),
    }
}

/// The chart's ValidatingAdmissionPolicy, whatever the webhook process is
/// made to do: its ServiceAccount (whose RBAC may create ConfigMaps in any
/// namespace, since RBAC cannot restrict a create by name or by the
/// namespace's labels) may create only `kube-prestop-sidecar-*` ConfigMaps,
/// and only in namespaces labelled for injection. Before, the policy was
/// installed but no denial of it had been seen.
#[tokio::test]
async fn the_policy_refuses_the_webhook_account_any_other_config_map() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let account = as_webhook_account().await?;
    let labelled = TestNamespace::create(&client, "kpt-vap-selected", true).await?;
    let unlabelled = TestNamespace::create(&client, "kpt-vap-unselected", false).await?;
    let other = unlabelled.name.clone();
    let result =
        with_namespace(labelled, |ns| {
            let account = account.clone();
            async move {
                let refused = create_as_webhook(&account, &ns, "not-ours").await?;
                ensure!(
                    refused.as_deref().is_some_and(
                        |m| m.contains("may create only its sidecar-binary ConfigMaps")
                    ),
                    "a ConfigMap of another name in {ns}: {refused:?}"
                );
                let forged = format!("{CONFIG_MAP_PREFIX}vap-forged");
                let refused = create_as_webhook(&account, &other, &forged).await?;
                ensure!(
                    refused.as_deref().is_some_and(|m| m
                        .contains("only in namespaces labelled kube-prestop.io/inject=enabled")),
                    "a sidecar ConfigMap in the unlabelled {other}: {refused:?}"
                );
                // Its own kind of ConfigMap in a selected namespace passes.
                let own = format!("{CONFIG_MAP_PREFIX}vap-allowed");
                let refused = create_as_webhook(&account, &ns, &own).await?;
                ensure!(refused.is_none(), "its own ConfigMap in {ns}: {refused:?}");
                Ok(())
            }
        })
        .await;
    let deleted = unlabelled.delete().await;
    result.and(deleted)
}
