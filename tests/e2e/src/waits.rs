//! Waits on conditions with deadlines (never fixed sleeps): a generic poll,
//! the pods of a Job appearing, reaching a state or going away, and a
//! ResourceQuota's usage published by the quota controller.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::checks::pod_finished;

/// Polls `check` every `every` until it returns true or `timeout` passes.
pub async fn poll_until<F, Fut>(timeout: Duration, every: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_err {
                Some(e) => bail!("condition not met within {timeout:?} (last error: {e:#})"),
                None => bail!("condition not met within {timeout:?}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `pending` every `every` until it returns `None` (nothing left to
/// wait for) or `timeout` passes; the error then ends with the last
/// `Some(what is still pending)` it returned.
pub async fn poll_until_none<F, Fut>(
    timeout: Duration,
    every: Duration,
    mut pending: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<String>>>,
{
    let last = std::sync::Mutex::new(String::new());
    let result = poll_until(timeout, every, || {
        let (state, last) = (pending(), &last);
        async move {
            let state = state.await?;
            let done = state.is_none();
            if let Ok(mut l) = last.lock() {
                *l = state.unwrap_or_default();
            }
            Ok(done)
        }
    })
    .await;
    let last = last.lock().map(|l| l.clone()).unwrap_or_default();
    result.with_context(|| format!("still pending: {last}"))
}

/// Pods of a Job (any number).
pub async fn job_pods(client: &Client, ns: &str, job: &str) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={job}", crate::JOB_NAME_LABEL)))
        .await?
        .items)
}

/// Waits for the first pod of a Job to exist; returns it.
pub async fn wait_job_pod(client: &Client, ns: &str, job: &str, timeout: Duration) -> Result<Pod> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(pods) = job_pods(client, ns, job).await
            && let Some(p) = pods.into_iter().next()
        {
            return Ok(p);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no pod of Job {ns}/{job} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until `pred` holds for the pod; returns the pod.
pub async fn wait_pod<P>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: P,
) -> Result<Pod>
where
    P: Fn(&Pod) -> bool,
{
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last: Option<Pod> = None;
    loop {
        match pods.get(name).await {
            Ok(pod) if pred(&pod) => return Ok(pod),
            Ok(pod) => last = Some(pod),
            Err(e) => tracing::debug!(error = %e, "get pod"),
        }
        if tokio::time::Instant::now() >= deadline {
            let state = last
                .as_ref()
                .and_then(|p| p.status.as_ref())
                .map(|s| format!("{s:?}"));
            bail!("pod {ns}/{name}: not {what} within {timeout:?}; last status {state:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the pod no longer exists.
pub async fn wait_pod_gone(client: &Client, ns: &str, name: &str, timeout: Duration) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    poll_until(timeout, Duration::from_millis(300), || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt(name).await?.is_none()) }
    })
    .await
    .with_context(|| format!("pod {ns}/{name} still exists"))
}

/// Waits until the pod is finished (see [`pod_finished`]).
pub async fn wait_pod_finished(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Pod> {
    wait_pod(client, ns, name, "finished", timeout, pod_finished).await
}

/// How long the quota controller may take to publish a new ResourceQuota's
/// usage: one full resync of every quota (kube-controller-manager
/// `--resource-quota-sync-period`, default 5m0s in v1.37) and 30 s more, for
/// when the event of the quota's creation was not acted on at once.
pub const QUOTA_TIMEOUT: Duration = Duration::from_secs(330);

/// Waits until the quota controller has published ResourceQuota `name`'s
/// hard limits and usage for every resource its spec limits, and `full`
/// holds of them (`resource -> (hard, used)`, both as the API server prints
/// them). Until the hard limits are published the API server's quota
/// admission ignores the quota, so a test of what it refuses waits here
/// first.
///
/// # Errors
/// Not so within [`QUOTA_TIMEOUT`]: names the status last seen and ends with
/// the controller manager's last log lines about quotas.
pub async fn wait_quota_usage<F>(client: &Client, ns: &str, name: &str, full: F) -> Result<()>
where
    F: Fn(&std::collections::BTreeMap<String, (String, String)>) -> bool,
{
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    let full = &full;
    poll_until_none(QUOTA_TIMEOUT, Duration::from_millis(300), || {
        let quotas = quotas.clone();
        async move {
            let quota = quotas.get(name).await?;
            let limited = quota.spec.and_then(|s| s.hard).unwrap_or_default();
            let status = quota.status.unwrap_or_default();
            let (hard, used) = (
                status.hard.unwrap_or_default(),
                status.used.unwrap_or_default(),
            );
            let seen: std::collections::BTreeMap<String, (String, String)> = limited
                .keys()
                .filter_map(|r| Some((r.clone(), (hard.get(r)?.0.clone(), used.get(r)?.0.clone()))))
                .collect();
            if seen.len() == limited.len() && full(&seen) {
                return Ok(None);
            }
            Ok(Some(format!(
                "spec.hard {:?}; status.hard {:?}; status.used {:?}",
                limited.keys().collect::<Vec<_>>(),
                hard.iter()
                    .map(|(k, v)| format!("{k}={}", v.0))
                    .collect::<Vec<_>>(),
                used.iter()
                    .map(|(k, v)| format!("{k}={}", v.0))
                    .collect::<Vec<_>>(),
            )))
        }
    })
    .await
    .with_context(|| {
        format!(
            "the quota controller never published the usage of ResourceQuota {ns}/{name} as \
             expected; its last log lines about quotas:\n{}",
            crate::component_log_lines("kube-controller-manager", "quota", 20)
        )
    })
}
