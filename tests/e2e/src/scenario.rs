//! Running scenarios: each gets a labelled namespace and a records directory
//! ([`with_scenario`]), with diagnostics on failure; [`run_scenarios`] runs
//! independent ones concurrently and reports each one.
//!
//! What a scenario is made of lives beside this module: [`crate::records`]
//! (hook records on the node), [`crate::fixtures`] (pod and Job builders),
//! [`crate::waits`] (conditions with deadlines), [`crate::checks`]
//! (assertions on pods and logs) and [`crate::webhook`] (the installed
//! webhook).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt as _;
use kube::Client;

use crate::records::Records;
use crate::{TestNamespace, diagnose};

/// A labelled namespace plus a records directory for one scenario; on failure
/// prints diagnostics and the records; always deletes both.
pub async fn with_scenario<F, Fut>(client: &Client, prefix: &str, body: F) -> Result<()>
where
    F: FnOnce(String, Records) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    with_scenario_in(client, prefix, true, body).await
}

/// [`with_scenario`] with the namespace labelled for injection only when
/// `inject` is set (the body labels it itself otherwise).
pub async fn with_scenario_in<F, Fut>(
    client: &Client,
    prefix: &str,
    inject: bool,
    body: F,
) -> Result<()>
where
    F: FnOnce(String, Records) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let ns = TestNamespace::create(client, prefix, inject).await?;
    let records = Records::create(prefix)?;
    let name = ns.name.clone();
    let result = body(name.clone(), records.clone()).await;
    if let Err(e) = &result {
        eprintln!(
            "==== scenario {prefix} failed: {e:#}\n{}\n{}",
            records.dump(),
            diagnose(client, &name).await
        );
    }
    let deleted = ns.delete().await;
    records.remove();
    result.and(deleted)
}

/// A scenario to run: its name and its future.
pub type Scenario = (
    &'static str,
    Pin<Box<dyn Future<Output = Result<()>> + Send>>,
);

/// Scenarios that cannot pass on a container runtime, for a reason in how
/// that runtime behaves (recorded in docs/platforms.md with the run that
/// showed it): (runtime as the cluster harness names it, scenario, why). The harness exports the runtime as `RUNTIME`
/// (`/var/lib/kube-prestop/cluster/env.sh`, `tests/cluster/versions.sh`).
pub const RULED_OUT: &[(&str, &str, &str)] = &[(
    "containerd2-gvisor",
    "oom_kill_runs_hook_once",
    "under gVisor every container of the pod runs in the one sandbox, and the \
     out-of-memory kill of the watched container ended the sidecar too, with no \
     exit seen and the kubelet's own preStop failed: the host's OOM killer kills \
     the sandbox (runsc's sentry) in the pod's memory cgroup, gVisor issue 2533 \
     (docs/platforms.md, gVisor)",
)];

/// Why `scenario` cannot pass on the cluster's runtime (`RUNTIME`), if it
/// cannot ([`RULED_OUT`]); `None` when it must pass or `RUNTIME` is unset.
pub fn ruled_out(scenario: &str) -> Option<&'static str> {
    let runtime = std::env::var("RUNTIME").ok()?;
    RULED_OUT
        .iter()
        .find(|(r, s, _)| *r == runtime && *s == scenario)
        .map(|(_, _, why)| *why)
}

/// Runs scenarios with at most `concurrency` at a time, prints one line per
/// scenario (pass/FAIL, duration) and fails naming every failed one. A
/// scenario [`ruled_out`] on the cluster's runtime is not run: a `SKIPPED:`
/// line gives the reason.
pub async fn run_scenarios(scenarios: Vec<Scenario>, concurrency: usize) -> Result<()> {
    let started = Instant::now();
    let scenarios: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|(name, _)| match ruled_out(name) {
            Some(why) => {
                eprintln!("SKIPPED: scenario {name} on this runtime: {why}");
                false
            }
            None => true,
        })
        .collect();
    let results: Vec<(&'static str, Duration, Result<()>)> = futures::stream::iter(scenarios)
        .map(|(name, fut)| async move {
            let t = Instant::now();
            eprintln!("scenario {name}: started");
            let r = fut.await;
            eprintln!(
                "scenario {name}: {} after {:.1}s",
                if r.is_ok() { "passed" } else { "FAILED" },
                t.elapsed().as_secs_f64()
            );
            (name, t.elapsed(), r)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut failed = Vec::new();
    let mut sorted = results;
    sorted.sort_by_key(|(n, _, _)| *n);
    eprintln!(
        "==== scenario summary ({:.1}s) ====",
        started.elapsed().as_secs_f64()
    );
    for (name, took, r) in &sorted {
        match r {
            Ok(()) => eprintln!("SCENARIO {name}: pass ({:.1}s)", took.as_secs_f64()),
            Err(e) => {
                eprintln!("SCENARIO {name}: FAIL ({:.1}s): {e:#}", took.as_secs_f64());
                failed.push(format!("{name}: {e:#}"));
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} scenario(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}
