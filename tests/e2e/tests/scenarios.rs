//! Every way a Job's container can end (issue 6), on the real local cluster
//! with the chart installed. Each scenario is a real Job (or CronJob) in its
//! own labelled namespace; hooks append a line to a hostPath records file that
//! the test counts on the host after the pod finished, and the sidecar's logs
//! are counted too. Each function is named after its case.
//!
//! `concurrent_scenarios` runs the independent scenarios concurrently (a few
//! at a time) and reports each by its function's name. The ConfigMap
//! scenarios run in
//! `image_volume_unsupported_falls_back_to_config_map_then_install_container`,
//! beside a fake node whose runtime is too old for image volumes. Three run alone:
//! `indexed_twenty_true_runs_twenty_hooks` (a burst of short-lived
//! containers), `unselected_pods_untouched_and_webhook_not_called` (the
//! webhook's metrics must stay still) and
//! `webhook_scaled_to_zero_pods_start_uninjected` (scales the webhook to 0);
//! `make e2e` uses `--test-threads=1`.
//!
//! `two_containers_hooks_run_in_own_image_and_env` tags the busybox image
//! under a second name in the node's containerd (`ctr images tag`): without a
//! registry the two images have the same content, so the test tells the
//! containers apart by their env and checks each sidecar runs its own
//! container's image reference.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Pod, ResourceQuota, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    HOOK_SKIPPED_KUBELET, HOOK_STARTED, binary_config_map, config_map_binary, container_running,
    container_status, count_lines, ensure_injected, ensure_sidecar_hooks, ensure_skipped,
    ensure_untouched, has_install_container, phase, sidecar_logs,
};
use kube_prestop_e2e::fixtures::{container, job, label_namespace, pod_spec, set, tag_image};
use kube_prestop_e2e::metrics::admissions_total;
use kube_prestop_e2e::nodes::FakeNode;
use kube_prestop_e2e::records::{RECORD_HOOK, Records, ensure_records};
use kube_prestop_e2e::scenario::{Scenario, run_scenarios, with_scenario, with_scenario_in};
use kube_prestop_e2e::waits::{
    job_pods, poll_until, wait_job_pod, wait_pod, wait_pod_finished, wait_pod_gone,
    wait_quota_usage,
};
use kube_prestop_e2e::webhook::{
    binary_config_maps, probe_pod_with, scale_webhook, wait_delivery, wait_injects_from_config_map,
    wait_webhook_serving, webhook_log_lines, webhook_replicas,
};
use kube_prestop_e2e::{
    JobOutcome, TestNamespace, client, container_logs, init_tracing, kubectl, run_job,
    sidecar_name, test_image, unique_suffix, wait_for_log_line,
};
use serde_json::json;

const JOB_TIMEOUT: Duration = Duration::from_secs(240);
const POD_TIMEOUT: Duration = Duration::from_secs(120);
const C: &str = "main";
/// Scenarios running at the same time (2 shared cores).
const CONCURRENCY: usize = 6;

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Runs the Job, then waits for its single pod to be finished; returns the
/// outcome and the pod.
async fn run_to_end(client: &Client, ns: &str, job: &Job) -> Result<(JobOutcome, Pod)> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let outcome = run_job(client, ns, job, JOB_TIMEOUT).await?;
    let pod = wait_job_pod(client, ns, &name, POD_TIMEOUT).await?;
    let pod = wait_pod_finished(client, ns, &pod_name(&pod), POD_TIMEOUT).await?;
    Ok((outcome, pod))
}

/// [`run_to_end`], failing unless the Job ended `expected`; returns the pod.
async fn run_expecting(client: &Client, ns: &str, job: &Job, expected: JobOutcome) -> Result<Pod> {
    let (outcome, pod) = run_to_end(client, ns, job).await?;
    ensure!(
        outcome == expected,
        "Job ended {outcome:?}, expected {expected:?}"
    );
    Ok(pod)
}

/// Waits until the Job's pod runs `C` and its sidecar watches it.
async fn wait_watching(client: &Client, ns: &str, job: &str) -> Result<Pod> {
    let pod = wait_job_pod(client, ns, job, POD_TIMEOUT).await?;
    let name = pod_name(&pod);
    let pod = wait_pod(client, ns, &name, "main running", POD_TIMEOUT, |p| {
        container_running(p, C)
    })
    .await?;
    ensure_injected(&pod, C)?;
    wait_for_log_line(
        client,
        ns,
        &name,
        &sidecar_name(C),
        "kube-prestop: watching",
        POD_TIMEOUT,
    )
    .await?;
    Ok(pod)
}

fn create_job(client: &Client, ns: &str) -> Api<Job> {
    let _ = client;
    Api::<Job>::namespaced(client.clone(), ns)
}

/// The runtime makes each watched container's identifying mount point,
/// `created`, in the container's state volume when it sets the container
/// up (`docs/facts.md` K18): each sidecar's hook sees it as a directory
/// owned by root, for a root container and for one of UID 1000 alike, which
/// is what the watcher takes as the evidence of the container's start for
/// a late hook (`sidecar/src/watch.rs` `start_evidence`). In the
/// concurrent scenarios, so every cell of the matrix (runc 1.1 and 1.5,
/// gVisor) runs it.
async fn the_runtime_makes_the_start_evidence(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-created", |ns, rec| async move {
        // One records file per container: a file one user made, the other
        // could not append to.
        let hook = "stat -c \"$KUBE_PRESTOP_CONTAINER %u %F\" \
                    /.kube-prestop/state/$KUBE_PRESTOP_CONTAINER/created \
                    >> /records/created-$KUBE_PRESTOP_CONTAINER";
        let root = container("root", "true", hook);
        let mut user = container("user", "true", hook);
        set(
            &mut user,
            "securityContext",
            json!({ "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true }),
        );
        let j = job("created", pod_spec(&rec, vec![root, user]), json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, "root")?;
        let mut lines = ensure_records(&rec, "created-root", 1).await?;
        lines.extend(ensure_records(&rec, "created-user", 1).await?);
        ensure!(
            lines == ["root 0 directory", "user 0 directory"],
            "the hooks saw {lines:?}"
        );
        Ok(())
    })
    .await
}

/// Exit 0 -> once, Job Complete, pod Succeeded, output in the sidecar's logs.
async fn exit_zero_runs_hook_once(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-exit-zero", |ns, rec| async move {
        let token = format!("exit-zero-output-{}", unique_suffix());
        let hook = format!("{RECORD_HOOK}; echo {token}");
        let j = job(
            "exit-zero",
            pod_spec(&rec, vec![container(C, "sleep 2; echo body", &hook)]),
            json!({}),
        )?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
        ensure_injected(&pod, C)?;
        let lines = ensure_records(&rec, "hooks", 1).await?;
        ensure!(lines[0].starts_with("main "), "record {lines:?}");
        let logs = ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        ensure!(
            logs.lines().filter(|l| l.trim() == token).count() == 1,
            "hook output not once in sidecar logs:\n{logs}"
        );
        // The default start gate: the exec of post-start, done once armed.
        ensure!(
            post_start_of(&pod).is_some_and(|h| h.exec.is_some() && h.http_get.is_none()),
            "the sidecar's postStart is not the exec gate"
        );
        ensure!(
            logs.contains("kube-prestop: post-start done container=main"),
            "no post-start done in the sidecar's log:\n{logs}"
        );
        // The same through kubectl, as a user would look.
        let out = kubectl(&["logs", "-n", &ns, &pod_name(&pod), "-c", &sidecar_name(C)]).await?;
        ensure!(
            out.contains(&token),
            "kubectl logs lacks the hook output:\n{out}"
        );
        Ok(())
    })
    .await
}

