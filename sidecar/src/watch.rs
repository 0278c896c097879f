//! `watch`: the native sidecar's main loop (`docs/ARCHITECTURE.md` §4, "The watcher"),
//! the I/O shell around [`crate::lifecycle::Lifecycle`], which decides
//! whether and when each exit's hook runs; this module observes, holds,
//! spawns and writes what it says.
//!
//! One thread, one `ppoll(2)` over a signalfd (`SIGTERM`, `SIGINT`, `SIGCHLD`)
//! and, while the watched container runs, a pidfd of its process. While the
//! container runs and no hook runs, the loop sleeps in `ppoll` with no
//! timeout: no periodic wake-ups. While the container is absent, it ticks
//! every [`TICK`] to notice new processes (a tick costs one `pread` of
//! `/proc/loadavg` when no process was created), and also wakes on the
//! mount-table changes and exits of new parentless processes that may be the
//! container being set up (see [`crate::finder::Scanner`]).
//!
//! Per instance (see [`kube_prestop_contract::state_files`] for the files):
//! 1. found: `seen-<id>` is written, a pidfd is held;
//! 2. exited: if `prestop-<id>` exists the kubelet ran the preStop itself and
//!    nothing runs (`done-<id>` says `outcome=skipped-prestop`); otherwise
//!    `running-<id>` is written, the hook runs, and `done-<id>` records its
//!    status and duration;
//!    Before the hook starts, the watcher waits (at most [`REAP_WAIT_MAX`])
//!    for the container's parent to reap the process and reads its exit
//!    status through the pidfd ([`crate::exit_info`]); `--run-on` may then
//!    skip the hook (`done-<id>` says `outcome=skipped-run-on`). The
//!    container's root and mount namespace, held since it was found
//!    ([`crate::container_root`]), are released when the hook ends;
//! 3. the search resumes (under `restartPolicy: OnFailure` the kubelet starts
//!    a new instance), ignoring processes older than the observed exit.
//!
//! On start, the records of a previous run of the sidecar are reconciled: an
//! instance that was seen and whose process is gone without `done-<id>` or
//! `prestop-<id>` exited while the sidecar was down, and its hook runs now;
//! one with `running-<id>` but no `done-<id>` was interrupted and is retried
//! once (attempt 2); a second interruption is logged and given up.
//!
//! The loop never returns before `SIGTERM`/`SIGINT` (the kubelet restarts a
//! native sidecar that exits): every error is logged and waited out.

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;

use kube_prestop_contract::{
    self as contract, ContainerEnd, DoneRecord, HookRoot, HookRun, HookStatus, HookToken, Outcome,
    Parsed, PrestopRecord, RecordKind, RunLine, RunOn, RunningRecord, SeenRecord, SkipReason,
};

use crate::cli::Target;
use crate::container_root::{self, HeldRoot};
use crate::exit_info::{self, ExitKnowledge, Unknown};
use crate::finder::{self, Instance, Scanner};
use crate::gate;
use crate::hook::{self, Chroot, HookContext, RunningHook};
use crate::lifecycle::{Action, Event, KubeletRun, Lifecycle, StartEvidence};
use crate::log;
use crate::procfs;
use crate::recovery::{self, QueuedHookRun, RecoveryAction};
use crate::sender;
use crate::state::{self, StateError, StateStore};
use crate::termination;

/// Search interval while the container is absent: 1 ms for the first 10 s
/// of a search, 2 ms up to a minute, then 4 ms (a restart after the kubelet's
/// crash-loop backoff, or the pod's end). A container process lives through
/// the runtime's set-up and its create/start gap (tens of milliseconds) before
/// its command even starts, and a parentless process seen once is followed
/// post mortem (see [`crate::finder::Scanner`]).
pub fn search_tick(searching_for: Duration) -> Duration {
    if searching_for < Duration::from_secs(10) {
        TICK
    } else if searching_for < Duration::from_secs(60) {
        TICK * 2
    } else {
        TICK * 4
    }
}

/// The fastest search interval.
pub const TICK: Duration = Duration::from_millis(1);
/// Liveness check interval when the kernel has no `pidfd_open` (< 5.3).
const NO_PIDFD_TICK: Duration = Duration::from_millis(50);
/// How long the watcher waits, after the container's process exited, for
/// its parent (the runtime's shim) to reap it, which is when the kernel
/// makes the exit status readable. The shim reaps at once; past this the
/// hook runs without the status (logged).
pub const REAP_WAIT_MAX: Duration = Duration::from_millis(100);
/// How long the watcher waits, after the container's exit, for a preStop
/// wrapper without `prestop-ended-<id>` to end: the runtime kills it with
/// the container within milliseconds (`docs/facts.md` R5).
pub const WRAPPER_WAIT_MAX: Duration = Duration::from_secs(2);

/// How many `prestop-<id>` marks the stop's start check asks about, at most
/// (each up to [`WRAPPER_WAIT_MAX`]): the kubelet's own runs leave one per
/// run it stopped; more are planted, and only delay X's own late hook.
pub const MARKS_EXAMINED: usize = 4;
/// How long after finding an instance the watcher keeps trying to hold its
/// root (every [`TICK`]) while the process has not entered its root file
/// system yet (found before `pivot_root`).
const ROOT_HOLD_RETRY: Duration = Duration::from_secs(2);

/// Settings of the `watch` subcommand.
#[derive(Debug)]
pub struct WatchConfig {
    /// Container, root of our mounts and identifying-mount root.
    pub target: Target,
    /// The hook command (the container's original preStop command),
    /// verbatim: its arguments need not be UTF-8.
    pub hook: Vec<OsString>,
    /// Where procfs is mounted ([`procfs::PROC_ROOT`]).
    pub proc_root: PathBuf,
    /// [`contract::ENV_GRACE_PERIOD_SECONDS`], if set and valid.
    pub grace_seconds: Option<u64>,
    /// The watched container is the only one the kubelet starts after this
    /// sidecar ([`contract::FLAG_STARTED_AFTER`] names only it): a container
    /// set up and ended between two looks is taken to be an instance of it
    /// ([`Scanner::infer_unseen`]).
    pub sole_container: bool,
    /// [`kube_prestop_contract::FLAG_RUN_ON`].
    pub run_on: RunOn,
    /// [`kube_prestop_contract::FLAG_HOOK_ROOT`].
    pub hook_root: HookRoot,
    /// Where the termination message goes
    /// ([`kube_prestop_contract::FLAG_TERMINATION_MESSAGE`]).
    pub termination_message: PathBuf,
    /// Its size limit in bytes: the kubelet's share for this container
    /// ([`contract::termination_message_budget`] of
    /// [`kube_prestop_contract::FLAG_POD_CONTAINERS`]).
    pub termination_message_max: usize,
    /// The start gate ([`kube_prestop_contract::FLAG_GATE_PORT`]): its port
    /// and the listening sockets [`gate::listen`] opened (or why not), when
    /// the postStart handler is an `httpGet`.
    pub gate: Option<(u16, std::io::Result<Vec<std::net::TcpListener>>)>,
}

