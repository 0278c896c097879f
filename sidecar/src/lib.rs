//! kube-prestop sidecar: watches a Job container through the pod's shared PID
//! namespace and runs its preStop command when it exits on its own.
//!
//! The wire it shares with the webhook, which writes the pod specs that run
//! this binary (paths, subcommands and flags, environment, the records in
//! the state volumes), is the `kube-prestop-contract` crate. The modules here
//! are the binary's parts, one job each:
//!
//! - [`procfs`]: reading `/proc` (processes vanish mid-read; that is normal);
//! - [`finder`]: finding the watched container's process by its identifying mount;
//! - [`state`]: the per-instance records in the state directories (atomic writes);
//! - [`exit_info`]: the container's exit status through its pidfd (`PIDFD_INFO_EXIT`);
//! - [`run_on`]: whether a hook runs, by `--run-on` and the exit status (pure);
//! - [`container_process`]: the first process of the caller's container in the shared PID namespace;
//! - [`container_root`]: holding the container's root and mount namespace for the hook;
//! - [`cpu_stat`]: the sidecar's own CPU throttling, from its cgroup's `cpu.stat`;
//! - [`termination`]: the sidecar's termination message (a summary of the pod's hook runs);
//! - [`sender`]: whether a stop signal came from the runtime or from a process of the pod;
//! - [`hook`]: running the hook command as a child in its own process group;
//! - [`recovery`]: what a restarted watcher does about a previous run's records (pure);
//! - [`lifecycle`]: the watcher's decisions, events in and actions out (pure);
//! - [`watch`]: the `watch` main loop (pidfd + signalfd in `poll`), the I/O shell around [`lifecycle`];
//! - [`wrapper`]: the `prestop` wrapper that replaces the container's preStop;
//! - [`install`]: copying the binary into the binary's volume;
//! - [`signal`]: Argo's kill command, signalling the first process of the caller's container;
//! - [`gate`]: the start gate, the `httpGet` postStart handler the watcher answers once armed;
//! - [`poststart`]: the exec postStart handler, which waits until the watcher is armed;
//! - [`cli`]: command-line parsing over the contract's names.
//!
//! The sidecar's own log lines go to stderr, one line per event, each starting
//! with [`LOG_PREFIX`]; the hook's output is passed through untouched.

pub mod cli;
pub mod container_process;
pub mod container_root;
pub mod cpu_stat;
pub mod exit_info;
pub mod finder;
pub mod gate;
pub mod hook;
pub mod install;
pub mod lifecycle;
pub mod poststart;
pub mod procfs;
pub mod recovery;
pub mod run_on;
pub mod sender;
pub mod signal;
pub mod state;
pub mod termination;
pub mod watch;
pub mod wrapper;

/// Prefix of every line the binary itself writes to stderr.
pub const LOG_PREFIX: &str = "kube-prestop:";

/// Writes one log line `kube-prestop: <message>` to stderr with a single
/// `write(2)`, so it never interleaves mid-line with the hook's output, which
/// shares the file descriptor.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        let line = format!("{} {}\n", $crate::LOG_PREFIX, format_args!($($arg)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}
