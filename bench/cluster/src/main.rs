//! On-cluster benchmarks of kube-prestop (issue 7), run by `make bench`
//! (bench/run.sh) against the running local cluster with the chart
//! installed. Nothing here asserts a time: it measures and prints
//! `key=value` lines on stdout for the table (bench/report.py); progress
//! goes to stderr; `--raw FILE` keeps the samples as JSON. Built on the e2e
//! suite's helpers (the `kube-prestop-e2e` library).
//!
//! One subcommand per part, parsed by clap ([`Cli`]); each part also takes
//! `--prefix P` (the namespaces' prefix, default `kpb`) and `--raw FILE`,
//! and `--help` lists its options and their defaults.
//!
//! `start [--pods 20] [--sources S,...|current] [--helm PATH --chart DIR]
//! [--runtime-log PATH] [--gate http-get|exec|none] [--runtime-default-seccomp]
//! [--sidecar-cpu-limit Q] [--busy-pods N --busy-cpu Q]`: pod start per sidecar-binary source,
//! against a plain pod and one with a do-nothing native sidecar, and where
//! the time goes ([`start`]); `--gate` sets the injected pods'
//! `kube-prestop.io/gate` and `--sidecar-cpu-limit` their
//! `kube-prestop.io/sidecar-cpu-limit`; `--runtime-default-seccomp` gives every pod the
//! pod-level seccomp profile `RuntimeDefault` (Pod Security `restricted`);
//! busy pods (as for `burst`) load the node's CPUs through the run.
//!
//! `burst [--completions 200] [--parallelism 20] [--command SH]
//! [--busy-pods N --busy-cpu Q] [--sidecar-cpu-request Q] [--sidecar-cpu-limit Q]
//! [--deadline 1800]`:
//! an Indexed Job in a labelled namespace, optionally beside N pods that
//! each spin a CPU at `Q` (request = limit, e.g. `400m`): issue 24's
//! saturated node; the pods may ask for another sidecar CPU request or
//! limit (the annotations), and the sidecars' CFS throttling is summed from
//! their `cpu throttling` lines. Admission latency from the webhook's histogram (every
//! replica scraped through the API server before and after, buckets diffed
//! and summed, quantiles interpolated inside a bucket) and from the API
//! server's histogram for our webhook (what the call cost the API server);
//! pods injected (sidecar and status annotation); hooks that ran (a line per
//! run in a hostPath record, and the sidecars' `hook finished` log lines).
//! A Job still running at `--deadline` (seconds) is reported over the pods
//! that have finished, the others counted (`burst_unfinished`) and named in
//! the raw file.
//!
//! `init-start [--pods 15] [--image IMAGE] [--install-image IMAGE]
//! [--runtime-log PATH]`: where an init container's CRI `StartContainer`
//! time goes, per security context, against a plain one: busybox `true`
//! plain, with the install container's restricted context, that context
//! less seccomp `RuntimeDefault`, seccomp alone, and the install container
//! as injected with and without seccomp ([`init_start`]); the install image
//! is the installed webhook's `--install-image` unless given. It also
//! prints its table in Markdown after its key=value lines.
//!
//! `outcomes-memory [--pods 10000] [--nodes 100] [--runs 2] [--concurrency
//! 32] [--exporter PATH]`: the outcome exporter's memory at that many
//! injected pods on API-created nodes ([`outcomes_memory`];
//! bench/outcomes-memory.sh).
#![allow(clippy::print_stdout)]

mod busy;
mod clock;
mod init_start;
mod outcomes_memory;
mod release;
mod runtime_log;
mod start;
mod stats;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    HOOK_FINISHED, NEVER_SEEN_RUNNING, count_lines, injected, pod_finished, sidecar_logs,
};
use kube_prestop_e2e::fixtures::container;
use kube_prestop_e2e::metrics::{
    ApiserverWebhookStats, Histogram, WEBHOOK_DURATION, percentile, webhook_replica_metrics,
};
use kube_prestop_e2e::records::Records;
use kube_prestop_e2e::waits::poll_until;
use kube_prestop_e2e::webhook::{WEBHOOK_NAMESPACE, webhook_pods};
use kube_prestop_e2e::{JOB_NAME_LABEL, TestNamespace, run_job_until, sidecar_name, unique_suffix};
use serde_json::{Value, json};

