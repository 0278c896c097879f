//! Containers set up in youki's order: created in the pod's PID namespace
//! while still in the runtime's mount namespace, then unsharing their own.
//!
//! The watcher first sees such a process with the runtime's mount table (no
//! identifying mount) and holds that table; the container's mounts are made
//! in another namespace, whose changes the held table never shows. Under
//! youki 0.7.0 (`RUNTIME=containerd2-youki`) short containers were "never
//! seen running". The watcher must follow the process into its new mount
//! namespace while it lives: without that, the first container here is
//! never found.
//!
//! What these tests do not assert: that a look falls between the unshare
//! and the exit of a container started at once. That takes the watcher
//! being scheduled within those few milliseconds, which CPU starvation
//! takes away (facts R3; how-it-works.md "Limits"). The first test used to
//! start each container at once and so failed under load: with six busy
//! loops on two cores, 11 of 60 runs lost one of the twenty, each time with
//! the watcher off the CPU from before the unshare until after the exit
//! (7 ms in a traced run). That the look *after* the move, however soon,
//! follows the process is asserted deterministically by the finder's unit
//! tests (`a_young_candidate_that_leaves_its_mount_namespace_is_followed_at_the_next_look`);
//! what a starved watcher then guarantees, by the second test here.
//!
//! In its own test binary so that it does not share the two cores with the
//! other namespace tests (cargo runs test binaries one after another).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// A `true` main container made in youki's order
/// ([`Pod::spawn_late_unsharing_main`]), returned once the watcher holds its
/// mount table in the runtime's namespace: its gate and the container.
fn spawn_held(pod: &mut Pod, sc: &Sidecar) -> (std::path::PathBuf, Main) {
    let (gate, m) = pod.spawn_late_unsharing_main(&["true"]);
    let pid = ns_pid(m.pid);
    wait_for_or_show(
        "the watcher to hold the candidate's mount table",
        T,
        || sc.log_text(),
        || holds_mountinfo_of(sc.pid, pid),
    );
    (gate, m)
}

/// Whether `pid` is in the stopped state (`T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

/// Twenty consecutive `true` containers, each seen by the watcher in the
/// runtime's mount namespace first (the gate holds it there until the
/// watcher holds its mount table), then unsharing its own and making its
/// mounts there. Like youki after `create`, each then waits to be started:
/// here until the watcher has found it (its `seen-` record), which it can
/// only do by following the process out of the namespace whose table it
/// holds. Every one gets exactly one hook.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn late_unsharing_true_containers_each_get_their_hook() {
    require_root_and_util_linux();
    const N: usize = 20;
    let mut pod = Pod::new("youki-order");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    for i in 0..N {
        let (gate, mut m) = spawn_held(&mut pod, &sc);
        pod.open_gate(&gate);
        wait_for_or_show(
            &format!("the watcher to find container {}", i + 1),
            T,
            || sc.log_text(),
            || pod.records("seen-").len() > i,
        );
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
    assert_eq!(pod.records("done-").len(), N);
    // Each was found running after following it out of the runtime's
    // namespace.
    let log = sc.log_text();
    let moved = log
        .lines()
        .filter(|l| {
            l.starts_with("kube-prestop: watching container=main ")
                && l.contains(" candidates_moved=1 ")
        })
        .count();
    assert_eq!(moved, N, "{log}");
    assert!(sc.alive());
}

/// The case the first test leaves out, made certain: the watcher holds the
/// candidate's table in the runtime's namespace, then is stopped (`SIGSTOP`,
/// standing in for a CPU-starved sidecar) while the process unshares, makes
/// its mounts, runs `true` and exits. Its namespace is gone with it, so no
/// look can tell it was the container; the held table is the runtime's,
/// which never showed the mount. No run of it was seen, and the kubelet
/// prepared its start (`id/main`): at the sidecar's stop, its hook runs
/// once, late.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_late_unsharing_container_run_while_the_watcher_was_stopped_gets_one_late_hook() {
    require_root_and_util_linux();
    let mut pod = Pod::new("youki-order-starved");
    // The finder's debug lines say when it judged the candidate after its
    // exit (`post-mortem`), which the stop below waits for.
    let mut sc = pod.sidecar(&pod.hook(), &[(kube_prestop_contract::ENV_DEBUG, "1")]);
    let (gate, mut m) = spawn_held(&mut pod, &sc);
    kill(sc.pid, libc::SIGSTOP);
    wait_for("the watcher to stop", T, || is_stopped(sc.pid));
    pod.open_gate(&gate);
    m.start();
    assert_eq!(code(m.wait(T)), 0);
    kill(sc.pid, libc::SIGCONT);
    // nsenter stops itself when its child stops: continue it too.
    kill(sc.nsenter_pid(), libc::SIGCONT);
    wait_for("the watcher to run again", T, || !is_stopped(sc.pid));
    // Stop it only once it has judged the exited candidate: a SIGTERM that
    // came first would end the search with the candidate still held, and
    // the late hook would run as it must, but the log could not say the
    // candidate was lost (a race of the test, seen once under load).
    wait_for_or_show(
        "the watcher to judge the exited candidate",
        T,
        || sc.log_text(),
        || sc.log_text().contains("debug: post-mortem pid="),
    );
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0, "{}", sc.log_text());
    let log = sc.log_text();
    assert_eq!(pod.lines("hooks"), ["main 0-0 1"], "{log}");
    assert!(pod.records("seen-").is_empty(), "{log}");
    assert!(pod.record("done-0-0").contains("outcome=ran"), "{log}");
    assert!(
        log.contains("container=main ran and exited unseen"),
        "{log}"
    );
    // It was held, and lost: the log says so.
    let line = log
        .lines()
        .find(|l| l.contains("ran and exited unseen"))
        .unwrap_or_default();
    assert!(line.contains(" candidates_lost=1 "), "{log}");
}
