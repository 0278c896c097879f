//! The optional end-to-end check: a tiny Job whose container prints a line
//! and exits on its own, in a namespace the webhook selects; it must be
//! injected, and its sidecar's log must show the preStop hook's output and
//! `hook finished container=main ... exit_status=0`. The Job is deleted
//! afterwards whatever happened (and carries `ttlSecondsAfterFinished` in
//! case the check itself is interrupted).

use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt as _, watcher};
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
    /// A container of the pod that cannot start ([`stuck`]): the wait
    /// stopped there.
    pub stuck: Option<String>,
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

/// Waiting reasons of a container that the kubelet reports when it cannot
/// start it and only retries with a back-off (kubelet `pkg/kubelet/images`:
/// `ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`,
/// `InvalidImageName`; `pkg/kubelet/kuberuntime`:
/// `CreateContainerConfigError`, `CreateContainerError`). A test Job showing
/// one will not end by itself within the check's timeout.
pub const STUCK_REASONS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// The first container of `pod` (init containers first) waiting for one of
/// [`STUCK_REASONS`], as `container NAME (image IMAGE): REASON: MESSAGE`.
pub fn stuck(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            STUCK_REASONS.contains(&reason).then(|| {
                format!(
                    "container {} (image {}): {reason}: {}",
                    c.name,
                    c.image,
                    waiting.message.as_deref().unwrap_or("(no message)")
                )
            })
        })
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
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let outcome = observe(&jobs, &pods, &name, &uid, timeout).await;
    // Background propagation: the garbage collector deletes the pod.
    let deleted = jobs
        .delete(&name, &DeleteParams::background())
        .await
        .map_err(api_error(format!("delete test Job {namespace}/{name}")));
    let outcome = outcome?;
    deleted?;
    Ok(outcome)
}

/// Whether `pod` is one the Job of uid `job_uid` controls (its controller
/// owner reference). The pods' `batch.kubernetes.io/job-name` label alone
/// is not enough: anyone who may create pods in the namespace can give one
/// that label (and an injected look, and a log) while the test Job runs.
fn controlled_by(pod: &Pod, job_uid: &str) -> bool {
    !job_uid.is_empty()
        && pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == "Job" && o.uid == job_uid)
}

async fn observe(
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    name: &str,
    job_uid: &str,
    timeout: Duration,
) -> Result<JobOutcome, JobError> {
    let selector = format!("batch.kubernetes.io/job-name={name}");
    // Until the Job ends, or one of its pods shows a container that cannot
    // start (then the Job would run into its deadline), or the timeout.
    let pod_stuck = async {
        let config = watcher::Config::default().labels(&selector);
        let mut events = std::pin::pin!(watcher(pods.clone(), config).default_backoff());
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                && controlled_by(&pod, job_uid)
                && let Some(why) = stuck(&pod)
            {
                return Some(why);
            }
        }
        None
    };
    let (ended, stuck_reason) = tokio::select! {
        r = tokio::time::timeout(timeout, await_condition(jobs.clone(), name, job_ended)) => {
            (r.is_ok_and(|r| r.is_ok()), None)
        }
        why = tokio::time::timeout(timeout, pod_stuck) => (false, why.ok().flatten()),
    };
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
        stuck: stuck_reason,
    };
    let Some(pod) = list.items.into_iter().find(|p| controlled_by(p, job_uid)) else {
        return Ok(outcome);
    };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    outcome.delivery = probe_pod::injected(&pod);
    outcome.pod = Some(pod_name.clone());
    if outcome.delivery.is_some() && outcome.stuck.is_none() {
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
    fn only_a_pod_the_test_job_controls_is_read() {
        let pod = |owners: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "kube-prestop-check-x-abcde",
                    "labels": {"batch.kubernetes.io/job-name": "kube-prestop-check-x"},
                    "ownerReferences": owners
                }
            }))
            .unwrap()
        };
        let owner = |kind: &str, uid: &str, controller: bool| serde_json::json!({"apiVersion": "batch/v1", "kind": kind, "name": "kube-prestop-check-x", "uid": uid, "controller": controller});
        assert!(controlled_by(
            &pod(serde_json::json!([owner("Job", "u1", true)])),
            "u1"
        ));
        // The label alone, another Job, not the controller, another kind.
        assert!(!controlled_by(&pod(serde_json::json!([])), "u1"));
        assert!(!controlled_by(
            &pod(serde_json::json!([owner("Job", "u2", true)])),
            "u1"
        ));
        assert!(!controlled_by(
            &pod(serde_json::json!([owner("Job", "u1", false)])),
            "u1"
        ));
        assert!(!controlled_by(
            &pod(serde_json::json!([owner("CronJob", "u1", true)])),
            "u1"
        ));
        // A Job created without a uid in the answer controls nothing.
        assert!(!controlled_by(
            &pod(serde_json::json!([owner("Job", "", true)])),
            ""
        ));
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
            stuck: None,
        };
        assert!(o.hook_ran());
        o.hook_output_seen = false;
        assert!(!o.hook_ran());
        o.hook_output_seen = true;
        o.hook_finished = Some("kube-prestop: hook finished container=main exit_status=1".into());
        assert!(!o.hook_ran());
    }

    #[test]
    fn a_container_that_cannot_start_is_named_with_its_image_and_reason() {
        let pod = |statuses: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {}, "status": statuses})).unwrap()
        };
        let waiting = |name: &str, reason: &str| {
            serde_json::json!({
                "name": name, "image": format!("{name}:1"), "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": format!("{reason} for {name}")}}
            })
        };
        assert_eq!(stuck(&pod(serde_json::json!({}))), None);
        // Still starting: not stuck.
        assert_eq!(
            stuck(&pod(serde_json::json!({
                "initContainerStatuses": [waiting("kube-prestop-main", "PodInitializing")],
                "containerStatuses": [waiting("main", "PodInitializing")]
            }))),
            None
        );
        assert_eq!(
            stuck(&pod(serde_json::json!({
                "initContainerStatuses": [waiting("kube-prestop-main", "PodInitializing")],
                "containerStatuses": [waiting("main", "ImagePullBackOff")]
            }))),
            Some(
                "container main (image main:1): ImagePullBackOff: ImagePullBackOff for main"
                    .to_owned()
            )
        );
        // Init containers first: the main container waits for them.
        assert_eq!(
            stuck(&pod(serde_json::json!({
                "initContainerStatuses": [waiting("kube-prestop-install", "ErrImagePull")],
                "containerStatuses": [waiting("main", "CreateContainerConfigError")]
            }))),
            Some("container kube-prestop-install (image kube-prestop-install:1): ErrImagePull: ErrImagePull for kube-prestop-install".to_owned())
        );
    }
}
