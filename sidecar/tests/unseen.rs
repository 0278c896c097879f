//! A container set up, run and ended while the watcher is not scheduled.
//!
//! The stand-in does what runc does and the other stand-ins leave out: it is
//! first visible with the host's root and no mounts of its own, then makes
//! its mounts, `pivot_root`s and detaches the old root, and only then execs.
//! The watcher is stopped (`SIGSTOP`, standing in for CPU starvation) after
//! it has started holding the process's mount table and continued after the
//! process is gone: the held table then reads back empty.
//!
//! With `--started-after main` (the webhook's flag when the watched container
//! is the only one started after the sidecar) the instance is inferred and
//! its hook runs once; without it, nothing runs; a process that never
//! pivoted is never taken for the container. The same holds when the exit
//! is noticed by the scanner's periodic re-look instead of an event.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use kube_prestop_sidecar::finder::{Instance, Scanner, SearchStats};
use kube_prestop_sidecar::procfs::{IdMount, IdSource};

const SIGSTOP: i32 = libc::SIGSTOP;
const SIGCONT: i32 = libc::SIGCONT;

/// Whether `pid` is in the stopped state (`T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

/// The sidecars here log the finder's debug lines: [`end_while_stopped`]
/// waits for its `post-mortem` of the exited candidate.
const DEBUG: &[(&str, &str)] = &[(kube_prestop_contract::ENV_DEBUG, "1")];

/// Runs `m` to its end while the sidecar is stopped, once the sidecar holds
/// its mount table; then lets the sidecar go on and waits until it has
/// judged the exited candidate (the finder's `post-mortem` debug line: the
/// sidecar must run with [`DEBUG`]) and dropped (or used) that hold. The
/// line, not the hold alone: once the process is reaped, the held file's
/// `/proc` link may no longer name it, and a test that went on then raced
/// the watcher's judgment (its stats line said `candidates_lost=0`, seen
/// once under load).
fn end_while_stopped(sc: &Sidecar, mut m: Main) -> std::process::ExitStatus {
    let pid = ns_pid(m.pid);
    wait_for("the watcher to hold the candidate's mount table", T, || {
        holds_mountinfo_of(sc.pid, pid)
    });
    kill(sc.pid, SIGSTOP);
    // kill(2) returns before the target has stopped: a watcher busy on the
    // other CPU could still look at the container being set up. Start it
    // only once the watcher is in the stopped state.
    wait_for("the watcher to stop", T, || is_stopped(sc.pid));
    m.start();
    let st = m.wait(T);
    kill(sc.pid, SIGCONT);
    // nsenter stops itself when its child stops (and would stay stopped,
    // never reaping it): continue it too.
    kill(sc.nsenter_pid(), SIGCONT);
    let judged = format!("debug: post-mortem pid={pid} ");
    wait_for_or_show(
        "the watcher to judge the exited candidate",
        T,
        || sc.log_text(),
        || sc.log_text().contains(&judged),
    );
    wait_for("the watcher to let go of the candidate", T, || {
        !holds_mountinfo_of(sc.pid, pid)
    });
    st
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn pivoted_and_ended_unseen_is_inferred_for_the_sole_container() {
    require_root_and_util_linux();
    let mut pod = Pod::new("unseen-sole");
    let mut sc = pod.sidecar_with(&pod.hook(), DEBUG, &["--started-after", C]);
    let m = pod.spawn_pivoting_main(&["true"]);
    assert_eq!(code(end_while_stopped(&sc, m)), 0);
    wait_for_or_show(
        "the inferred instance's hook",
        T,
        || format!("sidecar log:\n{}", sc.log_text()),
        || pod.records("done-").len() == 1,
    );
    let lines = pod.lines("hooks");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("main "), "{lines:?}");
    assert_eq!(pod.records("seen-").len(), 1);
    let log = sc.log_text();
    assert!(log.contains("inferred container=main"), "{log}");
    assert!(log.contains("candidates_lost_pivoted=1"), "{log}");
    // The watcher goes on: the next container is found the ordinary way.
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the second hook", T, || pod.records("done-").len() == 2);
    assert_eq!(pod.lines("hooks").len(), 2);
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn pivoted_and_ended_unseen_is_not_inferred_without_the_flag() {
    require_root_and_util_linux();
    let mut pod = Pod::new("unseen-other");
    let mut sc = pod.sidecar(&pod.hook(), DEBUG);
    let m = pod.spawn_pivoting_main(&["true"]);
    assert_eq!(code(end_while_stopped(&sc, m)), 0);
    // The next container is found; only its hook runs.
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the found container's hook", T, || {
        pod.records("done-").len() == 1
    });
    assert_eq!(pod.lines("hooks").len(), 1);
    assert_eq!(pod.records("seen-").len(), 1);
    let log = sc.log_text();
    assert!(!log.contains("inferred"), "{log}");
    assert!(log.contains("candidates_lost_pivoted=1"), "{log}");
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_process_that_never_pivoted_is_never_inferred() {
    require_root_and_util_linux();
    let mut pod = Pod::new("unseen-plain");
    let mut sc = pod.sidecar_with(&pod.hook(), DEBUG, &["--started-after", C]);
    let m = pod.spawn_plain_process("exit 0");
    assert_eq!(code(end_while_stopped(&sc, m)), 0);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the found container's hook", T, || {
        pod.records("done-").len() == 1
    });
    assert_eq!(pod.lines("hooks").len(), 1);
    let log = sc.log_text();
    assert!(!log.contains("inferred"), "{log}");
    assert!(
        log.contains("candidates_lost=1 candidates_lost_pivoted=0"),
        "{log}"
    );
    assert!(sc.alive());
}

/// The watcher preempted between its poll and its next look: the candidate's
/// exit is not reported as an event, only found by the periodic re-look.
/// That path must read the held table too (it used to drop the candidate
/// unexamined: a `true` container lost with `candidates_lost=0`).
/// Drives the scanner directly over the pod's `/proc`, with no poll at all.
fn exit_found_by_the_periodic_look(infer: bool) -> (Option<Instance>, bool, SearchStats) {
    let mut pod = Pod::new(if infer { "relook-sole" } else { "relook" });
    let mut m = pod.spawn_pivoting_main(&["true"]);
    let proc_root = PathBuf::from(format!("/proc/{}/root/proc", pod.init));
    let mount = IdMount {
        point: pod.id_mount_point().to_string_lossy().into_owned(),
        source: IdSource::Any,
    };
    let mut scanner = Scanner::new(&proc_root, mount).infer_unseen(infer);
    let t0 = Instant::now();
    wait_for("the scanner to hold the candidate", T, || {
        scanner.step(t0).unwrap();
        scanner.stats().candidates >= 1
    });
    m.start();
    assert_eq!(code(m.wait(T)), 0);
    // Well past the periodic re-look interval, and no `note_events`.
    let found = scanner.step(t0 + Duration::from_secs(1)).unwrap();
    let inferred = found.is_some_and(|i| scanner.is_inferred(i));
    (found, inferred, scanner.stats())
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn an_exit_seen_only_by_the_periodic_look_is_still_judged() {
    require_root_and_util_linux();
    let (found, inferred, stats) = exit_found_by_the_periodic_look(true);
    assert!(found.is_some() && inferred, "{found:?} {stats}");
    assert_eq!(stats.candidates_lost_pivoted, 1, "{stats}");
    let (found, _, stats) = exit_found_by_the_periodic_look(false);
    assert_eq!(found, None);
    assert_eq!(
        (stats.candidates_lost, stats.candidates_lost_pivoted),
        (1, 1),
        "{stats}"
    );
}
