//! Running the hook: the watched container's declared preStop command, as a
//! child of the sidecar in its own process group.
//!
//! The child inherits the sidecar's environment (the watched container's
//! env, as the webhook copies it), working directory and stdout/stderr, so
//! its output reaches `kubectl logs POD -c SIDECAR` unchanged; stdin is
//! `/dev/null`, as for the kubelet's exec handlers. It also gets
//! [`contract::ENV_HOOK_CONTAINER`], [`contract::ENV_HOOK_INSTANCE`],
//! [`contract::ENV_HOOK_ATTEMPT`], and, when known,
//! [`contract::ENV_HOOK_EXIT_CODE`] or [`contract::ENV_HOOK_EXIT_SIGNAL`] and
//! [`contract::ENV_HOOK_ROOT`]; [`contract::ENV_HOOK_LATE`] for a run of the
//! container the watcher never saw ([`Unknown::Unseen`]) (any of these inherited from the sidecar's
//! environment is removed first, so the hook never sees a stale value).
//! With [`Chroot`], the child `chroot`s into the held container root before
//! `exec` (the command is then looked up in the container's file system)
//! and changes to the sidecar's working directory there (the container's
//! `workingDir`, which the webhook copies), or `/` if that does not exist.
//!
//! The caller is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so the hook's
//! orphaned descendants are re-parented to it and reaped by [`reap`]. When the
//! hook's leader exits, its process group is killed ([`kill_group`]). The
//! child gets `PR_SET_PDEATHSIG(SIGKILL)`: a hook never outlives a crashed
//! sidecar (as in Kubernetes, where the runtime kills the sidecar container's
//! processes with it), so the restarted sidecar's retry never runs in
//! parallel with the interrupted run.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::exit_info::{ContainerExit, ExitKnowledge, Unknown};
use kube_prestop_contract::{self as contract, HookStatus};

/// Chroot the hook into a held container root.
#[derive(Debug, Clone)]
pub struct Chroot {
    /// The held root directory (an `O_PATH` descriptor of the watcher,
    /// still open in the child until its `exec`).
    pub root_fd: RawFd,
    /// Directory to change to inside the new root; `/` when it is missing.
    pub cwd: CString,
}

/// What the hook is told about the run it answers.
#[derive(Debug, Clone)]
pub struct HookContext<'a> {
    /// The watched container.
    pub container: &'a str,
    /// The exited instance's id.
    pub instance: &'a str,
    /// 1, or 2 for a retry.
    pub attempt: u32,
    /// The container's exit status, if known.
    pub exit: ExitKnowledge,
    /// [`contract::ENV_HOOK_ROOT`], when the root is held.
    pub root: Option<&'a Path>,
    /// Run chrooted there ([`contract::HookRoot::Container`], with
    /// `CAP_SYS_CHROOT`).
    pub chroot: Option<Chroot>,
    /// The kubelet's own preStop for this exit was cut short
    /// ([`contract::ENV_HOOK_KUBELET_PRESTOP`] is `cut`).
    pub after_cut_prestop: bool,
}

/// A hook process that was started.
#[derive(Debug)]
pub struct RunningHook {
    /// PID of the hook's leader, also its process group id.
    pub pid: Pid,
    /// The instance id of the container run it is for.
    pub instance: String,
    /// 1, or 2 for a retry after a sidecar restart.
    pub attempt: u32,
    /// When it started.
    pub started: Instant,
}

