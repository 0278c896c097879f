//! Issue 8: a rolling restart of the webhook (what `kubectl rollout restart
//! deployment` does: a new `kubectl.kubernetes.io/restartedAt` annotation on
//! the pod template) while Job pods are being created in a labelled
//! namespace. No admission call may fail and every pod created before, during
//! and after the rollout must be injected.
//!
//! The load, from before the restart until some pods after the last old
//! replica is gone (old replicas keep serving for the chart's drain delay
//! after their SIGTERM, so the rollout is not over before they exit):
//! - a single-pod Job every 500 ms. The pods carry a nodeSelector no node
//!   matches and stay Pending: they go through admission like any Job pod,
//!   but do not load the small node, which must start the new webhook
//!   replicas meanwhile. A pod watcher records each pod when it first sees
//!   it; containers cannot change after creation, so that is what admission
//!   made of it.
//! - a server-side dry-run create of an opted-in pod every 50 ms: the same
//!   admission call by the API server, answered synchronously and stored
//!   nowhere, so the stream stays dense through the rollout even when the Job
//!   controller lags on a busy node (a failed call is a race of a few
//!   milliseconds at the moment a replica closes its connections).
//!
//! `failurePolicy` is Ignore: a failed call shows up as a pod without the
//! sidecar, and in the API server's counters for our webhook
//! (`apiserver_admission_webhook_fail_open_count`, `..._rejection_count`,
//! `..._request_total` by code); the test checks all of them.
//!
//! The Deployment is restored whatever happens: the test waits for the
//! rollout to finish (if it cannot, it puts the previous annotation back,
//! which rolls back to the old ReplicaSet), then until the webhook injects
//! again (dry run). Run alone: `make e2e` uses `--test-threads=1`, and this
//! file is its own test binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{AsyncBufReadExt as _, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, LogParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{injected, job_name};
use kube_prestop_e2e::fixtures::tiny_resources;
use kube_prestop_e2e::metrics::ApiserverWebhookStats;
use kube_prestop_e2e::waits::poll_until;
use kube_prestop_e2e::webhook::{
    WEBHOOK_NAMESPACE, set_webhook_restarted_at, wait_webhook_rolled_out, wait_webhook_serving,
    webhook_pods, webhook_rollout_pending,
};
use kube_prestop_e2e::{TestNamespace, client, container_names, init_tracing, test_image};
use serde_json::json;

const C: &str = "main";
/// One Job created every EVERY.
const EVERY: Duration = Duration::from_millis(500);
/// One dry-run pod create every DRY_EVERY.
const DRY_EVERY: Duration = Duration::from_millis(50);
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(240);
const SEEN_TIMEOUT: Duration = Duration::from_secs(90);
/// Pods admitted before the restart starts, and after the last old replica is gone.
const PODS_BEFORE: usize = 5;
const PODS_AFTER: usize = 5;
/// The rollout takes tens of seconds; fewer admissions in it (pods and dry
/// runs) would not test much.
const MIN_DURING: usize = 40;

/// A pod as first seen by the watcher.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    job: String,
    injected: bool,
    containers: Vec<String>,
}

type SeenMap = Arc<Mutex<BTreeMap<String, Seen>>>;

fn seen_count(seen: &SeenMap) -> usize {
    seen.lock().map(|m| m.len()).unwrap_or_default()
}

/// Records every pod of the namespace the first time it is seen.
fn watch_pods(client: &Client, ns: &str, seen: SeenMap) -> tokio::task::JoinHandle<()> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "pod watch");
                    continue;
                }
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Ok(mut map) = seen.lock() {
                map.entry(name).or_insert_with(|| Seen {
                    at: Instant::now(),
                    job: job_name(&pod),
                    injected: injected(&pod, C),
                    containers: container_names(&pod),
                });
            }
        }
    })
}