/// The watched container of every bench Job.
const C: &str = "main";
/// Label on every bench pod: the run's id, for one watch over both namespaces.
const RUN_LABEL: &str = "kube-prestop.io/bench-run";
/// How long one bench pod may take to finish.
const POD_TIMEOUT: Duration = Duration::from_secs(180);

/// The command line: one subcommand per part.
#[derive(Debug, Parser)]
#[command(
    name = "kube-prestop-cluster-bench",
    about = "On-cluster benchmarks of kube-prestop (make bench, bench/run.sh): key=value lines on stdout, progress on stderr"
)]
struct Cli {
    #[command(subcommand)]
    part: Part,
}

/// The options every part takes.
#[derive(Debug, PartialEq, clap::Args)]
struct Common {
    /// Prefix of the bench's namespace names.
    #[arg(long, value_name = "P", default_value = "kpb")]
    prefix: String,
    /// Also write the samples to FILE as JSON.
    #[arg(long, value_name = "FILE")]
    raw: Option<PathBuf>,
}

/// `--busy-pods N --busy-cpu Q`: busy pods beside the run.
#[derive(Debug, PartialEq, clap::Args)]
struct BusyArgs {
    /// Pods that each spin a CPU through the run (0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    busy_pods: u32,
    /// Each busy pod's CPU request and limit (a Kubernetes quantity).
    #[arg(long, value_name = "Q", default_value = "400m")]
    busy_cpu: String,
}

impl BusyArgs {
    fn load(&self) -> busy::Load {
        busy::Load {
            pods: self.busy_pods,
            cpu: self.busy_cpu.clone(),
        }
    }
}

/// `start`'s options.
#[derive(Debug, PartialEq, clap::Args)]
struct StartArgs {
    /// Pods of each kind per source.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pods: u32,
    /// The sources, comma-separated, or `current` alone (the installed
    /// one, no Helm needed).
    #[arg(long, value_name = "S,...", default_value = start::DEFAULT_SOURCES)]
    sources: String,
    /// The helm binary, to switch the sidecar-binary source (with --chart).
    #[arg(long, value_name = "PATH", requires = "chart")]
    helm: Option<PathBuf>,
    /// The chart directory (with --helm).
    #[arg(long, value_name = "DIR", requires = "helm")]
    chart: Option<PathBuf>,
    /// The node's containerd log, for the breakdown (none: no CRI times).
    #[arg(long, value_name = "PATH")]
    runtime_log: Option<PathBuf>,
    /// `kube-prestop.io/gate` on the injected pods: http-get, exec or
    /// none (default: the webhook's).
    #[arg(long, value_name = "GATE")]
    gate: Option<String>,
    /// Every pod (plain, reference, injected) sets the pod-level seccomp
    /// profile `RuntimeDefault`, as Pod Security `restricted` requires
    /// (default: none set, the kubelet's `seccompDefault` decides).
    #[arg(long)]
    runtime_default_seccomp: bool,
    /// The injected pods' `kube-prestop.io/sidecar-cpu-limit` (default:
    /// the webhook's).
    #[arg(long, value_name = "Q")]
    sidecar_cpu_limit: Option<String>,
    #[command(flatten)]
    busy: BusyArgs,
    #[command(flatten)]
    common: Common,
}

/// `init-start`'s options.
#[derive(Debug, PartialEq, clap::Args)]
struct InitStartArgs {
    /// Pods of each variant (rounds, one pod of each variant per round).
    #[arg(long, value_name = "N", default_value_t = 15,
          value_parser = clap::value_parser!(u32).range(1..))]
    pods: u32,
    /// The test image (busybox): the busybox variants' init container and
    /// every pod's main container.
    #[arg(long, value_name = "IMAGE", default_value = kube_prestop_e2e::DEFAULT_TEST_IMAGE)]
    image: String,
    /// The install image, with the engine's default pull policy (default:
    /// the one the installed webhook Deployment passes as --install-image,
    /// with its --install-image-pull-policy).
    #[arg(long, value_name = "IMAGE")]
    install_image: Option<String>,
    /// The node's containerd log, where the StartContainer times are read.
    #[arg(long, value_name = "PATH", default_value = init_start::DEFAULT_RUNTIME_LOG)]
    runtime_log: PathBuf,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Subcommand)]
