//! Finding the watched container's process in the pod's shared PID namespace.
//!
//! The container process of `X` is the *oldest* process that (a) has parent
//! PID 0, i.e. its parent is outside the pod's PID namespace (the runtime
//! starts it with `CLONE_PARENT` from `runc`, and the shim on the host reaps
//! it), and (b) has `X`'s identifying mount in its `/proc/PID/mountinfo`.
//! Processes exec'd into `X` later (probes, `kubectl exec`, the preStop
//! wrapper) also have parent PID 0 and the mount, but are younger.
//!
//! `hostPID: true` pods (no shared PID namespace; the webhook leaves
//! `shareProcessNamespace` off): there every parent is visible, so (a)
//! becomes "its parent does not have `X`'s identifying mount" (the runtime's
//! shim, or `runc`), which in a shared PID namespace is implied by parent
//! PID 0: no process of another container can fork into `X`'s mount
//! namespace. Such processes are re-examined on each listing while they are
//! younger than [`PENDING_GIVE_UP`] (the runtime makes the mounts after
//! creating the process) but are not held pending: with `hostPID` that would
//! mean holding the namespaces of the host's processes.
//!
//! [`find_oldest`] is the one-shot search the wrapper uses. [`Scanner`] is the
//! watcher's incremental search, cheap enough to run every millisecond while
//! `X` is absent: one `pread` of `/proc/loadavg` per tick when no process was
//! created, a listing only when one was.
//!
//! Short-lived containers. runc creates the container process (`runc init`)
//! directly in the pod's PID namespace and in the container's new mount
//! namespace, then makes the container's mounts (among them the identifying
//! one), waits for `runc start`, and only then execs the command. A new
//! parentless process without the mount is therefore held as *pending*: its
//! mountinfo stays open (which keeps its mount namespace, and so its mount
//! table, readable even after the process exits) and is polled for
//! `POLLPRI`, which the kernel raises on every change of that mount table;
//! its pidfd is polled for its exit. When either fires, the held mountinfo
//! is re-read. A container that is seen at all while it lives is thus
//! recognised, even if it made its mounts, ran `true` and exited before the
//! watcher's next look. A pending process that exits without the mount, or
//! has none after 60 s, is dropped (its namespace released).
//!
//! youki (libcontainer 0.7.0) does it in another order: its container process
//! is created in the pod's PID namespace while still in the *runtime's* mount
//! namespace and unshares its own right after (`container_init_process`,
//! `apply_rest_namespaces`), then makes its mounts, `pivot_root`s and waits
//! for start. A table held from before the unshare shows the runtime's
//! mounts, and their changes, never the container's. So while a pending
//! process is young ([`PENDING_FOLLOW_AGE`]), every look also reads the first
//! mount ID of its table opened afresh, and re-opens the hold when it changed.
//!
//! Matching: the identifying mount point is matched exactly, or as a suffix
//! after `/` (before `pivot_root` the runtime's mounts appear under the root
//! file system's host path), and the mount must come from the pod's volume
//! ([`id_mount`], [`IdSource`]).
//!
//! gVisor (runsc) differs in three ways (gvisor.dev/gvisor
//! v0.0.0-20260905035102-160fafc42237): its sentry sets a container's mounts
//! up before the container's first task exists, so a process is seen with
//! its identifying mount or never gets one; its mountinfo names no volume
//! (every bind mount from the host has root `/` and a device of its own), so
//! the source is checked by user namespace and directory instead
//! ([`IdSource::Gvisor`]); and a held mountinfo reads back empty once its
//! process exited, which there says nothing of a `pivot_root` (no inference
//! from it, [`Scanner::infer_unseen`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::poll::PollFlags;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procfs::{self, IdMount, IdSource, LastPid, ProcError};
use kube_prestop_contract as contract;

/// One run of a container's process: its PID in the pod's PID namespace and
/// its start time (clock ticks since boot). See [`contract::instance_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Instance {
    /// PID in the reader's (the pod's) PID namespace.
    pub pid: i32,
    /// Field 22 of `/proc/PID/stat`.
    pub start_time: u64,
}

impl Instance {
    /// The instance of a late run: one the watcher never saw, so whose PID
    /// and start time it does not know ([`contract::UNSEEN_INSTANCE_ID`],
    /// `0-0`; PID 0 is never a process of the pod).
    pub const UNSEEN: Self = Self {
        pid: 0,
        start_time: 0,
    };

    /// The instance id used in state file names: `<pid>-<start_time>`.
    pub fn id(&self) -> String {
        contract::instance_id(self.pid, self.start_time)
    }

    /// Parses an id built by [`Instance::id`].
    pub fn from_id(id: &str) -> Option<Self> {
        contract::parse_instance_id(id).map(|(pid, start_time)| Self { pid, start_time })
    }

    /// Whether this very process still runs (same PID *and* start time, so a
    /// reused PID does not count; a zombie counts as exited).
    pub fn is_alive(&self, proc_root: &Path) -> bool {
        matches!(procfs::read_stat(proc_root, self.pid),
            Ok(s) if s.start_time == self.start_time && s.state != b'Z')
    }
}

/// The identifying mount point of `container` under the mount path of ours
/// `root`: `<root>/state/<container>/created` (`/.kube-prestop/state/<container>/created`
/// in a pod, [`contract::id_mount_path`]).
pub fn mount_point(root: &Path, container: &str) -> String {
    contract::created_dir(root, container)
        .to_string_lossy()
        .into_owned()
}

/// The identifying mount of `container`: mount point [`mount_point`], and
/// the source it must come from ([`IdSource`]), read from this process's
/// own mounts, which the kubelet made (`root` is the mount path of ours,
/// [`contract::MOUNT_PATH`] in a pod):
///
/// - in a sidecar, which mounts the whole id volume at `<root>/id`
///   ([`procfs::id_volume_source`]; always in a pod on a Linux runtime):
///   the same file system and root. Both are whole mounts of the volume's
///   directory on the node, so they name the same file system and root path;
/// - under gVisor, whose mountinfo names no volume
///   ([`procfs::volume_is_gvisor_bind`]): a host bind mount at the mount
///   point whose directory is the one this process sees at `<root>/id` (the
///   sidecars mount the id volume there), or, in the watched container
///   itself (the preStop wrapper, which has no `id/`), its own identifying
///   mount;
/// - in the watched container itself on Linux: the source of its own
///   identifying mount;
/// - otherwise (plain directories in tests) the mount point alone.
pub fn id_mount(proc_root: &Path, root: &Path, container: &str) -> IdMount {
    let own = std::fs::read_to_string(proc_root.join("self").join("mountinfo")).ok();
    let root_str = root.to_string_lossy();
    let point = mount_point(root, container);
    let source = match own.as_deref() {
        Some(m) => {
            let own_point = procfs::mountinfo_source_of(m, &point);
            if let Some(s) = procfs::id_volume_source(m, &root_str) {
                IdSource::Volume(s)
            } else if procfs::volume_is_gvisor_bind(m, &root_str, container) {
                IdSource::Gvisor {
                    reference: if own_point.is_some() {
                        PathBuf::from(&point)
                    } else {
                        root.join(contract::IDS_DIR)
                    },
                }
            } else if let Some(s) = own_point.filter(|s| s.root != "/") {
                IdSource::Volume(s)
            } else {
                IdSource::Any
            }
        }
        None => IdSource::Any,
    };
    IdMount { point, source }
}

