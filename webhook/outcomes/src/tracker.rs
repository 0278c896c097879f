//! What has been counted, per live pod, so that each run's outcome is
//! counted once however often the pod is seen: on each of its
//! updates, again on every re-list of the watch, in every sidecar's message
//! and after a sidecar restart. Pure: pods in, counts out.
//!
//! Held per pod: its uid and the set of 64-bit keys of what was counted
//! ([`crate::read::run_key`], [`crate::read::message_key`]), and only for
//! pods where something was counted (a running pod, or one whose sidecars
//! wrote no runs, costs nothing). No copy of the pod is kept. A pod is
//! forgotten when it is deleted, or when a re-list no longer lists it.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use kube_prestop_contract::parse_message;

use crate::read::{self, OutcomeLabel, OwnerKind, Unreadable};

/// The most keys kept for one pod (runs and messages). A pod that reaches
/// it counts nothing more (one `too_many_runs`): whatever its messages say,
/// the exporter's memory per pod stays bounded (about 16 bytes a key). A
/// sidecar message lists at most about 40 runs (4 KiB).
pub const MAX_KEYS_PER_POD: usize = 1024;

/// One increment of a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Count {
    /// One hook run's outcome.
    Outcome {
        /// The outcome.
        outcome: OutcomeLabel,
        /// A late run ([`kube_prestop_contract::RunLine::is_late`]: instance
        /// `0-0`, the run its watcher never saw, answered at the pod's end).
        late: bool,
        /// The pod's namespace.
        namespace: String,
        /// The pod's owner kind.
        owner_kind: OwnerKind,
    },
    /// A message, or a line of one, that could not be read.
    Unreadable(Unreadable),
}

/// What was counted for one pod.
#[derive(Debug, Default)]
struct PodKeys {
    keys: HashSet<u64>,
    /// [`MAX_KEYS_PER_POD`] reached: nothing more is counted.
    full: bool,
}

impl PodKeys {
    /// Inserts `key`; `Some(true)` when it is new, `Some(false)` when it was
    /// there, `None` when the set is full (reported once).
    fn insert(&mut self, key: u64, counts: &mut Vec<Count>) -> Option<bool> {
        if self.keys.contains(&key) {
            return Some(false);
        }
        if self.full {
            return None;
        }
        if self.keys.len() >= MAX_KEYS_PER_POD {
            self.full = true;
            counts.push(Count::Unreadable(Unreadable::TooManyRuns));
            return None;
        }
        self.keys.insert(key);
        Some(true)
    }
}

/// The counted keys of the live pods (see the module docs).
#[derive(Debug, Default)]
pub struct Tracker {
    pods: HashMap<String, PodKeys>,
    /// During a re-list: the tracked uids listed so far.
    relisted: Option<HashSet<String>>,
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts `pod`'s messages add: each final outcome of a run not
    /// counted before for this pod (a `running` hook waits for a message
    /// that says how it ended), and each unreadable message or line once.
    pub fn observe(&mut self, pod: &Pod) -> Vec<Count> {
        let mut counts = Vec::new();
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return counts;
        };
        if let Some(seen) = self.relisted.as_mut()
            && self.pods.contains_key(uid)
        {
            seen.insert(uid.to_owned());
        }
        let messages = read::sidecar_messages(pod);
        if messages.iter().all(|m| m.text.is_empty()) {
            return counts;
        }
        // Every message with runs read before (the usual update of a
        // finished pod): nothing to parse.
        if self.pods.get(uid).is_some_and(|p| {
            p.full
                || messages
                    .iter()
                    .all(|m| m.text.is_empty() || p.keys.contains(&m.key))
        }) {
            return counts;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let owner_kind = OwnerKind::of(pod);
        let keys = self.pods.entry(uid.to_owned()).or_default();
        if let Some(seen) = self.relisted.as_mut() {
            seen.insert(uid.to_owned());
        }
        for m in messages.iter().filter(|m| !m.text.is_empty()) {
            if keys.keys.contains(&m.key) {
                continue;
            }
            match parse_message(m.text) {
                Err(e) => counts.push(Count::Unreadable(e.into())),
                Ok(message) => {
                    counts.extend(std::iter::repeat_n(
                        Count::Unreadable(Unreadable::BadLine),
                        message.unreadable_lines,
                    ));
                    for run in &message.runs {
                        let Some(outcome) = OutcomeLabel::of(&run.hook) else {
                            continue;
                        };
                        if keys.insert(read::run_key(run), &mut counts) == Some(true) {
                            counts.push(Count::Outcome {
                                outcome,
                                late: run.is_late(),
                                namespace: namespace.clone(),
                                owner_kind,
                            });
                        }
                    }
                }
            }
            if keys.insert(m.key, &mut counts).is_none() {
                break;
            }
        }
        counts
    }