/// A Job whose one pod is admitted like any other but never scheduled.
fn pending_job(name: &str) -> Result<Job> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "nodeSelector": { "kube-prestop.io/e2e": "never-scheduled" },
                "containers": [{
                    "name": C,
                    "image": test_image(),
                    "imagePullPolicy": "Never",
                    "command": ["true"],
                    "lifecycle": { "preStop": { "exec": { "command": ["true"] } } },
                    "resources": tiny_resources()
                }]
            } }
        }
    }))?)
}

/// A Job creation of the stream: its name, when, and the error if any.
struct Created {
    name: String,
    at: Instant,
    error: Option<String>,
}

/// Creates a Job every [`EVERY`] until `stop` is set; each create runs on its
/// own task so that a slow call never delays the next one.
fn create_jobs(
    client: &Client,
    ns: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Created>> {
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    every(EVERY, stop, move |i| {
        let name = format!("rr-{i:04}");
        let jobs = jobs.clone();
        async move {
            let at = Instant::now();
            let error = match pending_job(&name) {
                Ok(job) => jobs
                    .create(&PostParams::default(), &job)
                    .await
                    .err()
                    .map(|e| e.to_string()),
                Err(e) => Some(format!("{e:#}")),
            };
            Created { name, at, error }
        }
    })
}

/// Starts `call(i)` (i = 0, 1, ...) on its own task every `period` until
/// `stop` is set, so that a slow call never delays the next one; the handle
/// gives every call's result, in order.
fn every<T, F, Fut>(
    period: Duration,
    stop: Arc<AtomicBool>,
    mut call: F,
) -> tokio::task::JoinHandle<Vec<T>>
where
    T: Send + 'static,
    F: FnMut(u32) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut calls = Vec::new();
        let mut i = 0u32;
        while !stop.load(Ordering::SeqCst) {
            tick.tick().await;
            calls.push(tokio::spawn(call(i)));
            i += 1;
        }
        let mut results = Vec::new();
        for c in calls {
            if let Ok(r) = c.await {
                results.push(r);
            }
        }
        results
    })
}

/// A dry-run create of the stream: when, and whether it came back injected.
struct DryRun {
    at: Instant,
    result: Result<bool, String>,
}

/// Creates an opted-in pod with `dryRun: All` every [`DRY_EVERY`] until
/// `stop` is set; each create on its own task.
fn dry_runs(
    client: &Client,
    ns: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<DryRun>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let probe: Result<Pod, _> = serde_json::from_value(json!({
        "metadata": {
            "generateName": "rr-dry-",
            "annotations": { "kube-prestop.io/inject": "true" }
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": C,
                "image": test_image(),
                "imagePullPolicy": "Never",
                "command": ["true"],
                "lifecycle": { "preStop": { "exec": { "command": ["true"] } } }
            }]
        }
    }));
    let Ok(probe) = probe else {
        return tokio::spawn(async { Vec::new() });
    };
    every(DRY_EVERY, stop, move |_| {
        let (pods, probe) = (pods.clone(), probe.clone());
        async move {
            let at = Instant::now();
            let params = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            let result = pods
                .create(&params, &probe)
                .await
                .map(|p| injected(&p, C))
                .map_err(|e| e.to_string());
            DryRun { at, result }
        }
    })
}

/// Follows a webhook pod's log from now on (until the pod is gone).
fn follow_logs(
    client: &Client,
    pod: String,
    out: Arc<Mutex<Vec<(String, String)>>>,
) -> tokio::task::JoinHandle<()> {
    let api = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
    tokio::spawn(async move {
        let params = LogParams {
            follow: true,
            tail_lines: Some(0),
            ..LogParams::default()
        };
        let Ok(stream) = api.log_stream(&pod, &params).await else {
            return;
        };
        let mut lines = stream.lines();
        while let Ok(Some(line)) = lines.try_next().await {
            if let Ok(mut v) = out.lock() {
                v.push((pod.clone(), line));
            }
        }
    })
}

