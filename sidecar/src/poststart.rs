//! `post-start`: the native sidecar's `lifecycle.postStart` handler.
//!
//! The kubelet runs an exec postStart handler inside the sidecar container
//! and does not return from starting that container until the handler ends
//! (`startContainer` in `pkg/kubelet/kuberuntime/kuberuntime_container.go`);
//! it starts the containers after this native sidecar only in a later pod
//! sync. So a handler that returns once the watcher has written its `armed`
//! mark orders X's start after the watcher is armed, as a startupProbe did,
//! without the probe's period (1 s minimum) and the extra pod sync its
//! result needs.
//!
//! The kubelet puts no time limit on an exec postStart handler, and a
//! handler that fails makes it kill and restart the sidecar, which would
//! keep X from ever starting. So the wait is bounded, and when it runs out
//! the handler still succeeds: the Job goes on (fail-open) and the
//! watcher's own log tells why it could not arm.
//!
//! The kubelet keeps an exec handler's output only when the handler fails,
//! so when it returns, the handler writes its line (`post-start done`) into
//! the sidecar container's log: the armed watcher's stderr, opened through
//! `/proc/<pid>/fd/2` (same container, so same user and capabilities: the
//! kernel's `PTRACE_MODE_READ` check passes). The line's timestamp in the
//! container log says when the pod's next containers were let go.
//!
//! The `armed` mark is hostile input: X mounts its state volume read-write,
//! so X's processes can write a well-formed mark naming any process of the
//! pod (the PID namespace is shared), with its true start time. So a mark
//! counts ([`Mark::Live`]) only when the process it names is verified to be
//! the watcher ([`is_watcher`], the same check [`container_watcher`] makes):
//! the oldest process of the sidecar's container (mount namespace) that runs
//! this very executable and whose parent is outside that container. And the
//! line is written only to that verified process's stderr, never blocking
//! and within a bound ([`write_to_watcher_log`]): before, a mark naming a
//! process of X whose fd 2 was a full pipe hung `post-start` in `write(2)`
//! for ever (and the kubelet with it), one whose fd 2 was a FIFO without a
//! reader hung it in `open(2)`, and one whose fd 2 was a read-only
//! descriptor of some file had the line appended to that file.

use std::io;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::stat::{Mode, SFlag, fstat};
use nix::sys::time::TimeSpec;

use crate::container_process;
use crate::finder::Instance;
use crate::state::{Found, StateError, StateStore};
use kube_prestop_contract as contract;

/// How often the handler looks for the `armed` mark: the watcher normally
/// arms within a few milliseconds of its start, and one look every 2 ms
/// costs nothing measurable.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// Longest [`write_to_watcher_log`] waits for room in the watcher's log
/// pipe when it is full (the runtime's shim copies it to the container log
/// as it comes; a full pipe is a shim that is behind, or a pipe nobody
/// reads). The write itself never blocks; after this the line goes to the
/// caller's own stderr instead.
pub const LOG_WRITE_LIMIT: Duration = Duration::from_millis(100);

/// Where the process an `armed` mark names must run to count as the
/// watcher ([`is_watcher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In the caller's own container (mount namespace): `post-start` and
    /// `probe`, which the kubelet runs inside the sidecar container.
    OwnContainer,
    /// In another container than the caller's: the preStop wrapper, which
    /// the kubelet runs inside X, reporting into X's sidecar's log.
    OtherContainer,
}

/// What the `armed` mark says, as the postStart handler (or `probe`) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// No mark (nor state directory).
    Missing,
    /// A mark whose content is not an [`ArmedRecord`](contract::ArmedRecord).
    Malformed,
    /// Something other than a regular file at the mark's name, or at
    /// `state/` or the container's directory (planted: X mounts its state
    /// volume read-write): a FIFO, a socket, a device, a link. It is
    /// neither opened (but for a regular file swapped for it) nor followed,
    /// and counts as a malformed mark.
    Refused {
        /// The path refused: the mark's, or that of `state/` or of the
        /// container's directory when that is what was refused.
        path: PathBuf,
        /// What was found there.
        found: Found,
    },
    /// The mark exists but could not be read (permissions, I/O, not
    /// UTF-8): counts as a malformed mark.
    Unreadable(std::io::ErrorKind),
    /// A mark naming a watcher process that no longer runs: left by a
    /// watcher that was killed (SIGKILL, OOM) before it could remove it.
    Stale {
        /// The PID the mark names.
        pid: i32,
    },
    /// A mark naming a running process that is not the container's watcher
    /// ([`is_watcher`]: another executable, another container, or not the
    /// container's first process of this executable): not written by the
    /// watcher (planted: X's processes can write a well-formed mark naming
    /// any process of the pod), and counts as no mark. Nothing is opened
    /// or written through it.
    NotWatcher {
        /// The PID the mark names.
        pid: i32,
    },
    /// A mark written by a watcher that still runs, verified to be the
    /// container's watcher ([`is_watcher`]): armed.
    Live {
        /// The watcher's PID.
        pid: i32,
        /// Its start time (clock ticks since boot), which the writer checks
        /// again once it has opened the watcher's stderr
        /// ([`write_to_watcher_log`]).
        start_time: u64,
    },
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mark::Missing => f.write_str("missing"),
            Mark::Malformed => f.write_str("malformed"),
            Mark::Refused { path, found } => {
                write!(f, "refused, not read: {}: {found}", path.display())
            }
            Mark::Unreadable(kind) => write!(f, "unreadable: {kind}"),
            Mark::Stale { pid } => write!(f, "left by watcher pid {pid}, which is not running"),
            Mark::NotWatcher { pid } => write!(
                f,
                "names running pid {pid}, which is not this container's watcher (not the first process of the container running this executable); ignored"
            ),
            Mark::Live { pid, .. } => write!(f, "written by running watcher pid {pid}"),
        }
    }
}