/// Exit 3, backoffLimit 0 -> once, Job Failed, pod Failed.
async fn exit_three_runs_hook_once_and_job_fails(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-exit-three", |ns, rec| async move {
        let j = job(
            "exit-three",
            pod_spec(&rec, vec![container(C, "sleep 2; exit 3", RECORD_HOOK)]),
            json!({}),
        )?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Failed).await?;
        ensure!(phase(&pod) == "Failed", "pod phase {}", phase(&pod));
        let code = container_status(&pod, C)
            .and_then(|s| s.state)
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code);
        ensure!(code == Some(3), "main exit code {code:?}");
        ensure_records(&rec, "hooks", 1).await?;
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

/// OOM-killed -> once.
async fn oom_kill_runs_hook_once(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-oom", |ns, rec| async move {
        let mut c = container(C, "sleep 2; x=a; while :; do x=$x$x; done", RECORD_HOOK);
        set(
            &mut c,
            "resources",
            json!({ "requests": { "cpu": "10m", "memory": "16Mi" }, "limits": { "memory": "20Mi" } }),
        );
        let j = job("oom", pod_spec(&rec, vec![c]), json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Failed).await?;
        let term = container_status(&pod, C)
            .and_then(|s| s.state)
            .and_then(|s| s.terminated)
            .context("main not terminated")?;
        // containerd on cgroup v1 occasionally misses the OOM event of a
        // container the memory cgroup kills: then the reason is "Error", but
        // the memory cgroup's SIGKILL (137) is still there.
        ensure!(
            term.reason.as_deref() == Some("OOMKilled") || term.exit_code == 137,
            "main terminated with {:?} exit code {}",
            term.reason,
            term.exit_code
        );
        tracing::info!(reason = ?term.reason, code = term.exit_code, "OOM: main terminated");
        ensure_records(&rec, "hooks", 1).await?;
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

/// Pod deleted while running -> the kubelet's preStop once, no sidecar run.
async fn deleted_pod_gets_only_the_kubelets_prestop(client: Client) -> Result<()> {
    use futures::AsyncBufReadExt as _;
    use futures::TryStreamExt as _;
    with_scenario(&client.clone(), "kpt-pod-deleted", |ns, rec| async move {
        let j = job(
            "deleted",
            pod_spec(&rec, vec![container(C, "exec sleep 3600", RECORD_HOOK)]),
            json!({}),
        )?;
        create_job(&client, &ns)
            .create(&PostParams::default(), &j)
            .await?;
        let pod = wait_watching(&client, &ns, "deleted").await?;
        let name = pod_name(&pod);
        let pods = Api::<Pod>::namespaced(client.clone(), &ns);
        // Follow the sidecar's logs: the pod and its logs vanish after deletion.
        let params = kube::api::LogParams {
            container: Some(sidecar_name(C)),
            follow: true,
            ..Default::default()
        };
        let stream = pods.log_stream(&name, &params).await?;
        let reader = tokio::spawn(async move {
            stream
                .lines()
                .try_collect::<Vec<String>>()
                .await
                .unwrap_or_default()
        });
        pods.delete(&name, &DeleteParams::default()).await?;
        wait_pod_gone(&client, &ns, &name, Duration::from_secs(90)).await?;
        let lines = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .context("sidecar log stream did not end")??;
        let logs = lines.join("\n");
        let recs = ensure_records(&rec, "hooks", 1).await?;
        ensure!(
            recs[0].starts_with("by-kubelet "),
            "the hook was not the kubelet's: {recs:?}"
        );
        ensure!(
            count_lines(&logs, HOOK_SKIPPED_KUBELET) == 1,
            "sidecar did not log the skip:\n{logs}"
        );
        ensure!(
            count_lines(&logs, HOOK_STARTED) == 0,
            "sidecar ran the hook too:\n{logs}"
        );
        Ok(())
    })
    .await
}

/// Job activeDeadlineSeconds exceeded -> exactly once.
async fn active_deadline_runs_hook_once(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-deadline", |ns, rec| async move {
        let j = job(
            "deadline",
            pod_spec(&rec, vec![container(C, "exec sleep 3600", RECORD_HOOK)]),
            json!({ "activeDeadlineSeconds": 25 }),
        )?;
        create_job(&client, &ns)
            .create(&PostParams::default(), &j)
            .await?;
        let pod = wait_watching(&client, &ns, "deadline").await?;
        let jobs = create_job(&client, &ns);
        poll_until(Duration::from_secs(120), Duration::from_millis(500), || {
            let jobs = jobs.clone();
            async move {
                let j = jobs.get("deadline").await?;
                Ok(j.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| {
                        c.type_ == "Failed"
                            && c.status == "True"
                            && c.reason.as_deref() == Some("DeadlineExceeded")
                    }))
            }
        })
        .await
        .context("Job did not fail with DeadlineExceeded")?;
        // The Job controller deletes the pod: wait until it is gone (or finished).
        let pods = Api::<Pod>::namespaced(client.clone(), &ns);
        let name = pod_name(&pod);
        poll_until(Duration::from_secs(90), Duration::from_millis(300), || {
            let pods = pods.clone();
            let name = name.clone();
            async move {
                Ok(pods
                    .get_opt(&name)
                    .await?
                    .is_none_or(|p| kube_prestop_e2e::checks::pod_finished(&p)))
            }
        })
        .await?;
        let recs = ensure_records(&rec, "hooks", 1).await?;
        tracing::info!(?recs, "active deadline: record");
        Ok(())
    })
    .await
}

/// Liveness failure kills the container (restartPolicy Never) -> once.
async fn liveness_kill_runs_hook_once(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-liveness", |ns, rec| async move {
        let mut c = container(C, "exec sleep 3600", RECORD_HOOK);
        set(
            &mut c,
            "livenessProbe",
            json!({ "exec": { "command": ["sh", "-c", "test ! -e /records/kill"] },
                    "periodSeconds": 1, "failureThreshold": 1 }),
        );
        let j = job("liveness", pod_spec(&rec, vec![c]), json!({}))?;
        create_job(&client, &ns)
            .create(&PostParams::default(), &j)
            .await?;
        let pod = wait_watching(&client, &ns, "liveness").await?;
        rec.touch("kill")?;
        let name = pod_name(&pod);
        let pod = wait_pod_finished(&client, &ns, &name, JOB_TIMEOUT).await?;
        ensure!(phase(&pod) == "Failed", "pod phase {}", phase(&pod));
        let recs = ensure_records(&rec, "hooks", 1).await?;
        ensure!(
            recs[0].starts_with("by-kubelet "),
            "expected the kubelet's run: {recs:?}"
        );
        let logs = sidecar_logs(&client, &ns, &name, C).await?;
        ensure!(
            count_lines(&logs, HOOK_SKIPPED_KUBELET) == 1,
            "no skip logged:\n{logs}"
        );
        ensure!(
            count_lines(&logs, HOOK_STARTED) == 0,
            "sidecar ran the hook too:\n{logs}"
        );
        Ok(())
    })
    .await
}

