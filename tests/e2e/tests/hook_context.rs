//! What the hook learns about the exit it answers (issue 16), on the real
//! local cluster with the chart installed: the container's exit status
//! (`KUBE_PRESTOP_EXIT_CODE`/`_SIGNAL`, kernel ≥ 6.15), the
//! `kube-prestop.io/run-on` annotation, the container's own files
//! (`KUBE_PRESTOP_ROOT`, and `kube-prestop.io/hook-root: container`), the
//! sidecars' termination messages, and a pod deleted while its hook holds
//! the container's root. Hooks append lines to a hostPath records file that
//! the test reads on the host.
//!
//! `hook_context_scenarios` runs them a few at a time; `make e2e` runs it
//! with the rest of the suite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    HOOK_STARTED, container_status, count_lines, ensure_injected, ensure_sidecar_hooks,
    sidecar_logs,
};
use kube_prestop_e2e::fixtures::{container, job, pod_spec, set};
use kube_prestop_e2e::records::ensure_records;
use kube_prestop_e2e::scenario::{Scenario, run_scenarios, with_scenario};
use kube_prestop_e2e::waits::{poll_until, wait_job_pod, wait_pod_finished, wait_pod_gone};
use kube_prestop_e2e::{JobOutcome, client, init_tracing, run_job, sidecar_name};
use serde_json::{Value, json};

const JOB_TIMEOUT: Duration = Duration::from_secs(240);
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// Scenarios running at the same time (2 shared cores).
const CONCURRENCY: usize = 4;

/// A hook line with the exit status the hook was given.
const STATUS_HOOK: &str = "echo \"$KUBE_PRESTOP_CONTAINER code=${KUBE_PRESTOP_EXIT_CODE-unset} \
signal=${KUBE_PRESTOP_EXIT_SIGNAL-unset}\" >> /records/hooks";

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Whether this kernel reports exit statuses through pidfds (Linux 6.15);
/// the exit-status scenarios check the documented fallback otherwise.
fn kernel_reports_exit_status() -> bool {
    kube_prestop_sidecar::exit_info::probe().is_ok()
}

/// A Job with `annotations` on its pod template.
fn annotated_job(name: &str, spec: Value, annotations: Value) -> Result<Job> {
    let mut j = job(name, spec, json!({}))?;
    let tmpl = j
        .spec
        .as_mut()
        .context("job spec")?
        .template
        .metadata
        .get_or_insert_with(Default::default);
    tmpl.annotations = Some(serde_json::from_value(annotations)?);
    Ok(j)
}

/// Runs the Job to its end and returns its finished pod.
async fn run_to_end(client: &Client, ns: &str, job: &Job, expected: JobOutcome) -> Result<Pod> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let outcome = run_job(client, ns, job, JOB_TIMEOUT).await?;
    ensure!(
        outcome == expected,
        "Job ended {outcome:?}, expected {expected:?}"
    );
    let pod = wait_job_pod(client, ns, &name, POD_TIMEOUT).await?;
    wait_pod_finished(client, ns, &pod_name(&pod), POD_TIMEOUT).await
}

/// The termination message of `container`'s sidecar.
fn termination_message(pod: &Pod, container: &str) -> String {
    container_status(pod, &sidecar_name(container))
        .and_then(|s| s.state)
        .and_then(|s| s.terminated)
        .and_then(|t| t.message)
        .unwrap_or_default()
}

/// Exit 3 and an OOM kill reach the hook as `KUBE_PRESTOP_EXIT_CODE=3` and
/// `KUBE_PRESTOP_EXIT_SIGNAL=9`.
async fn exit_code_and_oom_kill_reach_the_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-exit-status", |ns, rec| async move {
        let three = container("three", "sleep 2; exit 3", STATUS_HOOK);
        let mut oom = container("oom", "sleep 2; x=a; while :; do x=$x$x; done", STATUS_HOOK);
        set(
            &mut oom,
            "resources",
            json!({ "requests": { "cpu": "10m", "memory": "16Mi" }, "limits": { "memory": "20Mi" } }),
        );
        let j = job("exit-status", pod_spec(&rec, vec![three, oom]), json!({}))?;
        let pod = run_to_end(&client, &ns, &j, JobOutcome::Failed).await?;
        ensure_injected(&pod, "three")?;
        let mut lines = ensure_records(&rec, "hooks", 2).await?;
        lines.sort();
        if kernel_reports_exit_status() {
            ensure!(
                lines == ["oom code=unset signal=9", "three code=3 signal=unset"],
                "hook lines {lines:?}"
            );
            let logs = sidecar_logs(&client, &ns, &pod_name(&pod), "three").await?;
            ensure!(logs.contains("exit_status=exit:3"), "{logs}");
        } else {
            ensure!(
                lines == ["oom code=unset signal=unset", "three code=unset signal=unset"],
                "hook lines {lines:?}"
            );
            let logs = sidecar_logs(&client, &ns, &pod_name(&pod), "three").await?;
            ensure!(logs.contains("warning: exit status unavailable"), "{logs}");
        }
        Ok(())
    })
    .await
}

