//! The installed release (`kube-prestop` in namespace `kube-prestop`) as
//! the start part switches it between sidecar-binary sources: Helm
//! upgrades and the rollback that restores it, the wait until no replica
//! of an older configuration is left, and the check that this release's
//! webhook is the only one that injects the bench's namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use kube_prestop_e2e::waits::poll_until_none;
use kube_prestop_e2e::webhook::{WEBHOOK_DEPLOYMENT, WEBHOOK_NAMESPACE, webhook_rollout_pending};
use kube_prestop_tools::check::config;
use serde_json::Value;

use crate::log;

/// Name of the chart's webhook in its MutatingWebhookConfiguration.
pub const WEBHOOK_NAME: &str = config::WEBHOOK_NAME;

/// How long a Helm upgrade or rollback and the rollout after it may take.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(300);

/// Helm and the chart the release was installed from.
#[derive(Debug, Clone)]
pub struct Release {
    /// The `helm` binary.
    pub helm: PathBuf,
    /// The chart directory (`charts/kube-prestop`).
    pub chart: PathBuf,
}

impl Release {
    /// Runs helm with `args` (release namespace added), returns its stdout.
    async fn helm(&self, args: &[&str]) -> Result<String> {
        let mut cmd = tokio::process::Command::new(&self.helm);
        cmd.args(args).args(["--namespace", WEBHOOK_NAMESPACE]);
        let out = cmd
            .output()
            .await
            .with_context(|| format!("running {}", self.helm.display()))?;
        ensure!(
            out.status.success(),
            "helm {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The release's current revision and its `sidecarBinary.source` (all
    /// values, chart defaults included).
    pub async fn current(&self) -> Result<(i64, String)> {
        let status: Value = serde_json::from_str(
            &self
                .helm(&["status", WEBHOOK_DEPLOYMENT, "--output", "json"])
                .await?,
        )
        .context("helm status output")?;
        let revision = status["version"]
            .as_i64()
            .context("helm status has no version")?;
        let values: Value = serde_json::from_str(
            &self
                .helm(&[
                    "get",
                    "values",
                    WEBHOOK_DEPLOYMENT,
                    "--all",
                    "--output",
                    "json",
                ])
                .await?,
        )
        .context("helm get values output")?;
        let source = values["sidecarBinary"]["source"]
            .as_str()
            .unwrap_or("auto")
            .to_owned();
        Ok((revision, source))
    }

    /// Upgrades the release to `sidecarBinary.source=<source>`, everything
    /// else as it is, and waits until only replicas of the new
    /// configuration are left.
    pub async fn switch(&self, client: &Client, source: &str) -> Result<()> {
        log(&format!("helm upgrade: sidecarBinary.source={source}"));
        let chart = self.chart.to_string_lossy().into_owned();
        let set = format!("sidecarBinary.source={source}");
        let timeout = format!("{}s", ROLLOUT_TIMEOUT.as_secs());
        self.helm(&[
            "upgrade",
            WEBHOOK_DEPLOYMENT,
            &chart,
            "--reuse-values",
            "--set",
            &set,
            "--wait",
            "--timeout",
            &timeout,
        ])
        .await?;
        wait_only_current_replicas(client).await
    }

    /// Rolls the release back to `revision` (chart and values as they
    /// were) and waits until only its replicas are left.
    pub async fn restore(&self, client: &Client, revision: i64) -> Result<()> {
        log(&format!("helm rollback to revision {revision}"));
        let rev = revision.to_string();
        let timeout = format!("{}s", ROLLOUT_TIMEOUT.as_secs());
        self.helm(&[
            "rollback",
            WEBHOOK_DEPLOYMENT,
            &rev,
            "--wait",
            "--timeout",
            &timeout,
        ])
        .await?;
        wait_only_current_replicas(client).await
    }
}

/// Waits until the webhook Deployment has rolled out and every pod of it
/// left (terminating ones included: they still answer the API server's
/// admission calls on the connections it keeps) is of one pod template,
/// running and ready, as many as it wants.
pub async fn wait_only_current_replicas(client: &Client) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
    poll_until_none(ROLLOUT_TIMEOUT, Duration::from_millis(500), || {
        let (pods, client) = (pods.clone(), client.clone());
        async move {
            Ok(match webhook_rollout_pending(&client).await? {
                Some(pending) => Some(pending),
                None => {
                    let list = pods
                        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-prestop"))
                        .await?
                        .items;
                    replicas_left(&list)
                }
            })
        }
    })
    .await
    .context("webhook replicas of an older configuration are left")
}

/// `None` when every pod is of one template (`pod-template-hash`), none is
/// terminating and each is ready; else what is not.
fn replicas_left(pods: &[Pod]) -> Option<String> {
    let mut templates: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_ready = Vec::new();
    for p in pods {
        let hash = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash").cloned())
            .unwrap_or_default();
        *templates.entry(hash).or_default() += 1;
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if p.metadata.deletion_timestamp.is_some() || !ready {
            not_ready.push(p.metadata.name.clone().unwrap_or_default());
        }
    }
    (templates.len() != 1 || !not_ready.is_empty())
        .then(|| format!("pods by template {templates:?}; terminating or not ready: {not_ready:?}"))
}

/// The MutatingWebhookConfigurations whose webhook [`WEBHOOK_NAME`] selects
/// namespace `ns`, by name.
async fn injectors_of(client: &Client, ns: &str) -> Result<Vec<String>> {
    let namespace = Api::<Namespace>::all(client.clone())
        .get(ns)
        .await
        .with_context(|| format!("reading namespace {ns}"))?;
    let labels = namespace.metadata.labels.unwrap_or_default();
    let configs = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing MutatingWebhookConfigurations")?;
    Ok(config::selecting(&configs.items, &labels))
}

/// Fails unless exactly one MutatingWebhookConfiguration's
/// [`WEBHOOK_NAME`] webhook selects the injected namespace and none the
/// plain one. The API server calls mutating webhooks in the order of their
/// configurations' names and the first to inject wins (the second finds
/// the pod injected), so with two releases the bench could measure the
/// other one's delivery.
pub async fn ensure_one_injector(client: &Client, injected: &str, plain: &str) -> Result<()> {
    let found = injectors_of(client, injected).await?;
    match found.as_slice() {
        [_] => {}
        [] => bail!(
            "no MutatingWebhookConfiguration has a webhook {WEBHOOK_NAME} that selects namespace {injected}: is kube-prestop installed?"
        ),
        several => bail!(
            "{} MutatingWebhookConfigurations have a webhook {WEBHOOK_NAME} that selects namespace {injected} ({}): the first by name injects, so the bench cannot tell which release it measures; uninstall all but release {WEBHOOK_DEPLOYMENT} in namespace {WEBHOOK_NAMESPACE}",
            several.len(),
            several.join(", ")
        ),
    }
    let in_plain = injectors_of(client, plain).await?;
    ensure!(
        in_plain.is_empty(),
        "MutatingWebhookConfiguration(s) {} select the not-injected namespace {plain}",
        in_plain.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn only_one_template_running_and_ready_is_done() {
        let pod = |hash: &str, ready: bool, terminating: bool| -> Pod {
            serde_json::from_value(json!({
                "metadata": {
                    "name": format!("kube-prestop-{hash}"),
                    "labels": { "pod-template-hash": hash },
                    "deletionTimestamp": terminating.then_some("2026-12-02T01:00:00Z"),
                },
                "status": { "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] }
            }))
            .unwrap()
        };
        assert_eq!(
            replicas_left(&[pod("a", true, false), pod("a", true, false)]),
            None
        );
        assert!(replicas_left(&[pod("a", true, false), pod("b", true, true)]).is_some());
        assert!(replicas_left(&[pod("b", true, false), pod("b", true, true)]).is_some());
        assert!(replicas_left(&[pod("b", false, false)]).is_some());
    }
}
