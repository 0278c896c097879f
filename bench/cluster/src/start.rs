//! `start`: pod start per sidecar-binary source, and where the time goes.
//!
//! One phase per source (`--sources`, default `imageVolume,configMap,
//! installContainer`): the installed release is switched to
//! `sidecarBinary.source=<source>` (Helm upgrade, everything else kept;
//! then until no webhook replica of the old configuration is left), the
//! webhook is asked (dry runs) until it gives that delivery, one warm-up Job
//! runs (not a sample; with `configMap` it makes the namespace's ConfigMap),
//! and then the same Job (one container that prints its own start time and
//! sleeps 1.5 s, an exec preStop) runs N times in a labelled namespace
//! (injected), N times in an unlabelled one (plain) and N times there with
//! one do-nothing native sidecar added by hand (the reference), interleaved
//! A B C C B A, one pod at a time, each to its end. Every injected pod must
//! have got the phase's delivery: any other is an error naming both. At the
//! end, even after an error or SIGINT, the release is rolled back to the
//! revision it had (a second SIGINT does not stop the rollback; SIGTERM
//! does). `--sources current` measures the release as it is, without Helm.
//! Before each phase: exactly one MutatingWebhookConfiguration's
//! `inject.kube-prestop.io` webhook selects the labelled namespace
//! ([`crate::release::ensure_one_injector`]).
//!
//! Times, all from the host's clock (the node is a network namespace on
//! this machine), with sub-millisecond resolution instead of the API's
//! one-second timestamps:
//! - pod added: when a watch on the pods delivered the new pod (after
//!   admission); Job created: just before the create call;
//! - main started: the container's first instruction, busybox `adjtimex`,
//!   which prints the kernel's clock and time status ([`crate::clock`]:
//!   the sub-second field is in ns when the status has STA_NANO, else in
//!   µs). A time before the Job create call or after the pod can have run
//!   its sleep is refused: counted and reported per kind, not a sample;
//! - the difference of the injected and reference medians with its 95%
//!   percentile bootstrap interval ([`crate::stats`]), per phase;
//! - main Running (API): when the watch delivered that status;
//! - the node's CRI calls from containerd's log ([`crate::runtime_log`]):
//!   `RunPodSandbox`, and per container `CreateContainer`, `StartContainer`
//!   (called, returned) and the exit;
//! - the container log's own timestamps (containerd's, taken as it reads
//!   each line) of the sidecar's `watch starting`, `armed` and `post-start
//!   done` lines;
//! - admission: the webhook's `duration_ms` of each review of the phase
//!   (its log line), and the API server's histogram for the webhook.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{LogParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    INSTALL_CONTAINER, binary_delivery, container_status, injected, job_name, pod_finished,
};
use kube_prestop_e2e::fixtures::tiny_resources;
use kube_prestop_e2e::metrics::{ApiserverWebhookStats, percentile};
use kube_prestop_e2e::webhook::{WEBHOOK_NAMESPACE, probe_pod_with, wait_delivery, webhook_pods};
use kube_prestop_e2e::{TestNamespace, run_job, sidecar_name, test_image, unique_suffix};
use serde_json::{Value, json};

use crate::clock::{ClockError, implausible, parse_adjtimex};
use crate::release::{Release, ensure_one_injector};
use crate::runtime_log::{RuntimeLog, parse_time};
use crate::stats;
use crate::{C, POD_TIMEOUT, RUN_LABEL, log, ms, now_ns, out, out_ms, with_namespaces};

/// The sources measured by default, in this order.
pub const DEFAULT_SOURCES: &str = "imageVolume,configMap,installContainer";
/// `--sources` value that measures the release as installed.
pub const CURRENT: &str = "current";
/// Every `sidecarBinary.source` a phase may switch to.
const SOURCES: [&str; 3] = ["imageVolume", "configMap", "installContainer"];
/// Name of the reference native sidecar.
const REFERENCE_SIDECAR: &str = "reference-sidecar";
/// How long the webhook may take to give a phase's delivery.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the main container sleeps after printing its clock (ms): long
/// enough for the kubelet's 1 s relist to report it Running; also the
/// least time between its first instruction and the pod's end.
const MAIN_SLEEP_MS: i128 = 1_500;

/// What the start part measures.
#[derive(Debug, Clone)]
pub struct StartOpts {
    /// Pods of each kind per phase.
    pub pods: u32,
    /// The phases' sources ([`SOURCES`]), or [`CURRENT`] alone.
    pub sources: Vec<String>,
    /// Helm and the chart, to switch the source (not needed for [`CURRENT`]).
    pub release: Option<Release>,
    /// The node's containerd log, for the breakdown (none: no CRI times).
    pub runtime_log: Option<PathBuf>,
    /// `kube-prestop.io/gate` on the injected pods (`http-get`, `exec`,
    /// `none`); none: the webhook's default.
    pub gate: Option<String>,
    /// Every pod of the run (all three kinds) sets the pod-level
    /// `securityContext.seccompProfile` to `RuntimeDefault`, as Pod
    /// Security's `restricted` level requires. runc builds and loads that
    /// filter at every container start and every exec, the exec start
    /// gate's included (`docs/facts.md` R8). False: no profile is set, and
    /// the kubelet's `seccompDefault` (false unless configured) decides.
    pub runtime_default_seccomp: bool,
    /// The injected pods' `kube-prestop.io/sidecar-cpu-limit` (none: the
    /// webhook's default, 200m). The exec start gate runs in the
    /// sidecar's cgroup, under this limit.
    pub sidecar_cpu_limit: Option<String>,
    /// Busy pods spinning the node's CPUs through the whole run (in the
    /// plain namespace; 0 pods: an idle node).
    pub load: crate::busy::Load,
}

