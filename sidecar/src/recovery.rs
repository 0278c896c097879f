//! What a restarted watcher does about the records a previous run of the
//! sidecar left (`docs/ARCHITECTURE.md` §4, "Records and once per exit"):
//! the decision only, pure. The caller lists and groups the records
//! ([`crate::state::group_by_instance`]), says which instances still run and
//! passes the time; it then logs, writes and queues what the returned
//! [`RecoveryAction`]s say.

use std::collections::BTreeMap;

use crate::exit_info::{ExitKnowledge, Unknown};
use crate::finder::Instance;
use crate::state::InstanceRecords;

/// One hook run waiting in the watcher's queue: the instance whose exit it
/// answers, its attempt number (1, or 2 for the retry of a run a sidecar
/// restart interrupted) and when the exit was observed
/// ([`crate::procfs::now_ticks`], clock ticks since boot), and what is known
/// of how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedHookRun {
    /// The exited instance.
    pub instance: Instance,
    /// 1 for a first run, 2 for the one retry.
    pub attempt: u32,
    /// When the exit was observed, in clock ticks since boot.
    pub exit_ticks: u64,
    /// The container's exit status ([`Unknown::SidecarDown`] for the runs
    /// recovery queues).
    pub exit: ExitKnowledge,
}

/// What to do about one instance found in the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryAction {
    /// The instance still runs: the search finds it and watches it again.
    StillRunning {
        /// The instance id.
        id: String,
    },
    /// It exited while the sidecar was down and the kubelet ran its preStop:
    /// record `outcome=skipped-prestop` (attempt 0).
    SkippedPrestop {
        /// The instance id.
        id: String,
    },
    /// Its hook was interrupted on attempt `attempt` ≥ 2: record
    /// `outcome=abandoned`, never retry.
    Abandon {
        /// The instance id.
        id: String,
        /// The interrupted attempt.
        attempt: u32,
    },
    /// Its hook was interrupted once: run it again (`run.attempt` is the
    /// interrupted attempt + 1).
    Retry {
        /// The run to queue.
        run: QueuedHookRun,
    },
    /// It was seen, then exited while the sidecar was down, and no hook
    /// started for it: run its hook now (attempt 1).
    RunMissed {
        /// The run to queue.
        run: QueuedHookRun,
    },
}

/// Decides, for every instance in `records` (keyed by instance id) that has
/// no `done-<id>`, what a restarted watcher does; `is_alive` says whether an
/// instance still runs (same PID and start time, not a zombie), `now_ticks`
/// is the time recorded as the exit's for the instances that exited while
/// the sidecar was down. Instances with a `done` record, ids that do not
/// parse, and ones with neither `seen`, `running` nor `prestop` records give
/// no action. Actions come in id order; queue the runs with
/// [`runs_in_start_order`].
pub fn plan(
    records: &BTreeMap<String, InstanceRecords>,
    is_alive: impl Fn(&Instance) -> bool,
    now_ticks: u64,
) -> Vec<RecoveryAction> {
    let mut out = Vec::new();
    for (id, r) in records {
        let Some(instance) = Instance::from_id(id) else {
            continue;
        };
        if r.done {
            continue;
        }
        // Only the watcher's own records name the late run (`running-0-0`,
        // `done-0-0`); a `seen-0-0` or `prestop-0-0` was written by
        // someone else (X's processes can write there) and is ignored.
        if instance == Instance::UNSEEN && r.running_attempt.is_none() {
            continue;
        }
        if is_alive(&instance) {
            out.push(RecoveryAction::StillRunning { id: id.clone() });
            continue;
        }
        if r.prestop {
            out.push(RecoveryAction::SkippedPrestop { id: id.clone() });
            continue;
        }
        match r.running_attempt {
            Some(a) if a >= 2 => out.push(RecoveryAction::Abandon {
                id: id.clone(),
                attempt: a,
            }),
            Some(a) => out.push(RecoveryAction::Retry {
                run: QueuedHookRun {
                    instance,
                    attempt: a.max(1) + 1,
                    exit_ticks: now_ticks,
                    // A late run, retried, is still late.
                    exit: ExitKnowledge::Unknown(if instance == Instance::UNSEEN {
                        Unknown::Unseen
                    } else {
                        Unknown::SidecarDown
                    }),
                },
            }),
            None if r.seen => out.push(RecoveryAction::RunMissed {
                run: QueuedHookRun {
                    instance,
                    attempt: 1,
                    exit_ticks: now_ticks,
                    exit: ExitKnowledge::Unknown(Unknown::SidecarDown),
                },
            }),
            None => {}
        }
    }
    out
}