/// One-shot search: the oldest process whose mountinfo has `mount_point` and
/// whose parent is not in that container (parent PID 0, or, in `hostPID`
/// pods, a parent without the mount). `Ok(None)` when there is none.
/// Processes that vanish during the scan are skipped.
pub fn find_oldest(proc_root: &Path, mount_point: &IdMount) -> io::Result<Option<Instance>> {
    let mut best: Option<Instance> = None;
    for pid in procfs::list_pids(proc_root)? {
        let Ok(stat) = procfs::read_stat(proc_root, pid) else {
            continue;
        };
        if stat.state == b'Z' {
            continue;
        }
        let cand = Instance {
            pid,
            start_time: stat.start_time,
        };
        if best.is_some_and(|b| (b.start_time, b.pid) <= (cand.start_time, cand.pid)) {
            continue;
        }
        if let Ok(true) = procfs::has_mount_point(proc_root, pid, mount_point)
            && parent_outside(proc_root, stat.ppid, mount_point) == Some(true)
        {
            best = Some(cand);
        }
    }
    Ok(best)
}

/// Whether a process with parent `ppid` was started from outside the
/// container whose identifying mount is `mount_point`: `ppid` 0 (the parent is
/// outside the PID namespace), or a parent without the mount (`hostPID`
/// pods, where the runtime's shim is visible). `None` when the parent
/// vanished meanwhile (the process was re-parented: look again).
fn parent_outside(proc_root: &Path, ppid: i32, mount_point: &IdMount) -> Option<bool> {
    if ppid == 0 {
        return Some(true);
    }
    match procfs::has_mount_point(proc_root, ppid, mount_point) {
        Ok(has) => Some(!has),
        Err(ProcError::Gone) => None,
        Err(_) => Some(false),
    }
}

/// A parentless process without the identifying mount is watched for
/// mount-table changes until it is this old (by its start time); then it is
/// taken to be another container's. The runtime makes a container's mounts
/// within milliseconds of creating its process.
const PENDING_GIVE_UP: Duration = Duration::from_secs(60);
/// A pending process's mountinfo is also opened afresh at this interval, in
/// case it moved to another mount namespace after we first opened it.
const PENDING_FRESH_INTERVAL: Duration = Duration::from_millis(100);
/// While a pending process is younger than this (by its start time), every
/// look also checks which mount namespace it is in now (the first mount ID
/// of its table opened afresh, [`procfs::current_first_mount_id`]) and
/// follows it when it moved. youki (libcontainer 0.7.0,
/// `container_init_process`) creates the container process in the pod's PID
/// namespace while it is still in the runtime's mount namespace and unshares
/// its own right after: a table held from before shows the runtime's mounts,
/// whose changes never show the container's, and a short container (`true`)
/// is set up, run and gone well within [`PENDING_FRESH_INTERVAL`]. runc
/// creates it in its own mount namespace, so there the check only finds the
/// `pivot_root`.
const PENDING_FOLLOW_AGE: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum Class {
    /// Has a parent inside the namespace, or never got the mount.
    NotOurs,
    /// Parentless, no identifying mount yet, young. Holds its mountinfo open
    /// (polled for `POLLPRI`: the kernel signals every mount-table change of
    /// that namespace) and a pidfd (polled for its exit). Because the open
    /// mountinfo keeps the namespace alive, it can still be read after the
    /// process died: a container that got its mount and exited between two
    /// looks is still recognised.
    Pending {
        hold: File,
        pidfd: Option<OwnedFd>,
        dirty: bool,
        next_fresh: Instant,
        /// The first mount ID of `hold`'s table when it was opened: which
        /// mount namespace (and root) it shows ([`procfs::first_mount_id`]).
        first_mount: Option<u64>,
    },
    /// Parentless with the identifying mount (its ID), holding the
    /// process's mountinfo open (and so its mount namespace alive).
    Match { mount_id: u64, hold: File },
    /// Shares the identifying mount (same mount ID) with an instance that
    /// already exited: a process exec'd into that container which outlived
    /// it, never a new instance.
    Leftover,
    /// A pending process that exited after its root had been replaced
    /// (`pivot_root`) without the scanner ever having read its mount table
    /// in between, taken to be an instance of the watched container because
    /// it is the only container started after the sidecar
    /// ([`Scanner::infer_unseen`]). Already exited.
    Inferred,
}

/// An exited instance's identifying mount, kept allocated (the namespace
/// is held through an open mountinfo) so that its ID cannot be reused by the
/// next instance while processes of the old instance remain.
#[derive(Debug)]
struct Retired {
    mount_id: u64,
    _hold: File,
    listed_since: bool,
}

/// What a search has done so far, for the watcher's log lines: when the
/// container is found, and when the sidecar is stopped without having found
/// it (troubleshooting a missed container without `KUBE_PRESTOP_DEBUG`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Listings of `/proc` (one per tick on which a process was created).
    pub listings: u64,
    /// Parentless processes held pending (candidates being set up).
    pub candidates: u64,
    /// Candidates that exited without ever showing the identifying mount.
    pub candidates_lost: u64,
    /// Of those, the ones whose held mount table read back empty: their root
    /// had been replaced (`pivot_root`) before the last look, i.e. a
    /// container the runtime set up, ran and ended between two looks.
    pub candidates_lost_pivoted: u64,
    /// Candidates that left the mount namespace they were first seen in
    /// (created in the runtime's namespace and unshared after, as youki
    /// does), followed into their own: by the check on every look while
    /// young ([`PENDING_FOLLOW_AGE`]), or, for a watcher that was not
    /// scheduled in time, by the periodic fresh open or a look on an event.
    pub candidates_moved: u64,
    /// Parentless processes first seen already exited (zombies), whose
    /// container cannot be told any more.
    pub zombies_unseen: u64,
    /// Longest time between two consecutive [`Scanner::step`]s: how long the
    /// watcher went without a look (CPU starvation shows here).
    pub longest_pause: Duration,
}

impl std::fmt::Display for SearchStats {
    /// `listings=N candidates=N candidates_lost=N candidates_lost_pivoted=N candidates_moved=N zombies_unseen=N longest_pause=N.NNNs`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "listings={} candidates={} candidates_lost={} candidates_lost_pivoted={} candidates_moved={} zombies_unseen={} longest_pause={:.3}s",
            self.listings,
            self.candidates,
            self.candidates_lost,
            self.candidates_lost_pivoted,
            self.candidates_moved,
            self.zombies_unseen,
            self.longest_pause.as_secs_f64()
        )
    }
}

