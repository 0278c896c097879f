//! Helpers for the end-to-end tests of kube-prestop on the local test cluster.
//!
//! The tests talk to a real apiserver through `KUBECONFIG` (`make cluster-up`
//! prints it). Each test works in namespaces of its own, waits on conditions
//! with deadlines, and on failure prints the events and every container's logs
//! of the pods involved.
//!
//! This root module holds what every test uses: the client, names, test
//! namespaces, running a Job, container logs, `kubectl` and failure
//! diagnostics. The scenario suites build on these modules:
//! - [`records`]: hook records on the node, counted on the host;
//! - [`fixtures`]: what a scenario sets up (pod and Job builders, namespace
//!   labels, image tags);
//! - [`waits`]: conditions with deadlines;
//! - [`checks`]: assertions on pods and sidecar logs;
//! - [`nodes`]: Node objects without a kubelet, standing for nodes of
//!   another architecture or runtime;
//! - [`webhook`]: controlling and observing the installed webhook;
//! - [`metrics`]: the webhook's and the API server's Prometheus metrics;
//! - [`scenario`]: a namespace and records per scenario, and a concurrent
//!   runner that reports each one.
//!
//! Dependencies point one way, each module only on those listed before it
//! (and on this root): `checks`, `waits`, `records`, `fixtures`, `nodes`,
//! `webhook`, `metrics`, `scenario`.

pub mod checks;
pub mod fixtures;
pub mod metrics;
pub mod nodes;
pub mod records;
pub mod scenario;
pub mod waits;
pub mod webhook;

use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use serde_json::json;

/// Namespace label that turns injection on.
pub const INJECT_LABEL: &str = "kube-prestop.io/inject";
/// Image of the test workloads, imported by `make cluster-up` (busybox-static).
pub const DEFAULT_TEST_IMAGE: &str = "localhost/kube-prestop/busybox:test";
/// Label the Job controller puts on a Job's pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Name of the sidecar the webhook adds for `container`.
pub fn sidecar_name(container: &str) -> String {
    format!("kube-prestop-{container}")
}

/// The workload image; `KUBE_PRESTOP_E2E_IMAGE` overrides it.
pub fn test_image() -> String {
    std::env::var("KUBE_PRESTOP_E2E_IMAGE").unwrap_or_else(|_| DEFAULT_TEST_IMAGE.to_owned())
}

/// Logs to the test output; `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
}

/// A client for the cluster named by `KUBECONFIG`.
pub async fn client() -> Result<Client> {
    Client::try_default()
        .await
        .context("no cluster: run `make cluster-up` and export the KUBECONFIG it prints")
}

/// A short suffix that keeps names of concurrent or repeated runs apart.
pub fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut n = (nanos ^ u128::from(std::process::id())) % 36u128.pow(6);
    let mut s = String::new();
    for _ in 0..6 {
        let digit = u32::try_from(n % 36).unwrap_or_default();
        s.push(char::from_digit(digit, 36).unwrap_or('0'));
        n /= 36;
    }
    s
}

/// A namespace created for one test, deleted by [`TestNamespace::delete`].
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates `<prefix>-<suffix>`, labelled for injection when `inject` is set.
    pub async fn create(client: &Client, prefix: &str, inject: bool) -> Result<Self> {
        let name = format!("{prefix}-{}", unique_suffix());
        let labels = if inject {
            json!({ INJECT_LABEL: "enabled" })
        } else {
            json!({})
        };
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels }
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        tracing::info!(namespace = %name, inject, "namespace created");
        Ok(Self {
            name,
            client: client.clone(),
        })
    }

    /// Deletes the namespace without waiting for its finalization.
    pub async fn delete(self) -> Result<()> {
        Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

/// Runs `body` in the namespace, prints diagnostics if it fails, deletes the
/// namespace either way, and returns the body's result.
pub async fn with_namespace<F, Fut>(ns: TestNamespace, body: F) -> Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let result = body(ns.name.clone()).await;
    if result.is_err() {
        eprintln!("{}", diagnose(&ns.client, &ns.name).await);
    }
    let deleted = ns.delete().await;
    result.and(deleted)
}

/// A Job whose single container `container` runs `command` with `sh -c` and
/// declares `prestop` (also `sh -c`) as its preStop exec handler.
pub fn job_with_prestop(name: &str, container: &str, command: &str, prestop: &str) -> Result<Job> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": container,
                        "image": test_image(),
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", command],
                        "lifecycle": { "preStop": { "exec": { "command": ["sh", "-c", prestop] } } }
                    }]
                }
            }
        }
    }))?)
}

/// Outcome of a finished Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    Complete,
    Failed,
}

fn finished(job: &Job) -> Option<JobOutcome> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" => Some(JobOutcome::Complete),
            "Failed" => Some(JobOutcome::Failed),
            _ => None,
        })
}