/// `run-on: failure` for the whole pod: the container that exits 0 gets no
/// hook (recorded as a skip in its sidecar's log and in the termination
/// message), the one that exits 1 does. `run-on` per container
/// (`ok=success,bad=success`): the reverse.
async fn run_on_failure_and_success(client: Client) -> Result<()> {
    if !kernel_reports_exit_status() {
        eprintln!("run-on scenario: the kernel has no PIDFD_INFO_EXIT; skipped");
        return Ok(());
    }
    with_scenario(&client.clone(), "kpt-run-on", |ns, rec| async move {
        for (job_name, annotation, ran, skipped) in [
            ("on-failure", "failure", "bad", "ok"),
            ("on-success", "ok=success,bad=success", "ok", "bad"),
        ] {
            let file = format!("hooks-{job_name}");
            let hook = format!("echo $KUBE_PRESTOP_CONTAINER >> /records/{file}");
            let spec = pod_spec(
                &rec,
                vec![
                    container("ok", "sleep 2; exit 0", &hook),
                    container("bad", "sleep 2; exit 1", &hook),
                ],
            );
            let j = annotated_job(
                job_name,
                spec,
                json!({ "kube-prestop.io/run-on": annotation }),
            )?;
            let pod = run_to_end(&client, &ns, &j, JobOutcome::Failed).await?;
            let lines = ensure_records(&rec, &file, 1).await?;
            ensure!(lines == [ran], "{job_name}: hook lines {lines:?}");
            ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), ran, 1).await?;
            let logs = sidecar_logs(&client, &ns, &pod_name(&pod), skipped).await?;
            ensure!(count_lines(&logs, HOOK_STARTED) == 0, "{logs}");
            ensure!(logs.contains("not running hook container="), "{logs}");
            let msg = termination_message(&pod, skipped);
            ensure!(
                msg.lines()
                    .any(|l| l.starts_with(&format!("container={skipped} "))
                        && l.contains(" hook=skipped-run-on ")),
                "{job_name}: termination message of {skipped}'s sidecar:\n{msg}"
            );
        }
        Ok(())
    })
    .await
}

/// A file the container wrote outside any volume: read by the hook through
/// `KUBE_PRESTOP_ROOT` (with `tar`, as docs/reference.md shows), and by its own
/// absolute path with `hook-root: container`.
async fn containers_own_files_reach_the_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-root", |ns, rec| async move {
        let body = "mkdir -p /tmp/out; echo payload-$HOSTNAME > /tmp/out/result.txt; sleep 2";
        let hook = "tar -C \"$KUBE_PRESTOP_ROOT/tmp/out\" -cf - . | tar -xOf - ./result.txt >> /records/via-root; \
                    test -e /tmp/out/result.txt || echo absent-in-sidecar >> /records/via-root";
        let j = job("via-root", pod_spec(&rec, vec![container("main", body, hook)]), json!({}))?;
        let pod = run_to_end(&client, &ns, &j, JobOutcome::Complete).await?;
        let lines = ensure_records(&rec, "via-root", 2).await?;
        ensure!(
            lines[0] == format!("payload-{}", pod_name(&pod)) && lines[1] == "absent-in-sidecar",
            "via KUBE_PRESTOP_ROOT: {lines:?}"
        );
        let logs = sidecar_logs(&client, &ns, &pod_name(&pod), "main").await?;
        ensure!(logs.contains("kube-prestop: released the root of container=main"), "{logs}");

        let hook = "echo \"root=$KUBE_PRESTOP_ROOT\" >> /records/chrooted; cat /tmp/out/result.txt >> /records/chrooted";
        let j = annotated_job(
            "chrooted",
            pod_spec(&rec, vec![container("main", body, hook)]),
            json!({ "kube-prestop.io/hook-root": "container" }),
        )?;
        let pod = run_to_end(&client, &ns, &j, JobOutcome::Complete).await?;
        let lines = ensure_records(&rec, "chrooted", 2).await?;
        ensure!(
            lines == ["root=/".to_owned(), format!("payload-{}", pod_name(&pod))],
            "chrooted: {lines:?}"
        );
        Ok(())
    })
    .await
}