/// Incremental search for the container process (see the module docs).
///
/// Telling a new instance from a leftover of the previous one: a process
/// exec'd into the old container (a `kubectl exec` shell the runtime has not
/// killed yet) is in the old instance's mount namespace, so it shows the old
/// identifying mount's *mount ID*; a new instance has a fresh mount
/// namespace and a fresh mount. Mount IDs are reused only after a mount is
/// gone, which [`Scanner::retire`] prevents by holding the old namespace
/// until no leftover remains. (Comparing start times with the exit time is
/// not enough: the next instance may start before the exit is observed.)
#[derive(Debug)]
pub struct Scanner {
    proc_root: PathBuf,
    mount_point: IdMount,
    hz: u64,
    last_pid: Option<LastPid>,
    seen_last_pid: Option<u64>,
    known: HashMap<i32, (u64, Class)>,
    retired: Vec<Retired>,
    own_pid: i32,
    debug: bool,
    stats: SearchStats,
    last_step: Option<Instant>,
    infer_unseen: bool,
}

/// Re-reads a held mountinfo: the identifying mount's ID if present, and
/// whether the table read back empty (nothing reachable from the root the
/// process had when the file was opened).
fn reread(
    hold: &mut File,
    mount_point: &IdMount,
    proc_root: &Path,
    pid: i32,
) -> (Option<u64>, bool) {
    let mut content = String::new();
    if hold.seek(SeekFrom::Start(0)).is_err() || hold.read_to_string(&mut content).is_err() {
        return (None, false);
    }
    (
        mount_point.find_in(&content, proc_root, pid),
        content.trim().is_empty(),
    )
}

impl Scanner {
    /// A scanner of `proc_root` for processes with `mount_point`.
    pub fn new(proc_root: &Path, mount_point: IdMount) -> Self {
        Self {
            proc_root: proc_root.to_owned(),
            mount_point,
            hz: procfs::clock_ticks_per_second(),
            last_pid: LastPid::open(proc_root).ok(),
            seen_last_pid: None,
            known: HashMap::new(),
            retired: Vec::new(),
            own_pid: std::process::id() as i32,
            debug: std::env::var_os(contract::ENV_DEBUG).is_some(),
            stats: SearchStats::default(),
            last_step: None,
            infer_unseen: false,
        }
    }

    /// Whether a candidate that exits after a `pivot_root` the scanner did
    /// not see through is taken to be an instance of the watched container
    /// ([`SearchStats::candidates_lost_pivoted`]); off by default.
    ///
    /// Why it is needed: a pending process's mount table is held through the
    /// mountinfo file opened when the process was first seen, and the kernel
    /// shows a mount table relative to the root the process had *at that
    /// open*. runc makes the container's mounts, `pivot_root`s into the
    /// container's root and detaches the old one, so once the process has
    /// pivoted the held file shows nothing, and after its exit it can no
    /// longer be opened afresh. If the watcher is not scheduled from just
    /// before the identifying mount is made until the container's process
    /// exits (tens of milliseconds for `true`; CPU starvation of a sidecar
    /// with a small CPU request does that), the instance is lost. Set this
    /// only when the watched container is the only container the kubelet
    /// starts in the pod after the sidecar, and the pod's PID namespace is
    /// its own (not `hostPID`): then every container the runtime sets up
    /// there after the sidecar is armed is an instance of it. (A restart of
    /// an earlier native sidecar that also fails within milliseconds while
    /// the watcher is starved would be taken for one.)
    pub fn infer_unseen(mut self, on: bool) -> Self {
        self.infer_unseen = on;
        self
    }

    /// Whether `inst` was inferred rather than seen with the identifying
    /// mount (see [`Scanner::infer_unseen`]).
    pub fn is_inferred(&self, inst: Instance) -> bool {
        matches!(self.known.get(&inst.pid), Some((start, Class::Inferred)) if *start == inst.start_time)
    }

    /// Forgets all cached classifications (after a long pause PIDs may have
    /// been reused); exited instances stay retired. Starts new
    /// [`SearchStats`].
    pub fn reset(&mut self) {
        self.known.clear();
        self.seen_last_pid = None;
        self.stats = SearchStats::default();
        self.last_step = None;
    }

    /// Statistics of the search since it started (or since the last
    /// [`Scanner::reset`], [`Scanner::retire`] or [`Scanner::attached`]).
    pub fn stats(&self) -> SearchStats {
        self.stats
    }

    /// `inst` exited: from now on processes sharing its identifying mount are
    /// leftovers, not instances. Also [`Scanner::reset`]s.
    pub fn retire(&mut self, inst: Instance) {
        if let Some((start, Class::Match { mount_id, hold })) = self.known.remove(&inst.pid)
            && start == inst.start_time
        {
            self.retired.push(Retired {
                mount_id,
                _hold: hold,
                listed_since: false,
            });
        }
        self.reset();
    }

    /// The watcher now holds `inst`: drop every other process's entry, so
    /// no other container's mount namespace is kept alive (by a held
    /// mountinfo) while the watcher sleeps; a namespace kept alive keeps its
    /// mounts, and so the volumes behind them, busy. `inst`'s own entry stays
    /// for [`Scanner::retire`]. Retired instances are released too: their
    /// leftovers have had the new instance's whole set-up to be killed by
    /// the runtime.
    pub fn attached(&mut self, inst: Instance) {
        self.known
            .retain(|pid, (start, _)| *pid == inst.pid && *start == inst.start_time);
        self.retired.clear();
        self.seen_last_pid = None;
        self.stats = SearchStats::default();
        self.last_step = None;
    }

    /// Forgets one process.
    pub fn forget(&mut self, pid: i32) {
        self.known.remove(&pid);
    }

    /// File descriptors to add to the caller's `poll` while searching, with
    /// the PID each belongs to: pending processes' mountinfo (`POLLPRI`) and
    /// pidfds (`POLLIN`). Pass the PIDs whose descriptors fired to
    /// [`Scanner::note_events`]: polling consumes the mountinfo event.
    pub fn wait_fds(&self) -> Vec<(i32, BorrowedFd<'_>, PollFlags)> {
        let mut v = Vec::new();
        for (pid, (_, c)) in &self.known {
            if let Class::Pending { hold, pidfd, .. } = c {
                v.push((*pid, hold.as_fd(), PollFlags::POLLPRI));
                if let Some(p) = pidfd {
                    v.push((*pid, p.as_fd(), PollFlags::POLLIN));
                }
            }
        }
        v
    }

    /// Marks pending processes whose descriptors fired in the caller's poll.
    pub fn note_events(&mut self, pids: &[i32]) {
        for pid in pids {
            if let Some((_, Class::Pending { dirty, .. })) = self.known.get_mut(pid) {
                *dirty = true;
            }
        }
    }

