//! On-cluster benchmarks of kube-prestop (issue 7), run by `make bench`
//! (bench/run.sh) against the running local cluster with the chart
//! installed. Nothing here asserts a time: it measures and prints
//! `key=value` lines on stdout for the table (bench/report.py); progress
//! goes to stderr; `--raw FILE` keeps the samples as JSON. Built on the e2e
//! suite's helpers (the `kube-prestop-e2e` library).
//!
//! `start [--pods N]`: pod start overhead. The same Job (one container that
//! prints its own start time and sleeps 1.5 s, an exec preStop) N times in a
//! labelled and N times in an unlabelled namespace, plus, as the reference
//! for what any native sidecar costs, N times in the unlabelled namespace
//! with one do-nothing native sidecar added by hand (no probe, no install
//! step); interleaved A B C C B A, one at a time, each run to its end before
//! the next. Times, all from the same
//! host clock (the node is a network namespace on this machine), with
//! microsecond resolution instead of the API's one-second timestamps:
//! - pod added: when a watch on the pods delivered the new pod (after
//!   admission: the webhook's own time is in `burst`);
//! - main started: the container's first instruction, `adjtimex` (busybox's
//!   date has no `%N`), which prints the clock in µs;
//! - main Running (API): when the watch delivered the status with the main
//!   container running;
//! - Job created: just before the create call (adds the Job controller and
//!   admission).
//!
//! `burst [--completions 200] [--parallelism 20]`: an Indexed Job in a
//! labelled namespace. Admission latency from the webhook's histogram (every
//! replica scraped through the API server before and after, buckets diffed
//! and summed, quantiles interpolated inside a bucket) and from the API
//! server's histogram for our webhook (what the call cost the API server);
//! pods injected (sidecar and status annotation); hooks that ran (a line per
//! run in a hostPath record, and the sidecars' `hook finished` log lines).
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    HOOK_FINISHED, INSTALL_CONTAINER, binary_config_map, container_status, count_lines, injected,
    job_name, pod_finished, sidecar_logs,
};
use kube_prestop_e2e::fixtures::{container, tiny_resources};
use kube_prestop_e2e::metrics::{
    ApiserverWebhookStats, Histogram, WEBHOOK_DURATION, percentile, webhook_replica_metrics,
};
use kube_prestop_e2e::records::Records;
use kube_prestop_e2e::waits::poll_until;
use kube_prestop_e2e::webhook::{WEBHOOK_NAMESPACE, wait_injects_from_config_map, webhook_pods};
use kube_prestop_e2e::{
    JOB_NAME_LABEL, TestNamespace, container_logs, run_job, sidecar_name, test_image, unique_suffix,
};
use serde_json::{Value, json};

const C: &str = "main";
/// Label on every bench pod: the run's id, for one watch over both namespaces.
const RUN_LABEL: &str = "kube-prestop.io/bench-run";
const POD_TIMEOUT: Duration = Duration::from_secs(180);

fn usage() -> &'static str {
    "usage: kube-prestop-cluster-bench start [--pods N] [--prefix P] [--raw FILE]\n\
     \x20      kube-prestop-cluster-bench burst [--completions N] [--parallelism N] \
     [--command SH] [--prefix P] [--raw FILE]"
}

struct Args {
    part: String,
    opts: BTreeMap<String, String>,
}

impl Args {
    fn parse() -> Result<Self> {
        let mut it = std::env::args().skip(1);
        let part = it.next().with_context(usage)?;
        let mut opts = BTreeMap::new();
        while let Some(k) = it.next() {
            let key = k
                .strip_prefix("--")
                .with_context(|| format!("unexpected {k:?}\n{}", usage()))?
                .to_owned();
            let v = it
                .next()
                .with_context(|| format!("--{key} needs a value"))?;
            opts.insert(key, v);
        }
        Ok(Self { part, opts })
    }

    fn num(&self, key: &str, default: u32) -> Result<u32> {
        self.opts.get(key).map_or(Ok(default), |v| {
            v.parse().with_context(|| format!("--{key} {v}"))
        })
    }

    fn str(&self, key: &str, default: &str) -> String {
        self.opts
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    }
}

fn log(msg: &str) {
    eprintln!("[cluster-bench] {msg}");
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_nanos()).unwrap_or_default())
        .unwrap_or_default()
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

