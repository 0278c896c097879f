//! The first process of the caller's container, found in the pod's shared
//! PID namespace, where it is not PID 1.
//!
//! The container is the caller's mount namespace: a process exec'd into a
//! container (`kubectl exec`, the API's `pods/exec`, the kubelet's exec
//! handlers) joins the mount namespace of the container's first process
//! (runc `libcontainer/nsenter`, v1.5). Of the processes in that namespace
//! whose parent is outside it (`ppid` 0 in the pod's PID namespace: the
//! runtime's shim started them, `proc(5)` "ppid"; or an orphan
//! re-parented to the pod's PID 1), the container's first process is the
//! oldest: processes exec'd into the container (the caller among them)
//! started after it. Used by `signal` (Argo's kill command) and by
//! `post-start` (to find the sidecar's watcher, whose stderr is the log).

use std::io;
use std::path::{Path, PathBuf};

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

/// `/proc` could not be read: the path and the error.
#[derive(Debug, thiserror::Error)]
#[error("reading {path}: {source}")]
pub struct ProcReadError {
    /// The path read.
    pub path: PathBuf,
    /// The error.
    pub source: io::Error,
}

/// The container's first process among `processes`, not `self_pid`, of
/// those `keep` accepts (by PID): the oldest (then lowest PID) of those in
/// the caller's mount namespace whose parent is not (a `ppid` of 0 or of a
/// process outside it). `None` when there is none.
pub fn first_process(
    processes: &[Process],
    self_pid: i32,
    keep: impl Fn(i32) -> bool,
) -> Option<i32> {
    let in_container = |pid: i32| processes.iter().any(|p| p.pid == pid && p.same_container);
    processes
        .iter()
        .filter(|p| p.same_container && p.pid != self_pid && keep(p.pid))
        .filter(|p| p.ppid == 0 || !in_container(p.ppid))
        .min_by_key(|p| (p.start_time, p.pid))
        .map(|p| p.pid)
}

/// The processes listed in `proc_root`, each compared with the caller's
/// mount namespace; a process that ends or cannot be read mid-listing is
/// left out (one we may not read is one we may not signal either).
pub fn processes(proc_root: &Path, namespace: &Path) -> Result<Vec<Process>, ProcReadError> {
    let pids = procfs::list_pids(proc_root).map_err(|source| ProcReadError {
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

/// The caller's mount namespace (`mnt:[INODE]`) and PID in `proc_root`.
pub fn caller(proc_root: &Path) -> Result<(PathBuf, i32), ProcReadError> {
    let ns_path = proc_root.join("self/ns/mnt");
    let namespace = std::fs::read_link(&ns_path).map_err(|source| ProcReadError {
        path: ns_path,
        source,
    })?;
    let pid = procfs::self_pid(proc_root).map_err(|source| ProcReadError {
        path: proc_root.join("self"),
        source,
    })?;
    Ok((namespace, pid))
}

/// The first process of the caller's container among those `keep`
/// accepts (by PID), through the procfs at `proc_root`; `Ok(None)` when
/// there is none.
///
/// Errors: [`ProcReadError`] when `proc_root` or the caller's own entries
/// cannot be read.
pub fn find(proc_root: &Path, keep: impl Fn(i32) -> bool) -> Result<Option<i32>, ProcReadError> {
    let (namespace, me) = caller(proc_root)?;
    Ok(first_process(&processes(proc_root, &namespace)?, me, keep))
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
        assert_eq!(first_process(&procs, 41, |_| true), Some(12));
    }

    #[test]
    fn a_child_whose_parent_is_in_another_container_counts_as_parentless() {
        // ppid as seen in the shared namespace is another container's
        // process only for reparented orphans: still not a child of ours.
        let procs = [p(5, 3, 40, true), p(3, 0, 10, false), p(9, 0, 50, true)];
        assert_eq!(first_process(&procs, 9, |_| true), Some(5));
    }

    #[test]
    fn pid_1_is_never_taken_unless_it_is_the_container() {
        let procs = [p(1, 0, 1, false), p(20, 0, 5, true)];
        assert_eq!(
            first_process(&procs, 20, |_| true),
            None,
            "only this command"
        );
        // Without a shared PID namespace the container's first process is PID 1.
        let own = [p(1, 0, 1, true), p(20, 0, 5, true)];
        assert_eq!(first_process(&own, 20, |_| true), Some(1));
    }

    #[test]
    fn keep_narrows_the_candidates_but_not_the_parents() {
        // post-start keeps only the processes of its own executable: the
        // hook child (another executable) of the watcher is still a child.
        let procs = [p(5, 0, 10, true), p(6, 5, 11, true), p(9, 0, 50, true)];
        assert_eq!(first_process(&procs, 9, |pid| pid != 5), None);
        assert_eq!(first_process(&procs, 9, |pid| pid == 5), Some(5));
    }

    #[test]
    fn ties_on_start_time_go_to_the_lower_pid() {
        let procs = [p(30, 0, 7, true), p(25, 0, 7, true), p(99, 0, 8, true)];
        assert_eq!(first_process(&procs, 99, |_| true), Some(25));
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
        let first = first_process(&procs, me, |_| true);
        assert_ne!(first, Some(me));
    }
}
