//! Late hooks: a container the watcher never saw run.
//!
//! The watcher is stopped (`SIGSTOP`, standing in for a CPU-starved sidecar)
//! from before the main container is set up until after it is gone, so no
//! look of it ever sees the container's process. What decides the outcome at
//! the sidecar's stop is what the runtime leaves behind: `state/main/created`,
//! the mount point it makes in main's state volume when it creates the
//! container (the stand-in's [`Pod`] makes it the same way, as root), and
//! the wrapper's marks when the kubelet ran the preStop itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// The test hook: one line of what it was told.
fn telling_hook(pod: &Pod) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo \"$KUBE_PRESTOP_CONTAINER $KUBE_PRESTOP_INSTANCE $KUBE_PRESTOP_ATTEMPT late=${{KUBE_PRESTOP_LATE-unset}} exit=${{KUBE_PRESTOP_EXIT_CODE-unset}} root=${{KUBE_PRESTOP_ROOT-unset}}\" >> {}",
            pod.out("hooks").display()
        ),
    ]
}

/// Whether `pid` is in the stopped state (`T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

fn stop(sc: &Sidecar) {
    kill(sc.pid, libc::SIGSTOP);
    wait_for("the watcher to stop", T, || is_stopped(sc.pid));
}

fn resume(sc: &Sidecar) {
    kill(sc.pid, libc::SIGCONT);
    // nsenter stops itself when its child stops: continue it too.
    kill(sc.nsenter_pid(), libc::SIGCONT);
    wait_for("the watcher to run again", T, || !is_stopped(sc.pid));
}

/// Stops the sidecar and waits for its exit (status 0).
fn terminate(sc: &mut Sidecar) {
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0, "{}", sc.log_text());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_container_run_while_the_watcher_was_stopped_gets_one_late_hook() {
    require_root_and_util_linux();
    let mut pod = Pod::new("late-ran");
    let mut sc = pod.sidecar(&telling_hook(&pod), &[]);
    stop(&sc);
    assert_eq!(code(pod.run_main_ungated(&["sh", "-c", "exit 3"])), 3);
    resume(&sc);
    terminate(&mut sc);
    let log = sc.log_text();
    assert_eq!(
        pod.lines("hooks"),
        ["main 0-0 1 late=1 exit=unset root=unset"],
        "{log}"
    );
    assert!(
        log.contains("container=main ran and exited unseen"),
        "{log}"
    );
    assert!(!log.contains("was never seen running"), "{log}");
    let done = pod.record("done-0-0");
    assert!(done.contains("outcome=ran"), "{done}\n{log}");
    assert!(done.contains("container_exit=unknown"), "{done}");
    assert!(pod.records("seen-").is_empty());
    let msg = pod.termination_message();
    assert!(
        msg.contains("container=main instance=0-0 container_exit=unknown hook=exit:0"),
        "{msg}"
    );
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_container_the_kubelet_never_started_gets_no_hook() {
    // The image never pulled, or the pod was deleted first: the kubelet
    // never prepared the container's mounts.
    require_root_and_util_linux();
    let pod = Pod::new("late-never");
    let mut sc = pod.sidecar(&telling_hook(&pod), &[]);
    terminate(&mut sc);
    let log = sc.log_text();
    assert!(pod.lines("hooks").is_empty(), "{log}");
    assert!(log.contains("container=main was never started"), "{log}");
    assert!(!log.contains("was never seen running"), "{log}");
    assert!(pod.records("done-").is_empty());
    assert!(!pod.termination_message().contains("container=main"));
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn no_late_hook_when_the_kubelet_ran_the_prestop() {
    // The pod was deleted while the container ran: the kubelet ran its
    // preStop (through the wrapper, which marks it) and then stopped it,
    // all while the watcher was stopped.
    require_root_and_util_linux();
    let mut pod = Pod::new("late-kubelet");
    let mut sc = pod.sidecar(&telling_hook(&pod), &[]);
    stop(&sc);
    let mut m = pod.create_main(&["sleep", "1000"]);
    m.start();
    let kubelet_hook = format!("echo kubelet >> {}", pod.out("kubelet").display());
    assert_eq!(code(pod.prestop(&m, &["sh", "-c", &kubelet_hook])), 0);
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    resume(&sc);
    terminate(&mut sc);
    let log = sc.log_text();
    assert_eq!(pod.lines("kubelet"), ["kubelet"]);
    assert!(pod.lines("hooks").is_empty(), "{log}");
    assert!(log.contains("not running the late hook"), "{log}");
    let done = pod.record("done-0-0");
    assert!(done.contains("outcome=skipped-prestop"), "{done}\n{log}");
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_link_at_the_evidence_is_reported_not_followed() {
    // `state/main/created` is what the runtime makes when it creates main;
    // a symbolic link there (planted through main's state volume, which
    // main and its sidecar can write) is not that directory, even when it
    // points at one, so whether main was started cannot be told: a miss is
    // reported, no late hook is guessed.
    require_root_and_util_linux();
    let pod = Pod::new("late-link");
    std::fs::create_dir_all(pod.state()).unwrap();
    std::os::unix::fs::symlink(pod.out(""), pod.id_mount_point()).unwrap();
    let mut sc = pod.sidecar(&telling_hook(&pod), &[]);
    terminate(&mut sc);
    let log = sc.log_text();
    assert!(pod.lines("hooks").is_empty(), "{log}");
    assert!(log.contains("is not a directory"), "{log}");
    assert!(log.contains("was never seen running"), "{log}");
    assert!(pod.termination_message().contains("hook=missed"));
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_late_hook_that_cannot_start_is_recorded_as_such_not_as_cut() {
    require_root_and_util_linux();
    let mut pod = Pod::new("late-not-found");
    let mut sc = pod.sidecar(&["/nonexistent/hook".to_owned()], &[]);
    stop(&sc);
    assert_eq!(code(pod.run_main_ungated(&["true"])), 0);
    resume(&sc);
    terminate(&mut sc);
    let log = sc.log_text();
    assert!(log.contains("hook failed to start"), "{log}");
    let msg = pod.termination_message();
    assert!(msg.contains("container=main instance=0-0"), "{msg}\n{log}");
    assert!(!msg.contains("grace_cut=true"), "{msg}\n{log}");
    let after_exit = log.split("exiting container=main").nth(1).unwrap_or("");
    assert!(
        !after_exit.contains("kube-prestop:"),
        "nothing is logged after exiting: {log}"
    );
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn evidence_not_owned_by_root_is_reported_not_taken() {
    // Another container running as main's sidecar's user can reach main's
    // state volume through /proc/PID/root of the sidecar and make `created`
    // before main exists: that directory is its user's, not root's as the
    // runtime makes it, so no late hook runs for a main that never ran.
    // Before the owner check this ran one late hook.
    require_root_and_util_linux();
    let pod = Pod::new("late-forged");
    std::fs::create_dir_all(pod.id_mount_point()).unwrap();
    std::os::unix::fs::chown(pod.id_mount_point(), Some(1000), Some(1000)).unwrap();
    let mut sc = pod.sidecar(&telling_hook(&pod), &[]);
    terminate(&mut sc);
    let log = sc.log_text();
    assert!(pod.lines("hooks").is_empty(), "{log}");
    assert!(log.contains("is owned by UID 1000"), "{log}");
    assert!(log.contains("was never seen running"), "{log}");
    assert!(pod.termination_message().contains("hook=missed"));
}