impl Mark {
    /// The mark as the log lines of `post-start` and `probe` name it:
    /// `<armed>: <what it says>`, `armed` being the mark's path; a refused
    /// mark names the path actually refused instead, which is `state/` or
    /// the container's directory when one of those is not a directory.
    pub fn describe(&self, armed: &Path) -> String {
        match self {
            Mark::Refused { .. } => self.to_string(),
            _ => format!("{}: {self}", armed.display()),
        }
    }
}

/// Reads the `armed` mark in `store` ([`contract::ARMED_FILE`], with
/// [`StateStore::read_checked`]: never blocking on a planted FIFO, never
/// following a link, at most [`crate::state::MAX_RECORD_BYTES`]) and checks
/// that the watcher it names runs: same PID *and* start time in the procfs
/// at `proc_root` (a reused PID does not count, nor does a zombie), and
/// that it is the container's watcher, as `scope` says where
/// ([`is_watcher`]): a running process that is not is
/// [`Mark::NotWatcher`]. The handler runs in the watcher's own container,
/// so it sees the watcher in the same PID namespace and `/proc`. Only
/// [`Mark::Live`] means armed.
pub fn check_mark(store: &StateStore, proc_root: &Path, scope: Scope) -> Mark {
    match read_mark(store) {
        Ok(named) => classify(proc_root, named, scope),
        Err(mark) => mark,
    }
}

/// The process the `armed` mark in `store` names; `Err` with what the mark
/// is when it names none ([`Mark::Missing`], refused, unreadable,
/// malformed).
fn read_mark(store: &StateStore) -> Result<Instance, Mark> {
    let content = match store.read_checked(contract::ARMED_FILE) {
        Ok(Some(content)) => content,
        Ok(None) => return Err(Mark::Missing),
        Err(StateError::Refused { path, found }) => return Err(Mark::Refused { path, found }),
        Err(StateError::Read { source, .. } | StateError::OpenDir { source, .. }) => {
            return Err(Mark::Unreadable(source.kind()));
        }
        Err(_) => return Err(Mark::Unreadable(std::io::ErrorKind::Other)),
    };
    let armed = contract::ArmedRecord::parse(&content).ok_or(Mark::Malformed)?;
    Ok(Instance {
        pid: armed.pid,
        start_time: armed.start_time_ticks,
    })
}

/// What a mark naming `named` is: [`Mark::Stale`], [`Mark::Live`] or
/// [`Mark::NotWatcher`] ([`is_watcher`] in `scope`).
fn classify(proc_root: &Path, named: Instance, scope: Scope) -> Mark {
    let pid = named.pid;
    if !named.is_alive(proc_root) {
        Mark::Stale { pid }
    } else if is_watcher(proc_root, named, scope) {
        Mark::Live {
            pid,
            start_time: named.start_time,
        }
    } else {
        Mark::NotWatcher { pid }
    }
}

/// How a wait for the `armed` mark ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A running watcher's mark exists; `waited` is how long it took to appear.
    Armed {
        /// Time from the start of the wait until the mark was seen.
        waited: Duration,
        /// The armed watcher's PID (in the pod's PID namespace).
        pid: i32,
        /// The armed watcher's start time (clock ticks since boot).
        start_time: u64,
    },
    /// No running watcher's mark appeared within the timeout; `last` is
    /// what the last look found.
    TimedOut {
        /// The mark as last seen.
        last: Mark,
    },
}

