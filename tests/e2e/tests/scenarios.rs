//! Issue 6: every way a Job's container can end, on the real local cluster
//! with the chart installed. Each scenario is a real Job (or CronJob) in its
//! own labelled namespace; hooks append a line to a hostPath records file that
//! the test counts on the host after the pod finished, and the sidecar's logs
//! are counted too.
//!
//! `s00_concurrent_scenarios` runs the independent scenarios concurrently
//! (a few at a time); #16 (webhook metrics must stay still) and #17 (scales the
//! webhook to 0) run alone, after it (`make e2e` uses `--test-threads=1`, and
//! libtest runs tests in name order).
//!
//! Scenario 9 ("different images") tags the busybox image under a second name
//! in the node's containerd (`ctr images tag`): without a registry the two
//! images have the same content, so the test tells the containers apart by
//! their env and checks each sidecar runs its own container's image reference.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Pod, ResourceQuota, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::scenario::{
    HOOK_SKIPPED_KUBELET, HOOK_STARTED, RECORD_HOOK, Records, Scenario, admissions_total,
    binary_config_map, binary_config_maps, container, container_running, container_status,
    count_lines, ensure_injected, ensure_records, ensure_sidecar_hooks, ensure_untouched,
    has_install_container, job, job_pods, kubectl, label_namespace, phase, pod_spec, poll_until,
    run_scenarios, scale_webhook, set, sidecar_logs, tag_image, wait_injects_from_config_map,
    wait_job_pod, wait_pod, wait_pod_finished, wait_pod_gone, wait_webhook_serving,
    webhook_log_lines, webhook_replicas, with_scenario, with_scenario_in,
};
use kube_prestop_e2e::{
    JobOutcome, TestNamespace, client, container_logs, init_tracing, run_job, sidecar_name,
    test_image, unique_suffix, wait_for_log_line,
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

// 1. exit 0 -> once, Job Complete, pod Succeeded, output in the sidecar's logs.
async fn s01_exit_zero(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s01", |ns, rec| async move {
        let token = format!("s01-output-{}", unique_suffix());
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

// 2. exit 3, backoffLimit 0 -> once, Job Failed, pod Failed.
async fn s02_exit_three(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s02", |ns, rec| async move {
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

// 3. OOM-killed -> once.
async fn s03_oom_killed(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s03", |ns, rec| async move {
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
        tracing::info!(reason = ?term.reason, code = term.exit_code, "s03 main terminated");
        ensure_records(&rec, "hooks", 1).await?;
        ensure_sidecar_hooks(&client, &ns, &pod_name(&pod), C, 1).await?;
        Ok(())
    })
    .await
}

// 4. Indexed Job, 20 completions, parallelism 5, `true` -> 20 hooks.
async fn s04_indexed_twenty(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s04", |ns, rec| async move {
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

// 5. Pod deleted while running -> the kubelet's preStop once, no sidecar run.
async fn s05_pod_deleted(client: Client) -> Result<()> {
    use futures::AsyncBufReadExt as _;
    use futures::TryStreamExt as _;
    with_scenario(&client.clone(), "kpt-s05", |ns, rec| async move {
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

// 6. Job activeDeadlineSeconds exceeded -> exactly once.
async fn s06_active_deadline(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s06", |ns, rec| async move {
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
                    .is_none_or(|p| kube_prestop_e2e::scenario::pod_finished(&p)))
            }
        })
        .await?;
        let recs = ensure_records(&rec, "hooks", 1).await?;
        tracing::info!(?recs, "s06 record");
        Ok(())
    })
    .await
}