    fn age(&self, start: u64) -> Duration {
        let now = procfs::now_ticks();
        Duration::from_millis(now.saturating_sub(start) * 1000 / self.hz.max(1))
    }

    fn matched(&self, mount_id: u64, hold: File) -> Class {
        if self.retired.iter().any(|r| r.mount_id == mount_id) {
            Class::Leftover
        } else {
            Class::Match { mount_id, hold }
        }
    }

    fn classify(&self, pid: i32, start: u64, ppid: i32, now: Instant) -> Option<Class> {
        if pid == self.own_pid {
            return Some(Class::NotOurs);
        }
        if ppid != 0 {
            return self.classify_with_parent(pid, start, ppid);
        }
        match procfs::open_mountinfo(&self.proc_root, pid, &self.mount_point) {
            Ok((Some(mount_id), hold)) => Some(self.matched(mount_id, hold)),
            Ok((None, hold)) => {
                if self.age(start) >= PENDING_GIVE_UP {
                    return Some(Class::NotOurs);
                }
                let pidfd = procfs::pidfd_open(pid).ok();
                // The start time read after pidfd_open proves the pidfd is this process's.
                match procfs::read_stat(&self.proc_root, pid) {
                    Ok(s) if s.start_time == start => Some(Class::Pending {
                        first_mount: procfs::first_mount_id(&hold).ok().flatten(),
                        hold,
                        pidfd,
                        dirty: false,
                        next_fresh: now + PENDING_FRESH_INTERVAL,
                    }),
                    _ => None,
                }
            }
            Err(ProcError::Malformed(_)) | Err(ProcError::Io { .. }) => Some(Class::NotOurs),
            Err(ProcError::Gone) => None,
        }
    }

    /// A process whose parent is visible: X's container process only in a
    /// `hostPID` pod, where its parent (the runtime) lacks X's mount. Young
    /// processes without the mount yet are left unclassified (`None`), so the
    /// next listing looks again.
    fn classify_with_parent(&self, pid: i32, start: u64, ppid: i32) -> Option<Class> {
        match procfs::open_mountinfo(&self.proc_root, pid, &self.mount_point) {
            Ok((Some(mount_id), hold)) => {
                match parent_outside(&self.proc_root, ppid, &self.mount_point) {
                    Some(true) => Some(self.matched(mount_id, hold)),
                    Some(false) => Some(Class::NotOurs),
                    None => None,
                }
            }
            Ok((None, _)) if self.age(start) < PENDING_GIVE_UP => None,
            Ok((None, _)) | Err(ProcError::Malformed(_)) | Err(ProcError::Io { .. }) => {
                Some(Class::NotOurs)
            }
            Err(ProcError::Gone) => None,
        }
    }

    /// Re-examines a pending process; `None` removes it.
    ///
    /// Looked at when the caller's poll saw its mount table change or its
    /// pidfd become readable (`dirty`), and every [`PENDING_FRESH_INTERVAL`]
    /// regardless. A process found gone or a zombie on *either* path gets a
    /// last read of its held table (the namespace outlives the process
    /// through the held file), so an exit that the caller's poll has not
    /// reported yet (the watcher was preempted between its poll and this
    /// look) is judged like one it has: match, inference, or loss.
    fn recheck(&mut self, pid: i32, start: u64, class: Class, now: Instant) -> Option<Class> {
        let Class::Pending {
            mut hold,
            pidfd,
            dirty,
            next_fresh,
            first_mount,
        } = class
        else {
            return Some(class);
        };
        if !dirty && now < next_fresh && !self.moved(pid, start, first_mount) {
            return Some(Class::Pending {
                hold,
                pidfd,
                dirty: false,
                next_fresh,
                first_mount,
            });
        }
        let (found, _) = reread(&mut hold, &self.mount_point, &self.proc_root, pid);
        if let Some(mount_id) = found {
            return Some(self.matched(mount_id, hold));
        }
        // Not in the held view. While the process lives, open its table
        // afresh: the held file shows mounts relative to the root the process
        // had when it was opened, and after `pivot_root` that old root is
        // gone and nothing is reachable from it, so the hold must follow the
        // process to its new root.
        let alive = |proc_root: &Path| {
            procfs::read_stat(proc_root, pid)
                .ok()
                .filter(|s| s.start_time == start && s.state != b'Z')
        };
        if let Some(s) = alive(&self.proc_root) {
            match self.classify(pid, start, s.ppid, now) {
                // Unreadable because it is exiting: judge it below.
                Some(Class::NotOurs) if alive(&self.proc_root).is_none() => {}
                Some(fresh) => {
                    self.count_move(pid, first_mount, &hold, &fresh);
                    return Some(fresh);
                }
                None => {}
            }
        }
        // Exited (it may have done so since the read above): the held view
        // is final now.
        let (found, empty) = reread(&mut hold, &self.mount_point, &self.proc_root, pid);
        if self.debug {
            crate::log!("debug: post-mortem pid={pid} found={found:?} empty={empty}");
        }
        if let Some(mount_id) = found {
            return Some(self.matched(mount_id, hold));
        }
        self.stats.candidates_lost += 1;
        // Under gVisor an empty table after the exit tells nothing of a
        // `pivot_root`: the sentry shows every exited task's table empty
        // (`mountInfoData.Generate`, `pkg/sentry/fsimpl/proc/task_files.go`,
        // "The task has been destroyed"), and it sets a container's mounts
        // up before the container's first task exists (`createContainerProcess`
        // → `setupContainerVFS`, then `CreateProcess`, `runsc/boot/loader.go`;
        // gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237), so a
        // candidate that never showed the mount while it ran was another
        // container, never one to infer.
        let pivoted = empty && !self.mount_point.is_gvisor();
        self.stats.candidates_lost_pivoted += u64::from(pivoted);
        if pivoted && self.infer_unseen {
            return Some(Class::Inferred);
        }
        None
    }

    /// A process first seen already exited (a zombie its parent has not
    /// reaped yet). Its mount table can no longer be read (the kernel drops
    /// a task's namespaces in `do_exit`, before the zombie state: Linux
    /// `kernel/exit.c`, `exit_task_namespaces`, v6.18), so whether it was
    /// the watched container cannot be told. A parentless one is counted in
    /// [`SearchStats::zombies_unseen`], which the watcher's "never seen" and
    /// "search ended" lines show, and logged once: never dropped silently.
    fn first_seen_exited(&mut self, pid: i32, stat: &procfs::Stat) {
        if stat.ppid != 0 || pid == self.own_pid {
            return;
        }
        self.stats.zombies_unseen += 1;
        crate::log!(
            "warning: pid={pid} (started at tick {}) was first seen already exited, so it cannot be identified; if it was the watched container, its hook cannot run (the watcher was not scheduled during its whole life)",
            stat.start_time
        );
        self.known.insert(pid, (stat.start_time, Class::NotOurs));
    }