fn out(lines: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = writeln!(lines, "{key}={value}");
}

fn out_ms(lines: &mut String, key: &str, v: Option<f64>) {
    match v {
        Some(v) => out(lines, key, format!("{v:.3}")),
        None => out(lines, key, "nan"),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse()?;
    let client = kube_prestop_e2e::client().await?;
    let prefix = args.str("prefix", "kpb");
    let (lines, raw) = match args.part.as_str() {
        "start" => start(&client, &prefix, args.num("pods", 20)?).await?,
        "burst" => {
            burst(
                &client,
                &prefix,
                args.num("completions", 200)?,
                args.num("parallelism", 20)?,
                &args.str("command", "echo index $JOB_COMPLETION_INDEX"),
            )
            .await?
        }
        other => bail!("unknown part {other:?}\n{}", usage()),
    };
    if let Some(path) = args.opts.get("raw") {
        std::fs::write(path, serde_json::to_vec_pretty(&raw)?)
            .with_context(|| format!("writing {path}"))?;
    }
    print!("{lines}");
    Ok(())
}

/// Runs `body` with the namespaces, deletes them (and the records) whatever
/// happens.
async fn with_namespaces<F, Fut, T>(namespaces: Vec<TestNamespace>, body: F) -> Result<T>
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let names = namespaces.iter().map(|n| n.name.clone()).collect();
    let result = body(names).await;
    for ns in namespaces {
        let name = ns.name.clone();
        if let Err(e) = ns.delete().await {
            log(&format!("deleting namespace {name}: {e:#}"));
        }
    }
    result
}

// ---- start ---------------------------------------------------------------------

/// What the watch saw of one pod (ns).
#[derive(Debug, Clone, Default)]
struct Watched {
    job: String,
    added: i128,
    running: Option<i128>,
    /// Injected pods: the install container reported terminated, the
    /// sidecar reported started (running, its postStart handler done).
    install_done: Option<i128>,
    sidecar_started: Option<i128>,
    finished: bool,
    injected: bool,
    /// Injected pods: the sidecar binary is mounted from the namespace's
    /// ConfigMap (no install container).
    from_config_map: bool,
}

type WatchMap = Arc<Mutex<BTreeMap<String, Watched>>>;

fn main_running(pod: &Pod) -> bool {
    container_status(pod, C)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
}

fn install_done(pod: &Pod) -> bool {
    container_status(pod, INSTALL_CONTAINER)
        .and_then(|c| c.state)
        .is_some_and(|s| s.terminated.is_some())
}

fn sidecar_started(pod: &Pod) -> bool {
    container_status(pod, &sidecar_name(C)).is_some_and(|c| c.started == Some(true))
}

/// Watches all pods of the run (any namespace) and timestamps what it sees.
fn watch_run(client: &Client, run: &str, map: WatchMap) -> tokio::task::JoinHandle<()> {
    let api = Api::<Pod>::all(client.clone());
    let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={run}"));
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let at = now_ns();
            let pod = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                Ok(_) => continue,
                Err(e) => {
                    log(&format!("pod watch: {e}"));
                    continue;
                }
            };
            let key = format!(
                "{}/{}",
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default()
            );
            let Ok(mut m) = map.lock() else { return };
            let w = m.entry(key).or_insert_with(|| Watched {
                job: job_name(&pod),
                added: at,
                injected: injected(&pod, C),
                from_config_map: binary_config_map(&pod).is_some(),
                ..Watched::default()
            });
            if w.running.is_none() && main_running(&pod) {
                w.running = Some(at);
            }
            if w.install_done.is_none() && install_done(&pod) {
                w.install_done = Some(at);
            }
            if w.sidecar_started.is_none() && sidecar_started(&pod) {
                w.sidecar_started = Some(at);
            }
            w.finished = pod_finished(&pod);
        }
    })
}

/// Which of the three pods of the start part a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// In the labelled namespace: injected by kube-prestop.
    Injected,
    /// In the unlabelled namespace: the Job as written.
    Plain,
    /// In the unlabelled namespace, with [`reference_sidecar`] added by hand.
    OneSidecar,
}

impl Kind {
    /// Key fragment in the output lines.
    fn key(self) -> &'static str {
        match self {
            Self::Injected => "inj",
            Self::Plain => "plain",
            Self::OneSidecar => "ref",
        }
    }
}