/// OnFailure: fails twice then succeeds -> three hooks; sidecar restartCount 0.
async fn on_failure_restarts_run_a_hook_each(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-on-failure", |ns, rec| async move {
        let cmd = "n=$(cat /records/attempts 2>/dev/null | wc -l); echo x >> /records/attempts; test \"$n\" -ge 2";
        let mut spec = pod_spec(&rec, vec![container(C, cmd, RECORD_HOOK)]);
        set(&mut spec, "restartPolicy", json!("OnFailure"));
        let j = job("onfailure", spec, json!({ "backoffLimit": 6 }))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        let restarts = container_status(&pod, C).map(|s| s.restart_count);
        ensure!(restarts == Some(2), "main restartCount {restarts:?}");
        let sidecar_restarts = container_status(&pod, &sidecar_name(C)).map(|s| s.restart_count);
        ensure!(sidecar_restarts == Some(0), "sidecar restartCount {sidecar_restarts:?}");
        let recs = ensure_records(&rec, "hooks", 3).await?;
        let mut instances: Vec<&str> = recs.iter().filter_map(|l| l.split(' ').nth(1)).collect();
        instances.sort_unstable();
        instances.dedup();
        ensure!(instances.len() == 3, "instances not distinct: {recs:?}");
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 3).await?;
        Ok(())
    })
    .await
}

/// Two containers, different images and preStop commands.
async fn two_containers_hooks_run_in_own_image_and_env(client: Client) -> Result<()> {
    let second = format!("{}-second", test_image());
    let second = second.replacen(":test-second", ":second", 1);
    tag_image(&test_image(), &second).await?;
    with_scenario(
        &client.clone(),
        "kpt-two-containers",
        |ns, rec| async move {
            let mut a = container(
                "alpha",
                "sleep 2; echo a",
                "echo \"$KUBE_PRESTOP_CONTAINER cmd-alpha $WHO\" >> /records/hooks",
            );
            set(
                &mut a,
                "env",
                json!([{ "name": "WHO", "value": "env-alpha" }]),
            );
            let mut b = container(
                "beta",
                "sleep 2",
                "echo \"$KUBE_PRESTOP_CONTAINER cmd-beta $WHO\" >> /records/hooks",
            );
            set(
                &mut b,
                "env",
                json!([{ "name": "WHO", "value": "env-beta" }]),
            );
            set(&mut b, "image", json!(second.clone()));
            let j = job("two", pod_spec(&rec, vec![a, b]), json!({}))?;
            let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
            ensure_injected(&pod, "alpha")?;
            ensure_injected(&pod, "beta")?;
            let spec = pod.spec.clone().unwrap_or_default();
            for (c, img) in [("alpha", test_image()), ("beta", second.clone())] {
                let sc = spec
                    .init_containers
                    .iter()
                    .flatten()
                    .find(|x| x.name == sidecar_name(c))
                    .context("sidecar missing")?;
                ensure!(
                    sc.image.as_deref() == Some(img.as_str()),
                    "sidecar of {c} runs {:?}, not {img}",
                    sc.image
                );
            }
            let mut recs = ensure_records(&rec, "hooks", 2).await?;
            recs.sort();
            ensure!(
                recs == ["alpha cmd-alpha env-alpha", "beta cmd-beta env-beta"],
                "records {recs:?}"
            );
            ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), "alpha", 1).await?;
            ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), "beta", 1).await?;
            Ok(())
        },
    )
    .await
}

/// The hook sees env (literal, Secret, ConfigMap), volumes, workingDir, uid.
async fn hook_sees_its_containers_env_volumes_dir_and_uid(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-env", |ns, rec| async move {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": "hook-env" }, "stringData": { "token": "from-secret" }
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "hook-env" }, "data": { "setting": "from-configmap", "file.txt": "from-volume" }
        }))?;
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &cm)
            .await?;
        let hook = "{ echo \"literal=$LITERAL\"; echo \"secret=$SECRET_TOKEN\"; echo \"cm=$CM_SETTING\"; \
                    echo \"envfrom=$setting\"; echo \"volume=$(cat /cfg/file.txt)\"; echo \"pwd=$(pwd)\"; \
                    echo \"uid=$(id -u) gid=$(id -g)\"; } > /records/env.tmp && mv /records/env.tmp /records/env; \
                    echo done >> /records/hooks";
        let mut c = container(C, "sleep 2; echo body", hook);
        set(
            &mut c,
            "env",
            json!([
                { "name": "LITERAL", "value": "literal-value" },
                { "name": "SECRET_TOKEN", "valueFrom": { "secretKeyRef": { "name": "hook-env", "key": "token" } } },
                { "name": "CM_SETTING", "valueFrom": { "configMapKeyRef": { "name": "hook-env", "key": "setting" } } }
            ]),
        );
        set(&mut c, "envFrom", json!([{ "configMapRef": { "name": "hook-env" } }]));
        set(&mut c, "workingDir", json!("/cfg"));
        set(&mut c, "securityContext", json!({ "runAsUser": 4321, "runAsGroup": 4322 }));
        set(
            &mut c,
            "volumeMounts",
            json!([Records::mount(), { "name": "cfg", "mountPath": "/cfg" }]),
        );
        let mut spec = pod_spec(&rec, vec![c]);
        set(
            &mut spec,
            "volumes",
            json!([rec.volume(), { "name": "cfg", "configMap": { "name": "hook-env" } }]),
        );
        let j = job("env", spec, json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_records(&rec, "hooks", 1).await?;
        let env = rec.lines("env");
        let want = [
            "literal=literal-value",
            "secret=from-secret",
            "cm=from-configmap",
            "envfrom=from-configmap",
            "volume=from-volume",
            "pwd=/cfg",
            "uid=4321 gid=4322",
        ];
        ensure!(env == want, "hook saw {env:?}, expected {want:?}");
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

/// Hook longer than the grace period -> cut at the grace period, logged,
/// Job outcome unchanged.
async fn hook_over_grace_period_is_cut(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-over-grace", |ns, rec| async move {
        let hook = "echo start >> /records/hooks; sleep 120; echo end >> /records/hooks";
        let mut spec = pod_spec(&rec, vec![container(C, "sleep 2; echo body", hook)]);
        set(&mut spec, "terminationGracePeriodSeconds", json!(4));
        let j = job("long-hook", spec, json!({}))?;
        let t = Instant::now();
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
        ensure!(
            t.elapsed() < Duration::from_secs(100),
            "pod took {:?}: the hook was not cut",
            t.elapsed()
        );
        let recs = rec.wait_lines("hooks", 1, Duration::from_secs(10)).await?;
        ensure!(recs == ["start"], "records {recs:?}: hook not cut");
        let logs = sidecar_logs(&client, &ns, &pod_name(&pod), C).await?;
        ensure!(
            count_lines(&logs, "received while hook runs") == 1 && logs.contains("grace period 4s"),
            "the cut is not logged:\n{logs}"
        );
        ensure!(
            count_lines(&logs, "kube-prestop: hook finished") == 0,
            "hook finished?\n{logs}"
        );
        let sc = container_status(&pod, &sidecar_name(C))
            .and_then(|s| s.state)
            .and_then(|s| s.terminated);
        ensure!(
            sc.as_ref().map(|t| t.exit_code) == Some(137),
            "sidecar ended {sc:?}, expected SIGKILL"
        );
        Ok(())
    })
    .await
}

