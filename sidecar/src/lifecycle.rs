//! The watcher's decisions as a pure state machine (`docs/ARCHITECTURE.md`
//! §4, "The watcher"): [`Event`]s in, [`Action`]s out, no I/O.
//!
//! [`crate::watch`] is the shell around it: it polls, scans `/proc`, holds
//! pidfds and roots, spawns the hook and writes the records, and it turns
//! what it observes into events. Everything that decides *whether and when*
//! a hook runs for an exit is here, so that it is tested without root, a
//! pod or a kernel (the unit tests below, and an exhaustive run over every
//! interleaving of a bounded world in `tests` below).
//!
//! # The invariant
//! Every exit of the watched container that the machine learns of (an
//! instance found already exited, a watched instance that exits, or one that
//! a previous run of the sidecar left unfinished, [`Event::Recovered`]) ends
//! in exactly one [`Action::Done`]: the hook ran (or could not start), the
//! kubelet ran its preStop itself ([`SkipReason::Prestop`]), `--run-on`
//! excluded it ([`SkipReason::RunOn`]), or it was interrupted twice
//! ([`Outcome::Abandoned`]); and no instance gets two [`Action::RunHook`]s,
//! whatever the shell reports twice or out of order. A stop (`SIGTERM`)
//! that finds no instance at all asks whether the kubelet started the
//! container ([`Action::CheckStarted`]): if it did, and did not run the
//! preStop itself, the hook runs late, once, for the run nobody saw
//! ([`Instance::UNSEEN`], [`Unknown::Unseen`]); if it never started the
//! container nothing is due ([`Action::NotStarted`]); if that cannot be
//! told, [`Action::ReportMiss`]. So an exit the watcher never saw is never
//! silent when no other run was seen, and a container the kubelet never
//! prepared to start never gets a hook (one it prepared and then gave up
//! on before the runtime ran it does: `docs/how-it-works.md`, Limits).
//!
//! # Protocol
//! [`Lifecycle::handle`] returns actions in order. Three of them ask the
//! shell a question that it answers with the next event before anything
//! else: [`Action::CheckMark`] with [`Event::Marked`],
//! [`Action::FinalLook`] with the [`Event::Found`]/[`Event::Exited`] that
//! the look produced, then [`Event::FinalLookDone`], and
//! [`Action::CheckStarted`] with [`Event::StartEvidence`].
//! [`Action::RunHook`] is answered, later, by [`Event::HookEnded`] or at
//! once by [`Event::HookFailedToStart`].

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use kube_prestop_contract::{HookStatus, Outcome, RunOn, SkipReason};

use crate::exit_info::{ExitKnowledge, Unknown};
use crate::finder::Instance;
use crate::recovery::{self, QueuedHookRun, RecoveryAction};
use crate::run_on::{self, RunDecision};

