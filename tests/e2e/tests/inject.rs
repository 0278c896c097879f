//! First end-to-end tests: a Job whose container exits on its own gets its
//! preStop command run by the injected sidecar in a labelled namespace, and is
//! left alone in an unlabelled one.
//!
//! Needs the local cluster (`make cluster-up`) with the kube-prestop chart
//! installed; run with `make e2e`.

use std::time::Duration;

use anyhow::{Result, ensure};
use kube_prestop_e2e::{
    JobOutcome, TestNamespace, client, container_logs, container_names, init_tracing, job_pod,
    job_with_prestop, run_job, sidecar_name, unique_suffix, wait_for_log_line, with_namespace,
};

const JOB_TIMEOUT: Duration = Duration::from_secs(180);
const CONTAINER: &str = "main";

#[tokio::test]
async fn prestop_runs_in_sidecar_when_job_container_exits() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kpt-e2e-inject", true).await?;
    let token = format!("prestop-hook-ran-{}", unique_suffix());
    with_namespace(ns, |ns| async move {
        let job = job_with_prestop(
            "exits-zero",
            CONTAINER,
            "echo job-body-ran",
            &format!("echo {token}"),
        )?;
        let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT).await?;
        ensure!(outcome == JobOutcome::Complete, "Job ended {outcome:?}");

        let pod = job_pod(&client, &ns, "exits-zero").await?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let sidecar = sidecar_name(CONTAINER);
        let names = container_names(&pod);
        ensure!(
            names.contains(&sidecar),
            "pod {pod_name} was not injected: containers {names:?} lack {sidecar} \
             (is the kube-prestop chart installed?)"
        );
        let line = wait_for_log_line(
            &client,
            &ns,
            &pod_name,
            &sidecar,
            &token,
            Duration::from_secs(60),
        )
        .await?;
        tracing::info!(%line, "hook output found in the sidecar's logs");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn job_in_unlabelled_namespace_is_not_injected() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kpt-e2e-plain", false).await?;
    with_namespace(ns, |ns| async move {
        let job = job_with_prestop(
            "exits-zero",
            CONTAINER,
            "echo job-body-ran",
            "echo prestop-should-not-run",
        )?;
        let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT).await?;
        ensure!(outcome == JobOutcome::Complete, "Job ended {outcome:?}");

        let pod = job_pod(&client, &ns, "exits-zero").await?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let names = container_names(&pod);
        ensure!(
            names == [CONTAINER],
            "pod {pod_name} in an unlabelled namespace was changed: containers {names:?}"
        );
        let spec = pod.spec.as_ref();
        ensure!(
            spec.and_then(|s| s.share_process_namespace).is_none(),
            "pod {pod_name} got shareProcessNamespace"
        );
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            !annotations
                .keys()
                .any(|k| k.starts_with("kube-prestop.io/")),
            "pod {pod_name} carries kube-prestop annotations: {annotations:?}"
        );
        let logs = container_logs(&client, &ns, &pod_name, CONTAINER).await?;
        ensure!(logs.contains("job-body-ran"), "unexpected logs: {logs:?}");
        Ok(())
    })
    .await
}