/// Another native sidecar (HTTP) is still up while our hook runs.
async fn other_native_sidecar_serves_during_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-other-sidecar", |ns, rec| async move {
        let hook = "echo \"$KUBE_PRESTOP_CONTAINER $(wget -q -O - http://127.0.0.1:8080/index.html 2>&1)\" >> /records/hooks";
        let mut spec = pod_spec(&rec, vec![container(C, "sleep 2; echo body", hook)]);
        set(
            &mut spec,
            "initContainers",
            json!([{
                "name": "proxy",
                "image": test_image(),
                "imagePullPolicy": "Never",
                "restartPolicy": "Always",
                "command": ["sh", "-c", "mkdir -p /www && echo proxy-ok > /www/index.html && exec httpd -f -p 8080 -h /www"],
                "startupProbe": { "exec": { "command": ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/index.html"] }, "periodSeconds": 1, "failureThreshold": 60 },
                "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } }
            }]),
        );
        let j = job("proxy", spec, json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        let inits: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        let proxy_at = inits.iter().position(|n| n == "proxy");
        let ours_at = inits.iter().position(|n| *n == sidecar_name(C));
        ensure!(proxy_at < ours_at && ours_at.is_some(), "init containers {inits:?}");
        let recs = ensure_records(&rec, "hooks", 1).await?;
        ensure!(recs == ["main proxy-ok"], "hook did not reach the proxy: {recs:?}");
        Ok(())
    })
    .await
}

fn restricted_container(cmd: &str, prestop: &str) -> serde_json::Value {
    let mut c = container(C, cmd, prestop);
    set(&mut c, "volumeMounts", json!([]));
    set(
        &mut c,
        "securityContext",
        json!({
            "allowPrivilegeEscalation": false,
            "capabilities": { "drop": ["ALL"] },
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "seccompProfile": { "type": "RuntimeDefault" }
        }),
    );
    c
}

/// Pod Security restricted enforced -> admitted, hook runs.
async fn pod_security_restricted_admits_and_runs_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-restricted", |ns, _rec| async move {
        label_namespace(
            &client,
            &ns,
            json!({ "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest" }),
        )
        .await?;
        let token = format!("restricted-hook-{}", unique_suffix());
        // hostPath is not allowed under restricted: the sidecar's logs are the record.
        let hook = format!("echo \"{token} uid=$(id -u)\"");
        let spec = json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [restricted_container("sleep 2; echo body", &hook)]
        });
        let j = job("restricted", spec, json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, C)?;
        let logs = ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        ensure!(
            count_lines(&logs, &format!("{token} uid=65534")) == 1,
            "hook output not once:\n{logs}"
        );
        Ok(())
    })
    .await
}

/// LimitRange (min/max/defaults) + ResourceQuota on limits -> admitted, hook runs.
async fn limit_range_and_quota_admit_and_run_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-limits", |ns, rec| async move {
        let lr: LimitRange = serde_json::from_value(json!({
            "metadata": { "name": "limits" },
            "spec": { "limits": [{
                "type": "Container",
                "min": { "cpu": "5m", "memory": "8Mi" },
                "max": { "cpu": "500m", "memory": "512Mi" },
                "default": { "cpu": "100m", "memory": "64Mi" },
                "defaultRequest": { "cpu": "10m", "memory": "16Mi" }
            }] }
        }))?;
        Api::<LimitRange>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &lr)
            .await?;
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": { "name": "quota" },
            "spec": { "hard": {
                "limits.cpu": "2", "limits.memory": "2Gi",
                "requests.cpu": "1", "requests.memory": "1Gi", "pods": "5"
            } }
        }))?;
        Api::<ResourceQuota>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &quota)
            .await?;
        // The quota controller must have computed usage before pods are admitted.
        wait_quota_usage(&client, &ns, "quota", |_| true).await?;
        let mut c = container(C, "sleep 2; echo body", RECORD_HOOK);
        set(&mut c, "resources", json!({}));
        let j = job("limited", pod_spec(&rec, vec![c]), json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, C)?;
        let spec = pod.spec.clone().unwrap_or_default();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            let limits = c
                .resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .unwrap_or_default();
            ensure!(
                limits.contains_key("cpu") && limits.contains_key("memory"),
                "container {} has no cpu/memory limits: {:?}",
                c.name,
                c.resources
            );
        }
        ensure_records(&rec, "hooks", 1).await?;
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

/// Guaranteed pod stays Guaranteed.
async fn guaranteed_pod_stays_guaranteed(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-guaranteed", |ns, rec| async move {
        let mut c = container(C, "sleep 2; echo body", RECORD_HOOK);
        let r = json!({ "cpu": "50m", "memory": "32Mi" });
        set(
            &mut c,
            "resources",
            json!({ "requests": r.clone(), "limits": r }),
        );
        let j = job("guaranteed", pod_spec(&rec, vec![c]), json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, C)?;
        let qos = pod.status.as_ref().and_then(|s| s.qos_class.clone());
        ensure!(qos.as_deref() == Some("Guaranteed"), "qosClass {qos:?}");
        ensure_records(&rec, "hooks", 1).await?;
        Ok(())
    })
    .await
}

/// CronJob -> its Jobs' pods are injected and hooks run.
async fn cronjob_pods_injected_and_hooks_run(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-cronjob", |ns, rec| async move {
        let hook = "echo \"$KUBE_PRESTOP_CONTAINER $POD_NAME\" >> /records/hooks";
        let mut c = container(C, "sleep 2; echo body", hook);
        set(
            &mut c,
            "env",
            json!([{ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }]),
        );
        let cj: CronJob = serde_json::from_value(json!({
            "metadata": { "name": "every-minute" },
            "spec": {
                "schedule": "*/1 * * * *",
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 5,
                "failedJobsHistoryLimit": 5,
                "jobTemplate": { "spec": { "backoffLimit": 0, "template": { "spec": pod_spec(&rec, vec![c]) } } }
            }
        }))?;
        let cronjobs = Api::<CronJob>::namespaced(client.clone(), &ns);
        cronjobs.create(&PostParams::default(), &cj).await?;
        let jobs = create_job(&client, &ns);
        poll_until(Duration::from_secs(150), Duration::from_secs(1), || {
            let jobs = jobs.clone();
            async move { Ok(!jobs.list(&ListParams::default()).await?.items.is_empty()) }
        })
        .await
        .context("the CronJob created no Job within 150 s")?;
        cronjobs
            .patch("every-minute", &PatchParams::default(), &Patch::Merge(json!({ "spec": { "suspend": true } })))
            .await?;
        // Every Job created so far must finish, its pods injected, one record per pod.
        let mut finished_pods = Vec::new();
        for j in jobs.list(&ListParams::default()).await?.items {
            let name = j.metadata.name.clone().unwrap_or_default();
            let owned = j
                .metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| o.kind == "CronJob" && o.name == "every-minute");
            ensure!(owned, "Job {name} not owned by the CronJob");
            let pod = wait_job_pod(&client, &ns, &name, POD_TIMEOUT).await?;
            let pod = wait_pod_finished(&client, &ns, &pod_name(&pod), JOB_TIMEOUT).await?;
            ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
            ensure_injected(&pod, C)?;
            ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
            finished_pods.push(pod_name(&pod));
        }
        let recs = ensure_records(&rec, "hooks", finished_pods.len()).await?;
        for p in &finished_pods {
            ensure!(recs.contains(&format!("main {p}")), "no record of {p}: {recs:?}");
        }
        Ok(())
    })
    .await
}