    /// Whether a young pending process's mount table, opened afresh, is no
    /// longer the one it showed when first held (first mount ID
    /// `first_mount`): it moved to another mount namespace, or
    /// `pivot_root`ed, or exited. `false` from [`PENDING_FOLLOW_AGE`] on (the
    /// periodic fresh open still runs). Counts nothing: the look it triggers
    /// does ([`Scanner::count_move`]).
    fn moved(&self, pid: i32, start: u64, first_mount: Option<u64>) -> bool {
        if self.age(start) >= PENDING_FOLLOW_AGE {
            return false;
        }
        match procfs::current_first_mount_id(&self.proc_root, pid) {
            Ok(now) if now == first_mount => false,
            Ok(now) => {
                if self.debug {
                    crate::log!(
                        "debug: pid={pid} mount table changed first_mount={first_mount:?} now={now:?}"
                    );
                }
                true
            }
            Err(ProcError::Gone) => true,
            Err(_) => false,
        }
    }

    /// A pending process `pid`, held through `hold` (first mount ID
    /// `first_mount` when opened), was just classified afresh as `fresh`:
    /// when the fresh table is another namespace's while the held one still
    /// shows the namespace it was first seen in (the runtime's, left by
    /// youki's unshare; after a `pivot_root` the held table reads empty
    /// instead), it left that namespace and is followed into its own:
    /// counted in [`SearchStats::candidates_moved`], whichever look found it
    /// (the young candidate's check on every tick, [`Scanner::moved`]; the
    /// periodic fresh open; a look on a mount-table event). Counted once:
    /// `fresh`, when pending, holds the new namespace from now on.
    fn count_move(&mut self, pid: i32, first_mount: Option<u64>, hold: &File, fresh: &Class) {
        let now = match fresh {
            Class::Pending { first_mount, .. } => *first_mount,
            Class::Match {
                hold: held_afresh, ..
            } => procfs::first_mount_id(held_afresh).ok().flatten(),
            Class::NotOurs | Class::Leftover | Class::Inferred => return,
        };
        if now == first_mount {
            return;
        }
        let left = procfs::first_mount_id(hold).ok().flatten() == first_mount;
        self.stats.candidates_moved += u64::from(left);
        if self.debug {
            crate::log!(
                "debug: pid={pid} followed first_mount={first_mount:?} now={now:?} left_namespace={left}"
            );
        }
    }

