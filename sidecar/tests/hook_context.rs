//! What the hook learns about the exit it answers (issue 16), against real
//! processes in the pod stand-in (`common/mod.rs`): the exit status read
//! through the pidfd (`PIDFD_INFO_EXIT`, Linux ≥ 6.15), `--run-on`, the
//! container's own files through `KUBE_PRESTOP_ROOT` (and chrooted with
//! `--hook-root container`), their release when the hook ends, and the
//! termination message. Needs root; skips with a message otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fs;

use common::*;

/// Whether this kernel reports exit statuses through pidfds (the tests of
/// the status skip otherwise, and check the fallback instead).
fn kernel_reports_exit_status() -> bool {
    kube_prestop_sidecar::exit_info::probe().is_ok()
}

/// A hook that appends "<instance> code=<..> signal=<..>" to out/hooks.
fn status_hook(pod: &Pod) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo \"$KUBE_PRESTOP_INSTANCE code=${{KUBE_PRESTOP_EXIT_CODE-unset}} signal=${{KUBE_PRESTOP_EXIT_SIGNAL-unset}}\" >> {}",
            pod.out("hooks").display()
        ),
    ]
}

fn done_of(pod: &Pod, line: &str) -> std::collections::BTreeMap<String, String> {
    let id = line.split(' ').next().unwrap();
    fields(&pod.record(&format!("done-{id}")))
}

/// Whether host process `pid` holds a mount namespace descriptor.
fn holds_mnt_ns(pid: i32) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("mnt:["))
        })
    })
}

#[test]
#[ignore = "needs root, util-linux and Linux 6.15 (PIDFD_INFO_EXIT): make unit runs it as root (scripts/privileged-tests.sh)"]
fn exit_code_and_signal_reach_the_hook() {
    require_root_and_util_linux();
    if !kernel_reports_exit_status() {
        cannot_run("this kernel has no PIDFD_INFO_EXIT (Linux 6.15)");
    }
    let mut pod = Pod::new("exitcode");
    let mut sc = pod.sidecar(&status_hook(&pod), &[]);
    assert!(
        sc.log_text()
            .contains("exit status: read through the pidfd (PIDFD_INFO_EXIT)"),
        "{}",
        sc.log_text()
    );
    assert_eq!(code(pod.run_main(&["sh", "-c", "exit 3"])), 3);
    wait_for("the first hook", T, || pod.records("done-").len() == 1);
    // SIGKILL, as the OOM killer sends it.
    let mut m = pod.create_main(&["sleep", "60"]);
    m.start();
    wait_for("main to exec sleep", T, || {
        fs::read_to_string(format!("/proc/{}/cmdline", m.pid)).is_ok_and(|c| c.starts_with("sleep"))
    });
    kill(m.pid, libc::SIGKILL);
    assert_eq!(code(m.wait(T)), 128 + 9);
    wait_for("two hook runs", T, || {
        pod.lines("hooks").len() == 2 && pod.records("done-").len() == 2
    });
    let lines = pod.lines("hooks");
    assert!(lines[0].ends_with(" code=3 signal=unset"), "{lines:?}");
    assert!(lines[1].ends_with(" code=unset signal=9"), "{lines:?}");
    assert_eq!(done_of(&pod, &lines[0])["container_exit"], "exit:3");
    assert_eq!(done_of(&pod, &lines[1])["container_exit"], "signal:9");
    let log = sc.log_text();
    assert!(log.contains("exit_status=exit:3"), "{log}");
    assert!(log.contains("exit_status=signal:9"), "{log}");
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root, util-linux and Linux 6.15 (PIDFD_INFO_EXIT): make unit runs it as root (scripts/privileged-tests.sh)"]
fn run_on_failure_skips_a_success_and_runs_on_a_failure() {
    require_root_and_util_linux();
    if !kernel_reports_exit_status() {
        cannot_run("this kernel has no PIDFD_INFO_EXIT (Linux 6.15)");
    }
    let mut pod = Pod::new("runonfail");
    let mut sc = pod.sidecar_with(&status_hook(&pod), &[], &["--run-on", "failure"]);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the skip record", T, || pod.records("done-").len() == 1);
    let skipped = pod.records("done-")[0].clone();
    let d = fields(&pod.record(&skipped));
    assert_eq!(d["outcome"], "skipped-run-on");
    assert_eq!(d["container_exit"], "exit:0");
    assert!(pod.lines("hooks").is_empty());
    assert_eq!(code(pod.run_main(&["sh", "-c", "exit 1"])), 1);
    wait_for("the hook", T, || pod.records("done-").len() == 2);
    wait_for("the hook line", T, || pod.lines("hooks").len() == 1);
    assert!(pod.lines("hooks")[0].ends_with(" code=1 signal=unset"));
    assert!(
        sc.log_text()
            .contains("run-on=failure and the container ended with exit 0")
    );
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
    // Both runs are in the termination message, the skip first.
    let msg = pod.termination_message();
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines.len(), 3, "{msg}");
    assert!(
        lines[1].contains(" container_exit=exit:0 hook=skipped-run-on "),
        "{msg}"
    );
    assert!(
        lines[2].contains(" container_exit=exit:1 hook=exit:0 "),
        "{msg}"
    );
    assert!(lines[2].ends_with(" grace_cut=false"), "{msg}");
}