/// What the shell observed or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Records of a previous run of the sidecar, reconciled by
    /// [`crate::recovery::plan`]; `had_records`: any instance was recorded
    /// (the container ran before this sidecar started).
    Recovered {
        /// The plan's actions.
        actions: Vec<RecoveryAction>,
        /// Whether the previous run left any instance's records.
        had_records: bool,
        /// Now, in clock ticks since boot: the exit time recorded for the
        /// instances that exited while the sidecar was down.
        now_ticks: u64,
    },
    /// The search found an instance. `exit` is `None` while it still runs,
    /// else when its exit was observed (clock ticks since boot) and how it
    /// ended: a container that lived only milliseconds, or one inferred
    /// from its set-up ([`crate::finder::Scanner::infer_unseen`]).
    Found {
        /// The instance.
        instance: Instance,
        /// `None`: running; `Some((exit_ticks, exit))`: already exited.
        exit: Option<(u64, ExitKnowledge)>,
    },
    /// The watched instance exited (its pidfd became readable, or the
    /// liveness check failed).
    Exited {
        /// The instance.
        instance: Instance,
        /// When the exit was observed, clock ticks since boot.
        exit_ticks: u64,
        /// How it ended.
        exit: ExitKnowledge,
    },
    /// Answer to [`Action::CheckMark`]: what the kubelet's own preStop run
    /// for the instance came to (the wrapper's `prestop-<id>` and
    /// `prestop-ended-<id>`).
    Marked {
        /// The instance asked about.
        instance: Instance,
        /// The kubelet's run.
        kubelet: KubeletRun,
    },
    /// Answer to [`Action::RunHook`] when the hook could not be spawned:
    /// recorded as a run with this status (127 or 126, as a shell).
    HookFailedToStart {
        /// The instance whose hook failed to start.
        instance: Instance,
        /// The status recorded.
        status: HookStatus,
    },
    /// The running hook ended (reaped).
    HookEnded {
        /// The instance whose hook ended.
        instance: Instance,
        /// How it ended.
        status: HookStatus,
        /// How long it ran.
        duration: Duration,
    },
    /// `SIGTERM` or `SIGINT`: the kubelet stops the sidecar (after the
    /// watched container, which the kubelet 1.29+ stops first, exited).
    Terminate,
    /// The [`Action::FinalLook`] is complete.
    FinalLookDone,
    /// Answer to [`Action::CheckStarted`].
    StartEvidence(StartEvidence),
}

/// Whether the runtime created the watched container, asked at a stop when
/// no instance was ever found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartEvidence {
    /// The container's identifying mount point in its state volume
    /// (`state/X/created`) does not exist: the runtime never created the
    /// container, which it makes when it builds the container's root file
    /// system, after the image is present (its image never pulled, the
    /// kubelet refused it, or the pod was stopped first).
    NotStarted,
    /// `state/X/created` exists: the runtime created the container; `kubelet`
    /// is what the wrapper's marks say of the kubelet's own preStop (any
    /// instance's: the watcher does not know which ran). `now_ticks`: now,
    /// in clock ticks since boot (recorded as the exit time).
    Started {
        /// The kubelet's preStop run, over every mark.
        kubelet: KubeletRun,
        /// Now, clock ticks since boot.
        now_ticks: u64,
    },
    /// The evidence could not be read (logged by the shell): the miss is
    /// reported.
    Unreadable,
}

/// The kubelet's own run of the container's preStop for one instance, as
/// the wrapper's records and process tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeletRun {
    /// No `prestop-<id>`: the kubelet did not start the preStop.
    None,
    /// The preStop ended (`prestop-ended-<id>`), or still runs after the
    /// container's exit: the kubelet's run stands, ours is skipped.
    Ran,
    /// `prestop-<id>` without `prestop-ended-<id>`, and the wrapper is gone:
    /// the container's exit cut the preStop short (the runtime killed it
    /// with the container), so the hook runs for that exit, told so
    /// ([`kube_prestop_contract::ENV_HOOK_KUBELET_PRESTOP`]).
    Cut,
}