// 7. Liveness failure kills the container (restartPolicy Never) -> once.
async fn s07_liveness(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s07", |ns, rec| async move {
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

// 8. OnFailure: fails twice then succeeds -> three hooks; sidecar restartCount 0.
async fn s08_on_failure(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s08", |ns, rec| async move {
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

// 9. Two containers, different images and preStop commands.
async fn s09_two_containers(client: Client) -> Result<()> {
    let second = format!("{}-second", test_image());
    let second = second.replacen(":test-second", ":second", 1);
    tag_image(&test_image(), &second).await?;
    with_scenario(&client.clone(), "kpt-s09", |ns, rec| async move {
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
    })
    .await
}

// 10. The hook sees env (literal, Secret, ConfigMap), volumes, workingDir, uid.
async fn s10_environment(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s10", |ns, rec| async move {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": "s10" }, "stringData": { "token": "from-secret" }
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "s10" }, "data": { "setting": "from-configmap", "file.txt": "from-volume" }
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
                { "name": "SECRET_TOKEN", "valueFrom": { "secretKeyRef": { "name": "s10", "key": "token" } } },
                { "name": "CM_SETTING", "valueFrom": { "configMapKeyRef": { "name": "s10", "key": "setting" } } }
            ]),
        );
        set(&mut c, "envFrom", json!([{ "configMapRef": { "name": "s10" } }]));
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
            json!([rec.volume(), { "name": "cfg", "configMap": { "name": "s10" } }]),
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

