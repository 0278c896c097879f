//! The hook-outcome exporter (`kube-prestop-webhook outcomes`, chart value
//! `outcomes.enabled`) on the real local cluster: two Jobs, one whose hook
//! succeeds and one whose hook fails, are counted once each under their
//! namespace and owner kind, and stay counted once after their pods are
//! deleted (the exporter reads a deleted pod's last state, then forgets it).
//! Both runs are seen runs (the watcher saw each exit), so both carry
//! `late="false"`.
//!
//! `tests/install-product.sh` installs the chart with the exporter enabled;
//! a cluster installed without it fails this test with that hint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use kube_prestop_e2e::fixtures::{container, job, pod_spec};
use kube_prestop_e2e::metrics::{Sample, parse, sum};
use kube_prestop_e2e::scenario::with_scenario;
use kube_prestop_e2e::waits::poll_until;
use kube_prestop_e2e::webhook::WEBHOOK_NAMESPACE;
use kube_prestop_e2e::{JobOutcome, client, init_tracing, run_job};

/// The exporter's Deployment and Service (the chart's `kube-prestop.outcomesName`
/// for the release `kube-prestop`).
const EXPORTER: &str = "kube-prestop-outcomes";
/// The exporter's counter of hook outcomes.
const OUTCOMES: &str = "kube_prestop_hook_outcomes_total";
/// The exporter's gauge of pods it keeps counted keys for.
const TRACKED: &str = "kube_prestop_outcomes_tracked_pods";
const JOB_TIMEOUT: Duration = Duration::from_secs(240);
const METRICS_TIMEOUT: Duration = Duration::from_secs(90);

/// The exporter's `/metrics`, through the API server's service proxy.
async fn exporter_metrics(client: &Client) -> Result<Vec<Sample>> {
    let req = http::Request::get(format!(
        "/api/v1/namespaces/{WEBHOOK_NAMESPACE}/services/{EXPORTER}:metrics/proxy/metrics"
    ))
    .body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("the outcome exporter's /metrics (service proxy)")?;
    Ok(parse(&text))
}

/// `kube_prestop_hook_outcomes_total` for `ns` and owner kind Job, any
/// outcome, with the `late` label `late` (`"true"` or `"false"`).
fn job_outcomes_late(samples: &[Sample], ns: &str, late: &str) -> f64 {
    sum(samples, OUTCOMES, |l| {
        l.get("namespace").map(String::as_str) == Some(ns)
            && l.get("late").map(String::as_str) == Some(late)
            && l.get("owner_kind").map(String::as_str) == Some("Job")
    })
}

/// `kube_prestop_hook_outcomes_total` for `ns`, outcome `outcome`, owner kind Job.
fn job_outcomes(samples: &[Sample], ns: &str, outcome: &str) -> f64 {
    sum(samples, OUTCOMES, |l| {
        l.get("namespace").map(String::as_str) == Some(ns)
            && l.get("outcome").map(String::as_str) == Some(outcome)
            && l.get("owner_kind").map(String::as_str) == Some("Job")
    })
}

#[tokio::test]
async fn hook_outcomes_are_counted_once_by_namespace_and_owner_kind() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
    let ready = deployments
        .get_opt(EXPORTER)
        .await?
        .and_then(|d| d.status)
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    ensure!(
        ready >= 1,
        "no ready {EXPORTER} Deployment in {WEBHOOK_NAMESPACE}: install with \
         tests/install-product.sh (it sets outcomes.enabled=true)"
    );

    with_scenario(&client, "outcomes", |ns, records| {
        let client = client.clone();
        async move {
            let ok = job(
                "hook-ok",
                pod_spec(&records, vec![container("work", "exit 0", "true")]),
                serde_json::json!({}),
            )?;
            let bad = job(
                "hook-fails",
                pod_spec(&records, vec![container("work", "exit 1", "exit 3")]),
                serde_json::json!({}),
            )?;
            let (a, b) = tokio::join!(
                run_job(&client, &ns, &ok, JOB_TIMEOUT),
                run_job(&client, &ns, &bad, JOB_TIMEOUT)
            );
            ensure!(a? == JobOutcome::Complete, "hook-ok did not complete");
            ensure!(b? == JobOutcome::Failed, "hook-fails did not fail");

            // Counted once each, as soon as the sidecars' messages are in.
            let counted = |samples: &[Sample]| {
                (
                    job_outcomes(samples, &ns, "ran"),
                    job_outcomes(samples, &ns, "failed"),
                )
            };
            poll_until(METRICS_TIMEOUT, Duration::from_millis(500), || async {
                Ok(counted(&exporter_metrics(&client).await?) == (1.0, 1.0))
            })
            .await
            .with_context(|| format!("ran=1 and failed=1 in {OUTCOMES} for namespace {ns}"))?;
            let samples = exporter_metrics(&client).await?;
            let (seen, late) = (
                job_outcomes_late(&samples, &ns, "false"),
                job_outcomes_late(&samples, &ns, "true"),
            );
            ensure!(
                (seen, late) == (2.0, 0.0),
                "{OUTCOMES} for namespace {ns}: late=\"false\" {seen}, late=\"true\" {late} \
                 (expected 2 and 0: the watcher saw both exits)"
            );

            // Deleting the pods: the exporter reads each one's last state and
            // forgets it; nothing is counted again.
            let pods = Api::<Pod>::namespaced(client.clone(), &ns);
            let before = sum(&exporter_metrics(&client).await?, TRACKED, |_| true);
            pods.delete_collection(&DeleteParams::default(), &ListParams::default())
                .await?;
            poll_until(METRICS_TIMEOUT, Duration::from_millis(500), || async {
                let samples = exporter_metrics(&client).await?;
                Ok(sum(&samples, TRACKED, |_| true) <= before - 2.0)
            })
            .await
            .context("the exporter forgets the two deleted pods")?;
            let after = counted(&exporter_metrics(&client).await?);
            ensure!(
                after == (1.0, 1.0),
                "after the pods' deletion: ran={}, failed={} (expected 1 and 1)",
                after.0,
                after.1
            );
            Ok(())
        }
    })
    .await
}
