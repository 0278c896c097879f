//! Issue 14: kubelet behaviours new since Kubernetes 1.34 that restart a Job
//! pod's containers in place, on the real local cluster with the chart
//! installed. Both must give every exit of the watched container on its own
//! its hook exactly once, never twice.
//!
//! - **Container restart rules** (`restartPolicyRules` on a container of a
//!   `restartPolicy: Never` pod; feature gate `ContainerRestartRules`, alpha in
//!   1.34, beta and on by default from 1.35: `pkg/features/kube_features.go`
//!   of kubernetes v1.37.2): an exit whose code a `Restart` rule matches
//!   restarts that container in place; the pod goes on. For the sidecar this
//!   is a new instance (new PID and start time) of the same container.
//! - **`RestartAllContainers`** (the `RestartAllContainers` rule action;
//!   gate `RestartAllContainersOnContainerExits`, alpha in 1.35, beta and on
//!   from 1.36): the kubelet kills and removes every container of the pod,
//!   init and sidecar containers included, with a grace period of 0 raised to
//!   the 2 s minimum and no preStop (`SyncPod` and `killContainer` in
//!   `pkg/kubelet/kuberuntime/kuberuntime_manager.go` /
//!   `kuberuntime_container.go`), then runs the init containers again; the
//!   sandbox and so the emptyDir volumes stay. Our sidecar is killed with the
//!   rest, typically while it runs the hook of the exit that triggered the
//!   restart: the documented rule for an interrupted hook applies (the restarted
//!   sidecar retries it once, `KUBE_PRESTOP_ATTEMPT=2`).
//!
//! Each scenario is skipped, with the reason printed, on a cluster whose
//! Kubernetes does not have the feature on by default.
//!
//! The Job manifests go to the apiserver as JSON (a `DynamicObject`): the
//! typed `k8s-openapi` structs of this crate predate `restartPolicyRules` and
//! would drop it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{container_status, ensure_sidecar_hooks, sidecar_logs};
use kube_prestop_e2e::fixtures::{container, pod_spec, set};
use kube_prestop_e2e::records::{RECORD_HOOK, Records, ensure_records};
use kube_prestop_e2e::scenario::with_scenario;
use kube_prestop_e2e::waits::{wait_job_pod, wait_pod_finished};
use kube_prestop_e2e::{client, init_tracing, sidecar_name};
use serde_json::{Value, json};

const JOB_TIMEOUT: Duration = Duration::from_secs(240);
const C: &str = "main";

/// The apiserver's minor version (`/version`; a `+` suffix is ignored).
async fn server_minor(client: &Client) -> Result<u32> {
    let info = client.apiserver_version().await?;
    let digits: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .with_context(|| format!("apiserver minor version {:?}", info.minor))
}

/// Whether the cluster has the feature on by default (from minor `since`);
/// prints why a scenario is skipped when not.
async fn has_feature(client: &Client, feature: &str, since: u32) -> Result<bool> {
    let minor = server_minor(client).await?;
    if minor < since {
        eprintln!(
            "SKIPPED: {feature} is on by default from Kubernetes 1.{since}; this cluster is 1.{minor}"
        );
        return Ok(false);
    }
    Ok(true)
}

/// Creates a Job from its JSON manifest, unchanged (see the module docs).
async fn create_job_json(client: &Client, ns: &str, manifest: Value) -> Result<String> {
    let ar = ApiResource::erase::<Job>(&());
    let jobs = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
    let obj: DynamicObject = serde_json::from_value(manifest)?;
    let created = jobs
        .create(&PostParams::default(), &obj)
        .await
        .context("creating Job")?;
    Ok(created.metadata.name.unwrap_or_default())
}

/// A Job manifest (`backoffLimit: 0`) with the given pod spec.
fn job_manifest(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": { "backoffLimit": 0, "template": { "spec": spec } }
    })
}

/// `restartPolicy: Never` with one rule: `action` on the given exit code.
fn with_rule(mut c: Value, action: &str, code: i32) -> Value {
    set(&mut c, "restartPolicy", json!("Never"));
    set(
        &mut c,
        "restartPolicyRules",
        json!([{ "action": action, "exitCodes": { "operator": "In", "values": [code] } }]),
    );
    c
}