/// The reference native sidecar: busybox doing nothing until SIGTERM, with
/// no probe and no lifecycle handler. The kubelet starts the regular
/// containers one pod sync after it sees this sidecar running, as it does
/// for ours, so its cost is the floor for any sidecar injector.
fn reference_sidecar() -> Value {
    json!({
        "name": "reference-sidecar",
        "image": test_image(),
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        "resources": tiny_resources()
    })
}

fn start_job(name: &str, run: &str, kind: Kind) -> Result<Job> {
    let init: Vec<Value> = if kind == Kind::OneSidecar {
        vec![reference_sidecar()]
    } else {
        Vec::new()
    };
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { RUN_LABEL: run } },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "initContainers": init,
                    "containers": [{
                        "name": C,
                        "image": test_image(),
                        "imagePullPolicy": "Never",
                        // First instruction: the clock in µs (busybox date has no %N).
                        // Lives 1.5 s so the kubelet's 1 s relist reports it Running.
                        "command": ["sh", "-c", "adjtimex | grep tv_; sleep 1.5"],
                        "lifecycle": { "preStop": { "exec": { "command": ["sh", "-c", "echo bye"] } } },
                        "resources": tiny_resources()
                    }]
                }
            }
        }
    }))?)
}

/// The µs clock the container printed (`time.tv_sec:` and `time.tv_usec:`), in ns.
fn parse_adjtimex(logs: &str) -> Option<i128> {
    let field = |name: &str| {
        logs.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(name)
                    .map(|v| v.trim().parse::<i128>())
            })
            .and_then(Result::ok)
    };
    Some(field("time.tv_sec:")? * 1_000_000_000 + field("time.tv_usec:")? * 1_000)
}

#[derive(Debug, Clone)]
struct StartSample {
    kind: Kind,
    pod: String,
    job_created: i128,
    added: i128,
    running_event: i128,
    main_started: i128,
    install_done: Option<i128>,
    sidecar_started: Option<i128>,
    from_config_map: bool,
}

async fn start(client: &Client, prefix: &str, pods: u32) -> Result<(String, Value)> {
    let inj = TestNamespace::create(client, &format!("{prefix}-start-inj"), true).await?;
    let plain = TestNamespace::create(client, &format!("{prefix}-start-plain"), false).await?;
    let client = client.clone();
    with_namespaces(vec![inj, plain], |names| async move {
        // With sidecarBinary.source=configMap (or auto where image volumes
        // do not work, on a cluster of one architecture) the first pod
        // injected in a namespace gets the install container and makes the
        // webhook create the namespace's ConfigMap; the pods after it mount
        // the binary from there. Where image volumes work, auto (the chart's
        // default) mounts the install image instead and no ConfigMap comes.
        // Measure the steady state: one warm-up Job first (not a sample).
        let warm_up = start_job("warm-up", "warm-up", Kind::Injected)?;
        run_job(&client, &names[0], &warm_up, POD_TIMEOUT)
            .await
            .context("the warm-up Job")?;
        match wait_injects_from_config_map(&client, &names[0], Duration::from_secs(30)).await {
            Ok(name) => log(&format!(
                "injected pods mount the sidecar binary from ConfigMap {name}"
            )),
            Err(e) => log(&format!(
                "{e:#}: injected pods get the install init container"
            )),
        }
        let run = unique_suffix();
        let map: WatchMap = Arc::default();
        let watch = watch_run(&client, &run, map.clone());
        let mut samples = Vec::new();
        let result = async {
            for i in 0..pods * 3 {
                // A B C C B A: each kind comes first, second and third as often.
                let kind = match i % 6 {
                    0 | 5 => Kind::Injected,
                    1 | 4 => Kind::Plain,
                    _ => Kind::OneSidecar,
                };
                let ns = &names[usize::from(kind != Kind::Injected)];
                let job = format!("start-{i:03}");
                let sample = start_one(&client, ns, &job, &run, &map, kind).await?;
                log(&format!(
                    "{job} ({}): pod added -> main started {:.1} ms",
                    kind.key(),
                    ms(sample.main_started - sample.added)
                ));
                samples.push(sample);
            }
            Ok::<_, anyhow::Error>(())
        }
        .await;
        watch.abort();
        result?;
        Ok(start_report(pods, &samples))
    })
    .await
}