async fn wait_seen(seen: &SeenMap, n: usize, what: &str) -> Result<()> {
    poll_until(SEEN_TIMEOUT, Duration::from_millis(100), || {
        let have = seen_count(seen);
        async move { Ok(have >= n) }
    })
    .await
    .with_context(|| format!("{what}: {} pod(s) seen, waiting for {n}", seen_count(seen)))
}

/// What the run saw, for the report and the failure diagnostics.
#[derive(Default)]
struct Run {
    old_pods: Vec<String>,
    /// Offsets from the first Job creation.
    restart_at: Option<Duration>,
    old_gone_at: Option<Duration>,
    logs: Arc<Mutex<Vec<(String, String)>>>,
    seen: SeenMap,
}

#[tokio::test]
async fn rolling_restart_under_load() -> Result<()> {
    init_tracing();
    let client = client().await?;
    wait_webhook_rolled_out(&client, ROLLOUT_TIMEOUT)
        .await
        .context("the webhook was not rolled out before the test")?;
    // KUBE_PRESTOP_E2E_NS_PREFIX (default kpt) keeps shared clusters' users apart.
    let prefix = std::env::var("KUBE_PRESTOP_E2E_NS_PREFIX").unwrap_or_else(|_| "kpt".to_owned());
    let ns = TestNamespace::create(&client, &format!("{prefix}-rollout"), true).await?;
    let name = ns.name.clone();
    let mut patched: Option<Option<String>> = None;
    let mut run = Run::default();
    let result = rolling_restart(&client, &name, &mut patched, &mut run).await;
    if let Err(e) = &result {
        eprintln!(
            "==== rolling restart failed: {e:#}\n{}",
            diagnose(&client, &name, &run).await
        );
    }
    let restored = restore(&client, &name, patched).await;
    if let Err(e) = &restored {
        eprintln!("==== restoring the webhook failed: {e:#}");
    }
    let deleted = ns.delete().await;
    result.and(restored).and(deleted)
}

