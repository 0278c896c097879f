//! The watched container's exit status, read through the pidfd the watcher
//! holds on its process (which is not our child: the runtime's shim is its
//! parent and reaps it).
//!
//! Kernel facts this rests on (`fs/pidfs.c`, `kernel/exit.c`,
//! `include/uapi/linux/pidfd.h`; `PIDFD_INFO_EXIT` came with commit
//! 7477d7dce48a "pidfs: allow to retrieve exit information", Linux 6.15):
//!
//! - `ioctl(pidfd, PIDFD_GET_INFO, &info)` (Linux ≥ 6.13) fills
//!   `struct pidfd_info`; with `PIDFD_INFO_EXIT` in `info.mask` the kernel
//!   sets that bit in the answer and `exit_code` (byte 60, the `wait(2)`
//!   status word) once the exit information exists;
//! - the information is stored by `pidfs_exit()`, which `release_task()`
//!   calls when the process is **reaped** (not when it becomes a zombie),
//!   and only for a `struct pid` that had a pidfd by then: ours, opened
//!   while the container ran (or was a zombie), qualifies;
//! - `pidfd_info()` answers only for a process in the caller's PID namespace
//!   or a descendant (`pid_in_current_pidns`; `ESRCH`, `EREMOTE` since early
//!   2026): the pod's shared PID namespace is the watcher's own;
//! - `pidfd_poll()` reports `POLLIN` once the process is a zombie and
//!   `POLLHUP` once it is reaped (no task left); `__unhash_process()` wakes
//!   the pidfd's waiters at the reap, after `pidfs_exit()` stored the
//!   status. So polling the pidfd for `POLLHUP` alone (an empty `events`
//!   mask: `POLLHUP` is always reported, `POLLIN` then filtered out) sleeps
//!   until the reap, and the status is readable when it returns;
//! - on 6.13/6.14 the ioctl exists without `PIDFD_INFO_EXIT` (a reaped
//!   process gives `ESRCH`); before 6.13 it fails with `ENOTTY`/`EINVAL`.
//!   [`probe`] tells these apart once, on a child of our own.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;

use kube_prestop_contract::ContainerEnd;

/// `PIDFD_INFO_EXIT` (`include/uapi/linux/pidfd.h`, Linux 6.15): request
/// (and, in the answer, presence of) the exit status.
pub const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// `PIDFD_INFO_SIZE_VER0`: the size of the first `struct pidfd_info`, the
/// smallest the kernel accepts (it copies at most what both sides know).
pub const PIDFD_INFO_SIZE_VER0: usize = 64;
/// `PIDFD_GET_INFO` = `_IOWR(0xFF, 11, struct pidfd_info)` with the 64-byte
/// first version of the struct: direction read|write (3) << 30, size << 16,
/// type `PIDFS_IOCTL_MAGIC` (0xFF) << 8, number 11.
pub const PIDFD_GET_INFO: u64 =
    (3 << 30) | ((PIDFD_INFO_SIZE_VER0 as u64) << 16) | (0xFF << 8) | 11;

/// `struct pidfd_info` as of Linux 6.15 (`PIDFD_INFO_SIZE_VER0`, 64 bytes);
/// later kernels append fields, which a 64-byte buffer does not receive.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PidfdInfo {
    /// In: what is requested; out: what was filled in.
    pub mask: u64,
    /// cgroup v2 id.
    pub cgroupid: u64,
    /// PID in the caller's namespace.
    pub pid: u32,
    /// Thread group id.
    pub tgid: u32,
    /// Parent PID.
    pub ppid: u32,
    /// Real uid.
    pub ruid: u32,
    /// Real gid.
    pub rgid: u32,
    /// Effective uid.
    pub euid: u32,
    /// Effective gid.
    pub egid: u32,
    /// Saved uid.
    pub suid: u32,
    /// Saved gid.
    pub sgid: u32,
    /// Filesystem uid.
    pub fsuid: u32,
    /// Filesystem gid.
    pub fsgid: u32,
    /// The `wait(2)` status word, valid when `mask` has [`PIDFD_INFO_EXIT`].
    pub exit_code: i32,
}

const _: () = assert!(std::mem::size_of::<PidfdInfo>() == PIDFD_INFO_SIZE_VER0);
const _: () = assert!(std::mem::offset_of!(PidfdInfo, exit_code) == 60);

/// How the container's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerExit {
    /// `exit(code)`: 0–255.
    Code(u8),
    /// Killed by this signal (9 for SIGKILL, which is also how the kernel's
    /// OOM killer and a cgroup memory limit end a process).
    Signal(i32),
}