async fn start_one(
    client: &Client,
    ns: &str,
    job: &str,
    run: &str,
    map: &WatchMap,
    kind: Kind,
) -> Result<StartSample> {
    let expect_injected = kind == Kind::Injected;
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let job_created = now_ns();
    jobs.create(&PostParams::default(), &start_job(job, run, kind)?)
        .await
        .with_context(|| format!("creating Job {ns}/{job}"))?;
    let find = || -> Option<(String, Watched)> {
        let m = map.lock().ok()?;
        m.iter()
            .find(|(k, w)| w.job == job && k.starts_with(&format!("{ns}/")))
            .map(|(k, w)| (k.clone(), w.clone()))
    };
    poll_until(POD_TIMEOUT, Duration::from_millis(50), || {
        let done = find().is_some_and(|(_, w)| w.finished);
        async move { Ok(done) }
    })
    .await
    .with_context(|| format!("the pod of Job {ns}/{job} did not finish"))?;
    let (key, w) = find().with_context(|| format!("pod of {ns}/{job} vanished"))?;
    let pod = key.rsplit('/').next().unwrap_or_default().to_owned();
    ensure!(
        w.injected == expect_injected,
        "pod {key}: injected {}, expected {expect_injected} (is the webhook up?)",
        w.injected
    );
    let logs = container_logs(client, ns, &pod, C).await?;
    let main_started = parse_adjtimex(&logs)
        .with_context(|| format!("no start time in {key}'s logs: {logs:?}"))?;
    let running_event = w
        .running
        .with_context(|| format!("the watch never saw {key}'s main container running"))?;
    Ok(StartSample {
        kind,
        pod: key,
        job_created,
        added: w.added,
        running_event,
        main_started,
        install_done: w.install_done,
        sidecar_started: w.sidecar_started,
        from_config_map: w.from_config_map,
    })
}

fn sorted_ms(samples: &[&StartSample], f: impl Fn(&StartSample) -> i128) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().map(|s| ms(f(s))).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// One interval of a start sample, in ns.
type Measure = fn(&StartSample) -> i128;

fn start_report(pods: u32, samples: &[StartSample]) -> (String, Value) {
    let mut lines = String::new();
    out(&mut lines, "start_pods_each", pods);
    let of = |k: Kind| -> Vec<&StartSample> { samples.iter().filter(|s| s.kind == k).collect() };
    let (inj, plain, one_sidecar) = (of(Kind::Injected), of(Kind::Plain), of(Kind::OneSidecar));
    let measures: [(&str, Measure); 3] = [
        ("start", |s| s.main_started - s.added),
        ("start_api", |s| s.running_event - s.added),
        ("start_job", |s| s.main_started - s.job_created),
    ];
    for (name, f) in measures {
        for (kind, set) in [
            (Kind::Injected.key(), &inj),
            (Kind::Plain.key(), &plain),
            (Kind::OneSidecar.key(), &one_sidecar),
        ] {
            let v = sorted_ms(set, f);
            for (q, qn) in [(0.5, "p50"), (0.9, "p90")] {
                out_ms(
                    &mut lines,
                    &format!("{name}_{kind}_{qn}_ms"),
                    percentile(&v, q),
                );
            }
            out_ms(
                &mut lines,
                &format!("{name}_{kind}_min_ms"),
                v.first().copied(),
            );
            out_ms(
                &mut lines,
                &format!("{name}_{kind}_max_ms"),
                v.last().copied(),
            );
        }
    }
    // Where an injected pod's time goes, as the API reported it (each status
    // update the kubelet sends is seen by the watch; a one-second relist of
    // the kubelet sits between a container's exit and its report).
    let since_added = |f: fn(&StartSample) -> Option<i128>| {
        let mut v: Vec<f64> = inj
            .iter()
            .filter_map(|s| f(s).map(|t| ms(t - s.added)))
            .collect();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    out(
        &mut lines,
        "start_inj_from_config_map",
        inj.iter().filter(|s| s.from_config_map).count(),
    );
    out_ms(
        &mut lines,
        "start_inj_install_done_p50_ms",
        since_added(|s| s.install_done),
    );
    out_ms(
        &mut lines,
        "start_inj_sidecar_started_p50_ms",
        since_added(|s| s.sidecar_started),
    );
    let raw = samples
        .iter()
        .map(|s| {
            let rel = |t: Option<i128>| t.map(|t| ms(t - s.added));
            json!({
                "pod": s.pod, "kind": s.kind.key(),
                "job_created_to_added_ms": ms(s.added - s.job_created),
                "added_to_main_started_ms": ms(s.main_started - s.added),
                "added_to_running_event_ms": ms(s.running_event - s.added),
                "binary_from_config_map": s.from_config_map,
                "added_to_install_done_event_ms": rel(s.install_done),
                "added_to_sidecar_started_event_ms": rel(s.sidecar_started),
            })
        })
        .collect();
    (lines, Value::Array(raw))
}

// ---- burst ---------------------------------------------------------------------

fn burst_job(
    records: &Records,
    completions: u32,
    parallelism: u32,
    command: &str,
    run: &str,
) -> Result<Job> {
    let hook =
        "echo \"$JOB_COMPLETION_INDEX ${KUBE_PRESTOP_INSTANCE:-by-kubelet}\" >> /records/hooks";
    Ok(serde_json::from_value(json!({
        "metadata": { "name": "burst" },
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "backoffLimit": completions,
            "template": {
                "metadata": { "labels": { RUN_LABEL: run } },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [container(C, command, hook)],
                    "volumes": [records.volume()]
                }
            }
        }
    }))?)
}