/// The runs of `actions` ([`RecoveryAction::Retry`] and
/// [`RecoveryAction::RunMissed`]), oldest instance first (by start time), the
/// order the instances exited in.
pub fn runs_in_start_order(actions: &[RecoveryAction]) -> Vec<QueuedHookRun> {
    let mut runs: Vec<QueuedHookRun> = actions
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::Retry { run } | RecoveryAction::RunMissed { run } => Some(*run),
            _ => None,
        })
        .collect();
    runs.sort_by_key(|r| r.instance.start_time);
    runs
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn rec(seen: bool, prestop: bool, running: Option<u32>, done: bool) -> InstanceRecords {
        InstanceRecords {
            seen,
            prestop,
            prestop_ended: prestop,
            running_attempt: running,
            done,
        }
    }

    fn records(list: &[(&str, InstanceRecords)]) -> BTreeMap<String, InstanceRecords> {
        list.iter()
            .map(|(id, r)| ((*id).to_owned(), r.clone()))
            .collect()
    }

    const NOW: u64 = 5000;

    fn run(id: &str, attempt: u32) -> QueuedHookRun {
        QueuedHookRun {
            instance: Instance::from_id(id).unwrap(),
            attempt,
            exit_ticks: NOW,
            exit: ExitKnowledge::Unknown(Unknown::SidecarDown),
        }
    }

    #[test]
    fn done_instances_need_nothing() {
        let r = records(&[("10-100", rec(true, false, Some(1), true))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
        // Done wins even when the kubelet's mark is there too.
        let r = records(&[("10-100", rec(true, true, None, true))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
    }

    #[test]
    fn an_interrupted_late_run_is_retried_once_and_still_late() {
        let id = kube_prestop_contract::UNSEEN_INSTANCE_ID;
        let r = records(&[(id, rec(false, false, Some(1), false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::Retry {
                run: QueuedHookRun {
                    exit: ExitKnowledge::Unknown(Unknown::Unseen),
                    ..run(id, 2)
                }
            }]
        );
        // A late run that ended, or never started, needs nothing.
        let r = records(&[(id, rec(false, false, Some(1), true))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
        // Forged `seen-0-0` and `prestop-0-0` are ignored.
        let r = records(&[(id, rec(true, true, None, false))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
    }

    #[test]
    fn a_running_instance_is_watched_again() {
        let r = records(&[("10-100", rec(true, false, None, false))]);
        assert_eq!(
            plan(&r, |i| i.pid == 10, NOW),
            vec![RecoveryAction::StillRunning {
                id: "10-100".into()
            }]
        );
    }

    #[test]
    fn the_kubelets_run_means_skip() {
        let r = records(&[("10-100", rec(true, true, Some(1), false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::SkippedPrestop {
                id: "10-100".into()
            }]
        );
    }

    #[test]
    fn an_interrupted_run_is_retried_once_then_abandoned() {
        let r = records(&[("10-100", rec(true, false, Some(1), false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::Retry {
                run: run("10-100", 2)
            }]
        );
        // An unreadable running record counts as attempt 1.
        let r = records(&[("10-100", rec(true, false, Some(0), false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::Retry {
                run: run("10-100", 2)
            }]
        );
        let r = records(&[("10-100", rec(true, false, Some(2), false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::Abandon {
                id: "10-100".into(),
                attempt: 2
            }]
        );
    }

    #[test]
    fn an_exit_while_down_runs_the_hook() {
        let r = records(&[("10-100", rec(true, false, None, false))]);
        assert_eq!(
            plan(&r, |_| false, NOW),
            vec![RecoveryAction::RunMissed {
                run: run("10-100", 1)
            }]
        );
        // Never seen, never started: nothing to go on.
        let r = records(&[("10-100", rec(false, false, None, false))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
        // Bad ids are ignored.
        let r = records(&[("x-y", rec(true, false, None, false))]);
        assert_eq!(plan(&r, |_| false, NOW), vec![]);
    }

    #[test]
    fn runs_are_queued_oldest_first() {
        let r = records(&[
            ("10-300", rec(true, false, None, false)),
            ("20-100", rec(true, false, Some(1), false)),
            ("30-200", rec(true, true, None, false)),
        ]);
        let actions = plan(&r, |_| false, NOW);
        assert_eq!(actions.len(), 3);
        assert_eq!(
            runs_in_start_order(&actions),
            vec![run("20-100", 2), run("10-300", 1)]
        );
    }
}