impl StartOpts {
    /// Checks the sources: each known, none twice, [`CURRENT`] only alone,
    /// Helm given when a source is switched to.
    pub fn check(&self) -> Result<()> {
        ensure!(!self.sources.is_empty(), "--sources is empty");
        if let Some(g) = &self.gate {
            ensure!(
                ["http-get", "exec", "none"].contains(&g.as_str()),
                "--gate: {g:?} is not one of http-get, exec, none"
            );
        }
        for s in &self.sources {
            ensure!(
                SOURCES.contains(&s.as_str()) || (s == CURRENT && self.sources.len() == 1),
                "--sources: {s:?} is not one of {} (or {CURRENT} alone)",
                SOURCES.join(", ")
            );
        }
        let mut seen = self.sources.clone();
        seen.sort();
        seen.dedup();
        ensure!(
            seen.len() == self.sources.len(),
            "--sources names one twice"
        );
        ensure!(
            self.sources == [CURRENT] || self.release.is_some(),
            "switching sources needs --helm and --chart"
        );
        Ok(())
    }
}

/// What the watch saw of one pod (ns).
#[derive(Debug, Clone, Default)]
struct Watched {
    job: String,
    added: i128,
    running: Option<i128>,
    finished: bool,
    injected: bool,
    /// Injected pods: where the binary comes from ([`binary_delivery`]).
    delivery: &'static str,
}

type WatchMap = Arc<Mutex<BTreeMap<String, Watched>>>;

fn main_running(pod: &Pod) -> bool {
    container_status(pod, C)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
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
                delivery: binary_delivery(&pod),
                ..Watched::default()
            });
            if w.running.is_none() && main_running(&pod) {
                w.running = Some(at);
            }
            w.finished = pod_finished(&pod);
        }
    })
}

/// Which of the three pods of a phase a sample is.
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
        "name": REFERENCE_SIDECAR,
        "image": test_image(),
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        "resources": tiny_resources()
    })
}

/// What every Job of a run has in common besides its kind.
#[derive(Debug, Clone, Copy)]
struct PodShape<'a> {
    /// The injected kind's `kube-prestop.io/gate` annotation, if any.
    gate: Option<&'a str>,
    /// [`StartOpts::runtime_default_seccomp`].
    runtime_default_seccomp: bool,
    /// [`StartOpts::sidecar_cpu_limit`].
    sidecar_cpu_limit: Option<&'a str>,
}

impl StartOpts {
    fn shape(&self) -> PodShape<'_> {
        PodShape {
            gate: self.gate.as_deref(),
            runtime_default_seccomp: self.runtime_default_seccomp,
            sidecar_cpu_limit: self.sidecar_cpu_limit.as_deref(),
        }
    }
}

/// The bench's Job of `kind`, of the run's `shape`.
fn start_job(name: &str, run: &str, kind: Kind, shape: PodShape<'_>) -> Result<Job> {
    let init: Vec<Value> = if kind == Kind::OneSidecar {
        vec![reference_sidecar()]
    } else {
        Vec::new()
    };
    let mut annotations = serde_json::Map::new();
    if kind == Kind::Injected {
        if let Some(g) = shape.gate {
            annotations.insert(kube_prestop_engine::annotations::GATE.into(), g.into());
        }
        if let Some(q) = shape.sidecar_cpu_limit {
            annotations.insert(
                kube_prestop_engine::annotations::SIDECAR_CPU_LIMIT.into(),
                q.into(),
            );
        }
    }
    let security_context = if shape.runtime_default_seccomp {
        json!({ "seccompProfile": { "type": "RuntimeDefault" } })
    } else {
        json!({})
    };
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { RUN_LABEL: run }, "annotations": annotations },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": security_context,
                    "initContainers": init,
                    "containers": [{
                        "name": C,
                        "image": test_image(),
                        "imagePullPolicy": "Never",
                        // First instruction: the clock and its unit (crate::clock).
                        // Lives MAIN_SLEEP_MS so the kubelet's 1 s relist reports it Running.
                        "command": ["sh", "-c", format!(
                            "adjtimex | grep -E 'status:|tv_'; sleep {}.{:03}",
                            MAIN_SLEEP_MS / 1000,
                            MAIN_SLEEP_MS % 1000
                        )],
                        "lifecycle": { "preStop": { "exec": { "command": ["sh", "-c", "echo bye"] } } },
                        "resources": tiny_resources()
                    }]
                }
            }
        }
    }))?)
}

/// A container's log lines with the runtime's timestamp of each (ns).
pub(crate) async fn timed_lines(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> Result<Vec<(i128, String)>> {
    let params = LogParams {
        container: Some(container.to_owned()),
        timestamps: true,
        ..LogParams::default()
    };
    let text = Api::<Pod>::namespaced(client.clone(), ns)
        .logs(pod, &params)
        .await
        .with_context(|| format!("logs of {ns}/{pod} container {container}"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (ts, rest) = l.split_once(' ')?;
            Some((parse_time(ts)?, rest.to_owned()))
        })
        .collect())
}

/// The `waited=S.SSSs` of a `post-start done` line, in ns.
fn post_start_waited_ns(line: &str) -> Option<i128> {
    let secs: f64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("waited="))?
        .trim_end_matches(':')
        .strip_suffix('s')?
        .parse()
        .ok()?;
    Some((secs * 1e9) as i128)
}