impl ContainerExit {
    /// Decodes a `wait(2)` status word (`WIFEXITED`/`WEXITSTATUS`,
    /// `WIFSIGNALED`/`WTERMSIG`); `None` for a stopped/continued word.
    pub fn from_wait_status(status: i32) -> Option<Self> {
        let low = status & 0x7f;
        if low == 0 {
            Some(Self::Code(((status >> 8) & 0xff) as u8))
        } else if low != 0x7f {
            Some(Self::Signal(low))
        } else {
            None
        }
    }

    /// Whether this is a success: exit code 0.
    pub fn success(self) -> bool {
        self == Self::Code(0)
    }

    /// `exit 3`, `signal 9`: for logs and records.
    pub fn describe(self) -> String {
        match self {
            Self::Code(c) => format!("exit {c}"),
            Self::Signal(s) => format!("signal {s}"),
        }
    }
}

/// Why the exit status of an instance is not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// The kernel cannot tell ([`probe`] failed; logged once at start).
    Kernel,
    /// No pidfd was held on the process (it was gone when found, or
    /// `pidfd_open` failed).
    NoPidfd,
    /// The process was not reaped by its parent within this many ms.
    NotReaped(u64),
    /// `PIDFD_GET_INFO` failed with this error.
    Ioctl(Errno),
    /// The reaped process's information had no exit status.
    NotRecorded,
    /// The instance exited while the sidecar was not running.
    SidecarDown,
    /// The watcher never saw the instance: a late run
    /// ([`kube_prestop_contract::ENV_HOOK_LATE`]).
    Unseen,
}

impl Unknown {
    /// One phrase for the log line.
    pub fn describe(self) -> String {
        match self {
            Self::Kernel => "the kernel cannot report it (PIDFD_INFO_EXIT needs Linux 6.15)".into(),
            Self::NoPidfd => {
                "no pidfd was held on the process (gone when found, or pidfd_open failed)".into()
            }
            Self::NotReaped(ms) => {
                format!("the process was not reaped by its parent within {ms} ms")
            }
            Self::Ioctl(e) => format!("PIDFD_GET_INFO failed: {e}"),
            Self::NotRecorded => "the kernel recorded none for it".into(),
            Self::SidecarDown => "it exited while the sidecar was not running".into(),
            Self::Unseen => "the watcher never saw that run of the container".into(),
        }
    }
}

/// What is known about an instance's exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKnowledge {
    /// Read from the kernel.
    Known(ContainerExit),
    /// Not known, and why.
    Unknown(Unknown),
}

impl ExitKnowledge {
    /// `exit 3`, `signal 9` or `unknown`.
    pub fn describe(self) -> String {
        match self {
            Self::Known(e) => e.describe(),
            Self::Unknown(_) => "unknown".to_owned(),
        }
    }

    /// As records and the termination message write it (`exit:3`,
    /// `signal:9` or `unknown`: the same without spaces).
    pub fn token(self) -> ContainerEnd {
        match self {
            Self::Known(ContainerExit::Code(c)) => ContainerEnd::Exit(c),
            Self::Known(ContainerExit::Signal(s)) => ContainerEnd::Signal(s),
            Self::Unknown(_) => ContainerEnd::Unknown,
        }
    }
}

/// `PIDFD_GET_INFO` asking for [`PIDFD_INFO_EXIT`].
///
/// # Errors
/// The ioctl's errno (`ESRCH` when the process is gone and the kernel has
/// no exit information, `ENOTTY`/`EINVAL` before Linux 6.13).
pub fn get_info(pidfd: BorrowedFd<'_>) -> Result<PidfdInfo, Errno> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: `info` is a valid, writable 64-byte `struct pidfd_info`, the
    // size encoded in the request number.
    let r = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            std::ptr::from_mut(&mut info),
        )
    };
    if r < 0 { Err(Errno::last()) } else { Ok(info) }
}

/// Waits until the process behind `pidfd` (already a zombie, or gone) is
/// reaped, at most `max`; `true` once it is. Sleeps in `ppoll` for
/// `POLLHUP` only (see the module docs); interrupted waits resume.
pub fn wait_reaped(pidfd: BorrowedFd<'_>, max: Duration) -> bool {
    let end = Instant::now() + max;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(pidfd, PollFlags::empty())];
        match ppoll(&mut fds, Some(TimeSpec::from_duration(left)), None) {
            Ok(n) if n > 0 => {
                return fds[0]
                    .revents()
                    .is_some_and(|r| r.contains(PollFlags::POLLHUP));
            }
            Ok(_) => return false,
            Err(Errno::EINTR) if !left.is_zero() => {}
            Err(_) => return false,
        }
    }
}