/// What the shell does, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `seen-<id>` for a found instance.
    WriteSeen(Instance),
    /// Watch this running instance (hold its pidfd and root; stop searching).
    Watch(Instance),
    /// The instance's exit is taken: retire it in the scanner (processes
    /// sharing its identifying mount are leftovers from now on) and start
    /// searching for the next instance.
    Retire(Instance),
    /// A second report about an instance whose exit is already taken, or of
    /// an instance other than the watched one: nothing runs (logged).
    Ignored {
        /// The instance reported.
        instance: Instance,
        /// Why it is ignored.
        why: &'static str,
    },
    /// Look for `prestop-<id>`; answer with [`Event::Marked`].
    CheckMark(QueuedHookRun),
    /// Write `running-<id>` and spawn the hook for `run`; answer with
    /// [`Event::HookEnded`] later or [`Event::HookFailedToStart`] now.
    /// `unknown_despite_run_on`: it runs only because the exit status is
    /// unknown (`--run-on` is not `always`; logged).
    RunHook {
        /// The run.
        run: QueuedHookRun,
        /// Runs although `--run-on` might have excluded it.
        unknown_despite_run_on: bool,
        /// The kubelet's own preStop for this exit was cut short.
        after_cut_prestop: bool,
    },
    /// Write `done-<id>` and update the termination message.
    Done {
        /// The run the record answers (attempt 0 for recovery's skips).
        run: QueuedHookRun,
        /// The outcome.
        outcome: Outcome,
        /// The hook's status when it ran.
        status: Option<HookStatus>,
        /// How long it ran (zero when skipped by `--run-on` or when it
        /// failed to start; `None` when no run was attempted).
        duration: Option<Duration>,
    },
    /// `SIGTERM` came: take one last look before deciding what was missed
    /// (the watched instance's pidfd polled without waiting, or one more
    /// scan step while searching); report what it finds, then
    /// [`Event::FinalLookDone`].
    FinalLook {
        /// The instance being watched, if any.
        watching: Option<Instance>,
    },
    /// The watched instance still runs at the stop: the sidecar does not
    /// wait for it (the kubelet stops it and runs its own preStop).
    StopWatching(Instance),
    /// A stop came and no instance was ever found (nor recorded by a
    /// previous run): look whether the kubelet started the container; answer
    /// with [`Event::StartEvidence`].
    CheckStarted,
    /// The kubelet never started the container: no hook is due (logged).
    NotStarted,
    /// A stop came, no instance was ever found, and whether the container
    /// was started cannot be told: if it ran, its hook did not. Logged as a
    /// warning with the search's statistics.
    ReportMiss,
    /// Rewrite the termination message, marking the running hook's line as
    /// cut by the grace period when `cut` names it.
    TerminationMessage {
        /// The instance whose hook still runs at the stop.
        cut: Option<Instance>,
    },
    /// Nothing runs or waits: remove the `armed` mark and exit 0.
    Exit,
}

/// Where the stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// No stop yet.
    No,
    /// [`Action::FinalLook`] asked, not answered.
    Looking,
    /// [`Action::CheckStarted`] asked, not answered.
    Checking,
    /// Decided; the queue drains, then [`Action::Exit`].
    Draining,
    /// [`Action::Exit`] given.
    Exited,
}

/// The watcher's state (see the module docs).
#[derive(Debug, Clone)]
pub struct Lifecycle {
    run_on: RunOn,
    watching: Option<Instance>,
    queue: VecDeque<QueuedHookRun>,
    /// Popped from the queue, waiting for [`Event::Marked`].
    deciding: Option<QueuedHookRun>,
    /// The hook running now.
    running: Option<QueuedHookRun>,
    /// Instances whose exit was taken (queued, decided or recovered).
    taken: HashSet<Instance>,
    ever_found: bool,
    stop: Stop,
}

impl Lifecycle {
    /// A machine for a container whose hook runs by `run_on`.
    pub fn new(run_on: RunOn) -> Self {
        Self {
            run_on,
            watching: None,
            queue: VecDeque::new(),
            deciding: None,
            running: None,
            taken: HashSet::new(),
            ever_found: false,
            stop: Stop::No,
        }
    }

    /// Whether the shell should search for an instance: none is watched and
    /// no stop came.
    pub fn searching(&self) -> bool {
        self.watching.is_none() && self.stop == Stop::No
    }

    /// The instance being watched.
    pub fn watching(&self) -> Option<Instance> {
        self.watching
    }

    /// Whether a stop came.
    pub fn terminating(&self) -> bool {
        self.stop != Stop::No
    }

    /// Whether an instance was found or recorded in this run.
    pub fn ever_found(&self) -> bool {
        self.ever_found
    }

