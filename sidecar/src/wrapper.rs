//! `prestop`: the wrapper that replaces a watched container's
//! `preStop.exec.command`.
//!
//! The kubelet runs it inside the watched container (its mount and PID
//! namespaces, via the runtime's exec) *before* it sends the stop signal. It
//! finds the container's current instance with the same finder as the
//! watcher (the container process is the oldest parentless process with the
//! identifying mount; the wrapper itself is younger), writes
//! `prestop-<instance>` so the watcher does not run the hook a second time
//! when the container then exits, runs the original command as its child
//! (same arguments, environment, streams and exit status) and writes
//! `prestop-ended-<instance>` once it ended: a mark without it, whose
//! wrapper is gone, is a preStop that the container's own exit cut short.
//! Failing to write the mark never stops the original command from running.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::execvp;

use crate::cli::Target;
use crate::finder::{self, Instance};
use crate::hook;
use crate::log;
use crate::poststart;
use crate::procfs::{self, PROC_ROOT};
use crate::state::{Found, StateError, StateStore};
use kube_prestop_contract::{self as contract, HookStatus};

/// Errors of [`mark`].
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// The container's process was not found.
    #[error(
        "no process of container {0} found (no parentless process with its identifying mount {1})"
    )]
    NotFound(String, String),
    /// The container's instance `id`, which the watcher found, has exited:
    /// it ended on its own as the kubelet began its preStop, and the watcher
    /// runs the hook for that exit.
    #[error(
        "container {container} instance {id} has exited; the watcher found it and runs the hook for that exit"
    )]
    ExitedFirst {
        /// The watched container.
        container: String,
        /// The exited instance.
        id: String,
    },
    /// `/proc` could not be listed.
    #[error("cannot scan /proc: {0}")]
    Scan(std::io::Error),
    /// The mark could not be written.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

/// Which instance the kubelet's preStop run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Mark this instance.
    Mark(Instance),
    /// The newest instance the watcher found has exited and nothing newer
    /// runs: the container ended on its own while the wrapper looked, and
    /// the watcher takes that exit.
    ExitedFirst(Instance),
    /// Nothing to mark.
    NotFound,
}

/// Decides which instance to mark, pure: `found` is the oldest parentless
/// process with the identifying mount ([`finder::find_oldest`]), `me` this
/// wrapper (which has the mount and no parent in the namespace too, so once
/// the container's process is gone `found` is the wrapper itself or a
/// younger process), `seen` the instances the watcher recorded
/// (`seen-<id>`), `alive` whether an instance still runs.
///
/// Before, a wrapper that looked just after the container exited marked
/// its own id, and both the kubelet's preStop and the hook ran.
pub fn choose(
    found: Option<Instance>,
    me: Option<Instance>,
    seen: &[Instance],
    alive: impl Fn(&Instance) -> bool,
) -> Choice {
    let older_than_me =
        |i: &Instance| me.is_none_or(|m| (i.start_time, i.pid) < (m.start_time, m.pid));
    let found = found.filter(older_than_me);
    let newest_seen = seen
        .iter()
        .copied()
        .filter(older_than_me)
        .max_by_key(|i| (i.start_time, i.pid));
    match (newest_seen, found) {
        (Some(s), _) if alive(&s) => Choice::Mark(s),
        (Some(s), Some(f)) if (f.start_time, f.pid) > (s.start_time, s.pid) => Choice::Mark(f),
        (Some(s), _) => Choice::ExitedFirst(s),
        (None, Some(f)) => Choice::Mark(f),
        (None, None) => Choice::NotFound,
    }
}