/// `hostPID: true` -> hook runs without shareProcessNamespace.
async fn host_pid_hook_runs_without_shared_pid_namespace(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-host-pid", |ns, rec| async move {
        let mut spec = pod_spec(&rec, vec![container(C, "sleep 2; echo body", RECORD_HOOK)]);
        set(&mut spec, "hostPID", json!(true));
        let j = job("hostpid", spec, json!({}))?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, C)?;
        let share = pod.spec.as_ref().and_then(|s| s.share_process_namespace);
        ensure!(
            share != Some(true),
            "shareProcessNamespace set with hostPID"
        );
        ensure_records(&rec, "hooks", 1).await?;
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

/// The sidecar's postStart handler (the start gate).
fn post_start_of(pod: &Pod) -> Option<k8s_openapi::api::core::v1::LifecycleHandler> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == sidecar_name(C))?
        .lifecycle
        .clone()?
        .post_start
}

/// `kube-prestop.io/gate: http-get`: the kubelet's request answered by the
/// watcher once armed (`gate answered`), a `true` container's hook once;
/// the same annotation on a `hostNetwork` pod (where the port would be the
/// node's) gets the exec gate, and the watcher opens no port;
/// `kube-prestop.io/gate: none`: no postStart handler, and the `true`
/// container's hook still once (live, or the late run when it exited before
/// the watcher looked).
async fn gates_by_annotation_http_get_exec_for_host_network_none(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-http-get-gate", |ns, rec| async move {
        let annotated = |name: &str, gate: &str, spec: serde_json::Value| -> Result<Job> {
            let mut j = job(name, spec, json!({}))?;
            if let Some(spec) = j.spec.as_mut() {
                spec.template
                    .metadata
                    .get_or_insert_with(Default::default)
                    .annotations =
                    Some([("kube-prestop.io/gate".to_owned(), gate.to_owned())].into());
            }
            Ok(j)
        };
        let mut host = pod_spec(&rec, vec![container(C, "true", RECORD_HOOK)]);
        set(&mut host, "hostNetwork", json!(true));
        let jobs = [
            (
                annotated(
                    "gate-http-get",
                    "http-get",
                    pod_spec(&rec, vec![container(C, "true", RECORD_HOOK)]),
                )?,
                "httpGet",
            ),
            (annotated("gate-host-net", "http-get", host)?, "exec"),
            (
                annotated(
                    "gate-none",
                    "none",
                    pod_spec(&rec, vec![container(C, "true", RECORD_HOOK)]),
                )?,
                "none",
            ),
        ];
        for (n, (j, want)) in jobs.iter().enumerate() {
            let pod = run_expecting(&client, &ns, j, JobOutcome::Complete).await?;
            ensure_injected(&pod, C)?;
            let handler = post_start_of(&pod);
            let got = match &handler {
                None => "none",
                Some(h) if h.http_get.is_some() && h.exec.is_none() => "httpGet",
                Some(h) if h.exec.is_some() && h.http_get.is_none() => "exec",
                Some(_) => "both or neither",
            };
            ensure!(
                got == *want,
                "{}: the sidecar's postStart is not the {want} gate: {handler:?}",
                pod_name(&pod)
            );
            ensure_records(&rec, "hooks", n + 1).await?;
            let logs = ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
            let answered = logs.contains("kube-prestop: gate answered container=main")
                && !logs.contains("without the watcher armed");
            let exec_done = logs.contains("kube-prestop: post-start done container=main");
            let shown = match (answered, exec_done) {
                (true, false) => "httpGet",
                (false, true) => "exec",
                (false, false) => "none",
                (true, true) => "both",
            };
            ensure!(
                shown == *want,
                "{}: the sidecar's log does not show the {want} gate:\n{logs}",
                pod_name(&pod)
            );
        }
        Ok(())
    })
    .await
}

/// Sidecar SIGKILLed while watching -> restarted; hook still exactly once.
async fn killed_sidecar_restarts_and_hook_runs_once(client: Client) -> Result<()> {
    with_scenario(
        &client.clone(),
        "kpt-sidecar-killed",
        |ns, rec| async move {
            let cmd = "while [ ! -e /records/release ]; do sleep 1; done";
            let j = job(
                "killed",
                pod_spec(&rec, vec![container(C, cmd, RECORD_HOOK)]),
                json!({}),
            )?;
            create_job(&client, &ns)
                .create(&PostParams::default(), &j)
                .await?;
            let pod = wait_watching(&client, &ns, "killed").await?;
            let name = pod_name(&pod);
            // The watcher is the process whose argv[1] is `watch` (not PID 1: the
            // pod shares its PID namespace).
            let find_kill = "for p in /proc/[0-9]*; do \
              a=$(tr '\\0' '\\n' < $p/cmdline 2>/dev/null | sed -n 2p); \
              if [ \"$a\" = watch ]; then echo ${p#/proc/}; kill -9 ${p#/proc/}; fi; done";
            let killed = kubectl(&[
                "exec",
                "-n",
                &ns,
                &name,
                "-c",
                &sidecar_name(C),
                "--",
                "sh",
                "-c",
                find_kill,
            ])
            .await
            // Killing the container's main process may end the exec session
            // with it (137) before kubectl reports the output.
            .or_else(|e| {
                if format!("{e:#}").contains("exit code 137") {
                    Ok("(session ended with the container)".to_owned())
                } else {
                    Err(e)
                }
            })?;
            ensure!(
                !killed.trim().is_empty(),
                "found no watcher process to kill"
            );
            tracing::info!(pid = killed.trim(), "killed the watcher");
            let sc = sidecar_name(C);
            wait_pod(
                &client,
                &ns,
                &name,
                "sidecar restarted and running",
                POD_TIMEOUT,
                |p| {
                    container_status(p, &sc).is_some_and(|s| s.restart_count >= 1)
                        && container_running(p, &sc)
                },
            )
            .await?;
            wait_for_log_line(
                &client,
                &ns,
                &name,
                &sc,
                "kube-prestop: watching",
                POD_TIMEOUT,
            )
            .await?;
            ensure!(
                rec.lines("hooks").is_empty(),
                "hook ran before the release: {:?}",
                rec.lines("hooks")
            );
            rec.touch("release")?;
            let pod = wait_pod_finished(&client, &ns, &name, JOB_TIMEOUT).await?;
            ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
            let restarts = container_status(&pod, &sc).map(|s| s.restart_count);
            ensure!(restarts >= Some(1), "sidecar restartCount {restarts:?}");
            let recs = ensure_records(&rec, "hooks", 1).await?;
            ensure!(recs[0].starts_with("main "), "records {recs:?}");
            // The restarted sidecar ran it (its current logs), once.
            ensure_sidecar_hooks(&client, &ns, &name, C, 1).await?;
            Ok(())
        },
    )
    .await
}

