//! Holding the watched container's root file system so the hook can read
//! it after the container exited (`KUBE_PRESTOP_ROOT`).
//!
//! While the container's process runs, the watcher opens
//! `/proc/<pid>/ns/mnt` (which keeps the container's mount namespace, with
//! every mount in it, volumes included, alive after its last process exits)
//! and `/proc/<pid>/root` (`O_PATH`, a reference to the container's root
//! directory in that namespace). Both opens need the same access as
//! `ptrace(PTRACE_MODE_READ_FSCREDS)`: the watcher runs with the container's
//! user and capabilities, so it has it unless the container's process gained
//! more (a setuid binary, file capabilities) or is not dumpable; then the
//! open fails with `EACCES` and the hook runs without the root (logged).
//! Neither can be opened once the process has exited (its `fs` and
//! `nsproxy` are gone), which is why this happens while it runs.
//!
//! A process found before `pivot_root` still has the host's root: the hold
//! is taken only once the process's own mountinfo shows the identifying
//! mount at exactly its path (mountinfo paths are relative to the process's
//! root), and is retried until then.
//!
//! The hook reaches the root through the watcher's file descriptor:
//! `/proc/<watcher pid>/fd/<n>` (a "magic link": path lookup continues from
//! the held directory, crossing into the held namespace's mounts), so a
//! child of the hook that closes inherited descriptors still gets there. The
//! descriptors are close-on-exec: the hook does not inherit them. Dropping a
//! [`HeldRoot`] closes both; the namespace (and with it the mounts the
//! kubelet wants to tear down) is released once no process is inside it.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::procfs;

/// The container's root directory and mount namespace, held open.
#[derive(Debug)]
pub struct HeldRoot {
    root: OwnedFd,
    _mnt_ns: OwnedFd,
}

/// Why the root could not be held (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// The process's root is not the container's yet (found before
    /// `pivot_root`): try again while it runs.
    #[error("the process has not entered its root file system yet")]
    NotSetUp,
    /// The process is gone, or its PID now names another process.
    #[error("the process is gone")]
    Gone,
    /// An open failed.
    #[error("cannot open {path}: {errno}")]
    Open {
        /// What was opened.
        path: PathBuf,
        /// The error (`EACCES`: the watcher may not look into this process).
        errno: Errno,
    },
}

fn open_raw(path: &Path, flags: libc::c_int) -> Result<OwnedFd, HoldError> {
    let err = |errno| HoldError::Open {
        path: path.to_owned(),
        errno,
    };
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| err(Errno::EINVAL))?;
    // SAFETY: valid C string; plain open(2).
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(err(Errno::last()));
    }
    // SAFETY: the kernel returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl HeldRoot {
    /// Holds the root and mount namespace of process `pid` (start time
    /// `start_time`, in `proc_root`'s PID namespace), whose identifying
    /// mount is at `id_mount_point` inside the container.
    ///
    /// # Errors
    /// [`HoldError::NotSetUp`] before `pivot_root`; [`HoldError::Gone`];
    /// [`HoldError::Open`] (e.g. `EACCES`).
    pub fn hold(
        proc_root: &Path,
        pid: i32,
        start_time: u64,
        id_mount_point: &str,
    ) -> Result<Self, HoldError> {
        let dir = proc_root.join(pid.to_string());
        let mountinfo = dir.join("mountinfo");
        let content = procfs::read_small(&mountinfo).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT | libc::ESRCH) => HoldError::Gone,
            Some(n) => HoldError::Open {
                path: mountinfo.clone(),
                errno: Errno::from_raw(n),
            },
            None => HoldError::Gone,
        })?;
        if procfs::mountinfo_source_of(&content, id_mount_point).is_none() {
            return Err(HoldError::NotSetUp);
        }
        let gone = |e: HoldError| match e {
            HoldError::Open {
                errno: Errno::ENOENT | Errno::ESRCH,
                ..
            } => HoldError::Gone,
            e => e,
        };
        let mnt_ns = open_raw(&dir.join("ns/mnt"), libc::O_RDONLY).map_err(gone)?;
        let root = open_raw(&dir.join("root"), libc::O_PATH | libc::O_DIRECTORY).map_err(gone)?;
        // The PID still names that process (not a reused one).
        match procfs::read_stat(proc_root, pid) {
            Ok(s) if s.start_time == start_time => Ok(Self {
                root,
                _mnt_ns: mnt_ns,
            }),
            _ => Err(HoldError::Gone),
        }
    }

    /// The held root directory's descriptor (close-on-exec).
    pub fn root_fd(&self) -> RawFd {
        self.root.as_raw_fd()
    }

    /// The path the hook is given: `<proc_root>/<watcher_pid>/fd/<n>`.
    pub fn hook_path(&self, proc_root: &Path, watcher_pid: i32) -> PathBuf {
        proc_root
            .join(watcher_pid.to_string())
            .join("fd")
            .join(self.root.as_raw_fd().to_string())
    }
}

/// `CAP_SYS_CHROOT` (`include/uapi/linux/capability.h`).
pub const CAP_SYS_CHROOT: u32 = 18;

/// Whether the `CapEff:` line of a `/proc/PID/status` text has capability
/// `cap`. `None` when there is no such line or it does not parse.
pub fn status_has_cap(status: &str, cap: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let bits = u64::from_str_radix(hex, 16).ok()?;
    Some(bits & (1u64 << cap) != 0)
}

/// Whether this process may `chroot(2)`: `CAP_SYS_CHROOT` in its effective
/// set (`<proc_root>/self/status`). Unreadable counts as no.
pub fn can_chroot(proc_root: &Path) -> bool {
    procfs::read_small(&proc_root.join("self/status"))
        .ok()
        .and_then(|s| status_has_cap(&s, CAP_SYS_CHROOT))
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_from_status() {
        let st = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\n";
        // The container runtime's default set includes CAP_SYS_CHROOT.
        assert_eq!(status_has_cap(st, CAP_SYS_CHROOT), Some(true));
        let st = "CapEff:\t0000000000000000\n";
        assert_eq!(status_has_cap(st, CAP_SYS_CHROOT), Some(false));
        assert_eq!(status_has_cap("Name: x\n", CAP_SYS_CHROOT), None);
        assert_eq!(status_has_cap("CapEff:\tzz\n", CAP_SYS_CHROOT), None);
    }

    #[test]
    fn own_root_is_held_and_reachable() {
        let proc_root = Path::new(procfs::PROC_ROOT);
        let me = std::process::id() as i32;
        let st = procfs::read_stat(proc_root, me).unwrap();
        // procfs is mounted at /proc in our own mountinfo.
        let held = HeldRoot::hold(proc_root, me, st.start_time, "/proc").unwrap();
        let p = held.hook_path(proc_root, me);
        assert!(p.join("proc").is_dir());
        assert_eq!(
            HeldRoot::hold(proc_root, me, st.start_time, "/nonexistent/kps").unwrap_err(),
            HoldError::NotSetUp
        );
        assert_eq!(
            HeldRoot::hold(proc_root, me, st.start_time + 1, "/proc").unwrap_err(),
            HoldError::Gone
        );
    }
}