#[test]
#[ignore = "needs root, util-linux and Linux 6.15 (PIDFD_INFO_EXIT): make unit runs it as root (scripts/privileged-tests.sh)"]
fn run_on_success_runs_on_a_success_and_skips_a_failure() {
    require_root_and_util_linux();
    if !kernel_reports_exit_status() {
        cannot_run("this kernel has no PIDFD_INFO_EXIT (Linux 6.15)");
    }
    let mut pod = Pod::new("runonok");
    let mut sc = pod.sidecar_with(&status_hook(&pod), &[], &["--run-on=success"]);
    assert_eq!(code(pod.run_main(&["sh", "-c", "exit 2"])), 2);
    wait_for("the skip record", T, || pod.records("done-").len() == 1);
    assert!(pod.lines("hooks").is_empty());
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the hook's record", T, || pod.records("done-").len() == 2);
    assert_eq!(pod.lines("hooks").len(), 1);
    assert!(pod.lines("hooks")[0].ends_with(" code=0 signal=unset"));
    let outcomes: Vec<String> = pod
        .records("done-")
        .iter()
        .map(|r| fields(&pod.record(r))["outcome"].clone())
        .collect();
    let mut sorted = outcomes.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["ran", "skipped-run-on"]);
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn the_hook_reads_the_containers_own_files_and_they_are_released() {
    require_root_and_util_linux();
    let mut pod = Pod::new("root");
    let private = pod.private_dir(0);
    let file = private.join("result.txt");
    // The hook reads the file through KUBE_PRESTOP_ROOT: the container's
    // private mount is invisible from the sidecar's own mount namespace.
    let hook = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "cat \"$KUBE_PRESTOP_ROOT{f}\" >> {out}; test -e {f} || echo not-in-sidecar-root >> {out}",
            f = file.display(),
            out = pod.out("hooks").display()
        ),
    ];
    let mut sc = pod.sidecar(&hook, &[]);
    let payload = format!("echo written-by-main > {}", file.display());
    assert_eq!(code(pod.run_main(&["sh", "-c", &payload])), 0);
    wait_for("the hook", T, || pod.records("done-").len() == 1);
    assert_eq!(
        pod.lines("hooks"),
        vec!["written-by-main", "not-in-sidecar-root"],
        "{}",
        sc.log_text()
    );
    let log = sc.log_text();
    assert!(
        log.contains("kube-prestop: released the root of container=main"),
        "{log}"
    );
    // Nothing is held once the hook ended.
    assert!(!holds_mnt_ns(sc.pid), "{log}");
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn hook_root_container_runs_the_hook_chrooted_into_the_containers_files() {
    require_root_and_util_linux();
    let mut pod = Pod::new("chroot");
    let file = pod.private_dir(1).join("out.txt");
    let hook = vec![
        "sh".into(),
        "-c".into(),
        // Inside the chroot the file is at its own absolute path; the hook
        // writes its result into the pod's directory (mounted in the
        // container too).
        format!(
            "{{ echo \"root=$KUBE_PRESTOP_ROOT\"; cat {f}; }} >> {out}",
            f = file.display(),
            out = pod.vol().join("hook-out").display()
        ),
    ];
    let mut sc = pod.sidecar_with(&hook, &[], &["--hook-root", "container"]);
    let payload = format!("echo chrooted-read > {}", file.display());
    assert_eq!(code(pod.run_main(&["sh", "-c", &payload])), 0);
    wait_for("the hook", T, || pod.records("done-").len() == 1);
    let out = fs::read_to_string(pod.vol().join("hook-out")).unwrap_or_default();
    assert_eq!(out, "root=/\nchrooted-read\n", "{}", sc.log_text());
    assert!(sc.log_text().contains(" root=chroot"), "{}", sc.log_text());
    assert!(!holds_mnt_ns(sc.pid));
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_hook_cut_by_sigkill_says_so_in_the_termination_message() {
    require_root_and_util_linux();
    let mut pod = Pod::new("cut");
    let hook = vec![
        "sh".into(),
        "-c".into(),
        format!("echo started >> {}; sleep 60", pod.out("hooks").display()),
    ];
    let mut sc = pod.sidecar(&hook, &[]);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the hook to start", T, || pod.lines("hooks").len() == 1);
    kill(sc.pid, libc::SIGTERM);
    wait_for("the SIGTERM line", T, || {
        sc.log_text().contains("SIGTERM received while hook runs")
    });
    // The grace period's end.
    kill(sc.pid, libc::SIGKILL);
    let _ = sc.wait(T);
    let msg = pod.termination_message();
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines.len(), 2, "{msg}");
    assert!(
        lines[1].contains(" hook=cut duration_ms=- grace_cut=true"),
        "{msg}"
    );
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_container_the_sidecar_may_not_look_into_still_gets_its_hook() {
    require_root_and_util_linux();
    let mut pod = Pod::new("noroot");
    let hook = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo \"root=${{KUBE_PRESTOP_ROOT-unset}}\" >> {}",
            pod.out("hooks").display()
        ),
    ];
    // The sidecar runs as nobody; the "container" as root.
    let mut sc = pod.sidecar_unprivileged(&hook, &["--hook-root", "container"]);
    // A container that lives until the watcher has tried its root (a `true`
    // container may already be a zombie then, which is another reason for
    // no root: "the process is gone").
    let mut m = pod.create_main(&["sleep", "60"]);
    m.start();
    wait_for("the watcher to find the container", T, || {
        sc.log_text().contains("watching container=main")
    });
    // The watcher may have found it before its pivot_root (then it retries
    // the root every millisecond): kill it only once it runs `sleep`, inside
    // its root, so that the retry meets the permission check and not a
    // process that is already gone (one CI dry run in many did).
    wait_for("the container to run sleep", T, || {
        std::fs::read_to_string(format!("/proc/{}/comm", m.pid)).is_ok_and(|c| c.trim() == "sleep")
    });
    kill(m.pid, libc::SIGKILL);
    assert_eq!(code(m.wait(T)), 128 + 9);
    wait_for("the hook's record", T, || pod.records("done-").len() == 1);
    assert_eq!(pod.lines("hooks"), vec!["root=unset"], "{}", sc.log_text());
    let log = sc.log_text();
    assert!(
        log.contains("hook env: KUBE_PRESTOP_ROOT unset container=main")
            && log.contains("cannot hold the container's root: cannot open"),
        "{log}"
    );
    assert!(
        log.contains("hook-root=container not applied container=main"),
        "{log}"
    );
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_sidecar_stopped_without_seeing_its_container_says_so_in_the_termination_message() {
    // Before, a missed exit had no line at all: the pod status showed
    // nothing where the hook's line should have been. A miss is what is
    // left when the watcher cannot tell whether the runtime created the
    // container: here `state/main/created` is not the directory the runtime
    // makes.
    require_root_and_util_linux();
    let pod = Pod::new("missed");
    std::fs::create_dir_all(pod.state()).unwrap();
    std::fs::write(pod.id_mount_point(), "").unwrap();
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    wait_for("the watcher to arm", T, || {
        pod.state().join("armed").exists()
    });
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
    let msg = pod.termination_message();
    assert_eq!(
        msg,
        "kube-prestop hook runs, oldest first:\n\
         container=main instance=- container_exit=unknown hook=missed duration_ms=- grace_cut=false\n",
        "{}",
        sc.log_text()
    );
    assert!(sc.log_text().contains("was never seen running"));
}