/// Job deleted while its hook runs -> the hook finishes within the grace period.
async fn job_deleted_during_hook_lets_it_finish(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-job-deleted", |ns, rec| async move {
        let hook = "echo start >> /records/hooks; sleep 8; echo end >> /records/hooks";
        let mut spec = pod_spec(&rec, vec![container(C, "sleep 2; echo body", hook)]);
        set(&mut spec, "terminationGracePeriodSeconds", json!(30));
        let j = job("deleted-in-hook", spec, json!({}))?;
        let jobs = create_job(&client, &ns);
        jobs.create(&PostParams::default(), &j).await?;
        let pod = wait_job_pod(&client, &ns, "deleted-in-hook", POD_TIMEOUT).await?;
        rec.wait_lines("hooks", 1, POD_TIMEOUT).await?;
        ensure!(
            rec.lines("hooks") == ["start"],
            "records {:?}",
            rec.lines("hooks")
        );
        let t = Instant::now();
        jobs.delete("deleted-in-hook", &DeleteParams::background())
            .await?;
        wait_pod_gone(&client, &ns, &pod_name(&pod), Duration::from_secs(90)).await?;
        let recs = rec.lines("hooks");
        ensure!(recs == ["start", "end"], "hook did not finish: {recs:?}");
        ensure!(
            t.elapsed() < Duration::from_secs(40),
            "pod took {:?} to go",
            t.elapsed()
        );
        Ok(())
    })
    .await
}

/// The sidecar binary from the namespace's ConfigMap (`sidecarBinary.source`
/// `auto` where image volumes do not work, on a cluster of one
/// architecture): the first pod injected in a namespace
/// gets the install init container and makes the webhook create the
/// ConfigMap; later pods get no install init container. A container that
/// exits runs its hook once from the sidecar, and a deleted pod's preStop
/// (the wrapper, from the same ConfigMap, in the watched container) once
/// from the kubelet.
async fn sidecar_binary_from_namespace_config_map(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-binary-cm", |ns, rec| async move {
        ensure!(
            binary_config_maps(&client, &ns).await?.is_empty(),
            "a sidecar-binary ConfigMap before any pod (is sidecarBinary.createAhead set?)"
        );
        let first = job(
            "first",
            pod_spec(&rec, vec![container(C, "echo body", RECORD_HOOK)]),
            json!({}),
        )?;
        let pod = run_expecting(&client, &ns, &first, JobOutcome::Complete).await?;
        ensure!(
            has_install_container(&pod) && binary_config_map(&pod).is_none(),
            "the namespace's first pod did not get the install container"
        );
        ensure_records(&rec, "hooks", 1).await?;
        let name = wait_injects_from_config_map(&client, &ns, POD_TIMEOUT).await?;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get(&name)
            .await?;
        ensure!(cm.immutable == Some(true), "{name} is not immutable");
        let binary = config_map_binary(&cm);
        ensure!(
            binary.starts_with(b"\x7fELF") && binary.len() > 100 * 1024,
            "{name} does not hold the static sidecar binary ({} bytes)",
            binary.len()
        );
        ensure!(
            binary_config_maps(&client, &ns).await?.len() == 1,
            "more than one sidecar-binary ConfigMap in {ns}"
        );

        // Exits on its own: the sidecar runs the hook.
        let hook = RECORD_HOOK.replace("/records/hooks", "/records/exited");
        let j = job(
            "from-config-map",
            pod_spec(&rec, vec![container(C, "sleep 2; echo body", &hook)]),
            json!({}),
        )?;
        let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
        ensure_injected(&pod, C)?;
        ensure!(
            !has_install_container(&pod),
            "pod has the install container"
        );
        ensure!(
            binary_config_map(&pod).as_deref() == Some(name.as_str()),
            "pod mounts {:?}, not {name}",
            binary_config_map(&pod)
        );
        let lines = ensure_records(&rec, "exited", 1).await?;
        ensure!(lines[0].starts_with("main "), "record {lines:?}");
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;

        // Deleted while running: the kubelet runs the wrapped preStop.
        let hook = RECORD_HOOK.replace("/records/hooks", "/records/deleted");
        let j = job(
            "deleted",
            pod_spec(&rec, vec![container(C, "exec sleep 3600", &hook)]),
            json!({}),
        )?;
        create_job(&client, &ns)
            .create(&PostParams::default(), &j)
            .await?;
        let pod = wait_watching(&client, &ns, "deleted").await?;
        ensure!(
            binary_config_map(&pod).is_some() && !has_install_container(&pod),
            "second pod did not get the binary from the ConfigMap"
        );
        Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&pod_name(&pod), &DeleteParams::default())
            .await?;
        wait_pod_gone(&client, &ns, &pod_name(&pod), Duration::from_secs(90)).await?;
        let recs = ensure_records(&rec, "deleted", 1).await?;
        ensure!(
            recs[0].starts_with("by-kubelet "),
            "the hook was not the kubelet's: {recs:?}"
        );
        Ok(())
    })
    .await
}

/// A namespace whose ResourceQuota leaves no room for the sidecar-binary
/// ConfigMap: the webhook cannot make it, and pods get the install init
/// container instead, with the same hook exactly once.
async fn config_map_refused_falls_back_to_install_container(client: Client) -> Result<()> {
    with_scenario_in(
        &client.clone(),
        "kpt-cm-refused",
        false,
        |ns, rec| async move {
            let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
            // The quota counts the kube-root-ca.crt ConfigMap the controller
            // manager publishes in every namespace: wait for it, then allow no
            // more.
            poll_until(POD_TIMEOUT, Duration::from_millis(200), || {
                let config_maps = config_maps.clone();
                async move { Ok(config_maps.get_opt("kube-root-ca.crt").await?.is_some()) }
            })
            .await
            .context("kube-root-ca.crt never published")?;
            let quota: ResourceQuota = serde_json::from_value(json!({
                "metadata": { "name": "no-more-config-maps" },
                "spec": { "hard": { "count/configmaps": "1" } }
            }))?;
            let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
            quotas.create(&PostParams::default(), &quota).await?;
            // Full: used at or over hard (not "used == 1": any other
            // ConfigMap in the namespace fills it too).
            wait_quota_usage(&client, &ns, "no-more-config-maps", |seen| {
                seen.values().all(|(hard, used)| {
                    matches!((hard.parse::<u64>(), used.parse::<u64>()), (Ok(h), Ok(u)) if u >= h)
                })
            })
            .await?;
            label_namespace(
                &client,
                &ns,
                json!({ kube_prestop_e2e::INJECT_LABEL: "enabled" }),
            )
            .await?;
            wait_webhook_serving(&client, &ns, POD_TIMEOUT).await?;

            let j = job(
                "quota-full",
                pod_spec(&rec, vec![container(C, "sleep 2; echo body", RECORD_HOOK)]),
                json!({}),
            )?;
            let pod = run_expecting(&client, &ns, &j, JobOutcome::Complete).await?;
            ensure_injected(&pod, C)?;
            ensure!(
                has_install_container(&pod) && binary_config_map(&pod).is_none(),
                "pod did not fall back to the install container"
            );
            ensure!(
                binary_config_maps(&client, &ns).await?.is_empty(),
                "a sidecar-binary ConfigMap exists despite the quota"
            );
            ensure_records(&rec, "hooks", 1).await?;
            ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
            Ok(())
        },
    )
    .await
}