// 11. Hook longer than the grace period -> cut at the grace period, logged,
// Job outcome unchanged.
async fn s11_hook_over_grace(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s11", |ns, rec| async move {
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

// 12. Another native sidecar (HTTP) is still up while our hook runs.
async fn s12_other_sidecar(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s12", |ns, rec| async move {
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

// 13. Pod Security restricted enforced -> admitted, hook runs.
async fn s13_restricted(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s13", |ns, _rec| async move {
        label_namespace(
            &client,
            &ns,
            json!({ "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest" }),
        )
        .await?;
        let token = format!("s13-hook-{}", unique_suffix());
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

// 14. LimitRange (min/max/defaults) + ResourceQuota on limits -> admitted, hook runs.
async fn s14_limits(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s14", |ns, rec| async move {
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
        let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
        poll_until(Duration::from_secs(60), Duration::from_millis(300), || {
            let quotas = quotas.clone();
            async move {
                Ok(quotas
                    .get("quota")
                    .await?
                    .status
                    .and_then(|s| s.used)
                    .is_some())
            }
        })
        .await?;
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

// 15. Guaranteed pod stays Guaranteed.
async fn s15_guaranteed(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s15", |ns, rec| async move {
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

// 18. CronJob -> its Jobs' pods are injected and hooks run.
async fn s18_cronjob(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s18", |ns, rec| async move {
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

// 19. hostPID: true -> hook runs without shareProcessNamespace.
async fn s19_host_pid(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s19", |ns, rec| async move {
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

// 20. Sidecar SIGKILLed while watching -> restarted; hook still exactly once.
async fn s20_sidecar_killed(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s20", |ns, rec| async move {
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
        tracing::info!(pid = killed.trim(), "s20 killed the watcher");
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
    })
    .await
}

// 21. Job deleted while its hook runs -> the hook finishes within the grace period.
async fn s21_job_deleted_during_hook(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s21", |ns, rec| async move {
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

// 22. The sidecar binary from the namespace's ConfigMap (the chart's default
// `sidecarBinary.source=configMap`): the first pod injected in a namespace
// gets the install init container and makes the webhook create the
// ConfigMap; later pods get no install init container. A container that
// exits runs its hook once from the sidecar, and a deleted pod's preStop
// (the wrapper, from the same ConfigMap, in the watched container) once
// from the kubelet.
async fn s22_binary_from_config_map(client: Client) -> Result<()> {
    with_scenario(&client.clone(), "kpt-s22", |ns, rec| async move {
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
        let binary = cm
            .binary_data
            .as_ref()
            .and_then(|d| d.get("kube-prestop"))
            .map(|b| b.0.clone())
            .unwrap_or_default();
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

// 23. A namespace whose ResourceQuota leaves no room for the sidecar-binary
// ConfigMap: the webhook cannot make it, and pods get the install init
// container instead, with the same hook exactly once.
async fn s23_config_map_refused(client: Client) -> Result<()> {
    with_scenario_in(&client.clone(), "kpt-s23", false, |ns, rec| async move {
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
        poll_until(POD_TIMEOUT, Duration::from_millis(200), || {
            let quotas = quotas.clone();
            async move {
                let used = quotas
                    .get("no-more-config-maps")
                    .await?
                    .status
                    .and_then(|s| s.used)
                    .and_then(|u| u.get("count/configmaps").cloned());
                Ok(used.is_some_and(|q| q.0 == "1"))
            }
        })
        .await
        .context("the quota's usage was never computed")?;
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
    })
    .await
}

#[tokio::test]
async fn s00_concurrent_scenarios() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let c = || client.clone();
    let scenarios: Vec<Scenario> = vec![
        // Among other pods whose container is also named `main`: with hostPID
        // their processes are visible too, and only this pod's is ours.
        ("19-host-pid", Box::pin(s19_host_pid(c()))),
        ("18-cronjob", Box::pin(s18_cronjob(c()))),
        ("08-onfailure-3", Box::pin(s08_on_failure(c()))),
        ("01-exit-0", Box::pin(s01_exit_zero(c()))),
        ("02-exit-3", Box::pin(s02_exit_three(c()))),
        ("03-oom", Box::pin(s03_oom_killed(c()))),
        ("05-pod-deleted", Box::pin(s05_pod_deleted(c()))),
        ("06-active-deadline", Box::pin(s06_active_deadline(c()))),
        ("07-liveness", Box::pin(s07_liveness(c()))),
        ("09-two-containers", Box::pin(s09_two_containers(c()))),
        ("10-environment", Box::pin(s10_environment(c()))),
        ("11-hook-over-grace", Box::pin(s11_hook_over_grace(c()))),
        ("12-other-sidecar", Box::pin(s12_other_sidecar(c()))),
        ("13-psa-restricted", Box::pin(s13_restricted(c()))),
        ("14-limitrange-quota", Box::pin(s14_limits(c()))),
        ("15-guaranteed", Box::pin(s15_guaranteed(c()))),
        ("20-sidecar-killed", Box::pin(s20_sidecar_killed(c()))),
        (
            "21-job-deleted-in-hook",
            Box::pin(s21_job_deleted_during_hook(c())),
        ),
        (
            "22-binary-from-configmap",
            Box::pin(s22_binary_from_config_map(c())),
        ),
        (
            "23-configmap-refused",
            Box::pin(s23_config_map_refused(c())),
        ),
    ];
    run_scenarios(scenarios, CONCURRENCY).await
}

// 4 on its own: 20 trivial `true` containers are the sharpest test of the
// watcher's short-lived container detection.
#[tokio::test]
async fn s04_indexed_twenty_true() -> Result<()> {
    init_tracing();
    s04_indexed_twenty(client().await?).await
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

// 16. Unlabelled namespace, opted-out pod, pod without preStop, kube-system
// pod -> untouched; the webhook is not even called for pods without an exec
// preStop (its admissions counter stays still and it logs nothing for them).
#[tokio::test]
async fn s16_untouched_and_not_called() -> Result<()> {
    init_tracing();
    let client = client().await?;
    // (a) unlabelled namespace
    let plain = TestNamespace::create(&client, "kpt-s16-plain", false).await?;
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
    with_scenario(&client.clone(), "kpt-s16", |ns, _rec| {
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
    let name = format!("kpt-s16-{}", unique_suffix());
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

// 17. Webhook scaled to 0 -> Job pods still created promptly, not injected.
// Restores the replicas whatever happens.
#[tokio::test]
async fn s17_webhook_scaled_to_zero() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let replicas = webhook_replicas(&client).await?;
    ensure!(replicas > 0, "webhook already at 0 replicas");
    let result = with_scenario(&client.clone(), "kpt-s17", |ns, _rec| {
        let client = client.clone();
        async move {
            scale_webhook(&client, 0).await?;
            poll_until(Duration::from_secs(90), Duration::from_millis(500), || {
                let client = client.clone();
                async move {
                    Ok(Api::<Pod>::namespaced(
                        client,
                        kube_prestop_e2e::scenario::WEBHOOK_NAMESPACE,
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
        let probe_ns = TestNamespace::create(&client, "kpt-s17-probe", true).await?;
        let name = probe_ns.name.clone();
        let served = wait_webhook_serving(&client, &name, Duration::from_secs(180)).await;
        probe_ns.delete().await?;
        served
    }
    .await;
    result.and(restored)
}