use crate::procfs::pidfd_open;

/// The container's root, as far as the watcher holds it.
#[derive(Debug)]
enum RootHold {
    /// Held.
    Held(HeldRoot),
    /// Not yet, and why: the process has not entered its root file system,
    /// or it may not be looked into (`EACCES`/`EPERM`), which is retried in
    /// case the runtime is still setting the process up.
    Pending(String),
    /// Not held, and why (for the log).
    Missing(String),
}

#[derive(Debug)]
struct Watched {
    instance: Instance,
    pidfd: Option<OwnedFd>,
    since: Instant,
    root: RootHold,
}

/// The watcher's shell around [`Lifecycle`]: the I/O it asks for, and the
/// events it observes.
struct Watcher {
    cfg: WatchConfig,
    store: StateStore,
    scanner: Scanner,
    life: Lifecycle,
    /// The instance [`Action::Watch`] names: pidfd and root held.
    watched: Option<Watched>,
    /// The root held for an instance whose exit is being reported, until
    /// [`Action::Retire`] moves it into `roots` (dropped if ignored).
    incoming: Option<(Instance, RootHold)>,
    /// Roots held for exited instances whose hook has not run yet.
    roots: HashMap<Instance, RootHold>,
    /// The running hook, its instance and the root it uses.
    hook: Option<(RunningHook, Instance, RootHold)>,
    /// `Err(why)` when the kernel cannot report exit statuses.
    exit_status: Result<(), String>,
    /// This process's PID in `proc_root` (for `KUBE_PRESTOP_ROOT`).
    own_pid: Option<i32>,
    /// The watcher runs in the host's PID namespace (a `hostPID` pod):
    /// every stop signal counts ([`sender`]).
    initial_pid_namespace: bool,
    /// The termination message could not be written (logged once).
    termination_error_logged: bool,
    /// The signal that stopped the watcher.
    stop_signal: Option<Signal>,
    /// The stop came while searching (for the "search ended" line).
    stopped_searching: bool,
    /// [`Action::ReportMiss`] came: the termination message says so.
    missed: bool,
    /// The process exit status, once [`Action::Exit`] came.
    exit: Option<i32>,
    armed: bool,
    /// Set when armed: the start gate's requests wait for it.
    armed_flag: gate::Armed,
    arm_retry_at: Instant,
    arm_backoff: Duration,
    searching_since: Instant,
    next_wait_log: Instant,
    wait_log_interval: Duration,
    last_scan_error: Option<Instant>,
}

/// Serves the start gate on the sockets [`gate::listen`] opened, or logs why
/// it cannot: then the kubelet's postStart request fails (refused) or
/// reaches whatever holds the port.
fn start_gate(
    port: u16,
    listening: std::io::Result<Vec<std::net::TcpListener>>,
    armed: &gate::Armed,
    container: &str,
) {
    let fail_open_at = Instant::now() + Duration::from_secs(contract::POST_START_TIMEOUT_SECONDS);
    let served =
        listening.and_then(|l| gate::serve(l, armed.clone(), fail_open_at, container.to_owned()));
    match served {
        Ok(()) => log!("gate listening container={container} port={port}"),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => log!(
            "warning: gate cannot listen container={container} port={port}: a process of the pod holds the port without declaring it, so the kubelet's postStart request reaches that process and the pod's next containers may start before this watcher is armed; use the exec gate for this pod (kube-prestop.io/gate: exec)"
        ),
        Err(e) => log!(
            "error: gate cannot listen container={container} port={port}: {e}; the kubelet's postStart request fails and it restarts this sidecar; use the exec gate for this pod (kube-prestop.io/gate: exec)"
        ),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Runs the watcher. Returns the process exit status (0) only after
/// `SIGTERM` or `SIGINT`, once no hook is running or queued.
pub fn run(mut cfg: WatchConfig) -> i32 {
    // Before SIGCHLD is blocked: the probe forks and reaps a child.
    let exit_status = exit_info::probe();
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        mask.add(s);
    }
    let sfd = match sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .and_then(|_| SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC))
    {
        Ok(s) => s,
        Err(e) => {
            // Without a signalfd we cannot wait for SIGTERM in poll. Restore
            // the default dispositions so SIGTERM ends us, and wait for it.
            let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&mask), None);
            log!("fatal: cannot create signalfd: {e}; waiting for SIGTERM without watching");
            // Never armed: the gate lets the pod go at its fail-open deadline.
            if let Some((port, listening)) = cfg.gate.take() {
                start_gate(port, listening, &gate::Armed::new(), &cfg.target.container);
            }
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        log!(
            "warning: cannot become a child subreaper ({e}); orphans of the hook are reaped by the pod's init instead"
        );
    }
    let armed_flag = gate::Armed::new();
    if let Some((port, listening)) = cfg.gate.take() {
        start_gate(port, listening, &armed_flag, &cfg.target.container);
    }
    let now = Instant::now();
    let mount_point = finder::id_mount(&cfg.proc_root, &cfg.target.root, &cfg.target.container);
    let initial_pid_namespace = sender::in_initial_pid_namespace(&cfg.proc_root);
    let mut w = Watcher {
        store: StateStore::new(&cfg.target.root, &cfg.target.container),
        scanner: Scanner::new(&cfg.proc_root, mount_point.clone()).infer_unseen(cfg.sole_container),
        life: Lifecycle::new(cfg.run_on),
        cfg,
        watched: None,
        incoming: None,
        roots: HashMap::new(),
        hook: None,
        stop_signal: None,
        stopped_searching: false,
        missed: false,
        exit: None,
        armed: false,
        armed_flag,
        arm_retry_at: now,
        arm_backoff: Duration::from_secs(1),
        searching_since: now,
        next_wait_log: now + Duration::from_secs(10),
        wait_log_interval: Duration::from_secs(10),
        last_scan_error: None,
        exit_status,
        own_pid: None,
        initial_pid_namespace,
        termination_error_logged: false,
    };
    w.own_pid = procfs::self_pid(&w.cfg.proc_root).ok();
    log!(
        "watch starting container={} mount_point={} state_dir={} hook={:?} grace_period={} sole_container={} run_on={} hook_root={} pid={}",
        w.cfg.target.container,
        mount_point,
        w.store.dir().display(),
        w.cfg.hook,
        w.cfg
            .grace_seconds
            .map_or_else(|| "unknown".to_owned(), |g| format!("{g}s")),
        w.cfg.sole_container,
        w.cfg.run_on.as_str(),
        w.cfg.hook_root.as_str(),
        std::process::id()
    );
    match &w.exit_status {
        Ok(()) => log!("exit status: read through the pidfd (PIDFD_INFO_EXIT)"),
        Err(why) => log!(
            "warning: exit status unavailable: {why}; KUBE_PRESTOP_EXIT_CODE and KUBE_PRESTOP_EXIT_SIGNAL stay unset{}",
            if w.cfg.run_on == RunOn::Always {
                String::new()
            } else {
                format!(
                    " and run-on={} runs the hook on every exit",
                    w.cfg.run_on.as_str()
                )
            }
        ),
    }
    // A mark left by a previous run of the sidecar must not end the
    // postStart handler (or pass the probe) before this run is ready.
    let _ = w.store.remove(contract::ARMED_FILE);
    w.recover();
    w.arm();
    w.main_loop(&sfd)
}