/// A scenario of the concurrent batch, named after its function.
macro_rules! scenario {
    ($client:expr, $f:ident) => {
        (stringify!($f), Box::pin($f($client.clone())))
    };
}

/// The independent scenarios, a few at a time ([`CONCURRENCY`]); one line per
/// scenario in the summary, named after its function.
#[tokio::test]
async fn concurrent_scenarios() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let scenarios: Vec<Scenario> = vec![
        // Among other pods whose container is also named `main`: with hostPID
        // their processes are visible too, and only this pod's is ours.
        scenario!(client, host_pid_hook_runs_without_shared_pid_namespace),
        scenario!(client, cronjob_pods_injected_and_hooks_run),
        scenario!(client, on_failure_restarts_run_a_hook_each),
        scenario!(client, exit_zero_runs_hook_once),
        scenario!(client, the_runtime_makes_the_start_evidence),
        scenario!(
            client,
            gates_by_annotation_http_get_exec_for_host_network_none
        ),
        scenario!(client, exit_three_runs_hook_once_and_job_fails),
        scenario!(client, oom_kill_runs_hook_once),
        scenario!(client, deleted_pod_gets_only_the_kubelets_prestop),
        scenario!(client, active_deadline_runs_hook_once),
        scenario!(client, liveness_kill_runs_hook_once),
        scenario!(client, two_containers_hooks_run_in_own_image_and_env),
        scenario!(client, hook_sees_its_containers_env_volumes_dir_and_uid),
        scenario!(client, hook_over_grace_period_is_cut),
        scenario!(client, other_native_sidecar_serves_during_hook),
        scenario!(client, pod_security_restricted_admits_and_runs_hook),
        scenario!(client, limit_range_and_quota_admit_and_run_hook),
        scenario!(client, guaranteed_pod_stays_guaranteed),
        scenario!(client, killed_sidecar_restarts_and_hook_runs_once),
        scenario!(client, job_deleted_during_hook_lets_it_finish),
        scenario!(
            client,
            mount_under_our_path_is_admitted_uninjected_saying_why
        ),
    ];
    run_scenarios(scenarios, CONCURRENCY).await
}

/// The chart's default `sidecarBinary.source: auto` on this cluster mounts
/// the image volume (`binary_delivery.rs`). A Node object (no kubelet) of
/// this node's architecture whose runtime is containerd 1.7, too old for
/// image volumes, makes the webhook fall back to the next delivery: the
/// namespace's ConfigMap (`sidecar_binary_from_namespace_config_map`), and
/// where that cannot be made, the install init container
/// (`config_map_refused_falls_back_to_install_container`). The node is
/// removed at the end, and image volumes come back.
#[tokio::test]
async fn image_volume_unsupported_falls_back_to_config_map_then_install_container() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let node = FakeNode::create(
        &client,
        "kpt-fake-containerd17",
        "amd64",
        "containerd://1.7.0",
    )
    .await?;
    let result = async {
        with_scenario(&client.clone(), "kpt-fallback-wait", |ns, _rec| {
            let client = client.clone();
            async move {
                let pod = probe_pod_with(json!({}))?;
                wait_delivery(&client, &ns, &pod, "installContainer", POD_TIMEOUT).await?;
                Ok(())
            }
        })
        .await?;
        let scenarios: Vec<Scenario> = vec![
            scenario!(client, sidecar_binary_from_namespace_config_map),
            scenario!(client, config_map_refused_falls_back_to_install_container),
        ];
        run_scenarios(scenarios, 2).await
    }
    .await;
    let deleted = node.delete().await;
    let back = with_scenario(&client.clone(), "kpt-fallback-back", |ns, _rec| {
        let client = client.clone();
        async move {
            let pod = probe_pod_with(json!({}))?;
            wait_delivery(&client, &ns, &pod, "imageVolume", POD_TIMEOUT).await?;
            Ok(())
        }
    })
    .await;
    result.and(deleted).and(back)
}

/// An Indexed Job, 20 completions, parallelism 5, containers running `true`
/// -> 20 hooks. On its own, not in the concurrent batch: 20 trivial `true`
/// containers are the sharpest test of the watcher's short-lived container
/// detection.
#[tokio::test]
async fn indexed_twenty_true_runs_twenty_hooks() -> Result<()> {
    init_tracing();
    let client = client().await?;
    with_scenario(&client.clone(), "kpt-indexed-true", |ns, rec| async move {
        let hook = "echo \"$JOB_COMPLETION_INDEX $KUBE_PRESTOP_CONTAINER $KUBE_PRESTOP_INSTANCE\" >> /records/hooks";
        let mut spec = pod_spec(&rec, vec![container(C, "true", hook)]);
        set(&mut spec, "terminationGracePeriodSeconds", json!(5));
        let j = job(
            "indexed",
            spec,
            json!({ "completions": 20, "parallelism": 5, "completionMode": "Indexed", "backoffLimit": 0 }),
        )?;
        let outcome = run_job(&client, &ns, &j, Duration::from_secs(400)).await?;
        ensure!(outcome == JobOutcome::Complete, "Job ended {outcome:?}");
        let pods = job_pods(&client, &ns, "indexed").await?;
        ensure!(pods.len() == 20, "{} pods, expected 20", pods.len());
        for p in &pods {
            ensure_injected(p, C)?;
            wait_pod_finished(&client, &ns, &pod_name(p), POD_TIMEOUT).await?;
        }
        let lines = ensure_records(&rec, "hooks", 20).await?;
        let mut indexes: Vec<u32> = lines
            .iter()
            .map(|l| l.split(' ').next().unwrap_or("").parse().unwrap_or(999))
            .collect();
        indexes.sort_unstable();
        ensure!(indexes == (0..20).collect::<Vec<_>>(), "indexes recorded: {indexes:?}");
        for p in &pods {
            ensure_sidecar_hooks(&client, &ns, &pod_name(p), C, 1).await?;
        }
        Ok(())
    })
    .await
}

/// Creates a Job that completes and returns its (finished) pod.
async fn plain_job_pod(client: &Client, ns: &str, name: &str, j: &Job) -> Result<Pod> {
    let outcome = run_job(client, ns, j, JOB_TIMEOUT).await?;
    ensure!(
        outcome == JobOutcome::Complete,
        "Job {name} ended {outcome:?}"
    );
    wait_job_pod(client, ns, name, POD_TIMEOUT).await
}

fn simple_job(name: &str, with_prestop: bool, annotations: serde_json::Value) -> Result<Job> {
    let mut c = json!({
        "name": C,
        "image": test_image(),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", "echo body"],
        "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } }
    });
    if with_prestop {
        set(
            &mut c,
            "lifecycle",
            json!({ "preStop": { "exec": { "command": ["sh", "-c", "echo hook"] } } }),
        );
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "backoffLimit": 0, "template": {
            "metadata": { "annotations": annotations },
            "spec": { "restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [c] }
        } }
    }))?)
}