    /// Runs waiting behind the running hook.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Takes one event; returns what to do, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::Recovered {
                actions,
                had_records,
                now_ticks,
            } => self.recovered(actions, had_records, now_ticks, &mut out),
            Event::Found { instance, exit } => self.found(instance, exit, &mut out),
            Event::Exited {
                instance,
                exit_ticks,
                exit,
            } => {
                if self.watching == Some(instance) {
                    self.watching = None;
                    self.take_exit(instance, exit_ticks, exit, &mut out);
                } else {
                    out.push(Action::Ignored {
                        instance,
                        why: "an exit of an instance that is not being watched",
                    });
                }
            }
            Event::Marked { instance, kubelet } => self.marked(instance, kubelet, &mut out),
            Event::HookFailedToStart { instance, status } => {
                self.hook_ended(instance, status, Duration::ZERO, &mut out);
            }
            Event::HookEnded {
                instance,
                status,
                duration,
            } => self.hook_ended(instance, status, duration, &mut out),
            Event::Terminate => {
                if self.stop == Stop::No {
                    self.stop = Stop::Looking;
                    out.push(Action::FinalLook {
                        watching: self.watching,
                    });
                    // The shell answers before anything else runs.
                    return out;
                }
            }
            Event::FinalLookDone => {
                if self.stop == Stop::Looking {
                    if let Some(w) = self.watching.take() {
                        out.push(Action::StopWatching(w));
                    } else if !self.ever_found {
                        self.stop = Stop::Checking;
                        out.push(Action::CheckStarted);
                        // The shell answers before anything else runs.
                        return out;
                    }
                    self.stop = Stop::Draining;
                    out.push(Action::TerminationMessage {
                        cut: self.running.map(|r| r.instance),
                    });
                }
            }
            Event::StartEvidence(evidence) => {
                if self.stop == Stop::Checking {
                    self.stop = Stop::Draining;
                    self.start_evidence(evidence, &mut out);
                    out.push(Action::TerminationMessage {
                        cut: self.running.map(|r| r.instance),
                    });
                }
            }
        }
        self.pump(&mut out);
        out
    }

    fn recovered(
        &mut self,
        actions: Vec<RecoveryAction>,
        had: bool,
        now_ticks: u64,
        out: &mut Vec<Action>,
    ) {
        self.ever_found |= had;
        let down = ExitKnowledge::Unknown(Unknown::SidecarDown);
        for a in &actions {
            let (id, outcome, attempt) = match a {
                RecoveryAction::SkippedPrestop { id } => {
                    (id, Outcome::Skipped(SkipReason::Prestop), 0)
                }
                RecoveryAction::Abandon { id, attempt } => (id, Outcome::Abandoned, *attempt),
                _ => continue,
            };
            if let Some(instance) = Instance::from_id(id)
                && self.taken.insert(instance)
            {
                out.push(Action::Done {
                    run: QueuedHookRun {
                        instance,
                        attempt,
                        exit_ticks: now_ticks,
                        exit: down,
                    },
                    outcome,
                    status: None,
                    duration: None,
                });
            }
        }
        for run in recovery::runs_in_start_order(&actions) {
            if self.taken.insert(run.instance) {
                self.queue.push_back(run);
            }
        }
    }

    fn found(
        &mut self,
        instance: Instance,
        exit: Option<(u64, ExitKnowledge)>,
        out: &mut Vec<Action>,
    ) {
        if self.taken.contains(&instance) {
            out.push(Action::Ignored {
                instance,
                why: "found again after its exit was taken",
            });
            out.push(Action::Retire(instance));
            return;
        }
        if self.stop == Stop::Checking
            || (self.stop != Stop::No && self.taken.contains(&Instance::UNSEEN))
        {
            // Whether the kubelet started the container is being decided,
            // or the late run answered the exits nobody saw: this may be one.
            out.push(Action::Ignored {
                instance,
                why: "found while or after the late run for the unseen exits was decided",
            });
            out.push(Action::Retire(instance));
            return;
        }
        if self.watching.is_some() {
            out.push(Action::Ignored {
                instance,
                why: "found while an instance is already watched",
            });
            return;
        }
        self.ever_found = true;
        out.push(Action::WriteSeen(instance));
        match exit {
            Some((exit_ticks, exit)) => self.take_exit(instance, exit_ticks, exit, out),
            None if self.stop != Stop::No => out.push(Action::StopWatching(instance)),
            None => {
                self.watching = Some(instance);
                out.push(Action::Watch(instance));
            }
        }
    }

    fn take_exit(
        &mut self,
        instance: Instance,
        exit_ticks: u64,
        exit: ExitKnowledge,
        out: &mut Vec<Action>,
    ) {
        // Both callers take only an exit not taken yet: `found` ignores a
        // taken instance, and `Exited` is only for the watched one, which
        // `found` watches only when not taken.
        out.push(Action::Retire(instance));
        self.taken.insert(instance);
        self.queue.push_back(QueuedHookRun {
            instance,
            attempt: 1,
            exit_ticks,
            exit,
        });
    }

    /// At a stop with nothing found ([`Stop::Checking`]): no instance was
    /// ever found or recorded, so nothing runs, is decided or queued, and
    /// the late run is the only one.
    fn start_evidence(&mut self, evidence: StartEvidence, out: &mut Vec<Action>) {
        let (kubelet, now_ticks) = match evidence {
            StartEvidence::NotStarted => return out.push(Action::NotStarted),
            StartEvidence::Unreadable => return out.push(Action::ReportMiss),
            StartEvidence::Started { kubelet, now_ticks } => (kubelet, now_ticks),
        };
        if !self.taken.insert(Instance::UNSEEN) {
            return;
        }
        let run = QueuedHookRun {
            instance: Instance::UNSEEN,
            attempt: 1,
            exit_ticks: now_ticks,
            exit: ExitKnowledge::Unknown(Unknown::Unseen),
        };
        self.deciding = Some(run);
        self.marked(Instance::UNSEEN, kubelet, out);
    }

    fn marked(&mut self, instance: Instance, kubelet: KubeletRun, out: &mut Vec<Action>) {
        let Some(run) = self.deciding.filter(|r| r.instance == instance) else {
            out.push(Action::Ignored {
                instance,
                why: "a mark answer for a run that is not being decided",
            });
            return;
        };
        self.deciding = None;
        if kubelet == KubeletRun::Ran {
            out.push(Action::Done {
                run,
                outcome: Outcome::Skipped(SkipReason::Prestop),
                status: None,
                duration: None,
            });
            return;
        }
        match run_on::decide(self.run_on, run.exit) {
            RunDecision::Skip => out.push(Action::Done {
                run,
                outcome: Outcome::Skipped(SkipReason::RunOn),
                status: None,
                duration: Some(Duration::ZERO),
            }),
            d => {
                self.running = Some(run);
                out.push(Action::RunHook {
                    run,
                    unknown_despite_run_on: d == RunDecision::RunUnknown,
                    after_cut_prestop: kubelet == KubeletRun::Cut,
                });
            }
        }
    }

    fn hook_ended(
        &mut self,
        instance: Instance,
        status: HookStatus,
        duration: Duration,
        out: &mut Vec<Action>,
    ) {
        match self.running {
            Some(run) if run.instance == instance => {
                self.running = None;
                out.push(Action::Done {
                    run,
                    outcome: Outcome::Ran,
                    status: Some(status),
                    duration: Some(duration),
                });
            }
            _ => out.push(Action::Ignored {
                instance,
                why: "a hook end for a hook that is not running",
            }),
        }
    }

    /// Starts deciding the next queued run when nothing runs or is being
    /// decided; gives [`Action::Exit`] once a stop has drained everything.
    fn pump(&mut self, out: &mut Vec<Action>) {
        if matches!(self.stop, Stop::Looking | Stop::Checking) {
            return;
        }
        if self.running.is_none() && self.deciding.is_none() {
            if let Some(run) = self.queue.pop_front() {
                self.deciding = Some(run);
                out.push(Action::CheckMark(run));
            } else if self.stop == Stop::Draining {
                self.stop = Stop::Exited;
                out.push(Action::Exit);
            }
        }
    }
}

#[cfg(test)]
mod tests;