impl Watcher {
    /// The watched container's name.
    fn container(&self) -> &str {
        &self.cfg.target.container
    }

    fn main_loop(&mut self, sfd: &SignalFd) -> i32 {
        loop {
            if let Some(code) = self.exit {
                return code;
            }
            let now = Instant::now();
            let terminating = self.life.terminating();
            if !self.armed && now >= self.arm_retry_at && !terminating {
                self.arm();
            }
            if self.life.searching() {
                self.search(now);
            }
            self.try_hold_root();
            let now = Instant::now();
            let mut timeout: Option<Duration> = None;
            let mut min_to = |d: Duration| {
                timeout = Some(timeout.map_or(d, |t: Duration| t.min(d)));
            };
            if !terminating {
                match &self.watched {
                    None => {
                        min_to(search_tick(now.duration_since(self.searching_since)));
                        if now >= self.next_wait_log {
                            log!(
                                "still waiting for container={} to appear waited={}",
                                self.container(),
                                secs(now - self.searching_since)
                            );
                            self.wait_log_interval =
                                (self.wait_log_interval * 2).min(Duration::from_secs(600));
                            self.next_wait_log = now + self.wait_log_interval;
                        }
                    }
                    Some(Watched { pidfd: None, .. }) => min_to(NO_PIDFD_TICK),
                    Some(_) => {}
                }
                if matches!(
                    &self.watched,
                    Some(Watched {
                        root: RootHold::Pending(_),
                        ..
                    })
                ) {
                    min_to(TICK);
                }
                if !self.armed {
                    min_to(self.arm_retry_at.saturating_duration_since(now));
                }
            }
            let (sig_ready, x_ready, fired) = {
                let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
                let mut pending_pids = Vec::new();
                if let Some(Watched { pidfd: Some(p), .. }) = &self.watched {
                    fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
                } else if self.life.searching() {
                    // Placeholder keeps index 1 for the watched pidfd.
                    fds.push(PollFd::new(sfd.as_fd(), PollFlags::empty()));
                    for (pid, fd, ev) in self.scanner.wait_fds() {
                        pending_pids.push(pid);
                        fds.push(PollFd::new(fd, ev));
                    }
                }
                match ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => {
                        log!("error: poll failed: {e}");
                        std::thread::sleep(TICK);
                    }
                }
                let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                let fired: Vec<i32> = pending_pids
                    .iter()
                    .zip(fds.iter().skip(2))
                    .filter(|(_, f)| ready(f))
                    .map(|(p, _)| *p)
                    .collect();
                (
                    ready(&fds[0]),
                    self.watched.is_some() && fds.get(1).is_some_and(ready),
                    fired,
                )
            };
            if !fired.is_empty() {
                self.scanner.note_events(&fired);
            }
            if x_ready || self.watched_gone_without_pidfd() {
                self.on_container_exit();
            }
            if sig_ready {
                self.on_signals(sfd);
            }
        }
    }

    /// Without a pidfd the watched process is checked by its `/proc` entry.
    fn watched_gone_without_pidfd(&self) -> bool {
        matches!(&self.watched, Some(Watched { pidfd: None, instance, .. })
            if !instance.is_alive(&self.cfg.proc_root))
    }

    /// Gives `event` to the state machine and carries out what it says.
    fn feed(&mut self, event: Event) {
        for action in self.life.handle(event) {
            self.act(action);
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::WriteSeen(inst) => {
                let seen = SeenRecord {
                    pid: inst.pid,
                    start_time_ticks: inst.start_time,
                };
                if let Err(e) = self
                    .store
                    .write(&RecordKind::Seen.file_name(&inst.id()), &seen.to_string())
                {
                    log!("error: {e} (an exit while the sidecar is down may go unnoticed)");
                }
            }
            Action::Watch(inst) => self.watch(inst),
            Action::Retire(inst) => {
                self.scanner.retire(inst);
                if let Some((i, root)) = self.incoming.take() {
                    if i == inst {
                        self.roots.entry(i).or_insert(root);
                    } else {
                        self.incoming = Some((i, root));
                    }
                }
                self.searching_since = Instant::now();
                self.wait_log_interval = Duration::from_secs(10);
                self.next_wait_log = self.searching_since + self.wait_log_interval;
            }
            Action::Ignored { instance, why } => log!(
                "warning: container={} instance={} ignored: {why}; its hook runs at most once",
                self.container(),
                instance.id()
            ),
            Action::CheckMark(run) => {
                let kubelet = self.kubelet_run(run.instance);
                self.feed(Event::Marked {
                    instance: run.instance,
                    kubelet,
                });
            }
            Action::RunHook {
                run,
                unknown_despite_run_on,
                after_cut_prestop,
            } => self.run_hook(run, unknown_despite_run_on, after_cut_prestop),
            Action::Done {
                run,
                outcome,
                status,
                duration,
            } => self.done(run, outcome, status, duration),
            Action::FinalLook { watching } => {
                match watching {
                    Some(_) => {
                        // The kubelet stops the sidecar only after the watched
                        // container exited; take that exit if the poll that
                        // saw the signal raced it.
                        if self.watched_has_exited() {
                            self.on_container_exit();
                        }
                    }
                    None => self.search(Instant::now()),
                }
                self.feed(Event::FinalLookDone);
            }
            Action::StopWatching(inst) => {
                self.watched = None;
                self.incoming = None;
                log!(
                    "{} received while container={} instance={} still runs; not waiting for it",
                    self.signal_name(),
                    self.container(),
                    inst.id()
                );
            }
            Action::CheckStarted => {
                let evidence = self.start_evidence();
                self.feed(Event::StartEvidence(evidence));
            }
            Action::NotStarted => log!(
                "container={} was never started: the runtime never created it ({} is missing), so its image never became ready or the pod was stopped first; no hook is due. searched_for={} {}",
                self.container(),
                self.created_entry().display(),
                secs(self.searching_since.elapsed()),
                self.scanner.stats()
            ),
            Action::ReportMiss => {
                self.missed = true;
                let stats = self.scanner.stats();
                log!(
                    "warning: container={} was never seen running, and whether the runtime created it cannot be told (the line before says why); if it ran, its hook did not run. The watcher went up to {:.3}s without a look. searched_for={} {stats}",
                    self.container(),
                    stats.longest_pause.as_secs_f64(),
                    secs(self.searching_since.elapsed()),
                );
            }
            Action::TerminationMessage { cut } => {
                if self.exit.is_some() {
                    // A late hook that could not start ended the stop within
                    // the same batch: `Exit` has written the final message.
                    return;
                }
                // Only a hook that still runs can be cut by the grace period.
                let cut = cut.filter(|c| self.hook.as_ref().is_some_and(|(_, i, _)| i == c));
                self.update_termination_message(cut.map(|i| i.id()).as_deref());
                self.log_stop();
                if self.stopped_searching && self.life.ever_found() {
                    log!(
                        "search ended container={} searched_for={} {}",
                        self.container(),
                        secs(self.searching_since.elapsed()),
                        self.scanner.stats()
                    );
                }
            }
            Action::Exit => {
                let _ = self.store.remove(contract::ARMED_FILE);
                self.update_termination_message(None);
                match crate::cpu_stat::read() {
                    Ok(t) => log!("cpu throttling container={} {t}", self.container()),
                    Err(e) => log!("cpu throttling container={} unknown: {e}", self.container()),
                }
                log!("exiting container={} status=0", self.container());
                self.exit = Some(0);
            }
        }
    }

    /// What the kubelet's own preStop run for `inst` came to
    /// ([`KubeletRun`]): none without `prestop-<id>`; ran with
    /// `prestop-ended-<id>`; else the wrapper's process decides: once it is
    /// gone without having ended the command, the preStop was cut short
    /// (containerd's shim kills every process of a container that shares
    /// the pod's PID namespace when its init process exits:
    /// `ShouldKillAllOnExit`, `cmd/containerd-shim-runc-v2/runc/util.go`,
    /// v2.x; `docs/facts.md` R5). The watcher waits for that at most
    /// [`WRAPPER_WAIT_MAX`]; a wrapper still running then is a preStop the
    /// runtime did not kill, which stands as the kubelet's run.
    fn kubelet_run(&self, inst: Instance) -> KubeletRun {
        let id = inst.id();
        // Never blocks nor follows (`read_checked`). A `prestop-<id>` that
        // is there but refused (a link, a FIFO, a socket, a device) or
        // unreadable counts as the kubelet's run, as any existing entry
        // does (`StateStore::exists`): only X's processes can plant one,
        // and they could as well write a well-formed record.
        let mark = match self.store.read_checked(&RecordKind::Prestop.file_name(&id)) {
            Ok(Some(mark)) => mark,
            Ok(None) => return KubeletRun::None,
            Err(e @ (StateError::Refused { .. } | StateError::Read { .. })) => {
                log!(
                    "container={} instance={id}: {e}; the entry counts as the kubelet's preStop run",
                    self.container()
                );
                return KubeletRun::Ran;
            }
            Err(_) => return KubeletRun::None,
        };
        let ended = || self.store.exists(&RecordKind::PrestopEnded.file_name(&id));
        if ended() {
            return KubeletRun::Ran;
        }
        let wrapper = PrestopRecord::parse(&mark)
            .and_then(|r| i32::try_from(r.wrapper_pid).ok())
            .and_then(|pid| pidfd_open(pid).ok());
        if let Some(fd) = &wrapper {
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            let _ = ppoll(
                &mut fds,
                Some(TimeSpec::from_duration(WRAPPER_WAIT_MAX)),
                None,
            );
            let gone = fds[0].revents().is_some_and(|r| !r.is_empty());
            if !gone && !ended() {
                log!(
                    "container={} instance={id}: the kubelet's preStop still runs {} after the container's exit; it stands as the kubelet's run",
                    self.container(),
                    secs(WRAPPER_WAIT_MAX)
                );
                return KubeletRun::Ran;
            }
        }
        if ended() {
            KubeletRun::Ran
        } else {
            log!(
                "container={} instance={id}: the container exited while the kubelet's preStop ran, which cut it short (the runtime killed it with the container); running the hook with {}=cut",
                self.container(),
                contract::ENV_HOOK_KUBELET_PRESTOP
            );
            KubeletRun::Cut
        }
    }

    /// `<root>/state/X/created`: the mount point of X's identifying mount in
    /// X's state volume, which the runtime makes when it creates X
    /// ([`contract::created_dir`], `docs/facts.md` K18).
    fn created_entry(&self) -> PathBuf {
        contract::created_dir(&self.cfg.target.root, self.container())
    }

    /// [`Action::CheckStarted`]: whether the runtime created X
    /// ([`StartEvidence`]): `state/X/created` is a directory (not followed
    /// through a link) owned by root, as runc and runsc make it, whatever the
    /// container's user (`docs/facts.md` K18), and what the wrapper's marks say of the kubelet's preStop,
    /// over every `prestop-<id>` of X's state directory ([`KubeletRun::Ran`]
    /// if any ran, else [`KubeletRun::Cut`] if any was cut short). X's own
    /// processes can write marks there: a forged mark only skips X's own
    /// late hook. The owner check: another container running as X's user
    /// can reach X's state volume through `/proc/PID/root` of this sidecar
    /// before X exists (`docs/security.md`); a `created` it made is owned by
    /// that user, not root, and is reported instead of taken for X's start.
    fn start_evidence(&self) -> StartEvidence {
        use std::os::unix::fs::MetadataExt;
        let entry = self.created_entry();
        // X's state volume, mounted in this sidecar: without it a missing
        // `state/X/created` proves nothing.
        let state = entry.parent().unwrap_or(&entry);
        if !std::fs::symlink_metadata(state).is_ok_and(|m| m.is_dir()) {
            log!(
                "warning: container={}: {} is not mounted; cannot tell whether the container was started",
                self.container(),
                state.display()
            );
            return StartEvidence::Unreadable;
        }
        match std::fs::symlink_metadata(&entry) {
            Ok(m) if m.is_dir() && m.uid() == 0 => {}
            Ok(m) if m.is_dir() => {
                log!(
                    "warning: container={}: {} is owned by UID {}, not by root as the runtime makes it; cannot tell whether the container was started",
                    self.container(),
                    entry.display(),
                    m.uid()
                );
                return StartEvidence::Unreadable;
            }
            Ok(_) => {
                log!(
                    "warning: container={}: {} is not a directory; cannot tell whether the container was started",
                    self.container(),
                    entry.display()
                );
                return StartEvidence::Unreadable;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return StartEvidence::NotStarted;
            }
            Err(e) => {
                log!(
                    "warning: container={}: cannot read {}: {e}; cannot tell whether the container was started",
                    self.container(),
                    entry.display()
                );
                return StartEvidence::Unreadable;
            }
        }
        let names = self.store.list().unwrap_or_else(|e| {
            log!(
                "warning: container={}: {e}; the kubelet's preStop marks are not read",
                self.container()
            );
            Vec::new()
        });
        // At most MARKS_EXAMINED marks are asked about (each may wait up to
        // WRAPPER_WAIT_MAX for its wrapper), so marks X's own processes
        // plant cannot hold the stop past its grace period.
        let mut kubelet = KubeletRun::None;
        let marks = names
            .iter()
            .filter_map(|n| match RecordKind::parse_file_name(n) {
                Some((RecordKind::Prestop, id)) => Instance::from_id(id),
                _ => None,
            })
            .filter(|i| *i != Instance::UNSEEN)
            .take(MARKS_EXAMINED);
        for inst in marks {
            match self.kubelet_run(inst) {
                KubeletRun::Ran => {
                    kubelet = KubeletRun::Ran;
                    break;
                }
                KubeletRun::Cut => kubelet = KubeletRun::Cut,
                KubeletRun::None => {}
            }
        }
        log!(
            "container={} ran and exited unseen: the kubelet prepared its start ({} exists) and no run of it was found. searched_for={} {}",
            self.container(),
            entry.display(),
            secs(self.searching_since.elapsed()),
            self.scanner.stats()
        );
        StartEvidence::Started {
            kubelet,
            now_ticks: procfs::now_ticks(),
        }
    }

    fn signal_name(&self) -> String {
        self.stop_signal
            .map_or_else(|| "stop".to_owned(), |s| s.to_string())
    }

    /// Whether the watched instance's pidfd is readable now (it exited), or,
    /// without a pidfd, its `/proc` entry is gone.
    fn watched_has_exited(&self) -> bool {
        match &self.watched {
            Some(Watched { pidfd: Some(p), .. }) => {
                let mut fds = [PollFd::new(p.as_fd(), PollFlags::POLLIN)];
                matches!(ppoll(&mut fds, Some(TimeSpec::from_duration(Duration::ZERO)), None), Ok(n) if n > 0)
            }
            Some(_) => self.watched_gone_without_pidfd(),
            None => false,
        }
    }

    /// Writes the `armed` mark the postStart handler waits for, naming this
    /// process ([`contract::ArmedRecord`]) so that the handler can tell it
    /// from a mark a killed watcher left; on failure (missing or read-only
    /// volume, unreadable `/proc`) logs and schedules a retry with backoff.
    fn arm(&mut self) {
        let proc_root = &self.cfg.proc_root;
        let res = procfs::self_pid(proc_root)
            .map_err(|e| format!("cannot read {}/self: {e}", proc_root.display()))
            .and_then(|pid| {
                procfs::read_stat(proc_root, pid)
                    .map(|st| {
                        contract::ArmedRecord {
                            pid,
                            start_time_ticks: st.start_time,
                        }
                        .to_string()
                    })
                    .map_err(|e| format!("cannot read {}/{pid}/stat: {e}", proc_root.display()))
            })
            .and_then(|record| {
                self.store
                    .check_dir()
                    .and_then(|_| self.store.write(contract::ARMED_FILE, &record))
                    .map_err(|e| e.to_string())
            });
        match res {
            Ok(()) => {
                self.armed = true;
                self.armed_flag.set();
                log!(
                    "armed container={} mark={}",
                    self.container(),
                    self.store.path(contract::ARMED_FILE).display()
                );
            }
            Err(e) => {
                log!(
                    "error: cannot arm (is the state volume mounted and writable?): {e}; retrying in {}",
                    secs(self.arm_backoff)
                );
                self.arm_retry_at = Instant::now() + self.arm_backoff;
                self.arm_backoff = (self.arm_backoff * 2).min(Duration::from_secs(60));
            }
        }
    }

    /// Reconciles the records of a previous run (see the module docs): logs
    /// what [`recovery::plan`] found, and gives it to the state machine.
    fn recover(&mut self) {
        let names = match self.store.list() {
            Ok(n) => n,
            Err(e) => {
                if self.store.dir().exists() {
                    log!("error: cannot read previous state: {e}");
                }
                return;
            }
        };
        let groups = state::group_by_instance(&self.store, &names);
        let proc_root = &self.cfg.proc_root;
        let now_ticks = procfs::now_ticks();
        let actions = recovery::plan(&groups, |i| i.is_alive(proc_root), now_ticks);
        for action in &actions {
            match action {
                RecoveryAction::StillRunning { id } => log!(
                    "recovered container={} instance={id} still running; watching it again",
                    self.container()
                ),
                RecoveryAction::SkippedPrestop { id } => log!(
                    "recovered container={} instance={id} exited while the sidecar was down; the kubelet ran its preStop, nothing to do",
                    self.container()
                ),
                RecoveryAction::Abandon { id, attempt } => log!(
                    "error: container={} instance={id} hook was interrupted twice (attempt {attempt}); not retrying again",
                    self.container()
                ),
                RecoveryAction::Retry { run } => log!(
                    "recovered container={} instance={} hook was interrupted by a sidecar restart (attempt {}); retrying once",
                    self.container(),
                    run.instance.id(),
                    run.attempt - 1
                ),
                RecoveryAction::RunMissed { run } => log!(
                    "recovered container={} instance={} exited while the sidecar was down; running its hook",
                    self.container(),
                    run.instance.id()
                ),
            }
        }
        let still_running: Vec<Instance> = actions
            .iter()
            .filter_map(|a| match a {
                RecoveryAction::StillRunning { id } => Instance::from_id(id),
                _ => None,
            })
            .collect();
        self.feed(Event::Recovered {
            actions,
            had_records: !groups.is_empty(),
            now_ticks,
        });
        // Hold a running instance at once rather than leave it to the
        // search: one that exits between the liveness check above and the
        // search's look would no longer be found (a gone process has no
        // mount table), and its exit would be lost without a word. Attached
        // now, it is watched, or, if it just exited, its hook runs.
        for inst in still_running {
            if self.life.searching() {
                self.attach(inst);
            }
        }
    }

    fn search(&mut self, now: Instant) {
        match self.scanner.step(now) {
            Ok(Some(inst)) => self.attach(inst),
            Ok(None) => {}
            Err(e) => {
                if self
                    .last_scan_error
                    .is_none_or(|t| now.duration_since(t) > Duration::from_secs(60))
                {
                    log!("error: cannot scan {}: {e}", self.cfg.proc_root.display());
                    self.last_scan_error = Some(now);
                }
            }
        }
    }

    /// A found instance: holds a pidfd and its root, and tells the state
    /// machine whether it still runs (a container that lived only
    /// milliseconds may be gone already).
    fn attach(&mut self, inst: Instance) {
        let id = inst.id();
        let waited = secs(self.searching_since.elapsed());
        let stats = self.scanner.stats();
        let pidfd = match pidfd_open(inst.pid) {
            Ok(fd) => Some(fd),
            Err(Errno::ESRCH) => None,
            Err(e) => {
                log!(
                    "warning: pidfd_open failed ({e}); checking the process every {}",
                    secs(NO_PIDFD_TICK)
                );
                None
            }
        };
        // The start time read after pidfd_open proves the pidfd is this
        // instance's (the PID was not reused in between).
        if self.scanner.is_inferred(inst) {
            log!(
                "inferred container={} instance={id} pid={} after {waited}: a container was set up, ran and exited in this pod while the watcher was not scheduled, and {} is the only container started after this sidecar {stats}",
                self.container(),
                inst.pid,
                self.container()
            );
            let exit = self.exit_of(pidfd.as_ref());
            let root = RootHold::Missing("the container had exited when it was found".to_owned());
            self.feed_exit(
                inst,
                root,
                Event::Found {
                    instance: inst,
                    exit: Some((procfs::now_ticks(), exit)),
                },
            );
            return;
        }
        let root = self.hold_root(inst);
        if !inst.is_alive(&self.cfg.proc_root) {
            log!(
                "found container={} instance={id} pid={} after {waited}, already exited {stats}",
                self.container(),
                inst.pid
            );
            let exit = self.exit_of(pidfd.as_ref());
            let root = match root {
                RootHold::Pending(why) => RootHold::Missing(format!(
                    "{why}, and the container had exited when it was found"
                )),
                r => r,
            };
            self.feed_exit(
                inst,
                root,
                Event::Found {
                    instance: inst,
                    exit: Some((procfs::now_ticks(), exit)),
                },
            );
            return;
        }
        log!(
            "watching container={} instance={id} pid={} found_after={waited} {stats}",
            self.container(),
            inst.pid
        );
        self.watched = Some(Watched {
            instance: inst,
            pidfd,
            since: Instant::now(),
            root,
        });
        self.feed(Event::Found {
            instance: inst,
            exit: None,
        });
        if self.life.watching() != Some(inst) {
            // Ignored, or left to the kubelet at a stop: not held.
            self.watched = None;
        }
    }

    /// [`Action::Watch`]: the instance [`Watcher::attach`] holds is now the
    /// watched one.
    fn watch(&mut self, inst: Instance) {
        match &self.watched {
            Some(w) if w.instance == inst => self.scanner.attached(inst),
            _ => log!(
                "error: container={} instance={} to be watched is not held",
                self.container(),
                inst.id()
            ),
        }
    }

    /// One attempt to hold `inst`'s root ([`HeldRoot::hold`]).
    fn hold_root(&self, inst: Instance) -> RootHold {
        let mp = finder::mount_point(&self.cfg.target.root, &self.cfg.target.container);
        match HeldRoot::hold(&self.cfg.proc_root, inst.pid, inst.start_time, &mp) {
            Ok(h) => RootHold::Held(h),
            Err(
                e @ (container_root::HoldError::NotSetUp
                | container_root::HoldError::Open {
                    errno: Errno::EACCES | Errno::EPERM,
                    ..
                }),
            ) => RootHold::Pending(e.to_string()),
            Err(e) => RootHold::Missing(e.to_string()),
        }
    }

    /// Retries holding the watched instance's root while it is pending;
    /// gives up after [`ROOT_HOLD_RETRY`].
    fn try_hold_root(&mut self) {
        let Some(w) = &self.watched else { return };
        if !matches!(w.root, RootHold::Pending(_)) {
            return;
        }
        let (inst, since) = (w.instance, w.since);
        let root = match self.hold_root(inst) {
            RootHold::Pending(why) if since.elapsed() > ROOT_HOLD_RETRY => RootHold::Missing(
                format!("{why} (still {} after it was found)", secs(ROOT_HOLD_RETRY)),
            ),
            r => r,
        };
        if let Some(w) = &mut self.watched {
            w.root = root;
        }
    }

    /// The exit status of an exited process through `pidfd` (waiting for
    /// the reap, at most [`REAP_WAIT_MAX`]).
    fn exit_of(&self, pidfd: Option<&OwnedFd>) -> ExitKnowledge {
        if self.exit_status.is_err() {
            return ExitKnowledge::Unknown(Unknown::Kernel);
        }
        match pidfd {
            Some(fd) => exit_info::read_after_exit(fd.as_fd(), REAP_WAIT_MAX),
            None => ExitKnowledge::Unknown(Unknown::NoPidfd),
        }
    }

    fn on_container_exit(&mut self) {
        let Some(w) = self.watched.take() else { return };
        let exit_ticks = procfs::now_ticks();
        let seen = Instant::now();
        let exit = self.exit_of(w.pidfd.as_ref());
        log!(
            "container exited container={} instance={} ran_for={} exit_status={} status_wait={:.3}ms",
            self.container(),
            w.instance.id(),
            secs(w.since.elapsed()),
            exit.token(),
            seen.elapsed().as_secs_f64() * 1000.0
        );
        let root = match w.root {
            RootHold::Pending(why) => RootHold::Missing(format!("{why}, until the process exited")),
            r => r,
        };
        self.feed_exit(
            w.instance,
            root,
            Event::Exited {
                instance: w.instance,
                exit_ticks,
                exit,
            },
        );
    }

    /// Feeds `event`, the exit of `instance`, whose root the shell holds as `root`:
    /// [`Action::Retire`] keeps it for the instance's hook; it is dropped
    /// (released) if the machine ignores the report.
    fn feed_exit(&mut self, instance: Instance, root: RootHold, event: Event) {
        self.incoming = Some((instance, root));
        self.feed(event);
        self.incoming = None;
    }

    /// Rewrites the termination message from the records of every watched
    /// container; `cut` names this sidecar's own running hook when SIGTERM
    /// came (shown as `hook=cut grace_cut=true` until a later rewrite).
    fn update_termination_message(&mut self, cut: Option<&str>) {
        let termination::Collected { mut runs, left_out } =
            termination::collect(&self.cfg.target.root, &self.cfg.target.container);
        if self.missed {
            runs.push(HookRun {
                line: RunLine {
                    container: self.cfg.target.container.clone(),
                    instance: "-".to_owned(),
                    container_exit: Parsed::Known(ContainerEnd::Unknown),
                    hook: HookToken::Missed,
                    duration_ms: None,
                    grace_cut: false,
                },
                exit_ticks: procfs::now_ticks(),
            });
        }
        if let Some(id) = cut {
            for r in &mut runs {
                if r.line.container == self.cfg.target.container && r.line.instance == id {
                    r.line.hook = HookToken::Cut;
                    r.line.grace_cut = true;
                }
            }
        }
        let msg = contract::termination::render_with_left_out(
            &runs,
            left_out,
            Some(&self.cfg.target.container),
            self.cfg.termination_message_max,
        );
        if let Err(e) = termination::write(&self.cfg.termination_message, &msg)
            && !self.termination_error_logged
        {
            self.termination_error_logged = true;
            log!(
                "warning: cannot write the termination message {}: {e} (logged once)",
                self.cfg.termination_message.display()
            );
        }
    }

    /// [`Action::Done`]: logs a skip, writes `done-<id>`, releases the root
    /// held for the run and rewrites the termination message.
    fn done(
        &mut self,
        run: QueuedHookRun,
        outcome: Outcome,
        status: Option<HookStatus>,
        dur: Option<Duration>,
    ) {
        let id = run.instance.id();
        // Recovery's own skips (attempt 0) and abandons were logged by it.
        match outcome {
            Outcome::Skipped(SkipReason::Prestop) if run.instance == Instance::UNSEEN => log!(
                "not running the late hook container={}: the kubelet ran the preStop itself (a {} mark)",
                self.container(),
                RecordKind::Prestop
            ),
            Outcome::Skipped(SkipReason::Prestop) if run.attempt > 0 => log!(
                "not running hook container={} instance={id}: the kubelet ran the preStop itself (mark {})",
                self.container(),
                RecordKind::Prestop.file_name(&id)
            ),
            Outcome::Skipped(SkipReason::RunOn) => log!(
                "not running hook container={} instance={id}: run-on={} and the container ended with {}",
                self.container(),
                self.cfg.run_on.as_str(),
                run.exit.describe()
            ),
            _ => {}
        }
        self.roots.remove(&run.instance);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let rec = DoneRecord::new(
            outcome,
            run.attempt,
            status,
            dur.map(ms),
            run.exit_ticks,
            run.exit.token(),
        );
        if let Err(e) = self
            .store
            .write(&RecordKind::Done.file_name(&id), &rec.to_string())
        {
            log!("error: {e} (a restarted sidecar may run this hook again)");
        }
        self.update_termination_message(None);
    }

    /// [`Action::RunHook`]: writes `running-<id>` and spawns the hook in the
    /// held root, or reports that it could not start.
    fn run_hook(
        &mut self,
        run: QueuedHookRun,
        unknown_despite_run_on: bool,
        after_cut_prestop: bool,
    ) {
        let id = run.instance.id();
        if unknown_despite_run_on {
            let why = match run.exit {
                ExitKnowledge::Unknown(u) => u.describe(),
                ExitKnowledge::Known(_) => String::new(),
            };
            log!(
                "running hook container={} instance={id} although run-on={}: the exit status is unknown ({why})",
                self.container(),
                self.cfg.run_on.as_str()
            );
        } else if let ExitKnowledge::Unknown(u) = run.exit
            && u != Unknown::Kernel
        {
            log!(
                "hook env: KUBE_PRESTOP_EXIT_CODE/KUBE_PRESTOP_EXIT_SIGNAL unset container={} instance={id}: {}",
                self.container(),
                u.describe()
            );
        }
        let root = self.roots.remove(&run.instance).unwrap_or_else(|| {
            RootHold::Missing(if run.instance == Instance::UNSEEN {
                "the watcher never saw this run of the container".to_owned()
            } else {
                "the container exited while the sidecar was not running".to_owned()
            })
        });
        let root_path = match (&root, self.own_pid) {
            (RootHold::Held(h), Some(pid)) => Some(h.hook_path(&self.cfg.proc_root, pid)),
            (RootHold::Held(_), None) => {
                log!(
                    "hook env: KUBE_PRESTOP_ROOT unset container={} instance={id}: cannot read {}/self",
                    self.container(),
                    self.cfg.proc_root.display()
                );
                None
            }
            (RootHold::Missing(why), _) => {
                log!(
                    "hook env: KUBE_PRESTOP_ROOT unset container={} instance={id}: cannot hold the container's root: {why}",
                    self.container()
                );
                None
            }
            (RootHold::Pending(_), _) => None,
        };
        let chroot = match (&root, self.cfg.hook_root) {
            (RootHold::Held(h), HookRoot::Container) => {
                if container_root::can_chroot(&self.cfg.proc_root) {
                    let cwd = std::env::current_dir()
                        .ok()
                        .and_then(|d| CString::new(d.as_os_str().as_encoded_bytes()).ok())
                        .unwrap_or_else(|| c"/".to_owned());
                    Some(Chroot {
                        root_fd: h.root_fd(),
                        cwd,
                    })
                } else {
                    log!(
                        "hook-root=container not applied container={} instance={id}: the container has no CAP_SYS_CHROOT; the hook runs in the sidecar's root, KUBE_PRESTOP_ROOT points at the container's files",
                        self.container()
                    );
                    None
                }
            }
            (_, HookRoot::Container) => {
                log!(
                    "hook-root=container not applied container={} instance={id}: the container's root is not held; the hook runs in the sidecar's root",
                    self.container()
                );
                None
            }
            _ => None,
        };
        let rec = RunningRecord::new(run.attempt, run.exit_ticks, run.exit.token());
        if let Err(e) = self
            .store
            .write(&RecordKind::Running.file_name(&id), &rec.to_string())
        {
            log!("error: {e} (a restarted sidecar cannot tell this run was interrupted)");
        }
        let chrooted = chroot.is_some();
        let ctx = HookContext {
            container: &self.cfg.target.container,
            instance: &id,
            attempt: run.attempt,
            exit: run.exit,
            root: root_path.as_deref(),
            chroot,
            after_cut_prestop,
        };
        match hook::spawn(&self.cfg.hook, &ctx) {
            Ok(h) => {
                log!(
                    "hook started container={} instance={id} attempt={} pid={} command={:?} container_exit={} root={}",
                    self.container(),
                    run.attempt,
                    h.pid,
                    self.cfg.hook,
                    run.exit.token(),
                    match (&root_path, chrooted) {
                        (Some(_), true) => "chroot".to_owned(),
                        (Some(p), false) => p.display().to_string(),
                        (None, _) => "-".to_owned(),
                    }
                );
                self.hook = Some((h, run.instance, root));
            }
            Err((status, e)) => {
                log!(
                    "hook failed to start container={} instance={id} attempt={} command={:?} error=\"{e}\" status={} exit_status={}",
                    self.container(),
                    run.attempt,
                    self.cfg.hook,
                    status,
                    status.code()
                );
                drop(root);
                self.feed(Event::HookFailedToStart {
                    instance: run.instance,
                    status,
                });
            }
        }
    }

    fn on_signals(&mut self, sfd: &SignalFd) {
        let mut chld = false;
        let mut term = None;
        loop {
            match sfd.read_signal() {
                Ok(Some(si)) => match Signal::try_from(si.ssi_signo as i32) {
                    Ok(Signal::SIGCHLD) => chld = true,
                    Ok(s @ (Signal::SIGTERM | Signal::SIGINT))
                        if sender::from_inside_the_pod(si.ssi_pid, self.initial_pid_namespace) =>
                    {
                        log!(
                            "ignored {s} from PID {} ({}) container={}: a process of the pod sent it, not the kubelet (whose stop comes through the runtime, from outside the pod's PID namespace); still watching",
                            si.ssi_pid,
                            sender::comm(&self.cfg.proc_root, si.ssi_pid),
                            self.container()
                        );
                    }
                    Ok(s @ (Signal::SIGTERM | Signal::SIGINT)) => term = Some(s),
                    _ => {}
                },
                Ok(None) => break,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log!("error: reading signalfd: {e}");
                    break;
                }
            }
        }
        if chld {
            self.reap();
        }
        if let Some(s) = term {
            self.on_term(s);
        }
    }

    /// Reaps every exited child and, when the running hook is among them,
    /// ends its run. Loops: ending a run can start the next queued hook
    /// (`HookEnded` → `RunHook`), which may have exited already by the next
    /// `waitpid`; that `waitpid` must then see it as the hook, or its status
    /// is consumed as an orphan's and its run never ends (every later hook
    /// would wait behind it).
    fn reap(&mut self) {
        while let Some(status) = hook::reap(self.hook.as_ref().map(|(h, _, _)| h.pid)) {
            self.end_hook(status);
        }
    }

    fn end_hook(&mut self, status: HookStatus) {
        let Some((h, inst, root)) = self.hook.take() else {
            return;
        };
        hook::kill_group(h.pid);
        let dur = h.started.elapsed();
        // Release the container's root and mount namespace at once: the
        // kubelet's volume teardown must not find them held.
        let released = matches!(root, RootHold::Held(_));
        drop(root);
        log!(
            "hook finished container={} instance={} attempt={} status=\"{}\" exit_status={} duration={}",
            self.container(),
            h.instance,
            h.attempt,
            status,
            status.code(),
            secs(dur)
        );
        if released {
            log!(
                "released the root of container={} instance={}",
                self.container(),
                h.instance
            );
        }
        // The group's killed members are reaped on their SIGCHLD (this is
        // a child subreaper), by the caller's next `hook::reap`.
        self.feed(Event::HookEnded {
            instance: inst,
            status,
            duration: dur,
        });
    }

    fn on_term(&mut self, sig: Signal) {
        if self.life.terminating() {
            log!("{sig} received again; still waiting for the hook");
            return;
        }
        self.stop_signal = Some(sig);
        self.stopped_searching = self.life.searching();
        self.feed(Event::Terminate);
    }

    /// The stop's log line: what still runs or waits when `SIGTERM` came.
    fn log_stop(&self) {
        let sig = self.signal_name();
        let grace = self
            .cfg
            .grace_seconds
            .map_or_else(|| "unknown".to_owned(), |g| format!("{g}s"));
        if let Some((h, _, _)) = &self.hook {
            log!(
                "{sig} received while hook runs container={} instance={} pid={} running_for={} queued={}; grace period {grace}; the hook keeps running until it ends or the kubelet's SIGKILL",
                self.container(),
                h.instance,
                h.pid,
                secs(h.started.elapsed()),
                self.life.queued()
            );
        } else if self.life.queued() > 0 {
            log!(
                "{sig} received container={} with {} hook(s) still to run; grace period {grace}; running them until the kubelet's SIGKILL",
                self.container(),
                self.life.queued()
            );
        } else {
            log!(
                "{sig} received container={}; no hook running",
                self.container()
            );
        }
    }
}