    /// One tick: notice new processes, re-check pending ones, and return the
    /// oldest match. A match may already have exited (a container that lived
    /// only milliseconds): attach with a pidfd and check the start time again.
    pub fn step(&mut self, now: Instant) -> io::Result<Option<Instance>> {
        if let Some(prev) = self.last_step.replace(now) {
            self.stats.longest_pause = self.stats.longest_pause.max(now.duration_since(prev));
        }
        let last = self.last_pid.as_mut().and_then(|l| l.read().ok());
        if last.is_none() || last != self.seen_last_pid {
            self.seen_last_pid = last;
            self.stats.listings += 1;
            let pids = procfs::list_pids(&self.proc_root)?;
            if self.debug {
                crate::log!("debug: listing last_pid={last:?} pids={pids:?}");
            }
            let live: std::collections::HashSet<i32> = pids.iter().copied().collect();
            // Pending processes that vanished are re-checked (post mortem) below.
            self.known
                .retain(|pid, (_, c)| live.contains(pid) || matches!(c, Class::Pending { .. }));
            for pid in pids {
                if self.known.contains_key(&pid) {
                    continue;
                }
                let Ok(stat) = procfs::read_stat(&self.proc_root, pid) else {
                    continue;
                };
                if stat.state == b'Z' {
                    self.first_seen_exited(pid, &stat);
                    continue;
                }
                if let Some(class) = self.classify(pid, stat.start_time, stat.ppid, now) {
                    if matches!(class, Class::Pending { .. }) {
                        self.stats.candidates += 1;
                    }
                    if self.debug {
                        crate::log!(
                            "debug: new pid={pid} ppid={} start={} class={class:?}",
                            stat.ppid,
                            stat.start_time
                        );
                    }
                    self.known.insert(pid, (stat.start_time, class));
                }
            }
            for r in &mut self.retired {
                r.listed_since = true;
            }
        }
        // Re-check pending processes, and whether leftovers still live.
        let due: Vec<i32> = self
            .known
            .iter()
            .filter(|(_, (_, c))| matches!(c, Class::Pending { .. } | Class::Leftover))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            let Some((start, class)) = self.known.remove(&pid) else {
                continue;
            };
            let next = if matches!(class, Class::Leftover) {
                match procfs::read_stat(&self.proc_root, pid) {
                    Ok(s) if s.start_time == start && s.state != b'Z' => Some(class),
                    _ => None,
                }
            } else {
                self.recheck(pid, start, class, now)
            };
            if self.debug {
                match &next {
                    Some(Class::Pending { .. }) => {}
                    other => crate::log!("debug: recheck pid={pid} class={other:?}"),
                }
            }
            if let Some(c) = next {
                self.known.insert(pid, (start, c));
            }
        }
        // Release retired mounts once a full listing found no leftover.
        if self.retired.iter().any(|r| r.listed_since)
            && !self
                .known
                .values()
                .any(|(_, c)| matches!(c, Class::Leftover))
        {
            self.retired.retain(|r| !r.listed_since);
        }
        Ok(self
            .known
            .iter()
            .filter(|(_, (_, c))| matches!(c, Class::Match { .. } | Class::Inferred))
            .map(|(pid, (start, _))| Instance {
                pid: *pid,
                start_time: *start,
            })
            .min_by_key(|i| (i.start_time, i.pid)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_round_trip() {
        let i = Instance {
            pid: 12,
            start_time: 345,
        };
        assert_eq!(i.id(), "12-345");
        assert_eq!(Instance::from_id("12-345"), Some(i));
    }

    #[test]
    fn own_process_is_alive_and_others_not() {
        let proc_root = Path::new(procfs::PROC_ROOT);
        let me = std::process::id() as i32;
        let s = procfs::read_stat(proc_root, me).unwrap();
        let i = Instance {
            pid: me,
            start_time: s.start_time,
        };
        assert!(i.is_alive(proc_root));
        let other = Instance {
            pid: me,
            start_time: s.start_time + 1,
        };
        assert!(!other.is_alive(proc_root));
    }

    #[test]
    fn nothing_found_for_an_absent_mount() {
        let proc_root = Path::new(procfs::PROC_ROOT);
        let mp = IdMount {
            point: "/nonexistent/kube-prestop-test-mount".to_owned(),
            source: IdSource::Any,
        };
        assert_eq!(find_oldest(proc_root, &mp).unwrap(), None);
        let mut s = Scanner::new(proc_root, mp);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
    }

    /// A fake procfs: `loadavg` as given, and one process per call to
    /// [`FakeProc::add`] with the identifying mount.
    struct FakeProc(PathBuf);

    const POINT: &str = "/.kube-prestop/state/main/created";

    impl FakeProc {
        fn new(name: &str, loadavg: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("kps-fakeproc-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("loadavg"), loadavg).unwrap();
            Self(dir)
        }

        /// A parentless process with the identifying mount.
        fn add(&self, pid: i32, start: u64) {
            self.add_in_state(pid, start, 'S');
        }

        fn add_in_state(&self, pid: i32, start: u64, state: char) {
            let d = self.0.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            let stat = format!(
                "{pid} (main) {state} 0 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"
            );
            std::fs::write(d.join("stat"), stat).unwrap();
            let mountinfo = format!("700 600 0:50 /main {POINT} ro - tmpfs tmpfs rw\n");
            std::fs::write(d.join("mountinfo"), mountinfo).unwrap();
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn point() -> IdMount {
        IdMount {
            point: POINT.to_owned(),
            source: IdSource::Any,
        }
    }

    #[test]
    fn without_a_last_pid_field_every_tick_lists_and_a_later_container_is_found() {
        // gVisor's /proc/loadavg never changes: before, the first listing
        // was the last, and a container that started later was never found.
        let p = FakeProc::new("gvisor", "0.00 0.00 0.00 0/0 0\n");
        let mut s = Scanner::new(&p.0, point());
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        p.add(42, procfs::now_ticks());
        let found = s.step(Instant::now()).unwrap();
        assert_eq!(found.map(|i| i.pid), Some(42));
        assert_eq!(s.stats().listings, 3);
    }

    #[test]
    fn with_a_last_pid_field_an_unchanged_field_skips_the_listing() {
        let p = FakeProc::new("linux", "0.00 0.01 0.05 1/123 4567\n");
        let mut s = Scanner::new(&p.0, point());
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.stats().listings, 1);
        // A new process moves the field on a real kernel.
        p.add(43, procfs::now_ticks());
        std::fs::write(p.0.join("loadavg"), "0.00 0.01 0.05 1/124 4568\n").unwrap();
        assert_eq!(s.step(Instant::now()).unwrap().map(|i| i.pid), Some(43));
        assert_eq!(s.stats().listings, 2);
    }

    #[test]
    fn a_parentless_zombie_seen_first_is_counted_not_dropped() {
        let p = FakeProc::new("zombie", "0.00 0.00 0.00 0/0 0\n");
        let mut s = Scanner::new(&p.0, point());
        p.add_in_state(44, procfs::now_ticks(), 'Z');
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.stats().zombies_unseen, 1, "counted once");
        assert!(s.stats().to_string().contains(" zombies_unseen=1 "));
    }
    /// gVisor's mountinfo, as its sentry renders it (`GenerateProcMountInfo`,
    /// `pkg/sentry/vfs/mount.go`, gvisor.dev/gvisor
    /// v0.0.0-20260905035102-160fafc42237): every bind mount from the host
    /// with root `/`, type `9p`, source `none` and a device of its own.
    const GVISOR_SIDECAR: &str = "1 0 0:6 / / ro - 9p none ro,trans=fd,rfdno=4,wfdno=4,cache=remote_revalidating\n\
        2 1 0:8 / /proc rw - proc none rw\n\
        7 1 0:12 / /.kube-prestop/bin ro - 9p none ro,trans=fd,cache=remote_revalidating\n\
        8 1 0:13 / /.kube-prestop/state/other ro - 9p none ro,trans=fd,cache=remote_revalidating\n\
        9 1 0:14 / /.kube-prestop/state/main rw - 9p none rw,trans=fd,cache=remote_revalidating\n\
        10 1 0:15 / /.kube-prestop/id ro - 9p none ro,trans=fd,cache=remote_revalidating\n";
    fn gvisor_id_line(id: u64, dev: u32) -> String {
        format!("{id} 20 0:{dev} / {POINT} ro - 9p none ro,trans=fd,cache=remote_revalidating\n")
    }

    impl FakeProc {
        /// `self` (the reader) with the given mountinfo and user namespace.
        fn set_self(&self, mountinfo: &str, userns: &str) {
            let d = self.0.join("self");
            std::fs::create_dir_all(d.join("ns")).unwrap();
            std::fs::write(d.join("mountinfo"), mountinfo).unwrap();
            let _ = std::fs::remove_file(d.join("ns/user"));
            std::os::unix::fs::symlink(userns, d.join("ns/user")).unwrap();
        }

        /// A parentless process under gVisor: `mountinfo`, user namespace
        /// `userns`, and its root a link to `root`.
        fn add_gvisor(&self, pid: i32, start: u64, mountinfo: &str, userns: &str, root: &Path) {
            self.add(pid, start);
            let d = self.0.join(pid.to_string());
            std::fs::write(d.join("mountinfo"), mountinfo).unwrap();
            std::fs::create_dir_all(d.join("ns")).unwrap();
            std::os::unix::fs::symlink(userns, d.join("ns/user")).unwrap();
            std::os::unix::fs::symlink(root, d.join("root")).unwrap();
        }
    }

    /// The directory `<root>/.kube-prestop/state/main/created` of a fake
    /// container root.
    fn container_root(p: &FakeProc, name: &str) -> PathBuf {
        let root = p.0.join(format!("root-{name}"));
        std::fs::create_dir_all(root.join(POINT.trim_start_matches('/'))).unwrap();
        root
    }

    #[test]
    fn id_mount_source_follows_the_readers_own_mounts() {
        let p = FakeProc::new("idsrc", "0.00 0.00 0.00 0/0 0\n");
        let root = Path::new("/.kube-prestop");
        // Linux, the sidecar: the id volume's file system and root.
        let ids = "/var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/kube-prestop";
        let state =
            "/var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/kube-prestop-state-main";
        p.set_self(
            &format!(
                "41 22 8:1 {state} /.kube-prestop/state/main rw - ext4 /dev/sda1 rw\n\
                 42 22 8:1 {ids} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n"
            ),
            "user:[1]",
        );
        let volume = IdSource::Volume(procfs::MountSource {
            dev: "8:1".into(),
            root: ids.to_owned(),
        });
        assert_eq!(id_mount(&p.0, root, "main").source, volume);
        // Linux, the preStop wrapper in `main` (no `id/`): its own
        // identifying mount, the same source.
        p.set_self(
            &format!(
                "41 22 8:1 {state} /.kube-prestop/state/main rw - ext4 /dev/sda1 rw\n\
                 43 22 8:1 {ids} {POINT} ro - ext4 /dev/sda1 rw\n"
            ),
            "user:[1]",
        );
        assert_eq!(id_mount(&p.0, root, "main").source, volume);
        // gVisor, the sidecar: compared with its own view of the id volume.
        p.set_self(GVISOR_SIDECAR, "user:[1]");
        let m = id_mount(&p.0, root, "main");
        assert_eq!(
            m.source,
            IdSource::Gvisor {
                reference: PathBuf::from("/.kube-prestop/id")
            }
        );
        assert!(m.to_string().contains("gVisor"), "{m}");
        // gVisor, the preStop wrapper in `main`: its own identifying mount.
        let wrapper = "1 0 0:6 / / ro - 9p none ro\n\
            9 1 0:14 / /.kube-prestop/state/main rw - 9p none rw\n"
            .to_owned()
            + &gvisor_id_line(11, 16);
        p.set_self(&wrapper, "user:[1]");
        assert_eq!(
            id_mount(&p.0, root, "main").source,
            IdSource::Gvisor {
                reference: PathBuf::from(POINT)
            }
        );
        // A plain directory (tests): the mount point alone.
        p.set_self("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", "user:[1]");
        assert_eq!(id_mount(&p.0, root, "main").source, IdSource::Any);
    }

    /// On Linux the sidecar takes the id volume's source from its own mount
    /// of it, and an older process of another container with a mount of its
    /// own at the identifying mount point (another volume, `main`'s own state
    /// volume, or another pod's id volume under `hostPID`) is not taken for
    /// `main`.
    #[test]
    fn a_lookalike_mount_at_the_point_is_not_taken_for_the_watched_container() {
        let p = FakeProc::new("lookalike", "0.00 0.00 0.00 0/0 0\n");
        let dir = |pod: &str, v: &str| {
            format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~empty-dir/{v}")
        };
        p.set_self(
            &format!(
                "42 22 8:1 {} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n",
                dir("a", "kube-prestop")
            ),
            "user:[1]",
        );
        let m = id_mount(&p.0, Path::new("/.kube-prestop"), "main");
        let t = procfs::now_ticks();
        let with_mount = |pid: i32, start: u64, root: String| {
            p.add(pid, start);
            let line = format!("{pid}0 22 8:1 {root} {POINT} ro - ext4 /dev/sda1 rw\n");
            std::fs::write(p.0.join(pid.to_string()).join("mountinfo"), line).unwrap();
        };
        with_mount(40, t, dir("a", "scratch"));
        with_mount(41, t, dir("b", "kube-prestop"));
        with_mount(43, t, dir("a", "kube-prestop-state-main"));
        with_mount(42, t + 1, dir("a", "kube-prestop"));
        assert_eq!(find_oldest(&p.0, &m).unwrap().map(|i| i.pid), Some(42));
        let mut s = Scanner::new(&p.0, m);
        assert_eq!(s.step(Instant::now()).unwrap().map(|i| i.pid), Some(42));
        // On the mount point alone the oldest lookalike would be taken.
        assert_eq!(
            find_oldest(&p.0, &point()).unwrap().map(|i| i.pid),
            Some(40)
        );
    }

    /// Before the gVisor source, a sidecar on gVisor found no source for its
    /// volume and matched on the mount point alone: any container of the
    /// pod with a mount of its own there passed for `main`. Now, under
    /// gVisor, `main` is found live, and neither a container in a user
    /// namespace of its own nor one whose mount shows another directory is.
    #[test]
    fn under_gvisor_the_watched_container_is_found_and_lookalikes_are_not() {
        let p = FakeProc::new("gvisor-id", "0.00 0.00 0.00 0/0 0\n");
        p.set_self(GVISOR_SIDECAR, "user:[4026531837]");
        let main_root = container_root(&p, "main");
        let reference = main_root.join(POINT.trim_start_matches('/'));
        let m = IdMount {
            point: POINT.to_owned(),
            source: IdSource::Gvisor {
                reference: reference.clone(),
            },
        };
        // The line's shape: a Linux bind of the id volume is not gVisor's.
        let linux = format!(
            "30 22 8:1 /var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/kube-prestop {POINT} ro - ext4 /dev/sda1 rw\n"
        );
        assert_eq!(m.find(&linux), None);
        assert_eq!(m.find(&gvisor_id_line(31, 16)), Some(31));

        let t = procfs::now_ticks();
        // Older than main, the same directory, but in a user namespace of
        // its own (it made its mount namespace there).
        p.add_gvisor(
            40,
            t,
            &gvisor_id_line(50, 20),
            "user:[4026532999]",
            &main_root,
        );
        // Older than main, the pod's user namespace, another directory.
        let other_root = container_root(&p, "other");
        std::fs::File::open(other_root.join(POINT.trim_start_matches('/')))
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH)
            .unwrap();
        p.add_gvisor(
            41,
            t,
            &gvisor_id_line(51, 21),
            "user:[4026531837]",
            &other_root,
        );
        // main itself.
        p.add_gvisor(
            42,
            t + 1,
            &gvisor_id_line(52, 22),
            "user:[4026531837]",
            &main_root,
        );

        assert_eq!(find_oldest(&p.0, &m).unwrap().map(|i| i.pid), Some(42));
        let mut s = Scanner::new(&p.0, m.clone());
        assert_eq!(s.step(Instant::now()).unwrap().map(|i| i.pid), Some(42));
        // On the mount point alone (the old behaviour) the oldest lookalike
        // would have been taken.
        let any = IdMount {
            point: POINT.to_owned(),
            source: IdSource::Any,
        };
        assert_eq!(find_oldest(&p.0, &any).unwrap().map(|i| i.pid), Some(40));
        // A process whose root cannot be looked into does not match.
        std::fs::remove_file(p.0.join("42/root")).unwrap();
        assert_eq!(find_oldest(&p.0, &m).unwrap(), None);
    }

    /// Under gVisor a held mountinfo reads back empty once its process
    /// exited, whatever its root (`mountInfoData.Generate`,
    /// `pkg/sentry/fsimpl/proc/task_files.go`): a candidate that never
    /// showed the mount is another container, not one that `pivot_root`ed
    /// between two looks, and is never inferred. On Linux the same empty
    /// table is a pivoted candidate, inferred when the container is the
    /// pod's only one after the sidecar.
    #[test]
    fn under_gvisor_an_empty_table_after_exit_is_not_a_pivot() {
        for gvisor in [true, false] {
            let name = if gvisor { "gvisor-exit" } else { "linux-exit" };
            let p = FakeProc::new(name, "0.00 0.00 0.00 0/0 0\n");
            p.set_self(GVISOR_SIDECAR, "user:[1]");
            let source = if gvisor {
                IdSource::Gvisor {
                    reference: p.0.join("nowhere"),
                }
            } else {
                IdSource::Any
            };
            let m = IdMount {
                point: POINT.to_owned(),
                source,
            };
            let mut s = Scanner::new(&p.0, m).infer_unseen(true);
            // Another container: parentless, no identifying mount.
            let pid = 4_000_000 + i32::from(gvisor);
            p.add(pid, procfs::now_ticks());
            let mi = p.0.join(pid.to_string()).join("mountinfo");
            std::fs::write(&mi, "1 0 0:6 / / ro - 9p none ro\n").unwrap();
            let t0 = Instant::now();
            assert_eq!(s.step(t0).unwrap(), None);
            assert_eq!(s.stats().candidates, 1);
            // It exits: the held table reads empty, the process is gone.
            std::fs::write(&mi, "").unwrap();
            std::fs::remove_file(p.0.join(pid.to_string()).join("stat")).unwrap();
            let found = s.step(t0 + Duration::from_secs(1)).unwrap();
            let st = s.stats();
            assert_eq!(st.candidates_lost, 1, "{name}");
            if gvisor {
                assert_eq!(found, None);
                assert_eq!(st.candidates_lost_pivoted, 0);
            } else {
                assert_eq!(found.map(|i| i.pid), Some(pid));
                assert!(s.is_inferred(found.unwrap()));
                assert_eq!(st.candidates_lost_pivoted, 1);
            }
        }
    }

    /// The runtime's mount table, as a process youki has just created in
    /// the pod's PID namespace shows it (first mount 22, no identifying mount).
    const RUNTIME_TABLE: &str =
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n23 22 0:5 / /proc rw - proc proc rw\n";

    /// A parentless candidate `pid` first seen in the runtime's mount
    /// namespace (held pending), then moved to a namespace of its own
    /// (youki's `unshare(CLONE_NEWNS)`) with the identifying mount made
    /// there. On a real kernel the held file keeps showing the runtime's
    /// table; here the held file is replaced by a new one, which the held
    /// descriptor does not see either. Returns the scanner after its first
    /// look and the time of that look.
    fn youki_candidate(p: &FakeProc, pid: i32) -> (Scanner, Instant) {
        let mut s = Scanner::new(&p.0, point());
        p.add(pid, procfs::now_ticks());
        let mi = p.0.join(pid.to_string()).join("mountinfo");
        std::fs::write(&mi, RUNTIME_TABLE).unwrap();
        let t0 = Instant::now();
        assert_eq!(s.step(t0).unwrap(), None);
        assert_eq!(s.stats().candidates, 1);
        let moved = p.0.join(pid.to_string()).join("mountinfo.new");
        std::fs::write(
            &moved,
            format!("90 89 8:1 / / rw - ext4 /dev/sda1 rw\n700 90 0:50 /id/main {POINT} ro - tmpfs tmpfs rw\n"),
        )
        .unwrap();
        std::fs::rename(&moved, &mi).unwrap();
        (s, t0)
    }

    /// youki's order (facts R3): the next look after the move, however
    /// soon (before the periodic fresh open is due, with no event), follows
    /// the young candidate into its new namespace and finds the mount there.
    /// Without that check a `true` container is set up, run and gone before
    /// the periodic look.
    #[test]
    fn a_young_candidate_that_leaves_its_mount_namespace_is_followed_at_the_next_look() {
        let p = FakeProc::new("youki-next-look", "0.00 0.00 0.00 0/0 0\n");
        let (mut s, t0) = youki_candidate(&p, 4_000_010);
        let found = s.step(t0 + Duration::from_millis(1)).unwrap();
        assert_eq!(found.map(|i| i.pid), Some(4_000_010));
        assert_eq!(s.stats().candidates_moved, 1);
        // Counted once, however often it is looked at again.
        assert_eq!(s.step(t0 + Duration::from_millis(2)).unwrap(), found);
        assert_eq!(s.stats().candidates_moved, 1);
    }

    /// A watcher that was not scheduled between the move and the periodic
    /// fresh open (or that looks because of an event on the held table)
    /// follows the candidate by that look instead: the move is counted all
    /// the same, since the stat is what tells a starved watcher's operator
    /// that the container was followed out of the runtime's namespace.
    #[test]
    fn a_move_followed_by_the_periodic_or_an_event_look_is_counted() {
        for by_event in [false, true] {
            let pid = 4_000_011 + i32::from(by_event);
            let p = FakeProc::new(
                &format!("youki-late-look-{by_event}"),
                "0.00 0.00 0.00 0/0 0\n",
            );
            let (mut s, t0) = youki_candidate(&p, pid);
            let at = if by_event {
                s.note_events(&[pid]);
                t0 + Duration::from_millis(1)
            } else {
                t0 + PENDING_FRESH_INTERVAL + Duration::from_millis(1)
            };
            let found = s.step(at).unwrap();
            assert_eq!(found.map(|i| i.pid), Some(pid), "by_event={by_event}");
            assert_eq!(s.stats().candidates_moved, 1, "by_event={by_event}");
            assert!(s.stats().to_string().contains(" candidates_moved=1 "));
        }
    }

    /// Asserts that the scanner's step at `at` finds `pid`, with no
    /// candidate counted as moved.
    fn found_unmoved(s: &mut Scanner, at: Instant, pid: i32) {
        assert_eq!(s.step(at).unwrap().map(|i| i.pid), Some(pid));
        assert_eq!(s.stats().candidates_moved, 0);
    }

    /// A candidate whose held table shows the identifying mount itself (it
    /// never left the namespace it was first seen in, as under runc) is not
    /// counted as moved; nor is one followed after a `pivot_root`, whose
    /// held table reads empty.
    #[test]
    fn no_move_is_counted_without_leaving_the_namespace() {
        let p = FakeProc::new("no-move", "0.00 0.00 0.00 0/0 0\n");
        let mut s = Scanner::new(&p.0, point());
        let pid = 4_000_013;
        p.add(pid, procfs::now_ticks());
        let mi = p.0.join(pid.to_string()).join("mountinfo");
        std::fs::write(&mi, RUNTIME_TABLE).unwrap();
        let t0 = Instant::now();
        assert_eq!(s.step(t0).unwrap(), None);
        // The mount made in the held namespace.
        std::fs::write(
            &mi,
            format!("{RUNTIME_TABLE}700 22 0:50 /id/main {POINT} ro - tmpfs tmpfs rw\n"),
        )
        .unwrap();
        s.note_events(&[pid]);
        found_unmoved(&mut s, t0 + Duration::from_millis(1), pid);
        // pivot_root: the held table reads empty, the fresh one has the mount.
        let pid = 4_000_014;
        p.add(pid, procfs::now_ticks());
        let mi = p.0.join(pid.to_string()).join("mountinfo");
        std::fs::write(&mi, RUNTIME_TABLE).unwrap();
        let mut s = Scanner::new(&p.0, point());
        // Only the pivoting candidate is in this second scanner's /proc.
        std::fs::remove_dir_all(p.0.join(4_000_013.to_string())).unwrap();
        assert_eq!(s.step(t0).unwrap(), None);
        let moved = p.0.join(pid.to_string()).join("mountinfo.new");
        std::fs::write(
            &moved,
            format!("90 89 8:1 / / rw - ext4 /dev/sda1 rw\n700 90 0:50 /id/main {POINT} ro - tmpfs tmpfs rw\n"),
        )
        .unwrap();
        std::fs::write(&mi, "").unwrap();
        std::fs::rename(&moved, &mi).unwrap();
        found_unmoved(&mut s, t0 + Duration::from_millis(1), pid);
    }
}
