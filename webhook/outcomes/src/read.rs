//! What a pod says about its hook runs: the termination messages of its
//! kube-prestop sidecars, each run's outcome as a label, the pod's owner
//! kind, and the keys that make each run and each message count once. Pure:
//! a `Pod` in, values out.
//!
//! A sidecar's message lists the runs of *every* watched container of the
//! pod (docs/ARCHITECTURE.md §5), so the same run appears in several
//! messages (one per sidecar, and again after a sidecar restart): a run is
//! named by its watched container and instance id ([`run_key`]), the same in
//! every message. A message is named by the terminated sidecar instance that
//! wrote it (its container id, [`message_key`]), so a message already read
//! is not parsed again on the pod's next update.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use kube_prestop_contract::{HookStatus, HookToken, MessageError, RunLine};
use kube_prestop_engine::names::SIDECAR_PREFIX;

/// What became of one hook run, as the counter's `outcome` label says it.
/// The names are the contract's hook tokens ([`HookToken`]), except that a
/// hook that ran is `ran` (exit 0) or `failed` (any other end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeLabel {
    /// The hook ran and exited 0 (`hook=exit:0`).
    Ran,
    /// The hook ran and did not exit 0: `exit:N` (N ≠ 0), `signal:N`,
    /// `not-found`, `not-executable`.
    Failed,
    /// `skipped-prestop`: the kubelet ran the preStop itself.
    SkippedPrestop,
    /// `skipped-run-on`: the pod's `run-on` excluded how the container ended.
    SkippedRunOn,
    /// `abandoned`: interrupted by sidecar restarts twice, not retried.
    Abandoned,
    /// `cut`: still running when the grace period's SIGKILL came.
    Cut,
    /// `missed`: the sidecar was stopped without having seen its container
    /// run (if it ran, its hook did not).
    Missed,
    /// `unknown`, or a token this version does not know (another version's).
    Unknown,
}

impl OutcomeLabel {
    /// Every value, in the documented order.
    pub const ALL: [Self; 8] = [
        Self::Ran,
        Self::Failed,
        Self::SkippedPrestop,
        Self::SkippedRunOn,
        Self::Abandoned,
        Self::Cut,
        Self::Missed,
        Self::Unknown,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ran => "ran",
            Self::Failed => "failed",
            Self::SkippedPrestop => "skipped-prestop",
            Self::SkippedRunOn => "skipped-run-on",
            Self::Abandoned => "abandoned",
            Self::Cut => "cut",
            Self::Missed => "missed",
            Self::Unknown => "unknown",
        }
    }

    /// The outcome of a run line; `None` while the hook is `running` (not
    /// final: another sidecar's message or a later one will say how it
    /// ended).
    pub fn of(token: &HookToken) -> Option<Self> {
        use kube_prestop_contract::SkipReason;
        Some(match token {
            HookToken::Ended(HookStatus::Exited(0)) => Self::Ran,
            HookToken::Ended(_) => Self::Failed,
            HookToken::Skipped(SkipReason::Prestop) => Self::SkippedPrestop,
            HookToken::Skipped(SkipReason::RunOn) => Self::SkippedRunOn,
            HookToken::Abandoned => Self::Abandoned,
            HookToken::Cut => Self::Cut,
            HookToken::Missed => Self::Missed,
            HookToken::Running => return None,
            HookToken::Unknown | HookToken::Verbatim(_) => Self::Unknown,
        })
    }
}

/// Why (part of) a sidecar's message could not be read: the `reason` of
/// `kube_prestop_hook_outcome_messages_unreadable_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreadable {
    /// The message is over 4 KiB (no sidecar writes one).
    TooLarge,
    /// The message does not start with the contract's header.
    NoHeader,
    /// One line of a message with the header is not a run line (another
    /// writer's text, or the last line cut short by the kubelet's per-pod
    /// budget).
    BadLine,
    /// The pod's runs exceed [`crate::tracker::MAX_KEYS_PER_POD`]: the run
    /// was not counted (memory stays bounded whatever a pod says).
    TooManyRuns,
}