/// The pod as the apiserver stores it, as JSON (fields newer than our typed
/// structs included).
async fn pod_json(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let ar = ApiResource::erase::<Pod>(&());
    let pods = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
    Ok(serde_json::to_value(pods.get(name).await?)?)
}

/// Checks the admitted pod still has the rule on `C` (the webhook's patch
/// must leave it alone) and got our sidecar.
async fn ensure_rule_kept(client: &Client, ns: &str, pod: &str, action: &str) -> Result<()> {
    let p = pod_json(client, ns, pod).await?;
    let main = p["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == C))
        .context("no main container")?;
    ensure!(
        main["restartPolicyRules"][0]["action"] == action,
        "main's restartPolicyRules after admission: {}",
        main["restartPolicyRules"]
    );
    let sc = sidecar_name(C);
    ensure!(
        p["spec"]["initContainers"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == sc.as_str())),
        "pod not injected: {}",
        p["spec"]["initContainers"]
    );
    Ok(())
}

/// Hook records `<container> <instance> <attempt>` ([`RECORD_HOOK`]) split
/// into (instance, attempt) pairs.
fn instances(lines: &[String]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|l| {
            let mut f = l.split(' ').skip(1);
            (
                f.next().unwrap_or_default().to_owned(),
                f.next().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The distinct instance ids in `pairs`.
fn distinct(pairs: &[(String, String)]) -> usize {
    let mut ids: Vec<&str> = pairs.iter().map(|(i, _)| i.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len()
}

async fn finished_pod(client: &Client, ns: &str, job: &str) -> Result<Pod> {
    let pod = wait_job_pod(client, ns, job, JOB_TIMEOUT).await?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    wait_pod_finished(client, ns, &name, JOB_TIMEOUT).await
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Container restart rules: `main` exits 42 twice (restarted in place by
/// its `Restart` rule) and then 0. Three exits on their own, three hooks,
/// each of its own instance, each run once; the sidecar itself never
/// restarts.
#[tokio::test]
async fn restart_rules_in_place() -> Result<()> {
    init_tracing();
    let client = client().await?;
    if !has_feature(&client, "ContainerRestartRules (restartPolicyRules)", 35).await? {
        return Ok(());
    }
    with_scenario(&client.clone(), "kpt-rr", |ns, rec: Records| async move {
        let cmd = "n=$(cat /records/attempts 2>/dev/null | wc -l); echo x >> /records/attempts; \
                   [ \"$n\" -ge 2 ] || exit 42";
        let main = with_rule(container(C, cmd, RECORD_HOOK), "Restart", 42);
        let spec = pod_spec(&rec, vec![main]);
        let job = create_job_json(&client, &ns, job_manifest("rules", spec)).await?;
        let first = wait_job_pod(&client, &ns, &job, JOB_TIMEOUT).await?;
        let name = first.metadata.name.clone().unwrap_or_default();
        ensure_rule_kept(&client, &ns, &name, "Restart").await?;
        let pod = finished_pod(&client, &ns, &job).await?;
        ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
        let restarts = container_status(&pod, C).map(|s| s.restart_count);
        ensure!(
            restarts == Some(2),
            "main restartCount {restarts:?}, expected 2"
        );
        let sc = sidecar_name(C);
        let sidecar_restarts = container_status(&pod, &sc).map(|s| s.restart_count);
        ensure!(
            sidecar_restarts == Some(0),
            "sidecar restartCount {sidecar_restarts:?}"
        );
        let recs = ensure_records(&rec, "hooks", 3).await?;
        let pairs = instances(&recs);
        ensure!(distinct(&pairs) == 3, "instances not distinct: {recs:?}");
        ensure!(
            recs.iter().all(|l| l.starts_with("main ")) && pairs.iter().all(|(_, a)| a == "1"),
            "every hook by the sidecar, first attempt: {recs:?}"
        );
        ensure_sidecar_hooks(&client, &ns, &name, C, 3).await?;
        Ok(())
    })
    .await
}

/// `RestartAllContainers`: `main`'s first exit (42) makes the kubelet kill
/// and remove every container, ours included, while our sidecar runs that
/// exit's hook (the hook's first attempt sleeps, so it is cut for sure); the
/// init container runs again, the emptyDir keeps its content, `main` runs
/// again and exits 0. Each of the two exits gets exactly one finished hook:
/// the first by the restarted sidecar's retry (attempt 2), as docs/how-it-works.md
/// says for an interrupted hook; nothing is run twice to its end.
#[tokio::test]
async fn restart_all_containers() -> Result<()> {
    init_tracing();
    let client = client().await?;
    if !has_feature(&client, "RestartAllContainersOnContainerExits", 36).await? {
        return Ok(());
    }
    with_scenario(&client.clone(), "kpt-rac", |ns, rec: Records| async move {
        let scratch_mount = json!({ "name": "scratch", "mountPath": "/scratch" });
        let mut prep = container(
            "prep",
            "echo x >> /records/init; echo kept >> /scratch/kept",
            "true",
        );
        set(&mut prep, "lifecycle", json!(null));
        set(
            &mut prep,
            "volumeMounts",
            json!([{ "name": "records", "mountPath": "/records" }, scratch_mount]),
        );
        // First run: exit 42 (restart all). Second run: the emptyDir must
        // hold both init runs' lines, then exit 0.
        let cmd = "n=$(cat /records/attempts 2>/dev/null | wc -l); echo x >> /records/attempts; \
                   [ \"$n\" -ge 1 ] || exit 42; \
                   [ \"$(wc -l < /scratch/kept)\" -eq 2 ] || { echo emptyDir lost; exit 1; }";
        // The first exit's first attempt is held until the kubelet's kill
        // cuts it; every attempt is recorded in `starts`.
        let hook = format!(
            "echo \"$KUBE_PRESTOP_INSTANCE ${{KUBE_PRESTOP_ATTEMPT:-0}}\" >> /records/starts; \
             if [ \"$(wc -l < /records/attempts)\" -eq 1 ] && [ \"${{KUBE_PRESTOP_ATTEMPT:-0}}\" = 1 ]; \
             then sleep 120; fi; {RECORD_HOOK}"
        );
        let mut main = with_rule(container(C, cmd, &hook), "RestartAllContainers", 42);
        set(
            &mut main,
            "volumeMounts",
            json!([{ "name": "records", "mountPath": "/records" }, scratch_mount]),
        );
        let mut spec = pod_spec(&rec, vec![main]);
        set(&mut spec, "initContainers", json!([prep]));
        set(
            &mut spec,
            "volumes",
            json!([rec.volume(), { "name": "scratch", "emptyDir": {} }]),
        );
        let job = create_job_json(&client, &ns, job_manifest("restartall", spec)).await?;
        let first = wait_job_pod(&client, &ns, &job, JOB_TIMEOUT).await?;
        let name = first.metadata.name.clone().unwrap_or_default();
        ensure_rule_kept(&client, &ns, &name, "RestartAllContainers").await?;
        let pod = finished_pod(&client, &ns, &job).await?;
        ensure!(
            phase(&pod) == "Succeeded",
            "pod phase {} (main's second run checks the emptyDir)",
            phase(&pod)
        );
        let init_runs = rec.lines("init");
        ensure!(init_runs.len() == 2, "init container runs: {init_runs:?}, expected 2");
        let attempts = rec.lines("attempts");
        ensure!(attempts.len() == 2, "main runs: {attempts:?}, expected 2");
        let recs = ensure_records(&rec, "hooks", 2).await?;
        let pairs = instances(&recs);
        ensure!(distinct(&pairs) == 2, "two exits, two instances: {recs:?}");
        let starts = rec.lines("starts");
        // The first instance: attempt 1 cut by the kill, attempt 2 finished;
        // the second: attempt 1 finished.
        let first_instance = &pairs
            .iter()
            .find(|(i, _)| starts.first().is_some_and(|s| s.starts_with(i.as_str())))
            .with_context(|| format!("first exit's hook never finished: {recs:?} {starts:?}"))?
            .clone();
        ensure!(
            first_instance.1 == "2",
            "the first exit's hook was cut by the kill, so it must finish as the retry (attempt 2): {recs:?}, starts {starts:?}"
        );
        ensure!(
            starts.len() == 3,
            "hook attempts started: {starts:?}, expected 3 (cut, retry, second exit)"
        );
        let logs = sidecar_logs(&client, &ns, &name, C)
            .await
            .unwrap_or_default();
        tracing::info!(%logs, "restarted sidecar's logs");
        Ok(())
    })
    .await
}