/// The webhook's admission log lines (JSON) about namespace `ns` from every
/// running replica: `(duration in ms, reason)` each.
async fn admission_log(client: &Client, ns: &str, since: Duration) -> Result<Vec<(f64, String)>> {
    let mut out = Vec::new();
    let params = kube::api::LogParams {
        since_seconds: Some(i64::try_from(since.as_secs()).unwrap_or(3600) + 10),
        ..kube::api::LogParams::default()
    };
    for pod in webhook_pods(client).await? {
        let name = pod.metadata.name.unwrap_or_default();
        let logs = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
            .logs(&name, &params)
            .await
            .with_context(|| format!("logs of webhook pod {name}"))?;
        for line in logs.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["message"] == "admission"
                && v["namespace"] == ns
                && let Some(ms) = v["duration_ms"].as_f64()
            {
                out.push((ms, v["reason"].as_str().unwrap_or_default().to_owned()));
            }
        }
    }
    Ok(out)
}

/// Sum of the webhook histogram over replicas, and the replicas' names.
async fn webhook_histogram(client: &Client) -> Result<(Histogram, BTreeSet<String>)> {
    let mut h = Histogram::default();
    let mut names = BTreeSet::new();
    for (pod, samples) in webhook_replica_metrics(client).await? {
        h.add(&Histogram::from_samples(&samples, WEBHOOK_DURATION, |_| {
            true
        }));
        names.insert(pod);
    }
    Ok((h, names))
}

