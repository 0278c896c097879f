//! `kube-prestop signal SIGNAL`: sends SIGNAL to the first process of the
//! container the command runs in ([`container_process`]), for Argo
//! Workflows' kill command in an injected pod ([`contract::SUBCOMMAND_SIGNAL`]
//! says why `kill 1` cannot be used there).

use std::path::Path;

use kube_prestop_contract as contract;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::container_process::{self, ProcReadError};
use crate::procfs;

/// Why no signal was sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// `/proc` could not be read.
    #[error(transparent)]
    Proc(#[from] ProcReadError),
    /// No process of the container other than this one.
    #[error("no process of this container besides this command")]
    NoProcess,
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

/// Sends `signal` to the first process of the caller's container, through
/// the procfs at `proc_root`; its PID.
///
/// Errors: [`SignalError::Proc`], [`SignalError::NoProcess`],
/// [`SignalError::Kill`].
pub fn signal_container(proc_root: &Path, signal: Signal) -> Result<i32, SignalError> {
    let pid = container_process::find(proc_root, |_| true)?.ok_or(SignalError::NoProcess)?;
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
