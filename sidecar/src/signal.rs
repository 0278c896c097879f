//! `kube-prestop signal SIGNAL`: sends SIGNAL to the first process of the
//! container the command runs in, for Argo Workflows' kill command in an
//! injected pod ([`contract::SUBCOMMAND_SIGNAL`] says why `kill 1` cannot
//! be used there).
//!
//! The container is the caller's mount namespace: a process exec'd into a
//! container (`kubectl exec`, the API's `pods/exec`, which Argo's
//! controller uses) joins the mount namespace of the container's first
//! process (runc `libcontainer/nsenter`, v1.5). Of the processes in that
//! namespace whose parent is outside it (`ppid` 0 in the pod's PID
//! namespace: the runtime's shim started them, `proc(5)` "ppid"), the
//! container's first process is the oldest: processes exec'd into the
//! container (this one among them) started after it.

use std::io;
use std::path::{Path, PathBuf};

use kube_prestop_contract as contract;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::procfs;

/// A process as the selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Its PID in the pod's PID namespace.
    pub pid: i32,
    /// Its parent's PID there (`0`: the parent is outside the namespace).
    pub ppid: i32,
    /// Start time in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_time: u64,
    /// Whether it is in the caller's mount namespace.
    pub same_container: bool,
}

/// Why no signal was sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// `/proc` could not be read.
    #[error("reading {path}: {source}")]
    Proc {
        /// The path read.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// No process of the container other than this one.
    #[error("no process of this container (mount namespace {namespace}) besides this command")]
    NoProcess {
        /// The caller's mount namespace (`mnt:[INODE]`).
        namespace: String,
    },
    /// `kill(2)` failed.
    #[error("kill({pid}, {signal}): {errno}")]
    Kill {
        /// The target.
        pid: i32,
        /// The signal.
        signal: Signal,
        /// The error.
        errno: nix::errno::Errno,
    },
}

/// The container's first process among `processes`, not `self_pid`: the
/// oldest (then lowest PID) of those in the caller's mount namespace whose
/// parent is not (a `ppid` of 0 or of a process outside it). `None` when
/// there is none.
pub fn first_process(processes: &[Process], self_pid: i32) -> Option<i32> {
    let in_container = |pid: i32| processes.iter().any(|p| p.pid == pid && p.same_container);
    processes
        .iter()
        .filter(|p| p.same_container && p.pid != self_pid)
        .filter(|p| p.ppid == 0 || !in_container(p.ppid))
        .min_by_key(|p| (p.start_time, p.pid))
        .map(|p| p.pid)
}

/// The processes listed in `proc_root`, each compared with the caller's
/// mount namespace; a process that ends or cannot be read mid-listing is
/// left out (one we may not read is one we may not signal either).
fn processes(proc_root: &Path, namespace: &Path) -> Result<Vec<Process>, SignalError> {
    let pids = procfs::list_pids(proc_root).map_err(|source| SignalError::Proc {
        path: proc_root.to_owned(),
        source,
    })?;
    Ok(pids
        .into_iter()
        .filter_map(|pid| {
            let ns = std::fs::read_link(proc_root.join(pid.to_string()).join("ns/mnt")).ok()?;
            let stat = procfs::read_stat(proc_root, pid).ok()?;
            Some(Process {
                pid,
                ppid: stat.ppid,
                start_time: stat.start_time,
                same_container: ns == namespace,
            })
        })
        .collect())
}

/// Sends `signal` to the first process of the caller's container (see the
/// module docs), through the procfs at `proc_root`; its PID.
///
/// Errors: [`SignalError::Proc`] when `proc_root` or the caller's own
/// namespace cannot be read, [`SignalError::NoProcess`], [`SignalError::Kill`].
pub fn signal_container(proc_root: &Path, signal: Signal) -> Result<i32, SignalError> {
    let self_ns_path = proc_root.join("self/ns/mnt");
    let namespace = std::fs::read_link(&self_ns_path).map_err(|source| SignalError::Proc {
        path: self_ns_path,
        source,
    })?;
    let self_pid = procfs::self_pid(proc_root).map_err(|source| SignalError::Proc {
        path: proc_root.join("self"),
        source,
    })?;
    let pid = first_process(&processes(proc_root, &namespace)?, self_pid).ok_or_else(|| {
        SignalError::NoProcess {
            namespace: namespace.display().to_string(),
        }
    })?;
    kill(Pid::from_raw(pid), signal).map_err(|errno| SignalError::Kill { pid, signal, errno })?;
    Ok(pid)
}

/// `kube-prestop signal SIGNAL`: exit 0 when sent, 1 (with the reason on
/// stderr, which Argo's controller logs) when not.
pub fn run(signal: Signal) -> i32 {
    match signal_container(Path::new(procfs::PROC_ROOT), signal) {
        Ok(pid) => {
            crate::log!(
                "{}: sent {signal} to PID {pid}, this container's first process",
                contract::SUBCOMMAND_SIGNAL
            );
            0
        }
        Err(e) => {
            crate::log!("{}: error: {e}", contract::SUBCOMMAND_SIGNAL);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn p(pid: i32, ppid: i32, start_time: u64, same_container: bool) -> Process {
        Process {
            pid,
            ppid,
            start_time,
            same_container,
        }
    }

    #[test]
    fn the_oldest_parentless_process_of_the_container_is_chosen() {
        let procs = [
            p(1, 0, 10, false),  // the sandbox's pause: PID 1, another container
            p(7, 0, 20, false),  // a sidecar of ours
            p(12, 0, 30, true),  // the container's first process (argoexec wait)
            p(13, 12, 31, true), // its child
            p(40, 0, 90, true),  // another exec (kubectl exec)
            p(41, 0, 95, true),  // this command
        ];
        assert_eq!(first_process(&procs, 41), Some(12));
    }

    #[test]
    fn a_child_whose_parent_is_in_another_container_counts_as_parentless() {
        // ppid as seen in the shared namespace is another container's
        // process only for reparented orphans: still not a child of ours.
        let procs = [p(5, 3, 40, true), p(3, 0, 10, false), p(9, 0, 50, true)];
        assert_eq!(first_process(&procs, 9), Some(5));
    }

    #[test]
    fn pid_1_is_never_taken_unless_it_is_the_container() {
        let procs = [p(1, 0, 1, false), p(20, 0, 5, true)];
        assert_eq!(first_process(&procs, 20), None, "only this command");
        // Without a shared PID namespace the container's first process is PID 1.
        let own = [p(1, 0, 1, true), p(20, 0, 5, true)];
        assert_eq!(first_process(&own, 20), Some(1));
    }

    #[test]
    fn ties_on_start_time_go_to_the_lower_pid() {
        let procs = [p(30, 0, 7, true), p(25, 0, 7, true), p(99, 0, 8, true)];
        assert_eq!(first_process(&procs, 99), Some(25));
    }

    #[test]
    fn this_process_alone_finds_its_own_process_tree_root_not_itself() {
        // In the test binary's own namespaces: the first process of this
        // mount namespace is some ancestor, never the test itself.
        let proc_root = Path::new(procfs::PROC_ROOT);
        let ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let me = procfs::self_pid(proc_root).unwrap();
        let procs = processes(proc_root, &ns).unwrap();
        assert!(procs.iter().any(|p| p.pid == me && p.same_container));
        let first = first_process(&procs, me);
        assert_ne!(first, Some(me));
    }
}
