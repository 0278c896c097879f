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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::finder::Instance;
use crate::state::{Found, StateError, StateStore};
use kube_prestop_contract as contract;

/// How often the handler looks for the `armed` mark: the watcher normally
/// arms within a few milliseconds of its start, and one look every 2 ms
/// costs nothing measurable.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);

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
    /// A mark written by a watcher that still runs: armed.
    Live {
        /// The watcher's PID.
        pid: i32,
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
            Mark::Live { pid } => write!(f, "written by running watcher pid {pid}"),
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
/// at `proc_root` (a reused PID does not count, nor does a zombie). The
/// handler runs in the watcher's own container, so it sees the watcher in
/// the same PID namespace and `/proc`. Only [`Mark::Live`] means armed.
pub fn check_mark(store: &StateStore, proc_root: &Path) -> Mark {
    let content = match store.read_checked(contract::ARMED_FILE) {
        Ok(Some(content)) => content,
        Ok(None) => return Mark::Missing,
        Err(StateError::Refused { path, found }) => return Mark::Refused { path, found },
        Err(StateError::Read { source, .. } | StateError::OpenDir { source, .. }) => {
            return Mark::Unreadable(source.kind());
        }
        Err(_) => return Mark::Unreadable(std::io::ErrorKind::Other),
    };
    let Some(armed) = contract::ArmedRecord::parse(&content) else {
        return Mark::Malformed;
    };
    let pid = armed.pid;
    let watcher = Instance {
        pid,
        start_time: armed.start_time_ticks,
    };
    if watcher.is_alive(proc_root) {
        Mark::Live { pid }
    } else {
        Mark::Stale { pid }
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
    },
    /// No running watcher's mark appeared within the timeout; `last` is
    /// what the last look found.
    TimedOut {
        /// The mark as last seen.
        last: Mark,
    },
}

/// Waits until the `armed` mark in `store` names a running watcher
/// ([`check_mark`]; a refused or malformed mark never ends it), looking
/// every [`POLL_INTERVAL`], for at most `timeout`. The watcher removes its
/// mark when it starts and when it exits, but a watcher killed with SIGKILL
/// leaves it behind, and the restarted sidecar's handler may look before the
/// new watcher removed it: such a stale mark names a process that is gone,
/// so it never ends the wait.
pub fn wait_armed(store: &StateStore, proc_root: &Path, timeout: Duration) -> Outcome {
    let start = Instant::now();
    loop {
        let seen = check_mark(store, proc_root);
        if let Mark::Live { pid } = seen {
            return Outcome::Armed {
                waited: start.elapsed(),
                pid,
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
/// container whose watcher is `pid`: that process's stderr, opened through
/// `<proc_root>/<pid>/fd/2`, with a single `write(2)` (a line shorter than
/// `PIPE_BUF` never interleaves with the watcher's own). Errors: the open or
/// the write failed (the watcher exited, or another user's process).
pub fn write_to_watcher_log(proc_root: &Path, pid: i32, line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let path = proc_root.join(pid.to_string()).join("fd/2");
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
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
pub fn container_watcher(proc_root: &Path) -> Option<i32> {
    use std::os::unix::fs::MetadataExt as _;
    let exe = |process: &str| {
        std::fs::metadata(proc_root.join(process).join("exe"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let own_exe = exe("self")?;
    crate::container_process::find(proc_root, |pid| exe(&pid.to_string()) == Some(own_exe))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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

    #[test]
    fn a_live_watchers_mark_returns_at_once() {
        let d = tmp("exists");
        let (s, mark) = store(&d);
        std::fs::write(&mark, live_record()).unwrap();
        assert!(matches!(
            wait_armed(&s, proc_root(), Duration::ZERO),
            Outcome::Armed { .. }
        ));
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
        assert_eq!(check_mark(&s, proc_root()), Mark::Stale { pid });
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
        assert_eq!(check_mark(&s, proc_root()), Mark::Malformed);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_mark_written_during_the_wait_ends_it() {
        let d = tmp("later");
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
                std::fs::write(&mark, live_record()).unwrap();
            })
        };
        let outcome = wait_armed(&s, proc_root(), Duration::from_secs(60));
        writer.join().unwrap();
        assert!(
            matches!(outcome, Outcome::Armed { waited, pid } if waited >= Duration::from_millis(30) && pid == std::process::id() as i32),
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
            check_mark(&s, proc_root()),
            refused(Found::OtherKind(FileKind::Socket))
        );
        std::fs::remove_file(&mark).unwrap();
        // A link to a live mark is not followed either.
        std::os::unix::fs::symlink(&target, &mark).unwrap();
        assert_eq!(check_mark(&s, proc_root()), refused(Found::Symlink));
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
        let mark = check_mark(&s, proc_root());
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
        let mark = check_mark(&s, proc_root());
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

    #[test]
    fn a_line_reaches_the_watchers_stderr() {
        // A child whose stderr is a file stands in for the watcher.
        let d = tmp("log");
        let log = d.join("stderr");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        write_to_watcher_log(proc_root(), pid, "kube-prestop: line\n").unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "kube-prestop: line\n"
        );
        // Gone (reaped): an error, not a panic.
        assert!(write_to_watcher_log(proc_root(), pid, "x\n").is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