/// Waits until the `armed` mark in `store` names a running watcher of the
/// caller's own container ([`check_mark`] with [`Scope::OwnContainer`]: a
/// refused or malformed mark, or one naming any other process, never ends
/// it), looking
/// every [`POLL_INTERVAL`], for at most `timeout`. The watcher removes its
/// mark when it starts and when it exits, but a watcher killed with SIGKILL
/// leaves it behind, and the restarted sidecar's handler may look before the
/// new watcher removed it: such a stale mark names a process that is gone,
/// so it never ends the wait.
pub fn wait_armed(store: &StateStore, proc_root: &Path, timeout: Duration) -> Outcome {
    let start = Instant::now();
    // A process found not to be the watcher stays so while it runs (the
    // watcher is the container's first process of this executable, which
    // the runtime started before any exec), so a mark still naming it is
    // not verified again: no scan of `/proc` every poll for a planted mark.
    let mut not_watcher = None;
    loop {
        let seen = match read_mark(store) {
            Err(mark) => mark,
            Ok(named) if not_watcher == Some(named) && named.is_alive(proc_root) => {
                Mark::NotWatcher { pid: named.pid }
            }
            Ok(named) => {
                let mark = classify(proc_root, named, Scope::OwnContainer);
                if let Mark::NotWatcher { .. } = mark {
                    not_watcher = Some(named);
                }
                mark
            }
        };
        if let Mark::Live { pid, start_time } = seen {
            return Outcome::Armed {
                waited: start.elapsed(),
                pid,
                start_time,
            };
        }
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            return Outcome::TimedOut { last: seen };
        }
        std::thread::sleep(POLL_INTERVAL.min(timeout - elapsed));
    }
}

/// Writes `line` (one log line, newline included) into the log of the
/// container whose watcher is `watcher` (PID and start time, verified by
/// the caller: [`check_mark`]'s [`Mark::Live`] or [`container_watcher`]):
/// that process's stderr, opened anew through `<proc_root>/<pid>/fd/2`.
///
/// Where that stderr comes from: the runtime's shim gives the container's
/// first process its stdio. containerd's shim (runc) hands it the write
/// end of a pipe it made (`pkg/process/io.go` `newPipeIO`) and copies what
/// comes out into the FIFO that the CRI plugin made for the container log
/// (`cio.NewFIFOSetInDir`), which the CRI plugin reads and writes to the
/// log file; CRI-O's conmon likewise hands it a pipe. With `tty: true` it
/// is a terminal (a character device), and a watcher run by hand or by the
/// tests may have a regular file. So the open is refused for anything
/// else, and:
///
/// - it never blocks: `O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY |
///   O_CLOEXEC`, never `O_CREAT` or `O_TRUNC`. Opening `/proc/PID/fd/N`
///   makes a new open file description (unlike `dup`), so `O_NONBLOCK`
///   applies to this descriptor only, never to the watcher's own fd 2; on
///   a FIFO with no reader the open fails at once (`ENXIO`) instead of
///   waiting for one, and `O_NOCTTY` keeps a terminal from becoming our
///   controlling one. `O_APPEND` makes a regular file's line land at its
///   end, not over the start;
/// - only the watcher's own output: its fd 2 must be open for writing
///   (`<pid>/fdinfo/2` flags, checked before the open), the opened file a
///   FIFO or pipe, a character device or a regular file (`fstat`), and
///   the process still the one verified once the file is open (same start
///   time: a PID reused in between does not pass);
/// - bounded: a single `write(2)` (a line of at most `PIPE_BUF` bytes goes
///   into a pipe whole or not at all, never interleaved with the
///   watcher's own lines); while the pipe is full (`EAGAIN`) it waits for
///   room with `ppoll` for at most `limit` in all, then gives up.
///
/// Errors: the open, the checks or the write failed, or the pipe stayed
/// full for `limit` (`WouldBlock`); the caller then writes the line on its
/// own stderr.
pub fn write_to_watcher_log(
    proc_root: &Path,
    watcher: Instance,
    line: &str,
    limit: Duration,
) -> io::Result<()> {
    let start = Instant::now();
    let process = proc_root.join(watcher.pid.to_string());
    if !fd_open_for_writing(&std::fs::read_to_string(process.join("fdinfo/2"))?) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the watcher's fd 2 is not open for writing",
        ));
    }
    let fd: OwnedFd = nix::fcntl::open(
        &process.join("fd/2"),
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    if !watcher.is_alive(proc_root) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("watcher pid {} has exited", watcher.pid),
        ));
    }
    let kind = SFlag::from_bits_truncate(fstat(fd.as_fd())?.st_mode & SFlag::S_IFMT.bits());
    if ![SFlag::S_IFIFO, SFlag::S_IFCHR, SFlag::S_IFREG].contains(&kind) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the watcher's stderr is not a pipe, a terminal or a regular file",
        ));
    }
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(&fd, rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let left = limit.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("the watcher's log stayed full for {limit:?}"),
                    ));
                }
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
                match ppoll(&mut fds, Some(TimeSpec::from_duration(left)), None) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whether `fdinfo` (the text of `/proc/PID/fdinfo/N`) says the descriptor
