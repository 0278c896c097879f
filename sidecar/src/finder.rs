//! Finding the watched container's process in the pod's shared PID namespace.
//!
//! The container process of `X` is the *oldest* process that (a) has parent
//! PID 0, i.e. its parent is outside the pod's PID namespace (the runtime
//! starts it with `CLONE_PARENT` from `runc`, and the shim on the host reaps
//! it), and (b) has `X`'s identifying mount in its `/proc/PID/mountinfo`.
//! Processes exec'd into `X` later (probes, `kubectl exec`, the preStop
//! wrapper) also have parent PID 0 and the mount, but are younger.
//!
//! [`find_oldest`] is the one-shot search the wrapper uses. [`Scanner`] is the
//! watcher's incremental search, cheap enough to run every millisecond while
//! `X` is absent: one `pread` of `/proc/loadavg` per tick when no process was
//! created, a listing only when one was, and `mountinfo` reads only of young
//! parentless processes the runtime may still be setting up.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::contract;
use crate::procfs::{self, LastPid, ProcError};

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

/// The identifying mount point of `container` under `id_root`
/// (`/.kube-prestop-id/<container>` in a pod).
pub fn mount_point(id_root: &Path, container: &str) -> String {
    id_root.join(container).to_string_lossy().into_owned()
}

/// One-shot search: the oldest process with parent PID 0 whose mountinfo has
/// `mount_point`. `Ok(None)` when there is none. Processes that vanish during
/// the scan are skipped.
pub fn find_oldest(proc_root: &Path, mount_point: &str) -> io::Result<Option<Instance>> {
    let mut best: Option<Instance> = None;
    for pid in procfs::list_pids(proc_root)? {
        let Ok(stat) = procfs::read_stat(proc_root, pid) else {
            continue;
        };
        if stat.ppid != 0 || stat.state == b'Z' {
            continue;
        }
        let cand = Instance {
            pid,
            start_time: stat.start_time,
        };
        if best.is_some_and(|b| (b.start_time, b.pid) <= (cand.start_time, cand.pid)) {
            continue;
        }
        if let Ok(true) = procfs::has_mount_point(proc_root, pid, mount_point) {
            best = Some(cand);
        }
    }
    Ok(best)
}

/// How long a parentless process without the mount is re-checked on every
/// tick: the runtime makes the container's mounts within milliseconds of
/// creating its process.
const PENDING_FAST: Duration = Duration::from_secs(2);
/// After [`PENDING_FAST`], re-check at this interval ...
const PENDING_SLOW_INTERVAL: Duration = Duration::from_millis(100);
/// ... until this age; then the process is taken to be another container's.
const PENDING_GIVE_UP: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
enum Class {
    /// Has a parent inside the namespace, predates the floor, or gave up.
    NotOurs,
    /// Parentless, no identifying mount yet.
    Pending { first_seen: Instant, next: Instant },
    /// Parentless with the identifying mount.
    Match,
}

/// Incremental search for the container process (see the module docs).
#[derive(Debug)]
pub struct Scanner {
    proc_root: PathBuf,
    mount_point: String,
    last_pid: Option<LastPid>,
    seen_last_pid: Option<u64>,
    known: HashMap<i32, (u64, Class)>,
    floor: u64,
}

impl Scanner {
    /// A scanner of `proc_root` for processes with `mount_point`.
    pub fn new(proc_root: &Path, mount_point: String) -> Self {
        Self {
            proc_root: proc_root.to_owned(),
            mount_point,
            last_pid: LastPid::open(proc_root).ok(),
            seen_last_pid: None,
            known: HashMap::new(),
            floor: 0,
        }
    }

    /// Ignore processes that started before `ticks` (clock ticks since boot).
    /// Set to the time an instance's exit was observed, so that processes
    /// left over from it (a `kubectl exec` still running) are never taken
    /// for the next instance. Also forgets everything cached.
    pub fn set_floor(&mut self, ticks: u64) {
        self.floor = self.floor.max(ticks);
        self.reset();
    }