/// The exit status of the process behind `pidfd`, which has exited (its
/// pidfd polled readable): waits up to `max` for its parent to reap it,
/// then asks the kernel.
pub fn read_after_exit(pidfd: BorrowedFd<'_>, max: Duration) -> ExitKnowledge {
    let started = Instant::now();
    if !wait_reaped(pidfd, max) {
        return ExitKnowledge::Unknown(Unknown::NotReaped(
            started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
        ));
    }
    match get_info(pidfd) {
        Ok(info) if info.mask & PIDFD_INFO_EXIT != 0 => {
            match ContainerExit::from_wait_status(info.exit_code) {
                Some(e) => ExitKnowledge::Known(e),
                None => ExitKnowledge::Unknown(Unknown::NotRecorded),
            }
        }
        Ok(_) => ExitKnowledge::Unknown(Unknown::NotRecorded),
        Err(e) => ExitKnowledge::Unknown(Unknown::Ioctl(e)),
    }
}

/// Whether this kernel reports the exit status of a reaped process through
/// a pidfd: forks a child that exits with 7 at once, holds a pidfd on it,
/// reaps it, and reads the status back. Call while the process has a
/// single thread (the child only calls `_exit`) and before `SIGCHLD` is
/// routed elsewhere.
///
/// # Errors
/// Why not, as one phrase for the log (`PIDFD_GET_INFO` missing, which is
/// before Linux 6.13; no `PIDFD_INFO_EXIT`, 6.13/6.14; or the probe failed).
pub fn probe() -> Result<(), String> {
    // SAFETY: the child only calls the async-signal-safe `_exit`.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(format!("probe failed: fork: {}", Errno::last()));
    }
    if child == 0 {
        // SAFETY: ends the forked child at once.
        unsafe { libc::_exit(7) };
    }
    let pidfd = crate::procfs::pidfd_open(child);
    let mut status = 0;
    // SAFETY: reaps our own child.
    while unsafe { libc::waitpid(child, &mut status, 0) } < 0 && Errno::last() == Errno::EINTR {}
    let pidfd = pidfd.map_err(|e| format!("probe failed: pidfd_open: {e}"))?;
    match get_info(pidfd.as_fd()) {
        Ok(info) if info.mask & PIDFD_INFO_EXIT != 0 => {
            match ContainerExit::from_wait_status(info.exit_code) {
                Some(ContainerExit::Code(7)) => Ok(()),
                other => Err(format!(
                    "probe failed: PIDFD_INFO_EXIT read back {other:?} for a child that exited with 7"
                )),
            }
        }
        Ok(_) | Err(Errno::ESRCH) => {
            Err("the kernel has no PIDFD_INFO_EXIT (needs Linux 6.15)".to_owned())
        }
        Err(e @ (Errno::ENOTTY | Errno::EINVAL)) => Err(format!(
            "the kernel has no PIDFD_GET_INFO ({e}; PIDFD_INFO_EXIT needs Linux 6.15)"
        )),
        Err(e) => Err(format!("probe failed: PIDFD_GET_INFO: {e}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn abi_constants() {
        assert_eq!(PIDFD_GET_INFO, 0xC040_FF0B);
        assert_eq!(PIDFD_INFO_EXIT, 8);
    }

    #[test]
    fn wait_status_words() {
        assert_eq!(
            ContainerExit::from_wait_status(0),
            Some(ContainerExit::Code(0))
        );
        assert_eq!(
            ContainerExit::from_wait_status(3 << 8),
            Some(ContainerExit::Code(3))
        );
        assert_eq!(
            ContainerExit::from_wait_status(255 << 8),
            Some(ContainerExit::Code(255))
        );
        assert_eq!(
            ContainerExit::from_wait_status(9),
            Some(ContainerExit::Signal(9))
        );
        // Core dumped: 0x80 on top of the signal.
        assert_eq!(
            ContainerExit::from_wait_status(0x80 | 6),
            Some(ContainerExit::Signal(6))
        );
        // Stopped.
        assert_eq!(ContainerExit::from_wait_status((19 << 8) | 0x7f), None);
        assert!(ContainerExit::Code(0).success());
        assert!(!ContainerExit::Code(1).success());
        assert!(!ContainerExit::Signal(9).success());
        assert_eq!(ContainerExit::Signal(9).describe(), "signal 9");
        let token = |e: ExitKnowledge| e.token().to_string();
        assert_eq!(
            token(ExitKnowledge::Known(ContainerExit::Code(3))),
            "exit:3"
        );
        assert_eq!(
            token(ExitKnowledge::Known(ContainerExit::Signal(9))),
            "signal:9"
        );
        assert_eq!(
            token(ExitKnowledge::Unknown(Unknown::SidecarDown)),
            "unknown"
        );
    }
}