/// Finds `target`'s current instance ([`choose`]) and writes its
/// `prestop-<id>` mark.
pub fn mark(target: &Target, proc_root: &Path) -> Result<Marked, MarkError> {
    let mp = finder::id_mount(proc_root, &target.root, &target.container);
    let found = finder::find_oldest(proc_root, &mp).map_err(MarkError::Scan)?;
    let me = procfs::self_pid(proc_root).ok().and_then(|pid| {
        procfs::read_stat(proc_root, pid).ok().map(|st| Instance {
            pid,
            start_time: st.start_time,
        })
    });
    let store = StateStore::new(&target.root, &target.container);
    let seen: Vec<Instance> = store
        .list()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| match contract::RecordKind::parse_file_name(n) {
            Some((contract::RecordKind::Seen, id)) => Instance::from_id(id),
            _ => None,
        })
        .collect();
    let inst = match choose(found, me, &seen, |i| i.is_alive(proc_root)) {
        Choice::Mark(i) => i,
        Choice::ExitedFirst(i) => {
            return Err(MarkError::ExitedFirst {
                container: target.container.clone(),
                id: i.id(),
            });
        }
        Choice::NotFound => {
            return Err(MarkError::NotFound(
                target.container.clone(),
                mp.to_string(),
            ));
        }
    };
    store.check_dir()?;
    let record = contract::PrestopRecord {
        wrapper_pid: std::process::id(),
    };
    let name = contract::RecordKind::Prestop.file_name(&inst.id());
    match store.write(&name, &record.to_string()) {
        Ok(()) => Ok(Marked {
            instance: inst,
            again: false,
        }),
        // A second delivery of the same preStop: Kubernetes delivers hooks
        // at least once (kubernetes.io, "Container Lifecycle Hooks", Hook
        // delivery guarantees: e.g. a kubelet restarted while sending it).
        // The first delivery's mark, a well-formed one, stands.
        Err(StateError::Refused {
            found: Found::Exists,
            ..
        }) if store
            .read(&name)
            .as_deref()
            .and_then(contract::PrestopRecord::parse)
            .is_some() =>
        {
            Ok(Marked {
                instance: inst,
                again: true,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// What [`mark`] marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marked {
    /// The instance the kubelet's preStop run belongs to.
    pub instance: Instance,
    /// The instance was marked already, by an earlier delivery of the same
    /// preStop (hook delivery is at least once); the earlier mark stands.
    pub again: bool,
}

/// Writes `line` where an operator sees it: this process's stderr (which the
/// kubelet discards for a preStop handler that succeeds) and the log of the
/// container's watcher, found through its `armed` mark and verified as a
/// sidecar's watcher ([`poststart::check_mark`] with
/// [`poststart::Scope::OtherContainer`]: the wrapper runs in X, the watcher
/// in its sidecar), best effort: never blocking, at most
/// [`poststart::LOG_WRITE_LIMIT`] ([`poststart::write_to_watcher_log`]).
fn report(target: &Target, proc_root: &Path, line: &str) {
    log!("{line}");
    let store = StateStore::new(&target.root, &target.container);
    if let poststart::Mark::Live { pid, start_time } =
        poststart::check_mark(&store, proc_root, poststart::Scope::OtherContainer)
    {
        let _ = poststart::write_to_watcher_log(
            proc_root,
            Instance { pid, start_time },
            &format!("{} {line}\n", crate::LOG_PREFIX),
            poststart::LOG_WRITE_LIMIT,
        );
    }
}

/// Runs `hook` as a child (same arguments, environment, standard streams,
/// and `PATH` lookup as `execvp`), waits for it, and writes
/// `prestop-ended-<id>` for `inst` with its status, so that the watcher can
/// tell a preStop that ended from one the container's exit cut short (the
/// runtime then kills this wrapper too, and the record is never written).
/// Returns the command's status as a shell reports it: its exit code,
/// `128 + signal`, 127 when it does not exist, 126 when it cannot be
/// executed.
fn run_and_record(target: &Target, proc_root: &Path, hook: &[OsString], marked: Marked) -> i32 {
    let inst = marked.instance;
    use std::os::unix::process::ExitStatusExt as _;
    let Some((prog, args)) = hook.split_first() else {
        return contract::EXIT_COMMAND_NOT_FOUND;
    };
    let status = match std::process::Command::new(prog).args(args).status() {
        Ok(st) => match (st.code(), st.signal()) {
            (Some(code), _) => HookStatus::Exited(code),
            (None, Some(signal)) => HookStatus::Signaled(signal),
            (None, None) => HookStatus::NotExecutable,
        },
        Err(e) => {
            let status = hook::spawn_error_status(&e);
            match status {
                HookStatus::NotFound => log!("prestop: {}: command not found", prog.display()),
                _ => log!("prestop: {}: cannot execute: {e}", prog.display()),
            }
            status
        }
    }
    .code();
    let store = StateStore::new(&target.root, &target.container);
    let record = contract::PrestopEndedRecord {
        exit_status: status,
    };
    match store.write(
        &contract::RecordKind::PrestopEnded.file_name(&inst.id()),
        &record.to_string(),
    ) {
        Ok(()) => {}
        // The earlier delivery's run ended first and said so.
        Err(StateError::Refused {
            found: Found::Exists,
            ..
        }) if marked.again => {}
        Err(e) => report(
            target,
            proc_root,
            &format!(
                "error: prestop: cannot record that the kubelet's preStop of container {} instance {} ended: {e}; the watcher may take it for one cut short and run the hook too",
                target.container,
                inst.id()
            ),
        ),
    }
    status
}

/// Replaces this process with `hook` (`execvp`), its arguments passed as
/// the bytes they are (UTF-8 or not). Returns only on failure, with the
/// shell's status: 127 when the command does not exist, 126 when it cannot
/// be executed.
pub fn exec(hook: &[OsString]) -> i32 {
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
    let name = hook
        .first()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
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

/// The whole `prestop` subcommand: mark, then run the command and record
/// that it ended ([`run_and_record`]); when the mark cannot be written, exec
/// the command (best effort), and report the failure into the watcher's log
/// too. When the container ended
/// on its own as the kubelet began its preStop ([`MarkError::ExitedFirst`]),
/// the command is not run: the watcher runs the hook for that exit, once.
pub fn run(target: &Target, hook: &[OsString]) -> i32 {
    let proc_root = Path::new(PROC_ROOT);
    match mark(target, proc_root) {
        Ok(marked) => {
            if marked.again {
                report(
                    target,
                    proc_root,
                    &format!(
                        "prestop: the kubelet delivered the preStop of container {} instance {} again (hook delivery is at least once); the first delivery's mark stands, and the command runs again as the kubelet asks",
                        target.container,
                        marked.instance.id()
                    ),
                );
            }
            return run_and_record(target, proc_root, hook, marked);
        }
        Err(e @ MarkError::ExitedFirst { .. }) => {
            report(
                target,
                proc_root,
                &format!("prestop: {e}; the kubelet's preStop run does not run it a second time"),
            );
            return 0;
        }
        Err(e) => report(
            target,
            proc_root,
            &format!(
                "error: prestop: could not record the kubelet's preStop run for container {}: {e}; running the preStop command anyway (the hook may run twice for this exit)",
                target.container
            ),
        ),
    }
    exec(hook)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(pid: i32, start: u64) -> Instance {
        Instance {
            pid,
            start_time: start,
        }
    }

    #[test]
    fn the_running_instance_the_watcher_found_is_marked() {
        let x = i(10, 100);
        let me = Some(i(50, 500));
        assert_eq!(choose(Some(x), me, &[x], |_| true), Choice::Mark(x));
        // Found by the wrapper only (the watcher has not written seen yet).
        assert_eq!(choose(Some(x), me, &[], |_| true), Choice::Mark(x));
        // A restart the watcher has not seen yet.
        let old = i(7, 70);
        assert_eq!(choose(Some(x), me, &[old], |i| *i == x), Choice::Mark(x));
    }

    #[test]
    fn a_container_that_exited_while_the_wrapper_looked_is_left_to_the_watcher() {
        // Before: the wrapper found itself and marked its own id.
        let x = i(10, 100);
        let me = i(50, 500);
        assert_eq!(
            choose(Some(me), Some(me), &[x], |i| *i == me),
            Choice::ExitedFirst(x)
        );
        // A younger process (another exec) is not the container either.
        let younger = i(60, 600);
        assert_eq!(
            choose(Some(younger), Some(me), &[x], |i| *i != x),
            Choice::ExitedFirst(x)
        );
        assert_eq!(choose(Some(me), Some(me), &[], |_| true), Choice::NotFound);
        assert_eq!(choose(None, Some(me), &[], |_| true), Choice::NotFound);
    }
}