enum Part {
    /// Pod start per sidecar-binary source, against a plain pod and one
    /// with a do-nothing native sidecar, and where the time goes.
    #[command(args_override_self = true)]
    Start(StartArgs),
    /// An Indexed Job in a labelled namespace, optionally beside busy pods:
    /// admission latency, pods injected, hooks that ran.
    #[command(args_override_self = true)]
    Burst {
        /// The Job's completions.
        #[arg(long, value_name = "N", default_value_t = 200)]
        completions: u32,
        /// The Job's parallelism.
        #[arg(long, value_name = "N", default_value_t = 20)]
        parallelism: u32,
        /// The main container's shell command (taken verbatim, even when it
        /// starts with '-').
        #[arg(
            long,
            value_name = "SH",
            default_value = "echo index $JOB_COMPLETION_INDEX",
            allow_hyphen_values = true
        )]
        command: String,
        #[command(flatten)]
        busy: BusyArgs,
        /// The pods' `kube-prestop.io/sidecar-cpu-request` (default: the
        /// webhook's).
        #[arg(long, value_name = "Q")]
        sidecar_cpu_request: Option<String>,
        /// The pods' `kube-prestop.io/sidecar-cpu-limit` (default: the
        /// webhook's).
        #[arg(long, value_name = "Q")]
        sidecar_cpu_limit: Option<String>,
        /// How long to wait for the Job, in seconds; past it the results
        /// cover the pods that have finished (`burst_outcome=DeadlinePassed`,
        /// the others counted in `burst_unfinished`).
        #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
        deadline: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Where an init container's StartContainer time goes, per security
    /// context (kube-prestop's install container's, with and without
    /// seccomp), against a plain one.
    #[command(args_override_self = true)]
    InitStart(InitStartArgs),
    /// The outcome exporter's memory at that many injected pods on
    /// API-created nodes (bench/outcomes-memory.sh).
    #[command(args_override_self = true)]
    OutcomesMemory {
        /// Pods to create.
        #[arg(long, value_name = "N", default_value_t = 10_000)]
        pods: u32,
        /// Fake nodes to spread them over (at least 1).
        #[arg(long, value_name = "N", default_value_t = 100)]
        nodes: u32,
        /// Runs in each pod's termination message.
        #[arg(long, value_name = "N", default_value_t = 2)]
        runs: u32,
        /// Requests in flight at once (at least 1).
        #[arg(long, value_name = "N", default_value_t = 32)]
        concurrency: u32,
        /// The kube-prestop-webhook binary to run as the exporter.
        #[arg(
            long,
            value_name = "PATH",
            default_value = "target/release/kube-prestop-webhook"
        )]
        exporter: String,
        #[command(flatten)]
        common: Common,
    },
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
    let cli = Cli::parse();
    let client = kube_prestop_e2e::client().await?;
    let (common, (lines, raw)) = match cli.part {
        Part::Start(StartArgs {
            pods,
            sources,
            helm,
            chart,
            runtime_log,
            gate,
            runtime_default_seccomp,
            sidecar_cpu_limit,
            busy,
            common,
        }) => {
            let opts = start::StartOpts {
                pods,
                sources: sources
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                // clap: --helm and --chart go together.
                release: helm
                    .zip(chart)
                    .map(|(helm, chart)| release::Release { helm, chart }),
                runtime_log,
                gate,
                runtime_default_seccomp,
                sidecar_cpu_limit,
                load: busy.load(),
            };
            let out = start::start(&client, &common.prefix, opts).await?;
            (common, out)
        }
        Part::Burst {
            completions,
            parallelism,
            command,
            busy,
            sidecar_cpu_request,
            sidecar_cpu_limit,
            deadline,
            common,
        } => {
            let out = burst(
                &client,
                &common.prefix,
                completions,
                parallelism,
                &command,
                Busy {
                    load: busy.load(),
                    sidecar_cpu_request,
                    sidecar_cpu_limit,
                },
                Duration::from_secs(deadline),
            )
            .await?;
            (common, out)
        }
        Part::InitStart(InitStartArgs {
            pods,
            image,
            install_image,
            runtime_log,
            common,
        }) => {
            let opts = init_start::InitStartOpts {
                pods,
                image,
                install_image: install_image.map(init_start::InstallImage::with_default_policy),
                runtime_log,
            };
            let out = init_start::init_start(&client, &common.prefix, opts).await?;
            (common, out)
        }
        Part::OutcomesMemory {
            pods,
            nodes,
            runs,
            concurrency,
            exporter,
            common,
        } => {
            let out = outcomes_memory::outcomes_memory(
                &client,
                &common.prefix,
                outcomes_memory::OutcomesOpts {
                    pods,
                    nodes: nodes.max(1),
                    runs,
                    concurrency: usize::try_from(concurrency)?.max(1),
                    exporter,
                },
            )
            .await?;
            (common, out)
        }
    };
    if let Some(path) = &common.raw {
        std::fs::write(path, serde_json::to_vec_pretty(&raw)?)
            .with_context(|| format!("writing {}", path.display()))?;
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

// ---- burst ---------------------------------------------------------------------

fn burst_job(
    records: &Records,
    completions: u32,
    parallelism: u32,
    command: &str,
    run: &str,
    busy: &Busy,
) -> Result<Job> {
    let mut annotations = serde_json::Map::new();
    if let Some(q) = &busy.sidecar_cpu_request {
        annotations.insert(
            kube_prestop_engine::annotations::SIDECAR_CPU_REQUEST.into(),
            q.as_str().into(),
        );
    }
    if let Some(q) = &busy.sidecar_cpu_limit {
        annotations.insert(
            kube_prestop_engine::annotations::SIDECAR_CPU_LIMIT.into(),
            q.as_str().into(),
        );
    }
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
                "metadata": { "labels": { RUN_LABEL: run }, "annotations": annotations },
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

/// What a sidecar logs when it runs a late hook (`sidecar/src/watch.rs`,
/// `start_evidence`).
const RAN_UNSEEN: &str = "ran and exited unseen";

/// The largest `longest_pause=S.SSSs` a sidecar's log reports, in ms
/// (`None`: no such field). The watcher prints it with its search
/// statistics (`sidecar/src/finder.rs`, `SearchStats`).
fn longest_pause_ms(log: &str) -> Option<f64> {
    log.split_whitespace()
        .filter_map(|w| seconds_field(w, "longest_pause="))
        .map(|s| s * 1e3)
        .max_by(f64::total_cmp)
}

/// The seconds of a sidecar log word `KEY=S.SSSs` (`key` with its `=`);
/// `None` for another key or a value that is not `S.SSSs`.
fn seconds_field(word: &str, key: &str) -> Option<f64> {
    word.strip_prefix(key)?.strip_suffix('s')?.parse().ok()
}

/// What a sidecar's `cpu throttling` line (`sidecar/src/cpu_stat.rs`, at
/// its exit) says: `(nr_throttled, throttled ms)`; `None` without the line
/// or with `unknown`.
fn throttling(log: &str) -> Option<(u64, f64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("cpu throttling container="))?;
    let throttled: u64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("nr_throttled="))?
        .parse()
        .ok()?;
    let secs = line
        .split_whitespace()
        .find_map(|w| seconds_field(w, "throttled="))?;
    Some((throttled, secs * 1e3))
}