/// The time of the first line containing `needle`.
pub(crate) fn first_with(lines: &[(i128, String)], needle: &str) -> Option<i128> {
    lines
        .iter()
        .find(|(_, l)| l.contains(needle))
        .map(|(t, _)| *t)
}

#[derive(Debug, Clone)]
struct StartSample {
    kind: Kind,
    /// The phase's name (its source).
    phase: String,
    pod: String,
    job_created: i128,
    added: i128,
    running_event: i128,
    main_started: i128,
    delivery: &'static str,
    /// Named times (ns) for the breakdown: see [`STEPS`].
    marks: BTreeMap<String, i128>,
}

/// The role a container plays in the breakdown, by its name.
fn role(container: &str) -> Option<&'static str> {
    if container == C {
        Some("main")
    } else if container == sidecar_name(C) || container == REFERENCE_SIDECAR {
        Some("sidecar")
    } else if container == INSTALL_CONTAINER {
        Some("install")
    } else {
        None
    }
}

/// The breakdown's steps: id, label, from mark, to mark. A sample counts
/// in a step when it has both marks.
const STEPS: &[(&str, &str, &str, &str)] = &[
    (
        "job_to_added",
        "Job create call → pod added (Job controller, admission)",
        "job_created",
        "added",
    ),
    (
        "added_to_sandbox",
        "pod added → RunPodSandbox called (scheduling, kubelet, volumes)",
        "added",
        "sandbox_requested",
    ),
    (
        "sandbox",
        "RunPodSandbox",
        "sandbox_requested",
        "sandbox_ready",
    ),
    (
        "sandbox_to_first_create",
        "sandbox ready → first container's CreateContainer called",
        "sandbox_ready",
        "first_create_requested",
    ),
    (
        "install_create",
        "install container: CreateContainer",
        "install_create_requested",
        "install_created",
    ),
    (
        "install_start",
        "install container: StartContainer",
        "install_start_requested",
        "install_started",
    ),
    (
        "install_run",
        "install container: started → exited (copies the binary)",
        "install_started",
        "install_exited",
    ),
    (
        "install_to_sidecar",
        "install container exited → sidecar's CreateContainer called (next pod sync)",
        "install_exited",
        "sidecar_create_requested",
    ),
    (
        "sidecar_create",
        "sidecar: CreateContainer (volumes, image volume mount)",
        "sidecar_create_requested",
        "sidecar_created",
    ),
    (
        "sidecar_start",
        "sidecar: StartContainer (runc)",
        "sidecar_start_requested",
        "sidecar_started",
    ),
    (
        "sidecar_exec",
        "sidecar: StartContainer called → `watch starting` logged",
        "sidecar_start_requested",
        "sidecar_first_line",
    ),
    (
        "sidecar_arm",
        "watcher: `watch starting` → `armed`",
        "sidecar_first_line",
        "sidecar_armed",
    ),
    (
        "gate",
        "sidecar's StartContainer returned → `gate answered` (httpGet gate: the kubelet's GetPod, GetPodStatus and request, held until armed)",
        "sidecar_started",
        "sidecar_gate_answered",
    ),
    (
        "gate_to_main",
        "`gate answered` → main's CreateContainer called (the handler's response read, sync ends, next sync)",
        "sidecar_gate_answered",
        "main_create_requested",
    ),
    (
        "post_start_exec",
        "sidecar's StartContainer returned → postStart handler running (kubelet's exec: ExecSync, runc exec)",
        "sidecar_started",
        "sidecar_post_start_begin",
    ),
    (
        "post_start_wait",
        "postStart handler: running → `post-start done` (its wait for the mark)",
        "sidecar_post_start_begin",
        "sidecar_post_start_done",
    ),
    (
        "post_start",
        "`armed` → `post-start done`",
        "sidecar_armed",
        "sidecar_post_start_done",
    ),
    (
        "post_start_to_main",
        "`post-start done` → main's CreateContainer called (exec ends, sync ends, relist, next sync)",
        "sidecar_post_start_done",
        "main_create_requested",
    ),
    (
        "armed_to_main",
        "`armed` → main's CreateContainer called (negative: the watcher armed after X's create began; only without a gate)",
        "sidecar_armed",
        "main_create_requested",
    ),
    (
        "sidecar_to_main",
        "sidecar's StartContainer returned → main's CreateContainer called (postStart + next pod sync)",
        "sidecar_started",
        "main_create_requested",
    ),
    (
        "main_create",
        "main: CreateContainer",
        "main_create_requested",
        "main_created",
    ),
    (
        "main_start",
        "main: StartContainer (runc)",
        "main_start_requested",
        "main_started",
    ),
    (
        "main_exec",
        "main: StartContainer called → its first instruction",
        "main_start_requested",
        "main_first",
    ),
    (
        "total",
        "pod added → main's first instruction",
        "added",
        "main_first",
    ),
];

/// Adds the pod's CRI call times from the runtime log to the sample's marks.
fn add_runtime_marks(sample: &mut StartSample, log: &RuntimeLog) {
    let Some((ns, name)) = sample.pod.split_once('/') else {
        return;
    };
    let Some(pod) = log.pod(ns, name) else {
        return;
    };
    let m = &mut sample.marks;
    let mut put = |k: String, v: Option<i128>| {
        if let Some(v) = v {
            m.insert(k, v);
        }
    };
    put("sandbox_requested".into(), pod.run_sandbox.requested);
    put("sandbox_ready".into(), pod.run_sandbox.returned);
    put(
        "first_create_requested".into(),
        pod.containers
            .values()
            .filter_map(|c| c.create.requested)
            .min(),
    );
    for (name, c) in &pod.containers {
        let Some(r) = role(name) else { continue };
        put(format!("{r}_create_requested"), c.create.requested);
        put(format!("{r}_created"), c.create.returned);
        put(format!("{r}_start_requested"), c.start.requested);
        put(format!("{r}_started"), c.start.returned);
        put(format!("{r}_exited"), c.exited);
    }
}