/// is open for writing: its `flags:` (octal) access mode is `O_WRONLY` or
/// `O_RDWR`.
fn fd_open_for_writing(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| i32::from_str_radix(v.trim(), 8).ok())
        .is_some_and(|flags| {
            let mode = flags & libc::O_ACCMODE;
            mode == libc::O_WRONLY || mode == libc::O_RDWR
        })
}

/// The executable of `process` (a PID, or `self`) in `proc_root`, as the
/// device and inode of `<process>/exe`: the same file whatever path or
/// mount of the binary's volume it was started through.
fn executable(proc_root: &Path, process: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(proc_root.join(process).join("exe"))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The watcher of the container whose mount namespace is `namespace`, as
/// the caller (`me`, never itself a candidate) sees it in `proc_root`: the
/// oldest process that runs the executable `exe`, in that namespace, whose
/// parent is outside it ([`container_process::first_process`]). The one
/// rule behind [`container_watcher`] and [`is_watcher`].
fn watcher_in(proc_root: &Path, namespace: &Path, me: i32, exe: (u64, u64)) -> Option<Instance> {
    let processes = container_process::processes(proc_root, namespace).ok()?;
    let pid = container_process::first_process(&processes, me, |pid| {
        executable(proc_root, &pid.to_string()) == Some(exe)
    })?;
    processes.iter().find(|p| p.pid == pid).map(|p| Instance {
        pid,
        start_time: p.start_time,
    })
}

/// The watcher of the container this process runs in, as the postStart
/// handler (an exec into the sidecar container) finds it without a mark:
/// the oldest other process that runs the same executable (`<pid>/exe`:
/// same device and inode), in the same mount namespace (`<pid>/ns/mnt`
/// links to the same `mnt:[inode]`), and whose parent is outside the
/// reader's PID namespace (`ppid` 0: the runtime's shim started it, as it
/// starts every exec). That is the sidecar container's first process, the
/// watcher, whose stderr is the container's log, also when it never armed.
/// `None` when there is none (it exited, or this is not run in a sidecar
/// container).
pub fn container_watcher(proc_root: &Path) -> Option<Instance> {
    let exe = executable(proc_root, "self")?;
    let (namespace, me) = container_process::caller(proc_root).ok()?;
    watcher_in(proc_root, &namespace, me, exe)
}

/// Whether `watcher` (PID and start time, from an `armed` mark) is the
/// watcher of a sidecar container, by the rule of [`container_watcher`]:
/// the first process, running this same executable, of
///
/// - [`Scope::OwnContainer`]: the caller's own container (`post-start`
///   and `probe` run in the sidecar container). X's processes, whatever
///   they write in the mark, are in X's mount namespace and cannot enter
///   the sidecar's (`setns` needs `CAP_SYS_ADMIN`), and a process exec'd
///   into the sidecar is younger than the watcher;
/// - [`Scope::OtherContainer`]: the container the named process runs in,
///   which must not be the caller's (the preStop wrapper runs in X). This
///   is weaker: any sidecar's watcher of the pod passes, not only X's. The
///   wrapper runs with X's user and capabilities, so what it can write
///   through a mark (one line into another sidecar's log, when that
///   sidecar runs as X's user) X's processes can write themselves.
///
/// The process must also still run with that start time (not a zombie).
pub fn is_watcher(proc_root: &Path, watcher: Instance, scope: Scope) -> bool {
    let Some(exe) = executable(proc_root, "self") else {
        return false;
    };
    // Cheap first: most processes a planted mark could name run another
    // executable, and need no scan of the container's processes.
    if executable(proc_root, &watcher.pid.to_string()) != Some(exe) {
        return false;
    }
    let Ok((own, me)) = container_process::caller(proc_root) else {
        return false;
    };
    let namespace = match scope {
        Scope::OwnContainer => own,
        Scope::OtherContainer => {
            match std::fs::read_link(proc_root.join(watcher.pid.to_string()).join("ns/mnt")) {
                Ok(ns) if ns != own => ns,
                _ => return false,
            }
        }
    };
    watcher_in(proc_root, &namespace, me, exe) == Some(watcher) && watcher.is_alive(proc_root)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::procfs::{self, PROC_ROOT};

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kps-poststart-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn proc_root() -> &'static Path {
        Path::new(PROC_ROOT)
    }

    /// The store of container `x` under `d`, its directory made (as the
    /// runtime makes the state volume's mount point), and its mark's path.
    fn store(d: &Path) -> (StateStore, std::path::PathBuf) {
        let s = StateStore::new(d, "x");
        std::fs::create_dir_all(s.dir()).unwrap();
        let mark = s.path(contract::ARMED_FILE);
        (s, mark)
    }

    /// A mark naming this (running) test process, as a watcher writes it.
    fn live_record() -> String {
        let pid = std::process::id() as i32;
        let st = procfs::read_stat(proc_root(), pid).unwrap();
        contract::ArmedRecord {
            pid,
            start_time_ticks: st.start_time,
        }
        .to_string()
    }

    /// A procfs stand-in under `<d>/proc`, for the watcher's verification
    /// (a real watcher, the first process of its container with a parent
    /// outside it, needs namespaces: `tests/pod.rs`). `self` is PID
    /// [`FakeProc::ME`].
    struct FakeProc {
        root: PathBuf,
        ours: PathBuf,
        other: PathBuf,
    }

    impl FakeProc {
        const ME: i32 = 9;
        /// The sidecar container's mount namespace, and X's.
        const SIDECAR: &str = "mnt:[4026532001]";
        const X: &str = "mnt:[4026532002]";

        fn new(d: &Path) -> Self {
            let root = d.join("proc");
            std::fs::create_dir_all(&root).unwrap();
            let (ours, other) = (d.join("kube-prestop"), d.join("sleep"));
            std::fs::write(&ours, "ours").unwrap();
            std::fs::write(&other, "other").unwrap();
            std::os::unix::fs::symlink(Self::ME.to_string(), root.join("self")).unwrap();
            FakeProc { root, ours, other }
        }

        /// Adds `pid` (parent `ppid`, started at `start`) in mount
        /// namespace `ns`, running our executable or another one, its
        /// stderr a link to `stderr`, open write-only.
        fn add(&self, pid: i32, ppid: i32, start: u64, ns: &str, ours: bool, stderr: &Path) {
            use std::os::unix::fs::symlink;
            let p = self.root.join(pid.to_string());
            for sub in ["ns", "fd", "fdinfo"] {
                std::fs::create_dir_all(p.join(sub)).unwrap();
            }
            std::fs::write(
                p.join("stat"),
                format!("{pid} (p) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"),
            )
            .unwrap();
            symlink(ns, p.join("ns/mnt")).unwrap();
            symlink(if ours { &self.ours } else { &self.other }, p.join("exe")).unwrap();
            symlink(stderr, p.join("fd/2")).unwrap();
            std::fs::write(p.join("fdinfo/2"), "pos:\t0\nflags:\t02000001\n").unwrap();
        }

        fn path(&self) -> &Path {
            &self.root
        }
    }

    fn armed(pid: i32, start: u64) -> String {
        contract::ArmedRecord {
            pid,
            start_time_ticks: start,
        }
        .to_string()
    }

    /// The sidecar container of a pod, as `post-start` (PID 9, exec'd into
    /// it) sees it: its watcher 5, the watcher's hook child 8, a process of
    /// X (6, older), the pause process 1, a process of X running another
    /// executable (7).
    fn sidecar_pod(d: &Path) -> FakeProc {
        let p = FakeProc::new(d);
        let log = d.join("log");
        std::fs::write(&log, "").unwrap();
        p.add(1, 0, 1, "mnt:[4026531840]", false, &log);
        p.add(5, 0, 100, FakeProc::SIDECAR, true, &log);
        p.add(6, 0, 50, FakeProc::X, true, &log);
        p.add(7, 0, 60, FakeProc::X, false, &log);
        p.add(8, 5, 150, FakeProc::SIDECAR, true, &log);
        p.add(FakeProc::ME, 0, 200, FakeProc::SIDECAR, true, &log);
        p
    }

    #[test]
    fn a_live_watchers_mark_returns_at_once() {
        let d = tmp("exists");
        let procs = sidecar_pod(&d);
        let (s, mark) = store(&d);
        std::fs::write(&mark, armed(5, 100)).unwrap();
        assert_eq!(
            check_mark(&s, procs.path(), Scope::OwnContainer),
            Mark::Live {
                pid: 5,
                start_time: 100
            }
        );
        assert!(matches!(
            wait_armed(&s, procs.path(), Duration::ZERO),
            Outcome::Armed {
                pid: 5,
                start_time: 100,
                ..
            }
        ));
        assert_eq!(
            container_watcher(procs.path()),
            Some(Instance {
                pid: 5,
                start_time: 100
            })
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A well-formed mark naming a running process that is not the
    /// container's watcher (X's processes can write one: they mount the
    /// state volume read-write and see every process of the pod) does not
    /// arm: not a process of another executable, of another container
    /// (X's, even older and of our executable), the watcher's own child,
    /// nor PID 1 or the caller. (Before, any live PID armed, and
    /// `post-start` then wrote into that process's stderr.)
    #[test]
    fn a_mark_naming_another_process_than_the_watcher_does_not_arm() {
        let d = tmp("not-watcher");
        let procs = sidecar_pod(&d);
        let (s, mark) = store(&d);
        for (pid, start) in [(1, 1), (6, 50), (7, 60), (8, 150), (FakeProc::ME, 200)] {
            std::fs::write(&mark, armed(pid, start)).unwrap();
            assert_eq!(
                check_mark(&s, procs.path(), Scope::OwnContainer),
                Mark::NotWatcher { pid },
                "pid {pid}"
            );
        }
        assert_eq!(
            wait_armed(&s, procs.path(), Duration::from_millis(20)),
            Outcome::TimedOut {
                last: Mark::NotWatcher { pid: FakeProc::ME }
            }
        );
        // The watcher's PID with another start time: a reused PID.
        std::fs::write(&mark, armed(5, 101)).unwrap();
        assert_eq!(
            check_mark(&s, procs.path(), Scope::OwnContainer),
            Mark::Stale { pid: 5 }
        );
        // Live processes on the real /proc: PID 1, this test process, a child.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        for pid in [1, std::process::id() as i32, child.id() as i32] {
            let start = procfs::read_stat(proc_root(), pid).unwrap().start_time;
            std::fs::write(&mark, armed(pid, start)).unwrap();
            assert_eq!(
                check_mark(&s, proc_root(), Scope::OwnContainer),
                Mark::NotWatcher { pid },
                "pid {pid}"
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The preStop wrapper runs in X and looks for the watcher in another
    /// container: the first process of our executable in its own mount
    /// namespace, which is not the caller's.
    #[test]
    fn the_wrapper_takes_a_sidecars_watcher_only() {
        let d = tmp("other");
        let p = FakeProc::new(&d);
        let log = d.join("log");
        std::fs::write(&log, "").unwrap();
        p.add(5, 0, 100, FakeProc::SIDECAR, true, &log);
        p.add(8, 5, 150, FakeProc::SIDECAR, true, &log);
        p.add(6, 0, 50, FakeProc::X, false, &log);
        p.add(7, 6, 70, FakeProc::X, true, &log);
        p.add(FakeProc::ME, 0, 200, FakeProc::X, true, &log);
        let (s, mark) = store(&d);
        std::fs::write(&mark, armed(5, 100)).unwrap();
        assert!(matches!(
            check_mark(&s, p.path(), Scope::OtherContainer),
            Mark::Live { pid: 5, .. }
        ));
        // From inside X the sidecar's watcher is not of the caller's container.
        assert_eq!(
            check_mark(&s, p.path(), Scope::OwnContainer),
            Mark::NotWatcher { pid: 5 }
        );
        for (pid, start) in [(8, 150), (7, 70), (6, 50)] {
            std::fs::write(&mark, armed(pid, start)).unwrap();
            assert_eq!(
                check_mark(&s, p.path(), Scope::OtherContainer),
                Mark::NotWatcher { pid },
                "pid {pid}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_mark_times_out() {
        let d = tmp("missing");
        assert_eq!(
            wait_armed(
                &StateStore::new(&d, "x"),
                proc_root(),
                Duration::from_millis(20)
            ),
            Outcome::TimedOut {
                last: Mark::Missing
            }
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stale_or_malformed_mark_does_not_count() {
        let d = tmp("stale");
        let (s, mark) = store(&d);
        let pid = std::process::id() as i32;
        let start = procfs::read_stat(proc_root(), pid).unwrap().start_time;
        // Same PID, another start time: a reused PID, not our watcher.
        std::fs::write(
            &mark,
            contract::ArmedRecord {
                pid,
                start_time_ticks: start + 1,
            }
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            check_mark(&s, proc_root(), Scope::OwnContainer),
            Mark::Stale { pid }
        );
        // A PID no process has.
        std::fs::write(
            &mark,
            contract::ArmedRecord {
                pid: i32::MAX,
                start_time_ticks: start,
            }
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            wait_armed(&s, proc_root(), Duration::from_millis(20)),
            Outcome::TimedOut {
                last: Mark::Stale { pid: i32::MAX }
            }
        );
        // An empty mark, as earlier versions of the watcher could leave.
        std::fs::write(&mark, "").unwrap();
        assert_eq!(
            check_mark(&s, proc_root(), Scope::OwnContainer),
            Mark::Malformed
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_mark_written_during_the_wait_ends_it() {
        let d = tmp("later");
        let procs = sidecar_pod(&d);
        let (s, mark) = store(&d);
        // A stale mark first, then the new watcher's own.
        std::fs::write(
            &mark,
            contract::ArmedRecord {
                pid: i32::MAX,
                start_time_ticks: 1,
            }
            .to_string(),
        )
        .unwrap();
        let writer = {
            let mark = mark.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                let _ = std::fs::remove_file(&mark);
                std::fs::write(&mark, armed(5, 100)).unwrap();
            })
        };
        let outcome = wait_armed(&s, procs.path(), Duration::from_secs(60));
        writer.join().unwrap();
        assert!(
            matches!(outcome, Outcome::Armed { waited, pid: 5, start_time: 100 } if waited >= Duration::from_millis(30)),
            "{outcome:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A FIFO, a socket or a link planted at the mark (X mounts its state
    /// volume read-write) is refused at once, never opened for a read that
    /// blocks nor followed, and counts as a malformed mark: the wait runs
    /// to its timeout (post-start's fail-open) instead of for ever.
    #[test]
    fn a_planted_non_regular_mark_is_refused_without_blocking() {
        use crate::state::FileKind;
        let d = tmp("planted");
        let (s, mark) = store(&d);
        let target = d.join("live");
        std::fs::write(&target, live_record()).unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        nix::unistd::mkfifo(&mark, mode).unwrap();
        let start = Instant::now();
        let refused = |found| Mark::Refused {
            path: mark.clone(),
            found,
        };
        assert_eq!(
            wait_armed(&s, proc_root(), Duration::from_millis(50)),
            Outcome::TimedOut {
                last: refused(Found::OtherKind(FileKind::Fifo))
            }
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        std::fs::remove_file(&mark).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(&mark).unwrap();
        assert_eq!(
            check_mark(&s, proc_root(), Scope::OwnContainer),
            refused(Found::OtherKind(FileKind::Socket))
        );
        std::fs::remove_file(&mark).unwrap();
        // A link to a live mark is not followed either.
        std::os::unix::fs::symlink(&target, &mark).unwrap();
        assert_eq!(
            check_mark(&s, proc_root(), Scope::OwnContainer),
            refused(Found::Symlink)
        );
        assert!(
            refused(Found::OtherKind(FileKind::Fifo))
                .to_string()
                .contains("a FIFO")
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// When the container's directory itself is what is planted (a FIFO, a
    /// link: X mounts the state volume, whose `state/x` is the mount point,
    /// read-write only in a pod, but `--root` runs see it), the refusal
    /// names that directory, not the `armed` mark under it, which was
    /// never looked at. (Before, the path was dropped and the log lines
    /// named `.../x/armed` as the FIFO or link.)
    #[test]
    fn a_refused_directory_is_named_not_the_mark_under_it() {
        use crate::state::FileKind;
        let d = tmp("refused-dir");
        let s = StateStore::new(&d, "x");
        let dir = s.dir().to_owned();
        let armed = s.path(contract::ARMED_FILE);
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        nix::unistd::mkfifo(&dir, mode).unwrap();
        let mark = check_mark(&s, proc_root(), Scope::OwnContainer);
        assert_eq!(
            mark,
            Mark::Refused {
                path: dir.clone(),
                found: Found::OtherKind(FileKind::Fifo)
            }
        );
        let line = mark.describe(&armed);
        assert!(
            line.contains(&format!("{}: it is a FIFO", dir.display())),
            "{line}"
        );
        assert!(!line.contains(&armed.display().to_string()), "{line}");
        std::fs::remove_file(&dir).unwrap();
        let elsewhere = d.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let mark = check_mark(&s, proc_root(), Scope::OwnContainer);
        assert_eq!(
            mark,
            Mark::Refused {
                path: dir.clone(),
                found: Found::Symlink
            }
        );
        assert!(!mark.describe(&armed).contains("armed"), "{mark:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// `child`'s PID and start time, as a verified mark gives them.
    fn instance(child: &std::process::Child) -> Instance {
        let pid = child.id() as i32;
        Instance {
            pid,
            start_time: procfs::read_stat(proc_root(), pid).unwrap().start_time,
        }
    }

    /// Runs `write` on a thread, failing the test (after `unblock`, which
    /// must end a blocked write) if it has not returned within 10 s.
    fn bounded<T: Send + 'static>(
        write: impl FnOnce() -> T + Send + 'static,
        unblock: impl FnOnce(),
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || tx.send(write()).unwrap());
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(v) => {
                t.join().unwrap();
                v
            }
            Err(_) => {
                unblock();
                t.join().unwrap();
                panic!("the write blocked for 10 s");
            }
        }
    }

    #[test]
    fn a_line_reaches_the_watchers_stderr() {
        // A child whose stderr is a file stands in for the watcher.
        let d = tmp("log");
        let log = d.join("stderr");
        std::fs::write(&log, "before\n").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stderr(std::fs::OpenOptions::new().append(true).open(&log).unwrap())
            .spawn()
            .unwrap();
        let watcher = instance(&child);
        write_to_watcher_log(
            proc_root(),
            watcher,
            "kube-prestop: line\n",
            LOG_WRITE_LIMIT,
        )
        .unwrap();
        // Not the process verified (another start time): nothing written.
        let other = Instance {
            start_time: watcher.start_time + 1,
            ..watcher
        };
        assert!(write_to_watcher_log(proc_root(), other, "x\n", LOG_WRITE_LIMIT).is_err());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "before\nkube-prestop: line\n"
        );
        // Gone (reaped): an error, not a panic.
        assert!(write_to_watcher_log(proc_root(), watcher, "x\n", LOG_WRITE_LIMIT).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A process whose fd 2 is a pipe nobody reads, and full: the line is
    /// not written, and the write gives up after `limit` instead of
    /// blocking for ever (before, `post-start` hung in `write(2)`).
    #[test]
    fn a_full_pipe_never_blocks_the_write() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
        while nix::unistd::write(&w, &[b'x'; 4096]).is_ok() {}
        nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty())).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stderr(std::process::Stdio::from(w))
            .spawn()
            .unwrap();
        let watcher = instance(&child);
        let start = Instant::now();
        let limit = Duration::from_millis(200);
        let res = bounded(
            move || write_to_watcher_log(proc_root(), watcher, "kube-prestop: line\n", limit),
            || {
                // Drain the pipe: a blocked write then returns.
                let _ = nix::fcntl::fcntl(&r, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
                let mut buf = [0u8; 65536];
                while nix::unistd::read(&r, &mut buf).is_ok_and(|n| n > 0) {}
            },
        );
        let took = start.elapsed();
        assert_eq!(
            res.unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "took {took:?}"
        );
        assert!(took >= limit && took < Duration::from_secs(5), "{took:?}");
        // With no time at all: one attempt, no wait.
        let start = Instant::now();
        assert!(
            write_to_watcher_log(proc_root(), watcher, "x\n", Duration::ZERO).is_err()
                && start.elapsed() < Duration::from_secs(1)
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A process whose fd 2 is the write end of a FIFO that has no reader
    /// any more: reopening it never waits for one (before, `post-start`
    /// hung in `open(2)`).
    #[test]
    fn a_fifo_without_a_reader_never_blocks_the_open() {
        let d = tmp("fifo");
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let wo = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        drop(rw);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stderr(wo)
            .spawn()
            .unwrap();
        let watcher = instance(&child);
        let unblock_fifo = fifo.clone();
        let res = bounded(
            move || write_to_watcher_log(proc_root(), watcher, "line\n", LOG_WRITE_LIMIT),
            move || {
                // A reader lets a blocked open return.
                use std::os::unix::fs::OpenOptionsExt as _;
                let _ = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&unblock_fifo);
            },
        );
        assert!(res.is_err(), "{res:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A process whose fd 2 is a read-only descriptor of some file: that
    /// is not an output, and the file is left as it was (before, the line
    /// was appended to it).
    #[test]
    fn a_read_only_fd_2_is_not_written_through() {
        let d = tmp("victim");
        let victim = d.join("victim");
        std::fs::write(&victim, "untouched\n").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stderr(std::fs::File::open(&victim).unwrap())
            .spawn()
            .unwrap();
        let res = write_to_watcher_log(proc_root(), instance(&child), "line\n", LOG_WRITE_LIMIT);
        assert_eq!(res.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
        // Nor a directory, whatever its descriptor's mode.
        let mut dir_child = std::process::Command::new("sleep")
            .arg("30")
            .stderr(std::fs::File::open(&d).unwrap())
            .spawn()
            .unwrap();
        assert!(
            write_to_watcher_log(proc_root(), instance(&dir_child), "x\n", LOG_WRITE_LIMIT)
                .is_err()
        );
        for c in [&mut child, &mut dir_child] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fdinfo_flags_say_whether_fd_2_is_an_output() {
        assert!(fd_open_for_writing(
            "pos:\t0\nflags:\t02000001\nmnt_id:\t15\n"
        ));
        assert!(fd_open_for_writing("pos:\t0\nflags:\t0100002\n"));
        assert!(!fd_open_for_writing("pos:\t0\nflags:\t0100000\n"));
        assert!(!fd_open_for_writing("pos:\t0\n"));
        assert!(!fd_open_for_writing("flags:\tzz\n"));
    }
}
