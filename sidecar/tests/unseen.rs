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
//! pivoted is never taken for the container.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

const SIGSTOP: i32 = libc::SIGSTOP;
const SIGCONT: i32 = libc::SIGCONT;

/// Runs `m` to its end while the sidecar is stopped, once the sidecar holds
/// its mount table; then lets the sidecar go on and waits until it has
/// dropped (or used) that hold.
fn end_while_stopped(sc: &Sidecar, mut m: Main) -> std::process::ExitStatus {
    let pid = ns_pid(m.pid);
    wait_for("the watcher to hold the candidate's mount table", T, || {
        holds_mountinfo_of(sc.pid, pid)
    });
    kill(sc.pid, SIGSTOP);
    m.start();
    let st = m.wait(T);
    kill(sc.pid, SIGCONT);
    wait_for("the watcher to let go of the candidate", T, || {
        !holds_mountinfo_of(sc.pid, pid)
    });
    st
}

#[test]
fn pivoted_and_ended_unseen_is_inferred_for_the_sole_container() {
    if !can_run() {
        return;
    }
    let mut pod = Pod::new("unseen-sole");
    let mut sc = pod.sidecar_with(&pod.hook(), &[], &["--started-after", C]);
    let m = pod.spawn_pivoting_main(&["true"]);
    assert_eq!(code(end_while_stopped(&sc, m)), 0);
    wait_for("the inferred instance's hook", T, || {
        pod.records("done-").len() == 1
    });
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
fn pivoted_and_ended_unseen_is_not_inferred_without_the_flag() {
    if !can_run() {
        return;
    }
    let mut pod = Pod::new("unseen-other");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
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
fn a_process_that_never_pivoted_is_never_inferred() {
    if !can_run() {
        return;
    }
    let mut pod = Pod::new("unseen-plain");
    let mut sc = pod.sidecar_with(&pod.hook(), &[], &["--started-after", C]);
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