async fn burst(
    client: &Client,
    prefix: &str,
    completions: u32,
    parallelism: u32,
    command: &str,
) -> Result<(String, Value)> {
    let ns = TestNamespace::create(client, &format!("{prefix}-burst"), true).await?;
    let records = Records::create(&format!("{prefix}-burst"))?;
    let client = client.clone();
    let rec = records.clone();
    let command = command.to_owned();
    let result = with_namespaces(vec![ns], |names| async move {
        let ns = names.concat();
        let run = unique_suffix();
        let job = burst_job(&rec, completions, parallelism, &command, &run)?;
        let (wh_before, replicas_before) = webhook_histogram(&client).await?;
        let api_before = ApiserverWebhookStats::scrape(&client).await?;
        log(&format!(
            "burst: Indexed Job, {completions} completions, parallelism {parallelism}, in {ns}"
        ));
        let t = Instant::now();
        let outcome = run_job(&client, &ns, &job, Duration::from_secs(1800)).await?;
        let took = t.elapsed();
        log(&format!("burst: Job {outcome:?} after {:.1} s", took.as_secs_f64()));
        let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
        let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}=burst"));
        poll_until(POD_TIMEOUT, Duration::from_secs(1), || {
            let (pods_api, lp) = (pods_api.clone(), lp.clone());
            async move { Ok(pods_api.list(&lp).await?.items.iter().all(pod_finished)) }
        })
        .await
        .context("burst pods did not all finish")?;
        let (wh_after, replicas_after) = webhook_histogram(&client).await?;
        let api_after = ApiserverWebhookStats::scrape(&client).await?;
        let pods = pods_api.list(&lp).await?.items;
        let logged = admission_log(&client, &ns, t.elapsed()).await?;
        let mut log_ms: Vec<f64> = logged.iter().map(|(ms, _)| *ms).collect();
        log_ms.sort_by(f64::total_cmp);
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, r) in &logged {
            *reasons.entry(r.as_str()).or_default() += 1;
        }
        let wh = wh_after.minus(&wh_before);
        let api = api_after.minus(&api_before);

        let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
        let n_injected = pods.iter().filter(|p| injected(p, C)).count();
        let succeeded = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
            .count();
        // The sidecars' own count of hook runs, pod by pod.
        let hook_logs: Vec<(String, Option<usize>)> = futures::stream::iter(names.clone())
            .map(|pod| {
                let (client, ns) = (client.clone(), ns.clone());
                async move {
                    let n = sidecar_logs(&client, &ns, &pod, C)
                        .await
                        .ok()
                        .map(|l| count_lines(&l, HOOK_FINISHED));
                    (pod, n)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let with_hook = hook_logs.iter().filter(|(_, n)| *n == Some(1)).count();
        let without_hook: Vec<&String> = hook_logs
            .iter()
            .filter(|(_, n)| *n == Some(0))
            .map(|(p, _)| p)
            .collect();
        let more_hooks = hook_logs.iter().filter(|(_, n)| n.is_some_and(|n| n > 1)).count();
        let no_logs = hook_logs.iter().filter(|(_, n)| n.is_none()).count();
        let recorded = rec.lines("hooks");
        let indexes: BTreeSet<&str> = recorded
            .iter()
            .filter_map(|l| l.split(' ').next())
            .collect();

        let mut lines = String::new();
        out(&mut lines, "burst_completions", completions);
        out(&mut lines, "burst_parallelism", parallelism);
        out(&mut lines, "burst_outcome", format!("{outcome:?}"));
        out(&mut lines, "burst_seconds", format!("{:.1}", took.as_secs_f64()));
        out(&mut lines, "burst_pods", pods.len());
        out(&mut lines, "burst_succeeded", succeeded);
        out(&mut lines, "burst_injected", n_injected);
        out(&mut lines, "burst_hook_record_lines", recorded.len());
        out(&mut lines, "burst_hook_record_indexes", indexes.len());
        out(&mut lines, "burst_sidecar_one_hook", with_hook);
        out(&mut lines, "burst_sidecar_no_hook", without_hook.len());
        out(&mut lines, "burst_sidecar_more_hooks", more_hooks);
        out(&mut lines, "burst_sidecar_no_logs", no_logs);
        out(&mut lines, "burst_log_count", log_ms.len());
        out(
            &mut lines,
            "burst_log_reasons",
            reasons
                .iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        for (q, n) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (1.0, "max")] {
            out_ms(&mut lines, &format!("burst_log_{n}_ms"), percentile(&log_ms, q));
        }
        out(&mut lines, "burst_wh_count", wh.count);
        out(
            &mut lines,
            "burst_wh_replicas_same",
            u8::from(replicas_before == replicas_after),
        );
        out(&mut lines, "burst_wh_replicas", replicas_after.len());
        for (q, n) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            out_ms(&mut lines, &format!("burst_wh_{n}_ms"), wh.quantile(q).map(|s| s * 1e3));
            out_ms(
                &mut lines,
                &format!("burst_api_{n}_ms"),
                api.duration.quantile(q).map(|s| s * 1e3),
            );
        }
        out_ms(&mut lines, "burst_wh_mean_ms", wh.mean().map(|s| s * 1e3));
        out_ms(&mut lines, "burst_api_mean_ms", api.duration.mean().map(|s| s * 1e3));
        out(&mut lines, "burst_api_count", api.duration.count);
        out(&mut lines, "burst_api_fail_open", api.fail_open);
        out(&mut lines, "burst_api_rejections", api.rejections);
        out(&mut lines, "burst_api_not_200", api.calls_not_200);
        let raw = json!({
            "pods_without_hook": without_hook,
            "webhook_histogram": wh.buckets.iter().map(|(le, c)| json!([le.to_string(), c])).collect::<Vec<_>>(),
            "apiserver_histogram": api.duration.buckets.iter().map(|(le, c)| json!([le.to_string(), c])).collect::<Vec<_>>(),
        });
        Ok((lines, raw))
    })
    .await;
    records.remove();
    result
}