/// Two watched containers: every sidecar's termination message lists the
/// runs of both (container, instance, exit status, hook status, duration).
async fn termination_message_lists_both_containers(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-term-msg", |ns, rec| async move {
        let hook = "echo $KUBE_PRESTOP_CONTAINER >> /records/hooks";
        let spec = pod_spec(
            &rec,
            vec![
                container("first", "sleep 1; exit 0", hook),
                container("second", "sleep 3; exit 4", hook),
            ],
        );
        let j = job("term-msg", spec, json!({}))?;
        let pod = run_to_end(&client, &ns, &j, JobOutcome::Failed).await?;
        ensure_records(&rec, "hooks", 2).await?;
        let exit_ok = kernel_reports_exit_status();
        for c in ["first", "second"] {
            let msg = termination_message(&pod, c);
            ensure!(
                msg.starts_with("kube-prestop hook runs, oldest first:\n"),
                "{c}'s sidecar: {msg:?}"
            );
            ensure!(msg.len() <= 4096, "{c}'s sidecar: {} bytes", msg.len());
            for (other, status) in [("first", "exit:0"), ("second", "exit:4")] {
                let status = if exit_ok { status } else { "unknown" };
                ensure!(
                    msg.lines().any(|l| l.starts_with(&format!("container={other} instance="))
                        && l.contains(&format!(" container_exit={status} hook=exit:0 duration_ms="))
                        && l.ends_with(" grace_cut=false")),
                    "{c}'s sidecar lacks {other}'s run:\n{msg}"
                );
            }
        }
        // The command docs/operations.md gives.
        let out = kube_prestop_e2e::kubectl(&[
            "get",
            "pod",
            "-n",
            &ns,
            &pod_name(&pod),
            "-o",
            "jsonpath={range .status.initContainerStatuses[?(@.state.terminated.message)]}{.name}{\":\\n\"}{.state.terminated.message}{end}",
        ])
        .await?;
        ensure!(
            out.contains("kube-prestop-first:\nkube-prestop hook runs"),
            "kubectl: {out}"
        );
        Ok(())
    })
    .await
}

/// The kubelet's pod directory on the node (the local cluster's
/// `--root-dir`).
fn kubelet_pod_dir(uid: &str) -> PathBuf {
    PathBuf::from("/var/lib/kube-prestop/cluster/kubelet/pods").join(uid)
}

/// Lines of every process's mountinfo on the host that mention `needle`
/// (the kubelet and the runtime live in the harness's mount namespace).
fn mounts_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen_ns = std::collections::HashSet::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(ns) = std::fs::read_link(p.join("ns/mnt")) else {
            continue;
        };
        if !seen_ns.insert(ns) {
            continue;
        }
        let text = std::fs::read_to_string(p.join("mountinfo")).unwrap_or_default();
        out.extend(
            text.lines()
                .filter(|l| l.contains(needle))
                .map(str::to_owned),
        );
    }
    out
}

/// The pod is deleted while its hook runs (and holds the container's root):
/// the grace period's SIGKILL ends the sidecar, the pod goes, the kubelet
/// tears its volumes down and removes its directory, and no mount of it is
/// left on the node.
async fn pod_deleted_while_root_held_ends_cleanly(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-root-held", |ns, rec| async move {
        let hook = "echo start >> /records/hooks; cd \"$KUBE_PRESTOP_ROOT/tmp\"; sleep 300";
        let mut spec = pod_spec(&rec, vec![container("main", "sleep 2", hook)]);
        set(&mut spec, "terminationGracePeriodSeconds", json!(3));
        set(
            &mut spec,
            "volumes",
            json!([rec.volume(), { "name": "mem", "emptyDir": { "medium": "Memory" } }]),
        );
        let mut j = job("root-held", spec, json!({}))?;
        // A memory-backed volume too: a tmpfs mount the kubelet unmounts.
        if let Some(c) = j
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|s| s.containers.first_mut())
        {
            c.volume_mounts
                .get_or_insert_with(Vec::new)
                .push(serde_json::from_value(
                    json!({ "name": "mem", "mountPath": "/mem" }),
                )?);
        }
        let jobs = Api::<Job>::namespaced(client.clone(), &ns);
        jobs.create(&PostParams::default(), &j).await?;
        let pod = wait_job_pod(&client, &ns, "root-held", POD_TIMEOUT).await?;
        let uid = pod.metadata.uid.clone().context("pod uid")?;
        rec.wait_lines("hooks", 1, POD_TIMEOUT).await?;
        jobs.delete("root-held", &DeleteParams::background())
            .await?;
        wait_pod_gone(&client, &ns, &pod_name(&pod), Duration::from_secs(90)).await?;
        let dir = kubelet_pod_dir(&uid);
        poll_until(Duration::from_secs(90), Duration::from_millis(500), || {
            let gone = !dir.exists() && mounts_mentioning(&uid).is_empty();
            async move { Ok(gone) }
        })
        .await
        .with_context(|| {
            format!(
                "pod {uid}: directory {} exists={}, mounts left: {:?}",
                dir.display(),
                dir.exists(),
                mounts_mentioning(&uid)
            )
        })?;
        Ok(())
    })
    .await
}

macro_rules! scenario {
    ($client:expr, $f:ident) => {
        (stringify!($f), Box::pin($f($client.clone())) as _)
    };
}

/// The scenarios of issue 16, a few at a time.
#[tokio::test]
async fn hook_context_scenarios() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let scenarios: Vec<Scenario> = vec![
        scenario!(client, exit_code_and_oom_kill_reach_the_hook),
        scenario!(client, run_on_failure_and_success),
        scenario!(client, containers_own_files_reach_the_hook),
        scenario!(client, termination_message_lists_both_containers),
        scenario!(client, pod_deleted_while_root_held_ends_cleanly),
    ];
    run_scenarios(scenarios, CONCURRENCY).await
}