/// A pod whose main-started time cannot be true: not a sample.
#[derive(Debug, Clone)]
struct Refused {
    kind: Kind,
    pod: String,
    reason: String,
    /// The main container's log lines (its `adjtimex` print).
    lines: Vec<String>,
}

/// One phase's samples and admission figures.
struct Phase {
    name: String,
    samples: Vec<StartSample>,
    /// Pods refused ([`Refused`]), in the order they ran.
    refused: Vec<Refused>,
    /// The webhook's `duration_ms` of each review of the phase (dry runs
    /// left out), sorted.
    admission_ms: Vec<f64>,
    /// The API server's histogram for the webhook over the phase's samples.
    api: ApiserverWebhookStats,
}

pub async fn start(client: &Client, prefix: &str, opts: StartOpts) -> Result<(String, Value)> {
    opts.check()?;
    let inj = TestNamespace::create(client, &format!("{prefix}-start-inj"), true).await?;
    let plain = TestNamespace::create(client, &format!("{prefix}-start-plain"), false).await?;
    let client = client.clone();
    with_namespaces(vec![inj, plain], |names| async move {
        ensure_one_injector(&client, &names[0], &names[1]).await?;
        crate::busy::start(&client, &names[1], &opts.load).await?;
        let switching = opts.sources != [CURRENT];
        let original = match (&opts.release, switching) {
            (Some(r), true) => {
                let (rev, source) = r.current().await?;
                log(&format!(
                    "release at revision {rev}, sidecarBinary.source={source}; rolled back to it at the end"
                ));
                Some((rev, source))
            }
            _ => None,
        };
        let mut phases = Vec::new();
        let run = async {
            for (idx, source) in opts.sources.iter().enumerate() {
                phases.push(run_phase(
                    &client,
                    &names,
                    idx,
                    source,
                    opts.pods,
                    opts.release.as_ref(),
                    opts.shape(),
                )
                .await?);
            }
            Ok::<_, anyhow::Error>(())
        };
        // Interrupted (Ctrl-C): stop measuring, still restore the release.
        let result = tokio::select! {
            r = run => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (SIGINT)")),
        };
        let restored = match (&opts.release, &original) {
            (Some(r), Some((rev, _))) => r.restore(&client, *rev).await,
            _ => Ok(()),
        };
        match (result, restored) {
            (Ok(()), Ok(())) => {}
            (Err(e), Ok(())) => return Err(e),
            (Ok(()), Err(r)) => return Err(r.context("restoring the release")),
            (Err(e), Err(r)) => {
                return Err(e.context(format!("and restoring the release failed: {r:#}")));
            }
        }
        let runtime = match &opts.runtime_log {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => Some(RuntimeLog::parse(&text)),
                Err(e) => {
                    log(&format!("no CRI times: reading {}: {e}", path.display()));
                    None
                }
            },
            None => None,
        };
        if let Some(rt) = &runtime {
            for s in phases.iter_mut().flat_map(|p| p.samples.iter_mut()) {
                add_runtime_marks(s, rt);
            }
        }
        let source_before = original.map(|(_, s)| s);
        Ok(start_report(&opts, &phases, source_before.as_deref(), runtime.is_some()))
    })
    .await
}