impl Unreadable {
    /// Every value.
    pub const ALL: [Self; 4] = [
        Self::TooLarge,
        Self::NoHeader,
        Self::BadLine,
        Self::TooManyRuns,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::NoHeader => "no_header",
            Self::BadLine => "bad_line",
            Self::TooManyRuns => "too_many_runs",
        }
    }
}

impl From<MessageError> for Unreadable {
    fn from(e: MessageError) -> Self {
        match e {
            MessageError::TooLarge => Self::TooLarge,
            MessageError::NoHeader => Self::NoHeader,
        }
    }
}

/// The pod's owner, as the counter's `owner_kind` label says it: a known set
/// (bounded cardinality), else `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// A `batch/v1` Job.
    Job,
    /// An Argo Workflows `argoproj.io` Workflow.
    Workflow,
    /// A Volcano `batch.volcano.sh` Job.
    VolcanoJob,
    /// A Pod (Spark's executors are owned by their driver pod).
    Pod,
    /// No ownerReference (a bare pod that opted in; Spark's driver).
    None,
    /// Any other owner.
    Other,
}

impl OwnerKind {
    /// Every value.
    pub const ALL: [Self; 6] = [
        Self::Job,
        Self::Workflow,
        Self::VolcanoJob,
        Self::Pod,
        Self::None,
        Self::Other,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::Workflow => "Workflow",
            Self::VolcanoJob => "VolcanoJob",
            Self::Pod => "Pod",
            Self::None => "none",
            Self::Other => "other",
        }
    }

    /// The kind of `pod`'s controller (its ownerReference with
    /// `controller: true`, else its first).
    pub fn of(pod: &Pod) -> Self {
        let refs = pod.metadata.owner_references.as_deref().unwrap_or_default();
        let Some(owner) = refs
            .iter()
            .find(|r| r.controller == Some(true))
            .or_else(|| refs.first())
        else {
            return Self::None;
        };
        let group = owner
            .api_version
            .split_once('/')
            .map_or("", |(group, _)| group);
        match (group, owner.kind.as_str()) {
            ("batch", "Job") => Self::Job,
            ("argoproj.io", "Workflow") => Self::Workflow,
            ("batch.volcano.sh", "Job") => Self::VolcanoJob,
            ("", "Pod") => Self::Pod,
            _ => Self::Other,
        }
    }
}

/// A fixed-key hash of `parts` (std's SipHash with its default keys: the
/// same in every run), separated so that `("ab", "c")` ≠ `("a", "bc")`.
fn key(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The key of one run: its watched container and instance id (a `missed`
/// line's instance is `-`: one per container).
pub fn run_key(line: &RunLine) -> u64 {
    key(&["run", &line.container, &line.instance])
}

/// The key of one message: the terminated sidecar instance that wrote it
/// (its container id; without one, its name, restart count and finish time).
pub fn message_key(
    sidecar: &str,
    restart_count: i32,
    terminated: &ContainerStateTerminated,
) -> u64 {
    match terminated.container_id.as_deref() {
        Some(id) if !id.is_empty() => key(&["message", id]),
        _ => {
            let finished = terminated
                .finished_at
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            key(&["message", sidecar, &restart_count.to_string(), &finished])
        }
    }
}

/// One terminated sidecar's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidecarMessage<'a> {
    /// [`message_key`].
    pub key: u64,
    /// The text (empty when the sidecar wrote none: no runs).
    pub text: &'a str,
}

/// The kube-prestop sidecars of `pod`: its init containers with
/// `restartPolicy: Always` named `kube-prestop-…` (the install init
/// container has no restart policy).
fn sidecar_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|c| {
            c.restart_policy.as_deref() == Some("Always") && c.name.starts_with(SIDECAR_PREFIX)
        })
        .map(|c| c.name.as_str())
        .collect()
}

