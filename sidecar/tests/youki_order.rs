//! Containers set up in youki's order: created in the pod's PID namespace
//! while still in the runtime's mount namespace, then unsharing their own.
//!
//! The watcher first sees such a process with the runtime's mount table (no
//! identifying mount) and holds that table; the container's mounts are made
//! in another namespace, whose changes the held table never shows. Under
//! youki 0.7.0 (`RUNTIME=containerd2-youki`) short containers were "never
//! seen running". The watcher must follow the process into its new mount
//! namespace while it lives. Without that, the first container here is
//! already missed.
//! In its own test binary so that it does not share the two cores with the
//! other namespace tests (cargo runs test binaries one after another).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// Twenty consecutive `true` containers, each seen by the watcher in the
/// runtime's mount namespace first (the gate holds it there until the
/// watcher holds its mount table): every one gets its hook.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn late_unsharing_true_containers_each_get_their_hook() {
    require_root_and_util_linux();
    const N: usize = 20;
    let mut pod = Pod::new("youki-order");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    for i in 0..N {
        let (gate, mut m) = pod.spawn_late_unsharing_main(&["true"]);
        let pid = ns_pid(m.pid);
        wait_for_or_show(
            "the watcher to hold the candidate's mount table",
            T,
            || sc.log_text(),
            || holds_mountinfo_of(sc.pid, pid),
        );
        pod.open_gate(&gate);
        m.start();
        assert_eq!(code(m.wait(T)), 0);
        wait_for_or_show(
            &format!("hook {}", i + 1),
            T,
            || sc.log_text(),
            || pod.records("done-").len() > i,
        );
    }
    let lines = pod.lines("hooks");
    assert_eq!(lines.len(), N, "{lines:?}\n{}", sc.log_text());
    assert_eq!(pod.records("seen-").len(), N);
    // Each was found (running, or already exited) after following it out
    // of the runtime's namespace.
    let log = sc.log_text();
    let moved = log
        .lines()
        .filter(|l| {
            (l.starts_with("kube-prestop: watching container=main ")
                || l.starts_with("kube-prestop: found container=main "))
                && l.contains(" candidates_moved=1 ")
        })
        .count();
    assert_eq!(moved, N, "{log}");
    assert!(sc.alive());
}