async fn run_phase(
    client: &Client,
    names: &[String],
    idx: usize,
    source: &str,
    pods: u32,
    release: Option<&Release>,
    shape: PodShape<'_>,
) -> Result<Phase> {
    let ns_inj = &names[0];
    if source != CURRENT {
        let release = release.context("switching sources needs --helm and --chart")?;
        release.switch(client, source).await?;
    }
    ensure_one_injector(client, &names[0], &names[1]).await?;
    let probe = probe_pod_with(json!({}))?;
    // A fresh replica gives the image volume once its probe of the API
    // server says the field is kept; the ConfigMap once the namespace has
    // one, which the first injected pod there makes. Wait for the phase's
    // delivery, then (or, for configMap, to get there) one warm-up Job.
    if source != CURRENT && source != "configMap" {
        wait_delivery(client, ns_inj, &probe, source, DELIVERY_TIMEOUT).await?;
    }
    let warm_up = start_job(&format!("warm-up-{idx}"), "warm-up", Kind::Injected, shape)?;
    run_job(client, ns_inj, &warm_up, POD_TIMEOUT)
        .await
        .context("the warm-up Job")?;
    if source == "configMap" {
        wait_delivery(client, ns_inj, &probe, source, DELIVERY_TIMEOUT).await?;
    }
    let run = unique_suffix();
    let map: WatchMap = Arc::default();
    let watch = watch_run(client, &run, map.clone());
    let api_before = ApiserverWebhookStats::scrape(client).await?;
    let since = now_ns();
    let mut samples = Vec::new();
    let mut refused = Vec::new();
    let result = async {
        for i in 0..pods * 3 {
            // A B C C B A: each kind comes first, second and third as often.
            let kind = match i % 6 {
                0 | 5 => Kind::Injected,
                1 | 4 => Kind::Plain,
                _ => Kind::OneSidecar,
            };
            let ns = &names[usize::from(kind != Kind::Injected)];
            let job = format!("p{idx}-{i:03}");
            match start_one(client, ns, &job, &run, &map, kind, (source, shape)).await? {
                Ok(sample) => {
                    log(&format!(
                        "{source} {job} ({}): pod added -> main started {:.1} ms",
                        kind.key(),
                        ms(sample.main_started - sample.added)
                    ));
                    samples.push(sample);
                }
                Err(r) => {
                    log(&format!(
                        "{source} {job} ({}): REFUSED, not a sample: {} (its lines: {:?})",
                        kind.key(),
                        r.reason,
                        r.lines
                    ));
                    refused.push(r);
                }
            }
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    watch.abort();
    result?;
    let api = ApiserverWebhookStats::scrape(client)
        .await?
        .minus(&api_before);
    let mut admission_ms = phase_admissions(client, ns_inj, since).await?;
    admission_ms.sort_by(f64::total_cmp);
    let name = if source == CURRENT {
        // Named after what the pods got (all the same, or an error).
        let mut got: Vec<&str> = samples
            .iter()
            .filter(|s| s.kind == Kind::Injected)
            .map(|s| s.delivery)
            .collect();
        got.sort_unstable();
        got.dedup();
        match got.as_slice() {
            [one] => (*one).to_owned(),
            other => bail!("the injected pods got different deliveries: {other:?}"),
        }
    } else {
        source.to_owned()
    };
    for s in &mut samples {
        s.phase.clone_from(&name);
    }
    Ok(Phase {
        name,
        samples,
        refused,
        admission_ms,
        api,
    })
}

/// The webhook's `duration_ms` of each review (not a dry run) about
/// namespace `ns` logged at or after `since` (ns), from every running
/// replica.
async fn phase_admissions(client: &Client, ns: &str, since: i128) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for pod in webhook_pods(client).await? {
        let name = pod.metadata.name.unwrap_or_default();
        let logs = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
            .logs(&name, &LogParams::default())
            .await
            .with_context(|| format!("logs of webhook pod {name}"))?;
        for line in logs.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = v["timestamp"].as_str().and_then(parse_time);
            if v["message"] == "admission"
                && v["namespace"] == ns
                && v["dry_run"] != true
                && at.is_some_and(|t| t >= since)
                && let Some(ms) = v["duration_ms"].as_f64()
            {
                out.push(ms);
            }
        }
    }
    Ok(out)
}