/// The messages of every terminated sidecar instance of `pod`: each
/// sidecar's current state and last state when terminated, last state
/// first (older first).
pub fn sidecar_messages(pod: &Pod) -> Vec<SidecarMessage<'_>> {
    let names = sidecar_names(pod);
    let statuses: &[ContainerStatus] = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    for status in statuses.iter().filter(|s| names.contains(&s.name.as_str())) {
        let terminated = [status.last_state.as_ref(), status.state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|s| s.terminated.as_ref());
        for t in terminated {
            out.push(SidecarMessage {
                key: message_key(&status.name, status.restart_count, t),
                text: t.message.as_deref().unwrap_or_default(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn every_token_has_its_outcome() {
        let of = |t: &str| OutcomeLabel::of(&HookToken::parse(t)).map(OutcomeLabel::as_str);
        assert_eq!(of("exit:0"), Some("ran"));
        assert_eq!(of("exit:3"), Some("failed"));
        assert_eq!(of("signal:9"), Some("failed"));
        assert_eq!(of("not-found"), Some("failed"));
        assert_eq!(of("not-executable"), Some("failed"));
        assert_eq!(of("skipped-prestop"), Some("skipped-prestop"));
        assert_eq!(of("skipped-run-on"), Some("skipped-run-on"));
        assert_eq!(of("abandoned"), Some("abandoned"));
        assert_eq!(of("cut"), Some("cut"));
        assert_eq!(of("missed"), Some("missed"));
        assert_eq!(of("unknown"), Some("unknown"));
        assert_eq!(of("stopped:by:3"), Some("unknown"));
        assert_eq!(of("running"), None);
    }

    fn owned(api_version: &str, kind: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "x".into(),
            uid: "u".into(),
            controller,
            ..OwnerReference::default()
        }
    }

    #[test]
    fn owner_kinds_are_a_known_set() {
        let kind = |refs: Vec<OwnerReference>| {
            let mut pod = Pod::default();
            pod.metadata.owner_references = Some(refs);
            OwnerKind::of(&pod).as_str()
        };
        assert_eq!(OwnerKind::of(&Pod::default()).as_str(), "none");
        assert_eq!(kind(vec![]), "none");
        assert_eq!(kind(vec![owned("batch/v1", "Job", Some(true))]), "Job");
        assert_eq!(
            kind(vec![owned("argoproj.io/v1alpha1", "Workflow", Some(true))]),
            "Workflow"
        );
        assert_eq!(
            kind(vec![owned("batch.volcano.sh/v1alpha1", "Job", Some(true))]),
            "VolcanoJob"
        );
        assert_eq!(kind(vec![owned("v1", "Pod", None)]), "Pod");
        assert_eq!(
            kind(vec![owned("example.com/v1", "Job", Some(true))]),
            "other"
        );
        assert_eq!(kind(vec![owned("v1", "ConfigMap\n{evil}", None)]), "other");
        // The controller wins over the first reference.
        assert_eq!(
            kind(vec![
                owned("v1", "Pod", None),
                owned("batch/v1", "Job", Some(true))
            ]),
            "Job"
        );
    }

    #[test]
    fn keys_name_runs_and_messages() {
        let line = |c: &str, i: &str| {
            RunLine::parse(&format!(
                "container={c} instance={i} container_exit=exit:0 hook=exit:0 duration_ms=1 grace_cut=false"
            ))
            .unwrap()
        };
        assert_eq!(run_key(&line("main", "1-1")), run_key(&line("main", "1-1")));
        assert_ne!(run_key(&line("main", "1-1")), run_key(&line("main", "1-2")));
        assert_ne!(run_key(&line("main", "1-1")), run_key(&line("side", "1-1")));
        let t = |id: Option<&str>| ContainerStateTerminated {
            container_id: id.map(str::to_owned),
            ..ContainerStateTerminated::default()
        };
        assert_eq!(
            message_key("kube-prestop-main", 0, &t(Some("containerd://a"))),
            message_key("kube-prestop-other", 3, &t(Some("containerd://a")))
        );
        assert_ne!(
            message_key("kube-prestop-main", 0, &t(None)),
            message_key("kube-prestop-main", 1, &t(None))
        );
    }
}
