//! `prestop`: the wrapper that replaces a watched container's
//! `preStop.exec.command`.
//!
//! The kubelet runs it inside the watched container (its mount and PID
//! namespaces, via the runtime's exec) *before* it sends the stop signal. It
//! finds the container's current instance with the same finder as the
//! watcher (the container process is the oldest parentless process with the
//! identifying mount; the wrapper itself is younger), writes
//! `prestop-<instance>` so the watcher does not run the hook a second time
//! when the container then exits, and `execvp`s the original command: same
//! process, arguments, environment and exit status. Failing to write the mark
//! never stops the original command from running.

use std::ffi::CString;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::execvp;

use crate::cli::Target;
use crate::finder::{self, Instance};
use crate::log;
use crate::procfs::PROC_ROOT;
use crate::state::StateStore;
use kube_prestop_contract as contract;

/// Errors of [`mark`].
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// The container's process was not found.
    #[error(
        "no process of container {0} found (no parentless process with its identifying mount {1})"
    )]
    NotFound(String, String),
    /// `/proc` could not be listed.
    #[error("cannot scan /proc: {0}")]
    Scan(std::io::Error),
    /// The mark could not be written.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

/// Finds `target`'s current instance and writes its `prestop-<id>` mark.
pub fn mark(target: &Target, proc_root: &Path) -> Result<Instance, MarkError> {
    let mp = finder::id_mount(proc_root, &target.root, &target.id_root, &target.container);
    let inst = finder::find_oldest(proc_root, &mp)
        .map_err(MarkError::Scan)?
        .ok_or_else(|| MarkError::NotFound(target.container.clone(), mp.to_string()))?;
    let store = StateStore::new(&target.root, &target.container);
    store.ensure_dir()?;
    let record = contract::PrestopRecord {
        wrapper_pid: std::process::id(),
    };
    store.write(
        &contract::RecordKind::Prestop.file_name(&inst.id()),
        &record.to_string(),
    )?;
    Ok(inst)
}

/// Replaces this process with `hook` (`execvp`). Returns only on failure,
/// with the shell's status: 127 when the command does not exist, 126 when it
/// cannot be executed.
pub fn exec(hook: &[String]) -> i32 {
    let Ok(argv) = hook
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        log!("prestop: command contains a NUL byte");
        return contract::EXIT_COMMAND_NOT_EXECUTABLE;
    };
    let Some(prog) = argv.first() else {
        return contract::EXIT_COMMAND_NOT_FOUND;
    };
    let e = match execvp(prog, &argv) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    let name = hook.first().map(String::as_str).unwrap_or("");
    match e {
        Errno::ENOENT | Errno::ENOTDIR => {
            log!("prestop: {name}: command not found");
            contract::EXIT_COMMAND_NOT_FOUND
        }
        other => {
            log!("prestop: {name}: cannot execute: {}", other.desc());
            contract::EXIT_COMMAND_NOT_EXECUTABLE
        }
    }
}

/// The whole `prestop` subcommand: mark (best effort), then exec.
pub fn run(target: &Target, hook: &[String]) -> i32 {
    if let Err(e) = mark(target, Path::new(PROC_ROOT)) {
        log!(
            "prestop: could not record the kubelet's preStop run for container {}: {e}; running the preStop command anyway",
            target.container
        );
    }
    exec(hook)
}