/// Runs one pod to its end: its sample, or why its start time cannot be
/// true ([`Refused`]).
async fn start_one(
    client: &Client,
    ns: &str,
    job: &str,
    run: &str,
    map: &WatchMap,
    kind: Kind,
    (source, shape): (&str, PodShape<'_>),
) -> Result<Result<StartSample, Refused>> {
    let expect_injected = kind == Kind::Injected;
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let job_created = now_ns();
    jobs.create(&PostParams::default(), &start_job(job, run, kind, shape)?)
        .await
        .with_context(|| format!("creating Job {ns}/{job}"))?;
    let find = || -> Option<(String, Watched)> {
        let m = map.lock().ok()?;
        m.iter()
            .find(|(k, w)| w.job == job && k.starts_with(&format!("{ns}/")))
            .map(|(k, w)| (k.clone(), w.clone()))
    };
    kube_prestop_e2e::waits::poll_until(POD_TIMEOUT, Duration::from_millis(50), || {
        let done = find().is_some_and(|(_, w)| w.finished);
        async move { Ok(done) }
    })
    .await
    .with_context(|| format!("the pod of Job {ns}/{job} did not finish"))?;
    let finished_seen = now_ns();
    let (key, w) = find().with_context(|| format!("pod of {ns}/{job} vanished"))?;
    let pod = key.rsplit('/').next().unwrap_or_default().to_owned();
    ensure!(
        w.injected == expect_injected,
        "pod {key}: injected {}, expected {expect_injected} (is the webhook up?)",
        w.injected
    );
    if expect_injected && source != CURRENT {
        ensure!(
            w.delivery == source,
            "phase sidecarBinary.source={source}: pod {key} got its sidecar binary by {}, not by {source}",
            w.delivery
        );
    }
    let main = timed_lines(client, ns, &pod, C).await?;
    let refuse = |reason: String| Refused {
        kind,
        pod: key.clone(),
        reason,
        lines: main.iter().map(|(_, l)| l.clone()).collect(),
    };
    let main_started = match parse_adjtimex(main.iter().map(|(_, l)| l.as_str())) {
        Ok(t) => t,
        Err(e @ ClockError::Missing(_)) => bail!("no start time in {key}'s logs ({e}): {main:?}"),
        Err(e @ ClockError::SubsecondOutOfRange { .. }) => return Ok(Err(refuse(e.to_string()))),
    };
    if let Some(why) = implausible(
        main_started,
        job_created,
        finished_seen,
        MAIN_SLEEP_MS * 1_000_000,
    ) {
        return Ok(Err(refuse(why)));
    }
    let running_event = w
        .running
        .with_context(|| format!("the watch never saw {key}'s main container running"))?;
    let mut marks = BTreeMap::from([
        ("job_created".to_owned(), job_created),
        ("added".to_owned(), w.added),
        ("main_first".to_owned(), main_started),
    ]);
    if expect_injected {
        let sidecar = timed_lines(client, ns, &pod, &sidecar_name(C)).await?;
        for (mark, needle) in [
            ("sidecar_first_line", "kube-prestop: watch starting"),
            ("sidecar_armed", "kube-prestop: armed"),
            ("sidecar_post_start_done", "kube-prestop: post-start done"),
            ("sidecar_gate_answered", "kube-prestop: gate answered"),
        ] {
            if let Some(t) = first_with(&sidecar, needle) {
                marks.insert(mark.to_owned(), t);
            }
        }
        // The handler's own start: its line's time less the wait it reports.
        if let Some(begin) = sidecar
            .iter()
            .find(|(_, l)| l.contains("kube-prestop: post-start done"))
            .and_then(|(t, l)| Some(t - post_start_waited_ns(l)?))
        {
            marks.insert("sidecar_post_start_begin".to_owned(), begin);
        }
    }
    Ok(Ok(StartSample {
        kind,
        phase: String::new(),
        pod: key,
        job_created,
        added: w.added,
        running_event,
        main_started,
        delivery: w.delivery,
        marks,
    }))
}

fn sorted_ms(samples: &[&StartSample], f: impl Fn(&StartSample) -> i128) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().map(|s| ms(f(s))).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// One interval of a start sample, in ns.
type Measure = fn(&StartSample) -> i128;

/// The medians (and counts) of each step over `samples`.
fn breakdown(lines: &mut String, column: &str, samples: &[&StartSample]) {
    for (id, _, from, to) in STEPS {
        let mut v: Vec<f64> = samples
            .iter()
            .filter_map(|s| Some(ms(s.marks.get(*to)? - s.marks.get(*from)?)))
            .collect();
        v.sort_by(f64::total_cmp);
        out(lines, &format!("bd_{column}_{id}_n"), v.len());
        out_ms(
            lines,
            &format!("bd_{column}_{id}_p50_ms"),
            percentile(&v, 0.5),
        );
    }
}

/// Of `samples` with both times, how many had the watcher's `armed` line
/// before the main container's CreateContainer was called: (armed first,
/// compared). X's process cannot exist before that call, so "armed first"
/// means the watcher was looking before X could run.
fn armed_first(samples: &[&StartSample]) -> (usize, usize) {
    let pairs: Vec<(i128, i128)> = samples
        .iter()
        .filter_map(|s| {
            Some((
                *s.marks.get("sidecar_armed")?,
                *s.marks.get("main_create_requested")?,
            ))
        })
        .collect();
    let first = pairs.iter().filter(|(armed, main)| armed < main).count();
    (first, pairs.len())
}

fn start_report(
    opts: &StartOpts,
    phases: &[Phase],
    source_before: Option<&str>,
    runtime_times: bool,
) -> (String, Value) {
    let mut lines = String::new();
    out(&mut lines, "start_pods_each", opts.pods);
    out(
        &mut lines,
        "start_gate",
        opts.gate.as_deref().unwrap_or("default"),
    );
    out(
        &mut lines,
        "start_sidecar_cpu_limit",
        opts.sidecar_cpu_limit.as_deref().unwrap_or("default"),
    );
    out(
        &mut lines,
        "start_pod_seccomp",
        if opts.runtime_default_seccomp {
            "RuntimeDefault"
        } else {
            "unset"
        },
    );
    out(&mut lines, "start_busy_pods", opts.load.pods);
    out(&mut lines, "start_busy_cpu", &opts.load.cpu);
    out(
        &mut lines,
        "start_phases",
        phases
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(","),
    );
    out(
        &mut lines,
        "start_source_before",
        source_before.unwrap_or("unchanged"),
    );
    out(&mut lines, "start_runtime_log", u8::from(runtime_times));
    out(&mut lines, "start_boot_resamples", stats::RESAMPLES);
    out(&mut lines, "start_boot_seed", stats::SEED);
    out(&mut lines, "start_boot_level", stats::LEVEL);
    let measures: [(&str, Measure); 3] = [
        ("start", |s| s.main_started - s.added),
        ("start_api", |s| s.running_event - s.added),
        ("start_job", |s| s.main_started - s.job_created),
    ];
    for phase in phases {
        let of = |k: Kind| -> Vec<&StartSample> {
            phase.samples.iter().filter(|s| s.kind == k).collect()
        };
        for (name, f) in measures {
            for kind in [Kind::Injected, Kind::Plain, Kind::OneSidecar] {
                let v = sorted_ms(&of(kind), f);
                let key = format!("{name}_{}_{}", phase.name, kind.key());
                for (q, qn) in [(0.5, "p50"), (0.9, "p90")] {
                    out_ms(&mut lines, &format!("{key}_{qn}_ms"), percentile(&v, q));
                }
                out_ms(&mut lines, &format!("{key}_min_ms"), v.first().copied());
                out_ms(&mut lines, &format!("{key}_max_ms"), v.last().copied());
            }
        }
        for kind in [Kind::Injected, Kind::Plain, Kind::OneSidecar] {
            let key = format!("start_{}_{}", phase.name, kind.key());
            out(&mut lines, &format!("{key}_n"), of(kind).len());
            out(
                &mut lines,
                &format!("{key}_refused"),
                phase.refused.iter().filter(|r| r.kind == kind).count(),
            );
        }
        // Issue 28's figure: injected minus the one-native-sidecar
        // reference, medians of pod added -> main started, and its interval.
        let start_ms = |k: Kind| sorted_ms(&of(k), |s| s.main_started - s.added);
        let d = stats::median_diff(
            &start_ms(Kind::Injected),
            &start_ms(Kind::OneSidecar),
            stats::RESAMPLES,
            stats::SEED,
        );
        let key = format!("start_{}_inj_minus_ref", phase.name);
        out_ms(&mut lines, &format!("{key}_p50_ms"), d.map(|d| d.estimate));
        out_ms(&mut lines, &format!("{key}_ci95_lo_ms"), d.map(|d| d.lo));
        out_ms(&mut lines, &format!("{key}_ci95_hi_ms"), d.map(|d| d.hi));
        let a = &phase.admission_ms;
        let key = format!("adm_{}", phase.name);
        out(&mut lines, &format!("{key}_log_count"), a.len());
        for (q, qn) in [(0.5, "p50"), (0.9, "p90"), (1.0, "max")] {
            out_ms(&mut lines, &format!("{key}_log_{qn}_ms"), percentile(a, q));
        }
        out(
            &mut lines,
            &format!("{key}_api_count"),
            phase.api.duration.count,
        );
        out_ms(
            &mut lines,
            &format!("{key}_api_p50_ms"),
            phase.api.duration.quantile(0.5).map(|s| s * 1e3),
        );
        out_ms(
            &mut lines,
            &format!("{key}_api_mean_ms"),
            phase.api.duration.mean().map(|s| s * 1e3),
        );
        breakdown(&mut lines, &phase.name, &of(Kind::Injected));
        // Without a gate nothing orders X after the watcher: how often the
        // watcher was armed before X's CreateContainer was even called.
        let (armed_first, compared) = armed_first(&of(Kind::Injected));
        out(
            &mut lines,
            &format!("start_{}_armed_first", phase.name),
            armed_first,
        );
        out(
            &mut lines,
            &format!("start_{}_armed_compared", phase.name),
            compared,
        );
    }
    let all = |k: Kind| -> Vec<&StartSample> {
        phases
            .iter()
            .flat_map(|p| p.samples.iter())
            .filter(|s| s.kind == k)
            .collect()
    };
    breakdown(&mut lines, "plain", &all(Kind::Plain));
    breakdown(&mut lines, "ref", &all(Kind::OneSidecar));
    out(
        &mut lines,
        "bd_steps",
        STEPS.iter().map(|s| s.0).collect::<Vec<_>>().join(","),
    );
    for (id, label, _, _) in STEPS {
        out(&mut lines, &format!("bd_label_{id}"), label);
    }
    let raw = phases
        .iter()
        .flat_map(|p| p.samples.iter())
        .map(|s| {
            let rel: BTreeMap<&str, f64> = s
                .marks
                .iter()
                .map(|(k, t)| (k.as_str(), ms(t - s.added)))
                .collect();
            json!({
                "pod": s.pod, "kind": s.kind.key(), "phase": s.phase,
                "delivery": s.delivery,
                "added_to_main_started_ms": ms(s.main_started - s.added),
                "added_to_running_event_ms": ms(s.running_event - s.added),
                "marks_ms_after_added": rel,
            })
        })
        .chain(phases.iter().flat_map(|p| {
            p.refused.iter().map(|r| {
                json!({
                    "pod": r.pod, "kind": r.kind.key(), "phase": p.name,
                    "refused": r.reason, "main_log": r.lines,
                })
            })
        }))
        .collect();
    (lines, Value::Array(raw))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_step_names_marks_that_are_set() {
        let known = [
            "job_created",
            "added",
            "main_first",
            "sidecar_first_line",
            "sidecar_armed",
            "sidecar_post_start_done",
            "sidecar_post_start_begin",
            "sidecar_gate_answered",
            "sandbox_requested",
            "sandbox_ready",
            "first_create_requested",
        ];
        for (id, _, from, to) in STEPS {
            for m in [from, to] {
                let by_role = ["install", "sidecar", "main"].iter().any(|r| {
                    [
                        "create_requested",
                        "created",
                        "start_requested",
                        "started",
                        "exited",
                    ]
                    .iter()
                    .any(|e| *m == format!("{r}_{e}"))
                });
                assert!(known.contains(m) || by_role, "step {id}: mark {m}");
            }
        }
    }

    #[test]
    fn sources_are_checked() {
        let opts = |s: &[&str], helm: bool| StartOpts {
            pods: 1,
            sources: s.iter().map(|s| (*s).to_owned()).collect(),
            release: helm.then(|| Release {
                helm: "helm".into(),
                chart: "chart".into(),
            }),
            runtime_log: None,
            gate: None,
            runtime_default_seccomp: false,
            sidecar_cpu_limit: None,
            load: crate::busy::Load {
                pods: 0,
                cpu: "400m".into(),
            },
        };
        assert!(opts(&["imageVolume", "configMap"], true).check().is_ok());
        for (gate, ok) in [
            ("exec", true),
            ("http-get", true),
            ("none", true),
            ("httpGet", false),
        ] {
            let o = StartOpts {
                gate: Some(gate.to_owned()),
                ..opts(&[CURRENT], false)
            };
            assert_eq!(o.check().is_ok(), ok, "{gate}");
        }
        assert!(opts(&[CURRENT], false).check().is_ok());
        assert!(opts(&["imageVolume"], false).check().is_err());
        assert!(opts(&["auto"], true).check().is_err());
        assert!(opts(&["configMap", "configMap"], true).check().is_err());
        assert!(opts(&[CURRENT, "configMap"], true).check().is_err());
    }

    /// A phase of 3 injected, 3 reference and 1 plain sample (pod added
    /// at 0, main started at the given ms) and one refused reference pod.
    fn fixture_phase() -> Phase {
        let sample = |kind, i: usize, started_ms: i128| StartSample {
            kind,
            phase: "imageVolume".into(),
            pod: format!("ns/p{i}"),
            job_created: 0,
            added: 0,
            running_event: started_ms * 1_000_000,
            main_started: started_ms * 1_000_000,
            delivery: "imageVolume",
            marks: BTreeMap::new(),
        };
        Phase {
            name: "imageVolume".into(),
            samples: vec![
                sample(Kind::Injected, 0, 800),
                sample(Kind::Injected, 1, 810),
                sample(Kind::Injected, 2, 820),
                sample(Kind::OneSidecar, 3, 700),
                sample(Kind::OneSidecar, 4, 710),
                sample(Kind::OneSidecar, 5, 720),
                sample(Kind::Plain, 6, 600),
            ],
            refused: vec![Refused {
                kind: Kind::OneSidecar,
                pod: "ns/p7".into(),
                reason: "main started 666.000 s after the latest it can have".into(),
                lines: vec!["time.tv_usec: 666256345".into()],
            }],
            admission_ms: vec![0.25],
            api: ApiserverWebhookStats::default(),
        }
    }

    #[test]
    fn the_report_counts_refused_pods_and_gives_the_interval() {
        let opts = StartOpts {
            pods: 3,
            sources: vec![CURRENT.to_owned()],
            release: None,
            runtime_log: None,
            gate: Some("none".to_owned()),
            runtime_default_seccomp: true,
            sidecar_cpu_limit: Some("1".to_owned()),
            load: crate::busy::Load {
                pods: 4,
                cpu: "400m".into(),
            },
        };
        let (lines, raw) = start_report(&opts, &[fixture_phase()], None, false);
        let kv: BTreeMap<&str, &str> = lines.lines().filter_map(|l| l.split_once('=')).collect();
        assert_eq!(kv["start_imageVolume_ref_n"], "3");
        assert_eq!(kv["start_imageVolume_ref_refused"], "1");
        assert_eq!(kv["start_imageVolume_inj_refused"], "0");
        assert_eq!(kv["start_imageVolume_ref_p50_ms"], "710.000");
        assert_eq!(kv["start_imageVolume_inj_minus_ref_p50_ms"], "100.000");
        let lo: f64 = kv["start_imageVolume_inj_minus_ref_ci95_lo_ms"]
            .parse()
            .unwrap();
        let hi: f64 = kv["start_imageVolume_inj_minus_ref_ci95_hi_ms"]
            .parse()
            .unwrap();
        assert!(
            (80.0..=100.0).contains(&lo) && (100.0..=120.0).contains(&hi),
            "{lo} {hi}"
        );
        assert_eq!(kv["start_boot_resamples"], "10000");
        assert_eq!(kv["start_gate"], "none");
        assert_eq!(kv["start_pod_seccomp"], "RuntimeDefault");
        assert_eq!(kv["start_sidecar_cpu_limit"], "1");
        assert_eq!(kv["start_busy_pods"], "4");
        // The fixture has no sidecar lines: nothing compared.
        assert_eq!(kv["start_imageVolume_armed_compared"], "0");
        // The refused pod is in the raw output with its reason, not a sample.
        let raw = raw.as_array().unwrap();
        assert_eq!(raw.len(), 8);
        assert!(
            raw.iter()
                .any(|r| r["pod"] == "ns/p7" && r["refused"].is_string())
        );
    }

    #[test]
    fn counts_the_watcher_armed_before_mains_create() {
        let with = |armed: Option<i128>, create: Option<i128>| {
            let mut s = fixture_phase().samples.remove(0);
            s.marks
                .extend(armed.map(|t| ("sidecar_armed".to_owned(), t)));
            s.marks
                .extend(create.map(|t| ("main_create_requested".to_owned(), t)));
            s
        };
        let samples = [
            with(Some(10), Some(20)),
            with(Some(30), Some(20)),
            with(Some(20), Some(20)),
            with(None, Some(20)),
            with(Some(10), None),
        ];
        let refs: Vec<&StartSample> = samples.iter().collect();
        assert_eq!(armed_first(&refs), (1, 3));
    }

    const NO_SHAPE: PodShape<'static> = PodShape {
        gate: None,
        runtime_default_seccomp: false,
        sidecar_cpu_limit: None,
    };

    #[test]
    fn every_kind_gets_the_seccomp_profile_and_only_the_injected_our_annotations() {
        let shape = PodShape {
            gate: Some("http-get"),
            runtime_default_seccomp: true,
            sidecar_cpu_limit: Some("1"),
        };
        for kind in [Kind::Injected, Kind::Plain, Kind::OneSidecar] {
            let job = serde_json::to_value(start_job("j", "r", kind, shape).unwrap()).unwrap();
            let template = &job["spec"]["template"];
            assert_eq!(
                template["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{kind:?}"
            );
            let annotations = &template["metadata"]["annotations"];
            let injected = kind == Kind::Injected;
            assert_eq!(
                annotations["kube-prestop.io/gate"].as_str(),
                injected.then_some("http-get")
            );
            assert_eq!(
                annotations["kube-prestop.io/sidecar-cpu-limit"].as_str(),
                injected.then_some("1")
            );
        }
        let job =
            serde_json::to_value(start_job("j", "r", Kind::Plain, NO_SHAPE).unwrap()).unwrap();
        assert!(job["spec"]["template"]["spec"]["securityContext"]["seccompProfile"].is_null());
    }

    #[test]
    fn the_main_container_prints_the_status_too() {
        let job =
            serde_json::to_value(start_job("j", "r", Kind::Plain, NO_SHAPE).unwrap()).unwrap();
        let cmd = &job["spec"]["template"]["spec"]["containers"][0]["command"][2];
        assert_eq!(cmd, "adjtimex | grep -E 'status:|tv_'; sleep 1.500");
    }

    #[test]
    fn reads_the_post_start_wait() {
        let line = "kube-prestop: post-start done container=main watcher_pid=7 waited=0.004s: the kubelet may start the pod's next containers";
        assert_eq!(post_start_waited_ns(line), Some(4_000_000));
        assert_eq!(post_start_waited_ns("kube-prestop: armed"), None);
    }
}