async fn rolling_restart(
    client: &Client,
    ns: &str,
    patched: &mut Option<Option<String>>,
    run: &mut Run,
) -> Result<()> {
    let watch = watch_pods(client, ns, run.seen.clone());
    run.old_pods = webhook_pods(client)
        .await?
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let followers: Vec<_> = run
        .old_pods
        .iter()
        .map(|p| follow_logs(client, p.clone(), run.logs.clone()))
        .collect();
    let before = ApiserverWebhookStats::scrape(client).await?;

    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let creator = create_jobs(client, ns, stop.clone());
    let dry = dry_runs(client, ns, stop.clone());
    let seen = run.seen.clone();
    let old_pods = run.old_pods.clone();
    let mut restart_at = None;
    let mut old_gone_at = None;
    let driven = async {
        wait_seen(&seen, PODS_BEFORE, "before the restart").await?;
        let stamp = k8s_openapi::jiff::Timestamp::now().to_string();
        *patched = Some(set_webhook_restarted_at(client, Some(&stamp)).await?);
        restart_at = Some(t0.elapsed());
        tracing::info!(restarted_at = %stamp, "rolling restart of the webhook started");
        let pods = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
        poll_until(ROLLOUT_TIMEOUT, Duration::from_millis(250), || {
            let (client, pods, old_pods) = (client.clone(), pods.clone(), old_pods.clone());
            async move {
                if webhook_rollout_pending(&client).await?.is_some() {
                    return Ok(false);
                }
                for p in &old_pods {
                    if pods.get_opt(p).await?.is_some() {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await
        .context("rollout (with every old replica gone)")?;
        old_gone_at = Some(t0.elapsed());
        let n = seen_count(&seen);
        wait_seen(&seen, n + PODS_AFTER, "after the rollout").await
    }
    .await;
    stop.store(true, Ordering::SeqCst);
    let created = creator.await.context("the Job creator task")?;
    let dry = dry.await.context("the dry-run task")?;
    run.restart_at = restart_at;
    run.old_gone_at = old_gone_at;
    driven?;

    // Every Job created got its pod seen.
    let wanted: BTreeSet<String> = created
        .iter()
        .filter(|c| c.error.is_none())
        .map(|c| c.name.clone())
        .collect();
    let have_pods = || -> BTreeSet<String> {
        seen.lock()
            .map(|m| m.values().map(|s| s.job.clone()).collect())
            .unwrap_or_default()
    };
    let all_seen = poll_until(SEEN_TIMEOUT, Duration::from_millis(250), || {
        let missing = wanted.difference(&have_pods()).count();
        async move { Ok(missing == 0) }
    })
    .await;
    let after = ApiserverWebhookStats::scrape(client).await?;
    let diff = after.minus(&before);
    watch.abort();

    let pods: Vec<(String, Seen)> = seen
        .lock()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let (restart, gone) = (
        restart_at.unwrap_or_default(),
        old_gone_at.unwrap_or_default(),
    );
    let in_window = |at: Instant| {
        let at = at.duration_since(t0);
        at >= restart && at <= gone
    };
    let during = pods.iter().filter(|(_, s)| in_window(s.at)).count();
    let dry_during = dry.iter().filter(|d| in_window(d.at)).count();
    let dry_failed: Vec<String> = dry
        .iter()
        .filter(|d| d.result != Ok(true))
        .map(|d| {
            let what = match &d.result {
                Ok(_) => "not injected".to_owned(),
                Err(e) => e.clone(),
            };
            format!("+{:.2}s: {what}", d.at.duration_since(t0).as_secs_f64())
        })
        .collect();
    let uninjected: Vec<String> = pods
        .iter()
        .filter(|(_, s)| !s.injected)
        .map(|(n, s)| {
            format!(
                "{n} at +{:.2}s: {:?}",
                s.at.duration_since(t0).as_secs_f64(),
                s.containers
            )
        })
        .collect();
    let failed_creates: Vec<String> = created
        .iter()
        .filter_map(|c| {
            c.error.as_ref().map(|e| {
                format!(
                    "{} at +{:.2}s: {e}",
                    c.name,
                    c.at.duration_since(t0).as_secs_f64()
                )
            })
        })
        .collect();
    // Which replica answered how many of our pods' admissions (JSON log lines).
    for f in &followers {
        f.abort();
    }
    let needle = format!("\"namespace\":\"{ns}\"");
    let mut by_replica: BTreeMap<String, usize> = BTreeMap::new();
    if let Ok(lines) = run.logs.lock() {
        for (pod, _) in lines.iter().filter(|(_, l)| l.contains(&needle)) {
            *by_replica.entry(format!("{pod} (old)")).or_default() += 1;
        }
    }
    let since = i64::try_from(t0.elapsed().as_secs()).unwrap_or(600) + 5;
    for p in webhook_pods(client).await? {
        let name = p.metadata.name.unwrap_or_default();
        let params = LogParams {
            since_seconds: Some(since),
            ..LogParams::default()
        };
        let logs = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
            .logs(&name, &params)
            .await
            .unwrap_or_default();
        let n = logs.lines().filter(|l| l.contains(&needle)).count();
        by_replica.insert(format!("{name} (new)"), n);
    }

    eprintln!(
        "ROLLING RESTART: {} Jobs created ({} failed), {} pods seen, {during} created during the \
         rollout (+{:.1}s restart .. +{:.1}s last old replica gone, {:.1}s), {} not injected; \
         {} dry-run creates, {dry_during} during the rollout, {} not injected or failed; \
         API server, our webhook: {} calls, {} not 200, {} fail-open, {} rejections; \
         latency p50/p99 {} / {} ms; admissions by replica {by_replica:?}",
        created.len(),
        failed_creates.len(),
        pods.len(),
        restart.as_secs_f64(),
        gone.as_secs_f64(),
        gone.saturating_sub(restart).as_secs_f64(),
        uninjected.len(),
        dry.len(),
        dry_failed.len(),
        diff.calls,
        diff.calls_not_200,
        diff.fail_open,
        diff.rejections,
        ms(diff.duration.quantile(0.5)),
        ms(diff.duration.quantile(0.99)),
    );

    ensure!(
        failed_creates.is_empty(),
        "Job creations failed: {failed_creates:#?}"
    );
    all_seen.with_context(|| {
        let missing: Vec<_> = wanted.difference(&have_pods()).cloned().collect();
        format!("Jobs without a pod: {missing:?}")
    })?;
    ensure!(
        uninjected.is_empty(),
        "{} of {} pods were created without injection: {uninjected:#?}",
        uninjected.len(),
        pods.len()
    );
    ensure!(
        dry_failed.is_empty(),
        "{} of {} dry-run creates were not injected or failed: {dry_failed:#?}",
        dry_failed.len(),
        dry.len()
    );
    ensure!(
        diff.fail_open == 0.0 && diff.rejections == 0.0 && diff.calls_not_200 == 0.0,
        "the API server counted failed calls to our webhook: {} fail-open, {} rejections, \
         {} answers other than 200",
        diff.fail_open,
        diff.rejections,
        diff.calls_not_200
    );
    ensure!(
        during + dry_during >= MIN_DURING,
        "only {during} pods and {dry_during} dry runs were admitted during the rollout, \
         expected at least {MIN_DURING} in all"
    );
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s * 1000.0))
}

/// Waits for the rollout to end; if it cannot, puts the previous pod template
/// annotation back (a rollback to the old ReplicaSet) and waits again. Then
/// waits until the webhook injects (dry run in the test namespace).
async fn restore(client: &Client, ns: &str, patched: Option<Option<String>>) -> Result<()> {
    if let Some(previous) = patched
        && let Err(e) = wait_webhook_rolled_out(client, ROLLOUT_TIMEOUT).await
    {
        eprintln!("the rollout did not finish ({e:#}); rolling the pod template back");
        set_webhook_restarted_at(client, previous.as_deref()).await?;
        wait_webhook_rolled_out(client, ROLLOUT_TIMEOUT).await?;
    }
    wait_webhook_serving(client, ns, Duration::from_secs(120)).await
}

/// The webhook's side of things: Deployment state, events of its namespace,
/// what the old replicas logged besides admissions, and the timeline.
async fn diagnose(client: &Client, ns: &str, run: &Run) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "timeline (s from the first Job): restart {:?}, last old replica gone {:?}; old replicas {:?}",
        run.restart_at.map(|d| d.as_secs_f64()),
        run.old_gone_at.map(|d| d.as_secs_f64()),
        run.old_pods
    );
    match webhook_rollout_pending(client).await {
        Ok(state) => {
            let _ = writeln!(out, "rollout pending: {state:?}");
        }
        Err(e) => {
            let _ = writeln!(out, "rollout state: {e:#}");
        }
    }
    for namespace in [WEBHOOK_NAMESPACE, ns] {
        if let Ok(events) = Api::<Event>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
        {
            // The webhook's recent events; the test namespace's warnings.
            let mut events: Vec<&Event> = events
                .items
                .iter()
                .filter(|e| namespace == WEBHOOK_NAMESPACE || e.type_.as_deref() != Some("Normal"))
                .collect();
            events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
            for e in events.iter().rev().take(40).rev() {
                let _ = writeln!(
                    out,
                    "event {namespace} {}/{}: {} {}: {}",
                    e.involved_object.kind.clone().unwrap_or_default(),
                    e.involved_object.name.clone().unwrap_or_default(),
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default()
                );
            }
        }
    }
    if let Ok(lines) = run.logs.lock() {
        for (pod, line) in lines.iter().filter(|(_, l)| !l.contains("\"admission\"")) {
            let _ = writeln!(out, "log {pod}: {line}");
        }
    }
    let _ = writeln!(out, "pods seen: {}", seen_count(&run.seen));
    out
}