/// A Job whose container mounts a volume under `/.kube-prestop`, where our
/// volumes go: the engine error `mount_path_conflict`. Under the chart's
/// default failure mode the pod is admitted uninjected and the Job runs;
/// the Job controller drops the admission warning, so the pod carries
/// `kube-prestop.io/skipped` saying why.
async fn mount_under_our_path_is_admitted_uninjected_saying_why(client: Client) -> Result<()> {
    with_scenario(
        &client.clone(),
        "kpt-mount-conflict",
        |ns, _rec| async move {
            let name = "mount-conflict";
            let mut j = serde_json::to_value(simple_job(name, true, json!({}))?)?;
            let spec = &mut j["spec"]["template"]["spec"];
            spec["volumes"] = json!([{ "name": "mine", "emptyDir": {} }]);
            spec["containers"][0]["volumeMounts"] =
                json!([{ "name": "mine", "mountPath": "/.kube-prestop/mine" }]);
            let j: Job = serde_json::from_value(j)?;
            let pod = plain_job_pod(&client, &ns, name, &j).await?;
            let names = kube_prestop_e2e::container_names(&pod);
            ensure!(names == [C], "the pod was changed: containers {names:?}");
            let note = ensure_skipped(&pod, "mount_path_conflict")?;
            ensure!(
                note.contains("admitted without the preStop sidecar")
                    && note.contains("\"/.kube-prestop/mine\""),
                "{note}"
            );
            Ok(())
        },
    )
    .await
}

/// Unlabelled namespace, opted-out pod, pod without preStop, kube-system
/// pod -> untouched; the webhook is not even called for pods without an exec
/// preStop (its admissions counter stays still and it logs nothing for them).
#[tokio::test]
async fn unselected_pods_untouched_and_webhook_not_called() -> Result<()> {
    init_tracing();
    let client = client().await?;
    // (a) unlabelled namespace
    let plain = TestNamespace::create(&client, "kpt-untouched-plain", false).await?;
    kube_prestop_e2e::with_namespace(plain, |ns| {
        let client = client.clone();
        async move {
            let pod = plain_job_pod(
                &client,
                &ns,
                "unlabelled",
                &simple_job("unlabelled", true, json!({}))?,
            )
            .await?;
            ensure_untouched(&pod, &[C])
        }
    })
    .await?;
    // (b) opted out and (c) no preStop, in a labelled namespace
    with_scenario(&client.clone(), "kpt-untouched", |ns, _rec| {
        let client = client.clone();
        async move {
            let pod = plain_job_pod(
                &client,
                &ns,
                "opted-out",
                &simple_job(
                    "opted-out",
                    true,
                    json!({ "kube-prestop.io/inject": "false" }),
                )?,
            )
            .await?;
            ensure_untouched(&pod, &[C])?;
            let needle = format!("\"namespace\":\"{ns}\"");
            let decided = webhook_log_lines(&client, &needle).await?;
            ensure!(
                !decided.is_empty(),
                "no admission log line for the opted-out pod"
            );

            // No preStop: the webhook must not be called. Retry a few times in
            // case someone else's pods moved the counter meanwhile.
            let mut last = String::new();
            let mut ok = false;
            for attempt in 0..3 {
                let before = admissions_total(&client).await?;
                let name = format!("no-prestop-{attempt}");
                let pod = plain_job_pod(&client, &ns, &name, &simple_job(&name, false, json!({}))?)
                    .await?;
                ensure_untouched(&pod, &[C])?;
                let after = admissions_total(&client).await?;
                if (after - before).abs() < f64::EPSILON {
                    ok = true;
                    break;
                }
                last = format!("admissions_total {before} -> {after}");
            }
            ensure!(
                ok,
                "the webhook was called for pods without preStop: {last}"
            );
            let later = webhook_log_lines(&client, &needle).await?;
            ensure!(
                later.len() == decided.len(),
                "webhook logged pods without preStop: {later:?}"
            );
            // Positive control: a pod with a preStop moves the counter.
            let before = admissions_total(&client).await?;
            let pod = plain_job_pod(
                &client,
                &ns,
                "with-prestop",
                &simple_job("with-prestop", true, json!({}))?,
            )
            .await?;
            ensure_injected(&pod, C)?;
            let after = admissions_total(&client).await?;
            ensure!(
                after > before,
                "admissions_total did not move for an injected pod: {before} -> {after}"
            );
            Ok(())
        }
    })
    .await?;
    // (d) kube-system, even when labelled
    let system = "kube-system";
    label_namespace(
        &client,
        system,
        json!({ "kube-prestop.io/inject": "enabled" }),
    )
    .await?;
    let name = format!("kpt-untouched-{}", unique_suffix());
    let result = async {
        let pod =
            plain_job_pod(&client, system, &name, &simple_job(&name, true, json!({}))?).await?;
        ensure_untouched(&pod, &[C])
    }
    .await;
    let _ = label_namespace(&client, system, json!({ "kube-prestop.io/inject": null })).await;
    let _ = Api::<Job>::namespaced(client.clone(), system)
        .delete(&name, &DeleteParams::background())
        .await;
    result
}

/// Webhook scaled to 0 -> Job pods still created promptly, not injected.
/// Restores the replicas whatever happens.
#[tokio::test]
async fn webhook_scaled_to_zero_pods_start_uninjected() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let replicas = webhook_replicas(&client).await?;
    ensure!(replicas > 0, "webhook already at 0 replicas");
    let result =
        with_scenario(&client.clone(), "kpt-no-webhook", |ns, _rec| {
            let client = client.clone();
            async move {
                scale_webhook(&client, 0).await?;
                poll_until(Duration::from_secs(90), Duration::from_millis(500), || {
                    let client = client.clone();
                    async move {
                        Ok(Api::<Pod>::namespaced(
                            client,
                            kube_prestop_e2e::webhook::WEBHOOK_NAMESPACE,
                        )
                        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-prestop"))
                        .await?
                        .items
                        .is_empty())
                    }
                })
                .await
                .context("webhook pods did not go away")?;
                let j = simple_job("no-webhook", true, json!({}))?;
                let t = Instant::now();
                Api::<Job>::namespaced(client.clone(), &ns)
                    .create(&PostParams::default(), &j)
                    .await?;
                let pod = wait_job_pod(&client, &ns, "no-webhook", Duration::from_secs(30)).await?;
                let took = t.elapsed();
                ensure!(
                    took < Duration::from_secs(15),
                    "pod created only after {took:?}"
                );
                ensure_untouched(&pod, &[C])?;
                let pod = wait_pod_finished(&client, &ns, &pod_name(&pod), JOB_TIMEOUT).await?;
                ensure!(phase(&pod) == "Succeeded", "pod phase {}", phase(&pod));
                let logs = container_logs(&client, &ns, &pod_name(&pod), C).await?;
                ensure!(logs.contains("body"), "logs {logs:?}");
                tracing::info!(?took, "pod created without the webhook");
                Ok(())
            }
        })
        .await;
    // Restore, and wait until the webhook injects again (dry run) so later
    // tests and other users see a working webhook.
    let restored = async {
        scale_webhook(&client, replicas).await?;
        let probe_ns = TestNamespace::create(&client, "kpt-no-webhook-probe", true).await?;
        let name = probe_ns.name.clone();
        let served = wait_webhook_serving(&client, &name, Duration::from_secs(180)).await;
        probe_ns.delete().await?;
        served
    }
    .await;
    result.and(restored)
}