    /// Forgets `pod` (deleted): call after [`Self::observe`] of its last
    /// state.
    pub fn forget(&mut self, pod: &Pod) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.pods.remove(uid);
        }
    }

    /// A re-list starts: the pods it does not list are forgotten at
    /// [`Self::end_relist`].
    pub fn begin_relist(&mut self) {
        self.relisted = Some(HashSet::new());
    }

    /// The re-list is complete: forgets the tracked pods it did not list
    /// (deleted while the watch was down); returns how many.
    pub fn end_relist(&mut self) -> usize {
        let Some(seen) = self.relisted.take() else {
            return 0;
        };
        let before = self.pods.len();
        self.pods.retain(|uid, _| seen.contains(uid));
        before - self.pods.len()
    }

    /// Pods with counted keys.
    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Keys held, over every pod.
    pub fn tracked_keys(&self) -> usize {
        self.pods.values().map(|p| p.keys.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateTerminated, ContainerStatus, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    const HEADER: &str = "kube-prestop hook runs, oldest first:\n";

    fn line(container: &str, instance: &str, hook: &str) -> String {
        format!(
            "container={container} instance={instance} container_exit=exit:0 hook={hook} duration_ms=- grace_cut={}\n",
            hook == "cut"
        )
    }

    fn message(lines: &[String]) -> String {
        format!("{HEADER}{}", lines.concat())
    }

    /// A sidecar's status: `(container id, message)` for its last state and
    /// its current state, when terminated.
    fn status(
        name: &str,
        last: Option<(&str, &str)>,
        now: Option<(&str, &str)>,
    ) -> ContainerStatus {
        let state = |t: Option<(&str, &str)>| {
            t.map(|(id, text)| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    container_id: Some(id.to_owned()),
                    message: Some(text.to_owned()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            })
        };
        ContainerStatus {
            name: name.to_owned(),
            restart_count: i32::from(last.is_some()),
            last_state: state(last),
            state: state(now),
            ..ContainerStatus::default()
        }
    }

    fn pod(uid: &str, statuses: Vec<ContainerStatus>) -> Pod {
        let sidecar = |name: &str| Container {
            name: name.to_owned(),
            restart_policy: Some("Always".to_owned()),
            ..Container::default()
        };
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.to_owned());
        pod.metadata.namespace = Some("jobs".to_owned());
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        pod.spec = Some(PodSpec {
            init_containers: Some(vec![
                Container {
                    name: "kube-prestop-install".into(),
                    ..Container::default()
                },
                sidecar("kube-prestop-main"),
                sidecar("kube-prestop-side"),
                // A user's own native sidecar: never read.
                Container {
                    name: "proxy".into(),
                    restart_policy: Some("Always".to_owned()),
                    ..Container::default()
                },
            ]),
            ..PodSpec::default()
        });
        pod.status = Some(PodStatus {
            init_container_statuses: Some(statuses),
            ..PodStatus::default()
        });
        pod
    }

    fn outcomes(counts: &[Count]) -> Vec<&'static str> {
        let mut v: Vec<&str> = counts
            .iter()
            .map(|c| match c {
                Count::Outcome { outcome, .. } => outcome.as_str(),
                Count::Unreadable(u) => u.as_str(),
            })
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn every_outcome_is_counted_with_its_labels() {
        let text = message(&[
            line("main", "1-1", "exit:0"),
            line("main", "2-2", "exit:3"),
            line("main", "3-3", "signal:9"),
            line("main", "4-4", "not-found"),
            line("main", "5-5", "skipped-prestop"),
            line("main", "6-6", "skipped-run-on"),
            line("main", "7-7", "abandoned"),
            line("main", "8-8", "cut"),
            line("main", "-", "missed"),
            line("main", "9-9", "unknown"),
            line("main", "10-10", "later"),
            line("main", "11-11", "running"),
        ]);
        let mut t = Tracker::new();
        let counts = t.observe(&pod(
            "u1",
            vec![status("kube-prestop-main", None, Some(("c://1", &text)))],
        ));
        assert_eq!(
            outcomes(&counts),
            vec![
                "abandoned",
                "cut",
                "failed",
                "failed",
                "failed",
                "missed",
                "ran",
                "skipped-prestop",
                "skipped-run-on",
                "unknown",
                "unknown"
            ]
        );
        assert!(counts.contains(&Count::Outcome {
            outcome: OutcomeLabel::Ran,
            late: false,
            namespace: "jobs".into(),
            owner_kind: OwnerKind::Job,
        }));
        assert_eq!(t.tracked_pods(), 1);
    }

    /// `(outcome, late)` of each outcome count, sorted.
    fn lates(counts: &[Count]) -> Vec<(&'static str, bool)> {
        let mut v: Vec<(&str, bool)> = counts
            .iter()
            .filter_map(|c| match c {
                Count::Outcome { outcome, late, .. } => Some((outcome.as_str(), *late)),
                Count::Unreadable(_) => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn late_runs_are_counted_as_late() {
        // Termination messages as the sidecar wrote them in its namespace
        // tests (sidecar/tests/late.rs, hook_context.rs): late runs are
        // instance 0-0; seen runs and a miss are not late.
        let late_ran = "kube-prestop hook runs, oldest first:\n\
            container=main instance=0-0 container_exit=unknown hook=exit:0 duration_ms=0 grace_cut=false\n";
        let late_not_found = "kube-prestop hook runs, oldest first:\n\
            container=main instance=0-0 container_exit=unknown hook=not-found duration_ms=0 grace_cut=false\n";
        let late_skipped = "kube-prestop hook runs, oldest first:\n\
            container=main instance=0-0 container_exit=unknown hook=skipped-prestop duration_ms=- grace_cut=false\n";
        let seen = "kube-prestop hook runs, oldest first:\n\
            container=main instance=4-4407224 container_exit=exit:0 hook=skipped-run-on duration_ms=0 grace_cut=false\n\
            container=main instance=19-4407228 container_exit=exit:1 hook=exit:0 duration_ms=1 grace_cut=false\n";
        let cut = "kube-prestop hook runs, oldest first:\n\
            container=main instance=4-4407202 container_exit=exit:0 hook=cut duration_ms=- grace_cut=true\n";
        let missed = "kube-prestop hook runs, oldest first:\n\
            container=main instance=- container_exit=unknown hook=missed duration_ms=- grace_cut=false\n";
        let mut t = Tracker::new();
        let count = |t: &mut Tracker, uid: &str, text: &str| {
            lates(&t.observe(&pod(
                uid,
                vec![status("kube-prestop-main", None, Some(("c://1", text)))],
            )))
        };
        assert_eq!(count(&mut t, "a", late_ran), [("ran", true)]);
        assert_eq!(count(&mut t, "b", late_not_found), [("failed", true)]);
        assert_eq!(
            count(&mut t, "c", late_skipped),
            [("skipped-prestop", true)]
        );
        assert_eq!(
            count(&mut t, "d", seen),
            [("ran", false), ("skipped-run-on", false)]
        );
        assert_eq!(count(&mut t, "e", cut), [("cut", false)]);
        assert_eq!(count(&mut t, "f", missed), [("missed", false)]);
        // The labels beside it are the pod's, as for any run.
        let counts = t.observe(&pod(
            "g",
            vec![status("kube-prestop-main", None, Some(("c://1", late_ran)))],
        ));
        assert_eq!(
            counts,
            [Count::Outcome {
                outcome: OutcomeLabel::Ran,
                late: true,
                namespace: "jobs".into(),
                owner_kind: OwnerKind::Job,
            }]
        );
    }

    #[test]
    fn a_late_run_is_counted_once_late_whoever_lists_it() {
        // Two watched containers: side's sidecar wrote while main's late
        // hook still ran; main's own message says how it ended; both list
        // side's seen run. The late run is counted once, when final, late.
        let early = message(&[
            line("main", "0-0", "running"),
            line("side", "7-70", "exit:0"),
        ]);
        let done = message(&[
            line("main", "0-0", "exit:0"),
            line("side", "7-70", "exit:0"),
        ]);
        let mut t = Tracker::new();
        let first = pod(
            "u1",
            vec![status("kube-prestop-side", None, Some(("c://2", &early)))],
        );
        assert_eq!(lates(&t.observe(&first)), [("ran", false)]);
        let second = pod(
            "u1",
            vec![
                status("kube-prestop-side", None, Some(("c://2", &early))),
                status("kube-prestop-main", None, Some(("c://1", &done))),
            ],
        );
        assert_eq!(lates(&t.observe(&second)), [("ran", true)]);
        assert_eq!(t.observe(&second), vec![]);
    }

    #[test]
    fn duplicates_are_counted_once() {
        // Both sidecars list both containers' runs; the pod is seen again
        // on every update and on a re-list.
        let both = message(&[line("main", "1-1", "exit:0"), line("side", "2-2", "exit:1")]);
        let p = pod(
            "u1",
            vec![
                status("kube-prestop-main", None, Some(("c://1", &both))),
                status("kube-prestop-side", None, Some(("c://2", &both))),
            ],
        );
        let mut t = Tracker::new();
        assert_eq!(outcomes(&t.observe(&p)), vec!["failed", "ran"]);
        assert_eq!(t.observe(&p), vec![]);
        t.begin_relist();
        assert_eq!(t.observe(&p), vec![]);
        assert_eq!(t.end_relist(), 0);
        assert_eq!(t.observe(&p), vec![]);
        assert_eq!(t.tracked_pods(), 1);
        // Deleted: forgotten.
        t.forget(&p);
        assert_eq!(t.tracked_pods(), 0);
    }

    #[test]
    fn running_waits_for_the_final_outcome() {
        // The side sidecar wrote while main's hook still ran; main's own
        // message, later, says how it ended.
        let early = message(&[line("main", "1-1", "running")]);
        let late = message(&[line("main", "1-1", "cut")]);
        let mut t = Tracker::new();
        let first = pod(
            "u1",
            vec![status("kube-prestop-side", None, Some(("c://2", &early)))],
        );
        assert_eq!(t.observe(&first), vec![]);
        let second = pod(
            "u1",
            vec![
                status("kube-prestop-side", None, Some(("c://2", &early))),
                status("kube-prestop-main", None, Some(("c://1", &late))),
            ],
        );
        assert_eq!(outcomes(&t.observe(&second)), vec!["cut"]);
        assert_eq!(t.observe(&second), vec![]);
    }

    #[test]
    fn restarted_containers_are_counted_per_instance() {
        // main ran three times (restartPolicy OnFailure): three instances;
        // the sidecar restarted once, its new message repeats the old runs.
        let old = message(&[
            line("main", "10-100", "exit:0"),
            line("main", "20-200", "exit:2"),
        ]);
        let new = message(&[
            line("main", "10-100", "exit:0"),
            line("main", "20-200", "exit:2"),
            line("main", "30-300", "exit:0"),
        ]);
        let mut t = Tracker::new();
        let before = pod(
            "u1",
            vec![status("kube-prestop-main", None, Some(("c://1", &old)))],
        );
        assert_eq!(outcomes(&t.observe(&before)), vec!["failed", "ran"]);
        let after = pod(
            "u1",
            vec![status(
                "kube-prestop-main",
                Some(("c://1", &old)),
                Some(("c://9", &new)),
            )],
        );
        assert_eq!(outcomes(&t.observe(&after)), vec!["ran"]);
        // Another pod with the same instance ids is another pod.
        let other = pod(
            "u2",
            vec![status("kube-prestop-main", None, Some(("c://5", &old)))],
        );
        assert_eq!(outcomes(&t.observe(&other)), vec!["failed", "ran"]);
        assert_eq!(t.tracked_pods(), 2);
    }

    #[test]
    fn garbage_is_counted_once_and_never_as_an_outcome() {
        let mut t = Tracker::new();
        let with_bad_line = format!("{HEADER}nonsense\n{}", line("main", "1-1", "exit:0"));
        let huge = format!("{HEADER}{}", "x".repeat(5000));
        let p = pod(
            "u1",
            vec![
                status(
                    "kube-prestop-main",
                    None,
                    Some(("c://1", "rm -rf /\n\u{0}")),
                ),
                status(
                    "kube-prestop-side",
                    Some(("c://2", &huge)),
                    Some(("c://3", &with_bad_line)),
                ),
            ],
        );
        assert_eq!(
            outcomes(&t.observe(&p)),
            vec!["bad_line", "no_header", "ran", "too_large"]
        );
        assert_eq!(t.observe(&p), vec![]);
        // The user's own sidecar's message is not read at all.
        let mut user = pod(
            "u2",
            vec![status("proxy", None, Some(("c://4", "garbage")))],
        );
        assert_eq!(t.observe(&user), vec![]);
        // Nor a pod without a uid.
        user.metadata.uid = None;
        assert_eq!(t.observe(&user), vec![]);
    }

    #[test]
    fn memory_per_pod_is_bounded() {
        let mut t = Tracker::new();
        let mut counted = 0;
        let mut too_many = 0;
        // 60 sidecar restarts, 40 new runs each.
        let mut lines = Vec::new();
        let mut statuses = Vec::new();
        for restart in 0..60 {
            lines.clear();
            for i in 0..40 {
                lines.push(line("main", &format!("{restart}-{i}"), "exit:0"));
            }
            statuses.clear();
            let id = format!("c://{restart}");
            statuses.push(status(
                "kube-prestop-main",
                None,
                Some((id.as_str(), &message(&lines))),
            ));
            for c in t.observe(&pod("u1", statuses.clone())) {
                match c {
                    Count::Outcome { .. } => counted += 1,
                    Count::Unreadable(Unreadable::TooManyRuns) => too_many += 1,
                    Count::Unreadable(_) => panic!("{c:?}"),
                }
            }
        }
        assert_eq!(too_many, 1);
        assert!(
            counted < MAX_KEYS_PER_POD && counted > MAX_KEYS_PER_POD - 50,
            "{counted}"
        );
        assert_eq!(t.tracked_keys(), MAX_KEYS_PER_POD);
    }

    #[test]
    fn a_relist_forgets_pods_deleted_meanwhile() {
        let text = message(&[line("main", "1-1", "exit:0")]);
        let a = pod(
            "a",
            vec![status("kube-prestop-main", None, Some(("c://1", &text)))],
        );
        let b = pod(
            "b",
            vec![status("kube-prestop-main", None, Some(("c://2", &text)))],
        );
        let mut t = Tracker::new();
        assert_eq!(t.observe(&a).len(), 1);
        assert_eq!(t.observe(&b).len(), 1);
        t.begin_relist();
        assert_eq!(t.observe(&a), vec![]);
        assert_eq!(t.end_relist(), 1);
        assert_eq!(t.tracked_pods(), 1);
        // A pod first seen during a re-list (terminated while the watch was
        // down) is counted at first sight and kept.
        t.begin_relist();
        assert_eq!(t.observe(&a), vec![]);
        assert_eq!(t.observe(&b).len(), 1);
        assert_eq!(t.end_relist(), 0);
        assert_eq!(t.tracked_pods(), 2);
    }
}
