//! The kube-prestop sidecar binary; see the library docs and `--help`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::exit;

use kube_prestop_contract as contract;
use kube_prestop_sidecar::cli::{self, Cli, Invocation, USAGE};
use kube_prestop_sidecar::state::StateStore;
use kube_prestop_sidecar::{gate, install, log, poststart, procfs, signal, watch, wrapper};

fn main() {
    // As `OsString`s: the hook command after `--` is passed on verbatim,
    // UTF-8 or not (`cli` checks the rest).
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let parsed = match cli::decide(&args) {
        Invocation::Run(c) => c,
        // The user's preStop must never be lost because of us: a `prestop`
        // that is not a wrapper run (malformed flags, a help flag) still
        // runs the command after `--`.
        Invocation::PreStopFallback { why, hook } => {
            log!("prestop: error: {why}; running the preStop command without recording it");
            exit(wrapper::exec(&hook));
        }
        Invocation::Usage(e) => {
            log!("error: {e}\n{USAGE}");
            exit(contract::EXIT_USAGE);
        }
    };
    let code = match parsed {
        Cli::Help => {
            println!("{USAGE}");
            0
        }
        Cli::Version => {
            println!("kube-prestop {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Cli::Install { dest } => match install::install(Path::new("/proc/self/exe"), &dest) {
            Ok(()) => {
                log!("installed {}", dest.display());
                0
            }
            Err(e) => {
                log!("error: install failed: {e}");
                1
            }
        },
        Cli::InstallArchitectures { dest_dir } => match install::install_architectures(
            Path::new(contract::ARCHITECTURES_DIR),
            Path::new("/proc/self/exe"),
            contract::own_architecture(),
            &dest_dir,
        ) {
            Ok(copied) => {
                log!("installed {} into {}", copied.join(","), dest_dir.display());
                0
            }
            Err(e) => {
                log!("error: install failed: {e}");
                1
            }
        },
        Cli::Probe(t) => {
            let store = StateStore::new(&t.root, &t.container);
            let armed = store.path(contract::ARMED_FILE);
            match poststart::check_mark(
                &store,
                Path::new(procfs::PROC_ROOT),
                poststart::Scope::OwnContainer,
            ) {
                poststart::Mark::Live { .. } => 0,
                mark => {
                    log!(
                        "probe: watcher for container {} not armed yet ({})",
                        t.container,
                        mark.describe(&armed)
                    );
                    1
                }
            }
        }
        Cli::PostStart { target, timeout } => {
            let store = StateStore::new(&target.root, &target.container);
            let armed = store.path(contract::ARMED_FILE);
            let proc_root = Path::new(procfs::PROC_ROOT);
            // The kubelet runs this handler with no time limit, so all of
            // it ends within `timeout`: the wait, then the log line, which
            // gets what is left (at most LOG_WRITE_LIMIT; when nothing is,
            // one write that does not block).
            let start = std::time::Instant::now();
            let log_limit = || {
                timeout
                    .saturating_sub(start.elapsed())
                    .min(poststart::LOG_WRITE_LIMIT)
            };
            match poststart::wait_armed(&store, proc_root, timeout) {
                poststart::Outcome::Armed {
                    waited,
                    pid,
                    start_time,
                } => {
                    // Into the sidecar's log (the kubelet drops a
                    // successful handler's output); on our own stderr if
                    // the watcher's cannot be written without blocking.
                    let line = format!(
                        "{} post-start done container={} watcher_pid={pid} waited={:.3}s: the kubelet may start the pod's next containers\n",
                        kube_prestop_sidecar::LOG_PREFIX,
                        target.container,
                        waited.as_secs_f64()
                    );
                    let watcher = kube_prestop_sidecar::finder::Instance { pid, start_time };
                    if poststart::write_to_watcher_log(proc_root, watcher, &line, log_limit())
                        .is_err()
                    {
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    }
                    0
                }
                poststart::Outcome::TimedOut { last } => {
                    // Fail-open: a failing postStart would make the kubelet
                    // restart the sidecar and never start the container.
                    // Into the sidecar's log too: the kubelet drops the
                    // output of a handler that succeeds.
                    let line = format!(
                        "{} post-start: warning: watcher for container {} not armed after {} s ({}); letting the kubelet start the pod's next containers (its preStop may be missed)\n",
                        kube_prestop_sidecar::LOG_PREFIX,
                        target.container,
                        timeout.as_secs(),
                        last.describe(&armed)
                    );
                    let logged = poststart::container_watcher(proc_root).is_some_and(|watcher| {
                        poststart::write_to_watcher_log(proc_root, watcher, &line, log_limit())
                            .is_ok()
                    });
                    if !logged {
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    }
                    0
                }
            }
        }
        Cli::PreStop(t, hook) => wrapper::run(&t, &hook),
        Cli::Signal(sig) => signal::run(sig),
        Cli::Watch {
            target,
            started_after,
            run_on,
            hook_root,
            termination_message,
            pod_containers,
            gate_port,
            hook,
        } => {
            // First: until the gate listens, the kubelet's postStart request
            // is refused and the kubelet restarts this sidecar.
            let gate = gate_port.map(|port| (port, gate::listen(port)));
            let grace_seconds = std::env::var(contract::ENV_GRACE_PERIOD_SECONDS)
                .ok()
                .and_then(|v| v.trim().parse().ok());
            let sole_container = started_after == [target.container.as_str()];
            watch::run(watch::WatchConfig {
                sole_container,
                target,
                hook,
                proc_root: PathBuf::from(procfs::PROC_ROOT),
                grace_seconds,
                run_on,
                hook_root,
                termination_message,
                gate,
                termination_message_max: pod_containers.map_or(
                    contract::TERMINATION_MESSAGE_MAX_BYTES,
                    contract::termination_message_budget,
                ),
            })
        }
    };
    exit(code);
}