/// Creates the Job and waits until it is Complete or Failed.
///
/// # Errors
/// The Job cannot be created, vanishes, or does not finish within `timeout`.
pub async fn run_job(
    client: &Client,
    ns: &str,
    job: &Job,
    timeout: Duration,
) -> Result<JobOutcome> {
    let name = job.metadata.name.clone().unwrap_or_default();
    run_job_until(client, ns, job, timeout)
        .await?
        .with_context(|| format!("Job {name} did not finish within {timeout:?}"))
}

/// Creates the Job and waits until it is Complete or Failed, or until
/// `deadline` passes: `None` then, with the Job left running for the
/// caller to read what has finished (a benchmark's partial results).
///
/// # Errors
/// The Job cannot be created or vanishes while waited on.
pub async fn run_job_until(
    client: &Client,
    ns: &str,
    job: &Job,
    deadline: Duration,
) -> Result<Option<JobOutcome>> {
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let created = jobs
        .create(&PostParams::default(), job)
        .await
        .context("creating Job")?;
    let name = created.metadata.name.unwrap_or_default();
    tracing::info!(namespace = ns, job = %name, "job created");
    let cond = move |j: Option<&Job>| j.and_then(finished).is_some();
    let Ok(done) = tokio::time::timeout(deadline, await_condition(jobs, &name, cond)).await else {
        tracing::info!(namespace = ns, job = %name, ?deadline, "job not finished by the deadline");
        return Ok(None);
    };
    let outcome = done?
        .as_ref()
        .and_then(finished)
        .context("Job vanished while waiting")?;
    tracing::info!(namespace = ns, job = %name, ?outcome, "job finished");
    Ok(Some(outcome))
}

/// The single pod of a Job that ran once.
pub async fn job_pod(client: &Client, ns: &str, job: &str) -> Result<Pod> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job}")))
        .await?;
    match list.items.as_slice() {
        [pod] => Ok(pod.clone()),
        other => bail!("expected one pod of Job {job}, found {}", other.len()),
    }
}

/// Names of all containers of a pod: init containers (native sidecars among
/// them) first, then regular ones.
pub fn container_names(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.name.clone())
        .collect()
}

/// The logs of one container of a pod.
pub async fn container_logs(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
) -> Result<String> {
    let params = LogParams {
        container: Some(container.to_owned()),
        ..LogParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .logs(pod, &params)
        .await
        .with_context(|| format!("logs of {ns}/{pod} container {container}"))
}

/// Runs `kubectl` (from `PATH`, as env.sh sets it) and returns its stdout.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let shown = args.join(" ");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl").args(&args).output()
    })
    .await?
    .with_context(|| format!("running kubectl {shown}"))?;
    ensure!(
        out.status.success(),
        "kubectl {shown}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls a container's logs until a line contains `needle`; returns that line.
pub async fn wait_for_log_line(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
    needle: &str,
    timeout: Duration,
) -> Result<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(logs) = container_logs(client, ns, pod, container).await
            && let Some(line) = logs.lines().find(|l| l.contains(needle))
        {
            return Ok(line.to_owned());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no line containing {needle:?} in {ns}/{pod} container {container} within {timeout:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last `max` lines of a control-plane component's log on the local test
/// cluster that contain `needle` (case-insensitive), for failure reports of
/// what a controller did. The harness writes each component's log to
/// `<state>/logs/<component>.log` (`tests/cluster/lib.sh`, `start_component`);
/// `<state>` is the parent of `KUBE_PRESTOP_NODE_HOSTPATH`. Never fails: a log
/// that cannot be read gives one line saying why.
pub fn component_log_lines(component: &str, needle: &str, max: usize) -> String {
    let hostpath = records::node_hostpath();
    let Some(state) = hostpath.parent() else {
        return format!("<no cluster state directory above {}>", hostpath.display());
    };
    let path = state.join("logs").join(format!("{component}.log"));
    let text = match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return format!("<{}: {e}>", path.display()),
    };
    let needle = needle.to_lowercase();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.to_lowercase().contains(&needle))
        .collect();
    if lines.is_empty() {
        return format!("<no line of {} contains {needle:?}>", path.display());
    }
    lines[lines.len().saturating_sub(max)..].join("\n")
}

/// Events and the logs of every container of every pod in the namespace, for
/// failure reports.
pub async fn diagnose(client: &Client, ns: &str) -> String {
    let mut out = format!("==== diagnostics for namespace {ns} ====\n");
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await;
    match events {
        Ok(list) => {
            for e in list.items {
                let _ = writeln!(
                    out,
                    "event {}/{}: {} {}: {}",
                    e.involved_object.kind.unwrap_or_default(),
                    e.involved_object.name.unwrap_or_default(),
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                );
            }
        }
        Err(err) => {
            let _ = writeln!(out, "events: {err}");
        }
    }
    let pods = match Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(err) => {
            let _ = writeln!(out, "pods: {err}");
            return out;
        }
    };
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let _ = writeln!(out, "---- pod {name} ({phase})");
        for c in container_names(&pod) {
            let logs = container_logs(client, ns, &name, &c)
                .await
                .unwrap_or_else(|e| format!("<{e:#}>"));
            let _ = writeln!(out, "-- container {c}:\n{logs}");
        }
    }
    out
}