    /// Forgets all cached classifications (after a long pause PIDs may have
    /// been reused).
    pub fn reset(&mut self) {
        self.known.clear();
        self.seen_last_pid = None;
    }

    /// Forgets one process (it turned out to be gone when attached).
    pub fn forget(&mut self, pid: i32) {
        self.known.remove(&pid);
    }

    /// Whether some process is in its fast re-check phase, so the caller
    /// should tick faster than its idle rate.
    pub fn has_fast_pending(&self, now: Instant) -> bool {
        self.known.values().any(
            |(_, c)| matches!(c, Class::Pending { first_seen, .. } if now.duration_since(*first_seen) < PENDING_FAST),
        )
    }

    fn classify(
        &self,
        pid: i32,
        start: u64,
        ppid: i32,
        now: Instant,
        first_seen: Option<Instant>,
    ) -> Option<Class> {
        if ppid != 0 || start < self.floor {
            return Some(Class::NotOurs);
        }
        match procfs::has_mount_point(&self.proc_root, pid, &self.mount_point) {
            Ok(true) => Some(Class::Match),
            Ok(false) | Err(ProcError::Malformed(_)) | Err(ProcError::Io { .. }) => {
                let first_seen = first_seen.unwrap_or(now);
                let age = now.duration_since(first_seen);
                if age >= PENDING_GIVE_UP {
                    Some(Class::NotOurs)
                } else if age >= PENDING_FAST {
                    Some(Class::Pending {
                        first_seen,
                        next: now + PENDING_SLOW_INTERVAL,
                    })
                } else {
                    Some(Class::Pending {
                        first_seen,
                        next: now,
                    })
                }
            }
            Err(ProcError::Gone) => None,
        }
    }

    /// One tick: notice new processes, re-check pending ones, and return the
    /// oldest match (not yet verified alive: attach with a pidfd and check the
    /// start time again).
    pub fn step(&mut self, now: Instant) -> io::Result<Option<Instance>> {
        let last = self.last_pid.as_mut().and_then(|l| l.read().ok());
        if last.is_none() || last != self.seen_last_pid {
            self.seen_last_pid = last;
            let pids = procfs::list_pids(&self.proc_root)?;
            let live: std::collections::HashSet<i32> = pids.iter().copied().collect();
            self.known.retain(|pid, _| live.contains(pid));
            for pid in pids {
                if self.known.contains_key(&pid) {
                    continue;
                }
                let Ok(stat) = procfs::read_stat(&self.proc_root, pid) else {
                    continue;
                };
                if stat.state == b'Z' {
                    continue;
                }
                if let Some(class) = self.classify(pid, stat.start_time, stat.ppid, now, None) {
                    self.known.insert(pid, (stat.start_time, class));
                }
            }
        }
        // Re-check pending processes that are due.
        let due: Vec<(i32, u64, Instant)> = self
            .known
            .iter()
            .filter_map(|(pid, (start, c))| match c {
                Class::Pending { first_seen, next } if *next <= now => {
                    Some((*pid, *start, *first_seen))
                }
                _ => None,
            })
            .collect();
        for (pid, start, first_seen) in due {
            match procfs::read_stat(&self.proc_root, pid) {
                Ok(s) if s.start_time == start && s.state != b'Z' => {
                    match self.classify(pid, start, s.ppid, now, Some(first_seen)) {
                        Some(c) => {
                            self.known.insert(pid, (start, c));
                        }
                        None => {
                            self.known.remove(&pid);
                        }
                    }
                }
                _ => {
                    self.known.remove(&pid);
                }
            }
        }
        Ok(self
            .known
            .iter()
            .filter(|(_, (start, c))| matches!(c, Class::Match) && *start >= self.floor)
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
        let mp = "/nonexistent/kube-prestop-test-mount".to_owned();
        assert_eq!(find_oldest(proc_root, &mp).unwrap(), None);
        let mut s = Scanner::new(proc_root, mp);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
        assert_eq!(s.step(Instant::now()).unwrap(), None);
    }
}
