//! The optional end-to-end check: a tiny Job whose container prints a line
//! and exits on its own, in a namespace the webhook selects; it must be
//! injected, and its sidecar's log must show the preStop hook's output and
//! `hook finished container=main ... exit_status=0`. The Job is deleted
//! afterwards whatever happened (and carries `ttlSecondsAfterFinished` in
//! case the check itself is interrupted).

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use std::collections::BTreeMap;

use super::probe_pod::{self, CHECK_LABEL, CONTAINER, HOOK_OUTPUT};

/// The sidecar watching the test container (`kube-prestop-main`).
pub const SIDECAR: &str = "kube-prestop-main";

/// What the test Job showed.
#[derive(Debug)]
pub struct JobOutcome {
    /// The Job's name.
    pub job: String,
    /// The pod's name, when one was created.
    pub pod: Option<String>,
    /// The pod was injected, and where its binary came from.
    pub delivery: Option<probe_pod::Delivery>,
    /// The sidecar's `hook finished` line, when present.
    pub hook_finished: Option<String>,
    /// The hook's own output line was in the sidecar's log.
    pub hook_output_seen: bool,
    /// Whether the Job ended (succeeded or failed) within the timeout.
    pub ended: bool,
}

impl JobOutcome {
    /// The hook ran and exited 0.
    pub fn hook_ran(&self) -> bool {
        self.hook_output_seen
            && self
                .hook_finished
                .as_deref()
                .is_some_and(|l| l.contains("exit_status=0"))
    }
}

/// Why the test Job could not be run.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> JobError {
    let what = what.into();
    move |source| JobError::Api { what, source }
}

fn job_ended(job: Option<&Job>) -> bool {
    job.and_then(|j| j.status.as_ref()).is_some_and(|s| {
        s.succeeded.unwrap_or(0) > 0
            || s.failed.unwrap_or(0) > 0
            || s.conditions
                .iter()
                .flatten()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    })
}

/// Run the test Job in `namespace` with `image` (needs `sh`), wait up to
/// `timeout` for it to end, read the sidecar's log, delete the Job.
///
/// # Errors
/// [`JobError`] when the Job cannot be created or its pod cannot be read;
/// an outcome whose hook did not run is not an error.
pub async fn run(
    client: kube::Client,
    namespace: &str,
    image: &str,
    timeout: Duration,
) -> Result<JobOutcome, JobError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let deadline = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX);
    let job = Job {
        metadata: ObjectMeta {
            generate_name: Some("kube-prestop-check-".to_owned()),
            labels: Some(BTreeMap::from([(
                CHECK_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(deadline),
            ttl_seconds_after_finished: Some(600),
            template: probe_pod::template(image, false),
            ..JobSpec::default()
        }),
        status: None,
    };
    let created = jobs
        .create(&PostParams::default(), &job)
        .await
        .map_err(api_error(format!("create a test Job in {namespace}")))?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let outcome = observe(&jobs, &pods, &name, timeout).await;
    // Background propagation: the garbage collector deletes the pod.
    let deleted = jobs
        .delete(&name, &DeleteParams::background())
        .await
        .map_err(api_error(format!("delete test Job {namespace}/{name}")));
    let outcome = outcome?;
    deleted?;
    Ok(outcome)
}

async fn observe(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    name: &str,
    timeout: Duration,
) -> Result<JobOutcome, JobError> {
    let ended = tokio::time::timeout(timeout, await_condition(jobs.clone(), name, job_ended))
        .await
        .is_ok_and(|r| r.is_ok());
    let selector = format!("batch.kubernetes.io/job-name={name}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error(format!("list the pods of test Job {name}")))?;
    let mut outcome = JobOutcome {
        job: name.to_owned(),
        pod: None,
        delivery: None,
        hook_finished: None,
        hook_output_seen: false,
        ended,
    };
    let Some(pod) = list.items.into_iter().next() else {
        return Ok(outcome);
    };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    outcome.delivery = probe_pod::injected(&pod);
    outcome.pod = Some(pod_name.clone());
    if outcome.delivery.is_some() {
        let log = pods
            .logs(
                &pod_name,
                &LogParams {
                    container: Some(SIDECAR.to_owned()),
                    ..LogParams::default()
                },
            )
            .await
            .map_err(api_error(format!(
                "read the log of {pod_name} -c {SIDECAR}"
            )))?;
        let finished = format!("hook finished container={CONTAINER} ");
        outcome.hook_output_seen = log.lines().any(|l| l.trim() == HOOK_OUTPUT);
        outcome.hook_finished = log
            .lines()
            .find(|l| l.contains(&finished))
            .map(str::to_owned);
    }
    Ok(outcome)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_name_is_the_engines_for_the_test_container() {
        assert_eq!(
            kube_prestop_engine::names::sidecar_name(CONTAINER, &std::collections::BTreeSet::new()),
            SIDECAR
        );
    }

    #[test]
    fn a_job_ends_on_success_failure_or_their_conditions() {
        let job = |status: serde_json::Value| -> Job {
            serde_json::from_value(serde_json::json!({"metadata": {}, "status": status})).unwrap()
        };
        assert!(!job_ended(None));
        assert!(!job_ended(Some(&job(serde_json::json!({"active": 1})))));
        assert!(job_ended(Some(&job(serde_json::json!({"succeeded": 1})))));
        assert!(job_ended(Some(&job(serde_json::json!({"failed": 1})))));
        assert!(job_ended(Some(&job(serde_json::json!({
            "conditions": [{"type": "Failed", "status": "True"}]
        })))));
    }

    #[test]
    fn the_hook_ran_only_with_its_output_and_exit_status_zero() {
        let mut o = JobOutcome {
            job: "j".into(),
            pod: None,
            delivery: None,
            hook_finished: Some("kube-prestop: hook finished container=main instance=1-2 attempt=1 status=\"exit 0\" exit_status=0 duration=0.003s".into()),
            hook_output_seen: true,
            ended: true,
        };
        assert!(o.hook_ran());
        o.hook_output_seen = false;
        assert!(!o.hook_ran());
        o.hook_output_seen = true;
        o.hook_finished = Some("kube-prestop: hook finished container=main exit_status=1".into());
        assert!(!o.hook_ran());
    }
}