/// Starts `argv` for the run `ctx` describes. On a spawn failure returns
/// the status to record (not found / not executable) and the error.
pub fn spawn(
    argv: &[OsString],
    ctx: &HookContext<'_>,
) -> Result<RunningHook, (HookStatus, io::Error)> {
    let Some((prog, args)) = argv.split_first() else {
        return Err((HookStatus::NotFound, io::Error::other("empty hook command")));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_remove(contract::ENV_HOOK_EXIT_CODE)
        .env_remove(contract::ENV_HOOK_EXIT_SIGNAL)
        .env_remove(contract::ENV_HOOK_ROOT)
        .env_remove(contract::ENV_HOOK_KUBELET_PRESTOP)
        .env_remove(contract::ENV_HOOK_LATE)
        .env(contract::ENV_HOOK_CONTAINER, ctx.container)
        .env(contract::ENV_HOOK_INSTANCE, ctx.instance)
        .env(contract::ENV_HOOK_ATTEMPT, ctx.attempt.to_string())
        .stdin(Stdio::null())
        .process_group(0);
    match ctx.exit {
        ExitKnowledge::Known(ContainerExit::Code(c)) => {
            cmd.env(contract::ENV_HOOK_EXIT_CODE, c.to_string());
        }
        ExitKnowledge::Known(ContainerExit::Signal(sig)) => {
            cmd.env(contract::ENV_HOOK_EXIT_SIGNAL, sig.to_string());
        }
        ExitKnowledge::Unknown(Unknown::Unseen) => {
            cmd.env(contract::ENV_HOOK_LATE, "1");
        }
        ExitKnowledge::Unknown(_) => {}
    }
    if ctx.after_cut_prestop {
        cmd.env(contract::ENV_HOOK_KUBELET_PRESTOP, "cut");
    }
    match (&ctx.chroot, ctx.root) {
        (Some(_), _) => {
            cmd.env(contract::ENV_HOOK_ROOT, "/");
        }
        (None, Some(r)) => {
            cmd.env(contract::ENV_HOOK_ROOT, r);
        }
        (None, None) => {}
    }
    let chroot = ctx.chroot.clone();
    // SAFETY: prctl, fchdir, chroot and chdir are async-signal-safe and
    // touch no memory of the parent; the CString was allocated before fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if let Some(c) = &chroot {
                if libc::fchdir(c.root_fd) != 0 || libc::chroot(c".".as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::chdir(c.cwd.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(child) => Ok(RunningHook {
            pid: Pid::from_raw(child.id() as i32),
            instance: ctx.instance.to_owned(),
            attempt: ctx.attempt,
            started: Instant::now(),
        }),
        Err(e) => Err((spawn_error_status(&e), e)),
    }
}

/// The status recorded for a command that could not be started, as a shell
/// would: [`HookStatus::NotFound`] (127) when it does not exist, else
/// [`HookStatus::NotExecutable`] (126).
pub fn spawn_error_status(e: &io::Error) -> HookStatus {
    match e.kind() {
        io::ErrorKind::NotFound => HookStatus::NotFound,
        _ => HookStatus::NotExecutable,
    }
}

/// Reaps every child that has exited (the hook and any re-parented orphan);
/// returns the status of `hook` if it was among them.
pub fn reap(hook: Option<Pid>) -> Option<HookStatus> {
    let mut found = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if Some(pid) == hook => {
                found = Some(HookStatus::Exited(code))
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if Some(pid) == hook => {
                found = Some(HookStatus::Signaled(sig as i32))
            }
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return found,
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(_) => return found,
        }
    }
}

/// Kills what is left of the hook's process group (`SIGKILL`); a group that
/// no longer exists is fine.
pub fn kill_group(pgid: Pid) {
    let _ = killpg(pgid, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn missing_command_is_127() {
        let ctx = HookContext {
            container: "c",
            instance: "1-2",
            attempt: 1,
            exit: ExitKnowledge::Unknown(crate::exit_info::Unknown::Kernel),
            root: None,
            chroot: None,
            after_cut_prestop: false,
        };
        let e = spawn(&["/nonexistent/kube-prestop-hook".into()], &ctx).unwrap_err();
        assert_eq!(e.0, HookStatus::NotFound);
        let e = spawn(&[], &ctx).unwrap_err();
        assert_eq!(e.0.code(), 127);
    }
}