/// Pods that keep CPUs busy beside the burst, and the sidecars' CPU request.
struct Busy {
    /// The busy pods ([`busy::Load`]).
    load: busy::Load,
    /// The burst pods' `kube-prestop.io/sidecar-cpu-request` (none: the
    /// webhook's default).
    sidecar_cpu_request: Option<String>,
    /// The burst pods' `kube-prestop.io/sidecar-cpu-limit` (none: the
    /// webhook's default).
    sidecar_cpu_limit: Option<String>,
}

async fn burst(
    client: &Client,
    prefix: &str,
    completions: u32,
    parallelism: u32,
    command: &str,
    busy: Busy,
    deadline: Duration,
) -> Result<(String, Value)> {
    let ns = TestNamespace::create(client, &format!("{prefix}-burst"), true).await?;
    let records = Records::create(&format!("{prefix}-burst"))?;
    let client = client.clone();
    let rec = records.clone();
    let command = command.to_owned();
    let result = with_namespaces(vec![ns], |names| async move {
        let ns = names.concat();
        let run = unique_suffix();
        let job = burst_job(
            &rec,
            completions,
            parallelism,
            &command,
            &run,
            &busy,
        )?;
        busy::start(&client, &ns, &busy.load).await?;
        let (wh_before, replicas_before) = webhook_histogram(&client).await?;
        let api_before = ApiserverWebhookStats::scrape(&client).await?;
        log(&format!(
            "burst: Indexed Job, {completions} completions, parallelism {parallelism}, in {ns}"
        ));
        let t = Instant::now();
        let outcome = run_job_until(&client, &ns, &job, deadline).await?;
        let took = t.elapsed();
        let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
        let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}=burst"));
        let outcome = match outcome {
            Some(outcome) => {
                log(&format!("burst: Job {outcome:?} after {:.1} s", took.as_secs_f64()));
                poll_until(POD_TIMEOUT, Duration::from_secs(1), || {
                    let (pods_api, lp) = (pods_api.clone(), lp.clone());
                    async move { Ok(pods_api.list(&lp).await?.items.iter().all(pod_finished)) }
                })
                .await
                .context("burst pods did not all finish")?;
                format!("{outcome:?}")
            }
            // Past the deadline: what has finished is counted, what has not
            // is named (burst_unfinished) and left to the namespace's
            // deletion; nothing measured so far is thrown away.
            None => {
                log(&format!(
                    "burst: the Job did not finish within {} s: results over the pods that have finished",
                    deadline.as_secs()
                ));
                "DeadlinePassed".to_owned()
            }
        };
        let (wh_after, replicas_after) = webhook_histogram(&client).await?;
        let api_after = ApiserverWebhookStats::scrape(&client).await?;
        let (pods, unfinished): (Vec<Pod>, Vec<Pod>) =
            pods_api.list(&lp).await?.items.into_iter().partition(pod_finished);
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
        // The sidecars' own count of hook runs, pod by pod, with the log.
        let hook_logs: Vec<(String, Option<(usize, String)>)> = futures::stream::iter(names.clone())
            .map(|pod| {
                let (client, ns) = (client.clone(), ns.clone());
                async move {
                    let l = sidecar_logs(&client, &ns, &pod, C)
                        .await
                        .ok()
                        .map(|l| (count_lines(&l, HOOK_FINISHED), l));
                    (pod, l)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        // Exit -> hook: from the main container's last log line to the
        // sidecar's `hook started`, both stamped by the runtime as it read
        // them (one clock); pods whose main printed nothing give no sample.
        let mut exit_hook_ms: Vec<f64> = futures::stream::iter(names.clone())
            .map(|pod| {
                let (client, ns) = (client.clone(), ns.clone());
                async move {
                    let main = start::timed_lines(&client, &ns, &pod, C).await.ok()?;
                    let side = start::timed_lines(&client, &ns, &pod, &sidecar_name(C))
                        .await
                        .ok()?;
                    let exited = main.last()?.0;
                    let hook = start::first_with(&side, "kube-prestop: hook started")?;
                    Some(ms(hook - exited))
                }
            })
            .buffer_unordered(8)
            .filter_map(|v| async move { v })
            .collect()
            .await;
        exit_hook_ms.sort_by(f64::total_cmp);
        let hooks = |l: &Option<(usize, String)>| l.as_ref().map(|(n, _)| *n);
        let with_hook = hook_logs.iter().filter(|(_, l)| hooks(l) == Some(1)).count();
        // A pod whose hook did not run, with its sidecar's last log lines:
        // whether the sidecar reported the miss (the guarantee's reported
        // cases, docs/operations.md) or lost it silently.
        let without_hook: Vec<(&String, &str)> = hook_logs
            .iter()
            .filter_map(|(p, l)| match l {
                Some((0, log)) => Some((p, log.as_str())),
                _ => None,
            })
            .collect();
        let reported = without_hook
            .iter()
            .filter(|(_, log)| log.contains(NEVER_SEEN_RUNNING))
            .count();
        // Each sidecar's longest pause between two looks, the most it
        // reported (`longest_pause=` in its `watching`/`found`/`never seen`
        // lines): how starved it was while it searched.
        let mut pause_ms: Vec<f64> = hook_logs
            .iter()
            .filter_map(|(_, l)| l.as_ref().and_then(|(_, log)| longest_pause_ms(log)))
            .collect();
        pause_ms.sort_by(f64::total_cmp);
        // Each sidecar's CFS throttling over its life (its `cpu throttling`
        // line): whether the CPU limit, beside the request, held it back.
        let throttles: Vec<(u64, f64)> = hook_logs
            .iter()
            .filter_map(|(_, l)| l.as_ref().and_then(|(_, log)| throttling(log)))
            .collect();
        let throttled_sidecars = throttles.iter().filter(|(n, _)| *n > 0).count();
        let mut throttled_ms: Vec<f64> = throttles.iter().map(|(_, ms)| *ms).collect();
        throttled_ms.sort_by(f64::total_cmp);
        let more_hooks = hook_logs.iter().filter(|(_, l)| hooks(l).is_some_and(|n| n > 1)).count();
        // Late hooks: runs for a container the watcher never saw run.
        let ran_late =
            |l: &Option<(usize, String)>| l.as_ref().is_some_and(|(_, log)| log.contains(RAN_UNSEEN));
        let late = hook_logs.iter().filter(|(_, l)| ran_late(l)).count();
        let no_logs = hook_logs.iter().filter(|(_, l)| l.is_none()).count();
        let recorded = rec.lines("hooks");
        let indexes: BTreeSet<&str> = recorded
            .iter()
            .filter_map(|l| l.split(' ').next())
            .collect();

        let mut lines = String::new();
        out(&mut lines, "burst_completions", completions);
        out(&mut lines, "burst_parallelism", parallelism);
        out(&mut lines, "burst_busy_pods", busy.load.pods);
        out(&mut lines, "burst_busy_cpu", &busy.load.cpu);
        out(
            &mut lines,
            "burst_sidecar_cpu_request",
            busy.sidecar_cpu_request.as_deref().unwrap_or("default"),
        );
        out(
            &mut lines,
            "burst_sidecar_cpu_limit",
            busy.sidecar_cpu_limit.as_deref().unwrap_or("default"),
        );
        out(&mut lines, "burst_outcome", &outcome);
        out(&mut lines, "burst_seconds", format!("{:.1}", took.as_secs_f64()));
        out(&mut lines, "burst_pods", pods.len());
        out(&mut lines, "burst_unfinished", unfinished.len());
        out(&mut lines, "burst_succeeded", succeeded);
        out(&mut lines, "burst_injected", n_injected);
        out(&mut lines, "burst_hook_record_lines", recorded.len());
        out(&mut lines, "burst_hook_record_indexes", indexes.len());
        out(&mut lines, "burst_sidecar_one_hook", with_hook);
        out(&mut lines, "burst_sidecar_no_hook", without_hook.len());
        out(&mut lines, "burst_sidecar_no_hook_reported", reported);
        out(&mut lines, "burst_sidecar_more_hooks", more_hooks);
        out(&mut lines, "burst_sidecar_late_hooks", late);
        out(&mut lines, "burst_sidecar_no_logs", no_logs);
        out(&mut lines, "burst_exit_hook_count", exit_hook_ms.len());
        for (q, n) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            out_ms(
                &mut lines,
                &format!("burst_exit_hook_{n}_ms"),
                percentile(&exit_hook_ms, q),
            );
        }
        out(&mut lines, "burst_pause_count", pause_ms.len());
        for (q, n) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            out_ms(&mut lines, &format!("burst_pause_{n}_ms"), percentile(&pause_ms, q));
        }
        out(&mut lines, "burst_throttle_count", throttles.len());
        out(&mut lines, "burst_throttled_sidecars", throttled_sidecars);
        for (q, n) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            out_ms(
                &mut lines,
                &format!("burst_throttled_{n}_ms"),
                percentile(&throttled_ms, q),
            );
        }
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
        // Every sidecar without exactly one hook, and every one whose hook
        // ran late, keeps its whole log, its restart count and termination
        // message, and its index's records.
        let sidecar = sidecar_name(C);
        let kept = |(pod, l): &(String, Option<(usize, String)>)| {
                let p = pods.iter().find(|p| p.metadata.name.as_deref() == Some(pod.as_str()));
                let st = p.and_then(|p| p.status.as_ref()).and_then(|s| {
                    s.init_container_statuses
                        .iter()
                        .flatten()
                        .find(|c| c.name == sidecar)
                });
                let index = p
                    .and_then(|p| p.metadata.annotations.as_ref())
                    .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"));
                json!({
                    "pod": pod,
                    "hooks": hooks(l),
                    "sidecar_log": l.as_ref().map(|(_, log)| log.lines().collect::<Vec<_>>()),
                    "sidecar_restarts": st.map(|c| c.restart_count),
                    "sidecar_termination_message": st
                        .and_then(|c| {
                            c.state
                                .as_ref()
                                .and_then(|s| s.terminated.as_ref())
                                .or(c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
                        })
                        .and_then(|t| t.message.clone()),
                    "completion_index": index,
                    "records": index.map(|i| recorded
                        .iter()
                        .filter(|r| r.split(' ').next() == Some(i.as_str()))
                        .collect::<Vec<_>>()),
                })
        };
        let not_one_hook: Vec<Value> = hook_logs
            .iter()
            .filter(|(_, l)| hooks(l) != Some(1))
            .map(kept)
            .collect();
        let late_hook: Vec<Value> = hook_logs
            .iter()
            .filter(|(_, l)| ran_late(l))
            .map(kept)
            .collect();
        let raw = json!({
            "pods_unfinished": unfinished.iter().filter_map(|p| p.metadata.name.as_deref()).collect::<Vec<_>>(),
            "pods_not_one_hook": not_one_hook,
            "pods_late_hook": late_hook,
            "webhook_histogram": wh.buckets.iter().map(|(le, c)| json!([le.to_string(), c])).collect::<Vec<_>>(),
            "apiserver_histogram": api.duration.buckets.iter().map(|(le, c)| json!([le.to_string(), c])).collect::<Vec<_>>(),
        });
        Ok((lines, raw))
    })
    .await;
    records.remove();
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{
        BusyArgs, Cli, Common, InitStartArgs, Part, StartArgs, longest_pause_ms, throttling,
    };
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The command line `args` (after the binary's name), parsed.
    fn try_parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(
            std::iter::once("kube-prestop-cluster-bench").chain(args.iter().copied()),
        )
    }

    /// `start`'s options from `args` (after the binary's name).
    fn start(args: &[&str]) -> StartArgs {
        let Part::Start(args) = try_parse(args).unwrap().part else {
            unreachable!()
        };
        args
    }

    #[test]
    fn defaults_and_run_sh_lines_parse() {
        assert_eq!(
            start(&["start"]),
            StartArgs {
                pods: 20,
                sources: super::start::DEFAULT_SOURCES.to_owned(),
                helm: None,
                chart: None,
                runtime_log: None,
                gate: None,
                runtime_default_seccomp: false,
                sidecar_cpu_limit: None,
                busy: BusyArgs {
                    busy_pods: 0,
                    busy_cpu: "400m".to_owned()
                },
                common: Common {
                    prefix: "kpb".to_owned(),
                    raw: None
                },
            }
        );
        // bench/run.sh's start line, with the ConfigMap delivery's helm.
        assert_eq!(
            start(&[
                "start",
                "--pods",
                "40",
                "--sources",
                "imageVolume,configMap",
                "--helm",
                "/cache/helm",
                "--chart",
                "charts/kube-prestop",
                "--gate",
                "exec",
                "--runtime-default-seccomp",
                "--sidecar-cpu-limit",
                "500m",
                "--busy-pods",
                "4",
                "--busy-cpu",
                "300m",
                "--runtime-log",
                "/var/lib/kube-prestop/cluster/logs/containerd.log",
                "--raw",
                "/tmp/w/cluster-start.json",
            ]),
            StartArgs {
                pods: 40,
                sources: "imageVolume,configMap".to_owned(),
                helm: Some("/cache/helm".into()),
                chart: Some("charts/kube-prestop".into()),
                runtime_log: Some("/var/lib/kube-prestop/cluster/logs/containerd.log".into()),
                gate: Some("exec".to_owned()),
                runtime_default_seccomp: true,
                sidecar_cpu_limit: Some("500m".to_owned()),
                busy: BusyArgs {
                    busy_pods: 4,
                    busy_cpu: "300m".to_owned()
                },
                common: Common {
                    prefix: "kpb".to_owned(),
                    raw: Some("/tmp/w/cluster-start.json".into())
                },
            }
        );

        // bench/run.sh's burst line (its default command).
        let cli = Cli::try_parse_from([
            "kube-prestop-cluster-bench",
            "burst",
            "--completions",
            "200",
            "--parallelism",
            "10",
            "--command",
            "echo index $JOB_COMPLETION_INDEX",
            "--busy-pods",
            "0",
            "--busy-cpu",
            "400m",
            "--raw",
            "/tmp/w/cluster-burst.json",
        ])
        .unwrap();
        assert!(matches!(
            cli.part,
            Part::Burst { completions: 200, parallelism: 10, ref command, sidecar_cpu_request: None, deadline: 1800, .. }
                if command == "echo index $JOB_COMPLETION_INDEX"
        ));
        let cli =
            Cli::try_parse_from(["kube-prestop-cluster-bench", "burst", "--deadline", "3600"])
                .unwrap();
        assert!(matches!(cli.part, Part::Burst { deadline: 3600, .. }));

        let cli = Cli::try_parse_from(["kube-prestop-cluster-bench", "outcomes-memory"]).unwrap();
        assert!(matches!(
            cli.part,
            Part::OutcomesMemory { pods: 10_000, nodes: 100, runs: 2, concurrency: 32, ref exporter, .. }
                if exporter == "target/release/kube-prestop-webhook"
        ));
    }

    /// `init-start`'s options from `args` (after the binary's name).
    fn init_start(args: &[&str]) -> InitStartArgs {
        let Part::InitStart(args) = try_parse(args).unwrap().part else {
            unreachable!()
        };
        args
    }

    #[test]
    fn init_start_defaults_and_run_sh_line_parse() {
        assert_eq!(
            init_start(&["init-start"]),
            InitStartArgs {
                pods: 15,
                image: "localhost/kube-prestop/busybox:test".to_owned(),
                install_image: None,
                runtime_log: "/var/lib/kube-prestop/cluster/logs/containerd.log".into(),
                common: Common {
                    prefix: "kpb".to_owned(),
                    raw: None
                },
            }
        );
        // bench/run.sh's init-start line, and every option.
        assert_eq!(
            init_start(&[
                "init-start",
                "--pods",
                "30",
                "--image",
                "reg/busybox:1",
                "--install-image",
                "reg/kube-prestop-sidecar:2",
                "--runtime-log",
                "/state/cluster/logs/containerd.log",
                "--prefix",
                "x",
                "--raw",
                "/tmp/w/cluster-init-start.json",
            ]),
            InitStartArgs {
                pods: 30,
                image: "reg/busybox:1".to_owned(),
                install_image: Some("reg/kube-prestop-sidecar:2".to_owned()),
                runtime_log: "/state/cluster/logs/containerd.log".into(),
                common: Common {
                    prefix: "x".to_owned(),
                    raw: Some("/tmp/w/cluster-init-start.json".into())
                },
            }
        );
        // A later option replaces an earlier one (args_override_self).
        assert_eq!(
            init_start(&["init-start", "--pods", "3", "--pods", "4"]).pods,
            4
        );
    }

    #[test]
    fn bad_lines_are_refused() {
        for bad in [
            &["start", "--helm", "/h"][..],
            &["start", "--chart", "c"],
            &["start", "--pods", "many"],
            &["start", "--completions", "5"],
            &["burst", "--pods", "5"],
            &["burst", "--raw"],
            &["init-start", "--pods", "0"],
            &["init-start", "--pods", "-1"],
            &["init-start", "--install-image"],
            &["init-start", "--sources", "current"],
            &["init-start", "--busy-pods", "2"],
            &["frobnicate"],
            &[],
        ] {
            assert!(try_parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn throttling_is_read_from_the_sidecars_last_cpu_line() {
        let log = "kube-prestop: watching\n\
                   kube-prestop: cpu throttling container=main nr_periods=12 nr_throttled=3 throttled=0.250s\n\
                   kube-prestop: exiting container=main status=0\n";
        assert_eq!(throttling(log), Some((3, 250.0)));
        assert_eq!(
            throttling(
                "kube-prestop: cpu throttling container=main unknown: no cpu.stat to read (x)"
            ),
            None
        );
        assert_eq!(throttling("kube-prestop: exiting"), None);
    }

    #[test]
    fn longest_pause_is_the_largest_the_log_reports() {
        let log = "kube-prestop: watching container=main instance=7-1 pid=7 found_after=0.1s \
                   listings=2 candidates=1 longest_pause=0.040s\n\
                   kube-prestop: warning: container=main was never seen running ... \
                   longest_pause=1.358s\n";
        assert_eq!(longest_pause_ms(log), Some(1358.0));
        assert_eq!(longest_pause_ms("kube-prestop: hook finished"), None);
        assert_eq!(longest_pause_ms("longest_pause=x"), None);
    }
}
