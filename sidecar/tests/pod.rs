//! The sidecar against real processes in a pod stand-in made of namespaces
//! (see `common/mod.rs`). Needs root; skips with a message otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fs;
use std::time::Duration;

use common::*;

fn done_fields(pod: &Pod, id: &str) -> std::collections::BTreeMap<String, String> {
    fields(&pod.record(&format!("done-{id}")))
}

/// Waits for `n` hook lines and `n` done records, and checks every line is a
/// distinct instance.
fn expect_hooks(pod: &Pod, n: usize) -> Vec<String> {
    wait_for(&format!("{n} hook runs"), T, || {
        pod.lines("hooks").len() >= n && pod.records("done-").len() >= n
    });
    let lines = pod.lines("hooks");
    assert_eq!(lines.len(), n, "hook lines: {lines:?}");
    let mut ids: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "distinct instances: {lines:?}");
    lines
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn exit_zero_runs_the_hook_once_with_its_env() {
    require_root_and_util_linux();
    let mut pod = Pod::new("exit0");
    let mut hook = pod.hook();
    // Also record when the hook starts, to measure exit -> hook latency.
    hook[2] = format!("date +%s%N > {}; {}", pod.out("hook-ts").display(), hook[2]);
    let mut sc = pod.sidecar(&hook, &[]);
    // As in a pod, the identifying mount must come from the id volume the
    // sidecar mounts at `id/`: its file system and root.
    let log = sc.log_text();
    assert!(
        log.contains("/volumes/kube-prestop)"),
        "the finder's source is not the id volume: {log}"
    );
    let ts = pod.out("exit-ts");
    let st = pod.run_main(&["sh", "-c", &format!("date +%s%N > {}", ts.display())]);
    assert_eq!(code(st), 0);
    let lines = expect_hooks(&pod, 1);
    let parts: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(parts[0], "main");
    assert_eq!(parts[2], "1");
    let id = parts[1];
    let d = done_fields(&pod, id);
    assert_eq!(d["outcome"], "ran");
    assert_eq!(d["exit_status"], "0");
    assert!(pod.records("seen-").contains(&format!("seen-{id}")));
    assert!(pod.records("running-").contains(&format!("running-{id}")));
    let t0: u128 = fs::read_to_string(&ts).unwrap().trim().parse().unwrap();
    let t1: u128 = fs::read_to_string(pod.out("hook-ts"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "measured: main's last action -> hook's first action: {:.2} ms",
        (t1 - t0) as f64 / 1e6
    );
    assert!(sc.alive(), "the sidecar must stay up after the hook");
    let log = sc.log_text();
    assert!(log.contains("kube-prestop: hook finished"), "{log}");
    assert!(
        log.lines().all(|l| l.starts_with("kube-prestop: ")),
        "{log}"
    );
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn exit_three_runs_the_hook_and_records_its_status() {
    require_root_and_util_linux();
    let mut pod = Pod::new("exit3");
    let mut hook = pod.hook();
    hook[2].push_str("; echo hook-stdout; echo hook-stderr >&2; exit 5");
    let mut sc = pod.sidecar(&hook, &[]);
    assert_eq!(code(pod.run_main(&["sh", "-c", "exit 3"])), 3);
    let lines = expect_hooks(&pod, 1);
    let id = lines[0].split(' ').nth(1).unwrap().to_owned();
    let d = done_fields(&pod, &id);
    assert_eq!(d["exit_status"], "5");
    assert_eq!(d["status"], "exit 5");
    // The hook's output reaches the sidecar's stdout and stderr unchanged.
    let out = fs::read_to_string(sc.log.with_extension("out")).unwrap();
    assert_eq!(out, "hook-stdout\n");
    assert!(sc.log_text().lines().any(|l| l == "hook-stderr"));
    assert!(sc.alive());
}

/// A preStop command whose arguments are not UTF-8 (no pod spec can carry
/// one: robustness) reaches both runs byte for byte: the kubelet's, through
/// the wrapper, and the watcher's hook.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_command_with_non_utf8_arguments_runs_verbatim() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt as _;
    require_root_and_util_linux();
    let mut pod = Pod::new("bytes");
    let arg = OsString::from_vec(b"caf\xe9".to_vec());
    let command = |out: std::path::PathBuf| -> Vec<OsString> {
        vec![
            "sh".into(),
            "-c".into(),
            "printf '%s\\n' \"$1\" >> \"$2\"".into(),
            "sh".into(),
            arg.clone(),
            out.into(),
        ]
    };
    let (hook, kubelet) = (command(pod.out("hooks")), command(pod.out("kubelet")));
    let mut sc = pod.sidecar(&hook, &[]);
    let (mut m, id) = pod.watched_sleeper();
    assert_eq!(code(pod.prestop(&m, &kubelet)), 0);
    assert_eq!(fs::read(pod.out("kubelet")).unwrap(), b"caf\xe9\n");
    assert!(
        pod.records("prestop-ended-")
            .contains(&format!("prestop-ended-{id}"))
    );
    // A second instance, which exits on its own: the watcher's hook.
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for_or_show(
        "the hook",
        T,
        || sc.log_text(),
        || pod.out("hooks").exists(),
    );
    wait_for("the hook to end", T, || pod.records("done-").len() >= 2);
    assert_eq!(fs::read(pod.out("hooks")).unwrap(), b"caf\xe9\n");
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn sigkill_runs_the_hook_once() {
    require_root_and_util_linux();
    let mut pod = Pod::new("sigkill");
    let _sc = pod.sidecar(&pod.hook(), &[]);
    let (mut m, _) = pod.watched_sleeper();
    kill(m.pid, libc::SIGKILL);
    assert_eq!(code(m.wait(T)), 128 + 9);
    expect_hooks(&pod, 1);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn kubelet_prestop_via_wrapper_means_no_second_run() {
    require_root_and_util_linux();
    let mut pod = Pod::new("wrapper");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    let (mut m, id) = pod.watched_sleeper();
    // The kubelet runs the wrapped preStop in the container: same exit status.
    let kubelet = format!("echo kubelet >> {}; exit 7", pod.out("kubelet").display());
    let st = pod.prestop(&m, &["sh", "-c", &kubelet]);
    assert_eq!(code(st), 7);
    assert_eq!(pod.lines("kubelet"), vec!["kubelet"]);
    assert!(pod.records("prestop-").contains(&format!("prestop-{id}")));
    assert!(
        pod.records("prestop-ended-")
            .contains(&format!("prestop-ended-{id}")),
        "the wrapper records that the preStop ended"
    );
    // Delivered again (hook delivery is at least once), with a command that
    // does not exist: 127, like a shell; the first mark stands, no error.
    assert_eq!(code(pod.prestop(&m, &["/nonexistent/cmd"])), 127);
    let log = sc.log_text();
    assert!(
        log.contains(&format!("instance {id} again")),
        "the repeat delivery is reported: {log}"
    );
    assert!(!log.contains("error"), "{log}");
    // Then the kubelet stops the container.
    kill(m.pid, libc::SIGTERM);
    m.wait(T);
    wait_for("the sidecar's decision", T, || {
        !pod.records("done-").is_empty()
    });
    assert_eq!(done_fields(&pod, &id)["outcome"], "skipped-prestop");
    assert!(pod.lines("hooks").is_empty());
    assert!(sc.log_text().contains("the kubelet ran the preStop itself"));
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_container_that_exits_as_the_kubelets_prestop_starts_gets_one_run() {
    // The kubelet's exec has entered the container, then the container
    // exits on its own before the wrapper looks: the wrapper used to find
    // itself, mark its own id, and run the command while the watcher also
    // ran the hook.
    require_root_and_util_linux();
    let mut pod = Pod::new("wrapper-race");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    let (mut m, id) = pod.watched_sleeper();
    let gate = pod.out("gate");
    let kubelet = format!("echo kubelet >> {}", pod.out("kubelet").display());
    let entered = pod.out("entered");
    let script = format!(
        ": > {entered}; while [ ! -e {gate} ]; do sleep 0.01; done; exec \"$0\" \"$@\"",
        entered = entered.display(),
        gate = gate.display()
    );
    let mut wrapper = pod
        .prestop_command(&m, &["sh", "-c", &script], &["sh", "-c", &kubelet])
        .stderr(std::fs::File::create(pod.out("wrapper-stderr")).unwrap())
        .spawn()
        .unwrap();
    wait_for("the kubelet's exec to enter the container", T, || {
        entered.exists()
    });
    // The container ends on its own; the watcher takes the exit.
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    wait_for("the sidecar's run", T, || !pod.records("done-").is_empty());
    std::fs::write(&gate, "").unwrap();
    let st = wait_exit(&mut wrapper, T);
    let stderr = std::fs::read_to_string(pod.out("wrapper-stderr")).unwrap_or_default();
    assert_eq!(code(st), 0, "wrapper: {stderr}\nsidecar: {}", sc.log_text());
    assert!(
        pod.lines("kubelet").is_empty(),
        "the preStop ran a second time"
    );
    assert!(!pod.records("prestop-").iter().any(|r| !r.ends_with(&id)));
    assert_eq!(done_fields(&pod, &id)["outcome"], "ran");
    expect_hooks(&pod, 1);
    wait_for_or_show(
        "the wrapper's line in the sidecar's log",
        T,
        || sc.log_text(),
        || sc.log_text().contains("does not run it a second time"),
    );
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_kubelet_prestop_cut_short_by_the_containers_exit_gets_the_hook() {
    // containerd's shim kills every process of a container that shares the
    // pod's PID namespace when its init process exits, the kubelet's preStop
    // exec included; the test kills the wrapper itself, as the shim would.
    // Before, the mark alone meant "the kubelet ran the preStop".
    require_root_and_util_linux();
    let mut pod = Pod::new("wrapper-cut");
    let hook = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo \"$KUBE_PRESTOP_INSTANCE ${{KUBE_PRESTOP_KUBELET_PRESTOP-unset}}\" >> {}",
            pod.out("hooks").display()
        ),
    ];
    let mut sc = pod.sidecar(&hook, &[]);
    let (mut m, id) = pod.watched_sleeper();
    let started = pod.out("prestop-started");
    let kubelet = format!(": > {}; exec sleep 1000", started.display());
    let mut wrapper = pod
        .prestop_command(&m, &[], &["sh", "-c", &kubelet])
        .spawn()
        .unwrap();
    wait_for("the kubelet's preStop to start", T, || started.exists());
    assert!(pod.records("prestop-").contains(&format!("prestop-{id}")));
    // The container exits on its own; the runtime kills the preStop with it.
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    let wrapper_pid = child_of(i32::try_from(wrapper.id()).unwrap());
    let command_pid = child_of(wrapper_pid);
    kill(wrapper_pid, libc::SIGKILL);
    kill(command_pid, libc::SIGKILL);
    let _ = wait_exit(&mut wrapper, T);
    wait_for_or_show(
        "the hook",
        T,
        || sc.log_text(),
        || !pod.lines("hooks").is_empty(),
    );
    assert_eq!(pod.lines("hooks"), vec![format!("{id} cut")]);
    wait_for("the done record", T, || {
        pod.records("done-").contains(&format!("done-{id}"))
    });
    assert!(
        !pod.records("prestop-ended-")
            .iter()
            .any(|r| r.ends_with(&id))
    );
    assert_eq!(done_fields(&pod, &id)["outcome"], "ran");
    assert!(sc.log_text().contains("cut it short"), "{}", sc.log_text());
    assert!(sc.alive());
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn three_restarts_three_hooks() {
    require_root_and_util_linux();
    let mut pod = Pod::new("restarts");
    let _sc = pod.sidecar(&pod.hook(), &[]);
    for i in 1..=3 {
        assert_eq!(code(pod.run_main(&["sh", "-c", "exit 1"])), 1);
        // OnFailure: the kubelet restarts after the exit was handled (backoff).
        expect_hooks(&pod, i);
    }
}

/// Hooks queued behind a slow one each end: when a run ends, the next
/// queued hook starts at once and may exit before the watcher's next
/// `waitpid`, which must see it as the hook (before the fix its status was
/// reaped as an orphan's, its run never ended and every later hook waited
/// behind it; the ungated measurement caught that in CI).
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn hooks_queued_behind_a_slow_one_each_end() {
    require_root_and_util_linux();
    let mut pod = Pod::new("queued");
    let release = pod.out("release");
    let hook = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "echo \"$KUBE_PRESTOP_CONTAINER $KUBE_PRESTOP_INSTANCE $KUBE_PRESTOP_ATTEMPT\" >> {h}; \
             [ -e {f} ] && exit 0; : > {f}; while [ ! -e {r} ]; do sleep 0.01; done",
            h = pod.out("hooks").display(),
            f = pod.out("first").display(),
            r = release.display()
        ),
    ];
    let _sc = pod.sidecar(&hook, &[]);
    let n = 40;
    for _ in 0..n {
        assert_eq!(code(pod.run_main(&["true"])), 0);
    }
    // The first hook still holds the rest in the queue.
    assert_eq!(pod.lines("hooks").len(), 1);
    fs::write(&release, "").unwrap();
    expect_hooks(&pod, n);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn sidecar_killed_mid_watch_still_exactly_once() {
    require_root_and_util_linux();
    let mut pod = Pod::new("sckill");
    let mut sc1 = pod.sidecar(&pod.hook(), &[]);
    let (mut m, _) = pod.watched_sleeper();
    kill(sc1.pid, libc::SIGKILL);
    sc1.wait(T);
    let sc2 = pod.sidecar(&pod.hook(), &[]);
    wait_for("the new sidecar to watch the same instance", T, || {
        sc2.log_text().contains("watching container=main")
    });
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    expect_hooks(&pod, 1);
    assert!(sc2.log_text().contains("still running; watching it again"));
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_sigkilled_watchers_mark_does_not_satisfy_the_next_post_start() {
    require_root_and_util_linux();
    let pod = Pod::new("stalemark");
    let mut sc1 = pod.sidecar(&pod.hook(), &[]);
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "{err}");
    assert!(err.is_empty(), "armed by a live watcher: {err}");
    // Its line is in the sidecar's log (the watcher's stderr).
    assert!(
        sc1.log_text().contains("post-start done container=main"),
        "{}",
        sc1.log_text()
    );
    // SIGKILL: the watcher cannot remove its mark, and the restarted
    // sidecar's postStart may run before the new watcher removes it.
    kill(sc1.pid, libc::SIGKILL);
    sc1.wait(T);
    assert!(pod.state().join("armed").exists(), "the stale mark is left");
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "fail-open: {err}");
    assert!(err.contains("not armed after 0 s"), "{err}");
    assert!(err.contains("not running"), "{err}");
    // A new watcher's own mark satisfies it again.
    let sc2 = pod.sidecar(&pod.hook(), &[]);
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "{err}");
    assert!(err.is_empty(), "armed by the new watcher: {err}");
    // A running watcher but no mark (removed here by hand): the handler
    // times out and writes its warning into that watcher's log, where an
    // operator sees it (the kubelet drops a successful handler's output).
    std::fs::remove_file(pod.state().join("armed")).unwrap();
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "fail-open: {err}");
    assert!(
        err.is_empty(),
        "into the watcher's log, not its own stderr: {err}"
    );
    assert!(
        sc2.log_text()
            .contains("post-start: warning: watcher for container main not armed after 0 s"),
        "{}",
        sc2.log_text()
    );
}

/// X mounts its state volume read-write and sees every process of the
/// pod, so it can replace the watcher's `armed` mark with a well-formed one
/// naming its own process: that neither arms `post-start` (which fails open
/// at its timeout, its warning in the real watcher's log) nor passes
/// `probe`; the watcher's own mark does both.
#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_mark_planted_by_x_naming_its_own_process_does_not_arm() {
    require_root_and_util_linux();
    let mut pod = Pod::new("plantedpid");
    let sc = pod.sidecar(&pod.hook(), &[]);
    let (_m, id) = pod.watched_sleeper();
    let armed = pod.state().join("armed");
    let own = fs::read_to_string(&armed).unwrap();
    let probe = || {
        std::process::Command::new("nsenter")
            .arg(format!("--target={}", pod.init))
            .args(["--pid", "--mount", "--"])
            .arg(bin())
            .args(["probe", "--container", C, "--root"])
            .arg(pod.vol())
            .output()
            .unwrap()
    };
    assert!(probe().status.success(), "the watcher's own mark");
    // X's process, as the pod's PID namespace numbers it, with its start time.
    let (x_pid, x_start) = {
        let (pid, start) = id.split_once('-').unwrap();
        (pid.to_owned(), start.to_owned())
    };
    fs::remove_file(&armed).unwrap();
    fs::write(&armed, format!("pid={x_pid}\nstart_time_ticks={x_start}\n")).unwrap();
    let out = probe();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not this container's watcher"),
        "{out:?}"
    );
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "fail-open: {err}");
    let log = sc.log_text();
    assert!(
        log.contains("not armed after 0 s") && log.contains("not this container's watcher"),
        "the warning is in the real watcher's log: {log}"
    );
    fs::remove_file(&armed).unwrap();
    fs::write(&armed, own).unwrap();
    let (c, err) = pod.post_start(0);
    assert_eq!(c, 0, "{err}");
    assert!(err.is_empty(), "armed by the watcher again: {err}");
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn exit_while_sidecar_down_is_still_handled_once() {
    require_root_and_util_linux();
    let mut pod = Pod::new("down");
    let mut sc1 = pod.sidecar(&pod.hook(), &[]);
    let (mut m, _) = pod.watched_sleeper();
    kill(sc1.pid, libc::SIGKILL);
    sc1.wait(T);
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    let sc2 = pod.sidecar(&pod.hook(), &[]);
    expect_hooks(&pod, 1);
    assert!(sc2.log_text().contains("exited while the sidecar was down"));
    // A third start finds everything done: nothing runs again.
    let mut sc2 = sc2;
    kill(sc2.pid, libc::SIGTERM);
    assert_eq!(code(sc2.wait(T)), 0);
    let mut sc3 = pod.sidecar(&pod.hook(), &[]);
    kill(sc3.pid, libc::SIGTERM);
    assert_eq!(code(sc3.wait(T)), 0);
    assert_eq!(pod.lines("hooks").len(), 1);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn interrupted_hook_is_retried_at_most_once() {
    require_root_and_util_linux();
    let mut pod = Pod::new("retry");
    // Appends its attempt, then waits for a release file.
    let hook = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "echo \"main $KUBE_PRESTOP_INSTANCE $KUBE_PRESTOP_ATTEMPT\" >> {h}; while [ ! -e {r} ]; do sleep 0.01; done",
            h = pod.out("attempts").display(),
            r = pod.out("release").display()
        ),
    ];
    let mut sc1 = pod.sidecar(&hook, &[]);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("attempt 1", T, || pod.lines("attempts").len() == 1);
    kill(sc1.pid, libc::SIGKILL);
    sc1.wait(T);
    let mut sc2 = pod.sidecar(&hook, &[]);
    wait_for("attempt 2", T, || pod.lines("attempts").len() == 2);
    assert!(pod.lines("attempts")[1].ends_with(" 2"));
    assert!(sc2.log_text().contains("retrying once"));
    kill(sc2.pid, libc::SIGKILL);
    sc2.wait(T);
    let sc3 = pod.sidecar(&hook, &[]);
    wait_for("the give-up record", T, || !pod.records("done-").is_empty());
    let id = pod.records("done-")[0]
        .trim_start_matches("done-")
        .to_owned();
    assert_eq!(done_fields(&pod, &id)["outcome"], "abandoned");
    assert!(sc3.log_text().contains("interrupted twice"));
    assert_eq!(pod.lines("attempts").len(), 2);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn sigterm_during_a_long_hook_lets_it_finish() {
    require_root_and_util_linux();
    let mut pod = Pod::new("sigterm");
    let hook = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "echo start >> {h}; while [ ! -e {r} ]; do sleep 0.01; done; echo end >> {h}",
            h = pod.out("hook").display(),
            r = pod.out("release").display()
        ),
    ];
    let mut sc = pod.sidecar(&hook, &[("KUBE_PRESTOP_GRACE_PERIOD_SECONDS", "7")]);
    assert_eq!(code(pod.run_main(&["sh", "-c", "exit 2"])), 2);
    wait_for("the hook to start", T, || pod.lines("hook") == ["start"]);
    kill(sc.pid, libc::SIGTERM);
    wait_for("the SIGTERM log line", T, || {
        sc.log_text().contains("SIGTERM received while hook runs")
    });
    let log = sc.log_text();
    assert!(log.contains("grace period 7s"), "{log}");
    assert!(sc.alive(), "the sidecar must wait for the hook");
    fs::write(pod.out("release"), "").unwrap();
    assert_eq!(code(sc.wait(T)), 0);
    assert_eq!(pod.lines("hook"), ["start", "end"]);
    assert_eq!(pod.records("done-").len(), 1);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn missing_hook_command_records_127_and_stays_up() {
    require_root_and_util_linux();
    let mut pod = Pod::new("nohook");
    let mut sc = pod.sidecar(&["/nonexistent/cleanup".to_owned()], &[]);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the done record", T, || !pod.records("done-").is_empty());
    let id = pod.records("done-")[0]
        .trim_start_matches("done-")
        .to_owned();
    assert_eq!(done_fields(&pod, &id)["exit_status"], "127");
    assert!(sc.log_text().contains("command not found"));
    // Still watching: the next instance is handled too.
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the second done record", T, || {
        pod.records("done-").len() == 2
    });
    assert!(sc.alive());
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn hook_process_group_is_cleaned_up() {
    require_root_and_util_linux();
    let mut pod = Pod::new("pgroup");
    // The hook leaves a background child in its group and exits.
    let hook = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("sleep 1000 & echo $! > {}; exit 0", pod.out("bg").display()),
    ];
    let _sc = pod.sidecar(&hook, &[]);
    assert_eq!(code(pod.run_main(&["true"])), 0);
    wait_for("the done record", T, || !pod.records("done-").is_empty());
    // bg holds the PID inside the pod; the process must be gone (killed and reaped).
    let bg: i32 = pod.lines("bg")[0].parse().unwrap();
    let proc_in_pod = format!("/proc/{}/root/proc/{bg}/stat", pod.init);
    // Positive control: the pod's /proc is reachable that way.
    assert!(fs::read_to_string(format!("/proc/{}/root/proc/1/stat", pod.init)).is_ok());
    wait_for("the hook's background child to be gone", T, || {
        fs::read_to_string(&proc_in_pod).is_err()
    });
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn idle_watch_has_no_wakeups_and_small_rss() {
    require_root_and_util_linux();
    let mut pod = Pod::new("idle");
    let sc = pod.sidecar(&pod.hook(), &[]);
    let mut m = pod.create_main(&["sleep", "1000"]);
    m.start();
    wait_for("the sidecar to watch", T, || {
        sc.log_text().contains("watching container=main")
    });
    let status = || fs::read_to_string(format!("/proc/{}/status", sc.pid)).unwrap();
    let get = |s: &str, k: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap()
    };
    let a = status();
    // A measurement window, not a synchronisation: count wake-ups over 1 s.
    std::thread::sleep(Duration::from_secs(1));
    let b = status();
    let wakeups = get(&b, "voluntary_ctxt_switches") - get(&a, "voluntary_ctxt_switches")
        + get(&b, "nonvoluntary_ctxt_switches")
        - get(&a, "nonvoluntary_ctxt_switches");
    let rss = get(&b, "VmRSS:");
    eprintln!("measured: idle watch: {wakeups} wake-ups in 1 s, VmRSS {rss} kB");
    assert_eq!(wakeups, 0);
    // The static release binary (KPS_TEST_BIN) must stay within 1 MiB; the
    // debug build cargo makes for the tests is larger.
    let limit = if std::env::var_os("KPS_TEST_BIN").is_some() {
        1024
    } else {
        4096
    };
    assert!(rss <= limit, "VmRSS {rss} kB > {limit} kB");
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    expect_hooks(&pod, 1);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_process_exec_d_into_the_container_that_outlives_it_is_not_an_instance() {
    require_root_and_util_linux();
    let mut pod = Pod::new("leftover");
    let sc = pod.sidecar(&pod.hook(), &[]);
    let (mut m, _) = pod.watched_sleeper();
    // Like `kubectl exec`: a process joins the container's namespaces (parent
    // outside the pod: parent PID 0, identifying mount present).
    let mut exec = std::process::Command::new("nsenter")
        .arg(format!("--target={}", m.pid))
        .args(["--pid", "--mount", "--", "sleep", "1000"])
        .spawn()
        .unwrap();
    let exec_pid = child_of(exec.id() as i32);
    kill(m.pid, libc::SIGKILL);
    m.wait(T);
    expect_hooks(&pod, 1);
    // The exec'd process outlives the container; then it goes too.
    kill(exec_pid, libc::SIGKILL);
    exec.wait().unwrap();
    // The next real instance is found and handled; the leftover never was.
    assert_eq!(code(pod.run_main(&["true"])), 0);
    expect_hooks(&pod, 2);
    assert_eq!(pod.records("seen-").len(), 2, "{:?}", pod.records("seen-"));
    assert!(!sc.log_text().contains(&format!("pid={exec_pid} ")));
    // While watching, the sidecar holds no other process's mount namespace.
    let m2 = pod.create_main(&["sleep", "1000"]);
    m2.start();
    wait_for("the third instance", T, || pod.records("seen-").len() == 3);
    wait_for("the sidecar to watch it", T, || {
        sc.log_text().matches("watching container=main").count() >= 2
    });
    let held: Vec<String> = fs::read_dir(format!("/proc/{}/fd", sc.pid))
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.ends_with("/mountinfo"))
        .collect();
    assert!(held.len() <= 1, "{held:?}");
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_sigterm_from_a_process_of_the_pod_is_not_the_kubelets_stop() {
    // Argo's emissary signals `kill(-1, SIGTERM)` when it is stopped, which
    // in a shared PID namespace reaches the sidecar too (src/sender.rs).
    require_root_and_util_linux();
    let mut pod = Pod::new("insider");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    let (mut m, _) = pod.watched_sleeper();
    let st = std::process::Command::new("nsenter")
        .arg(format!("--target={}", pod.init))
        .args(["--pid", "--", "sh", "-c"])
        .arg(format!("kill -TERM {}", ns_pid(sc.pid)))
        .status()
        .unwrap();
    assert!(st.success());
    wait_for("the ignored SIGTERM's log line", T, || {
        sc.log_text().contains("ignored SIGTERM from PID")
    });
    assert!(sc.alive(), "a process of the pod stopped the sidecar");
    kill(m.pid, libc::SIGTERM);
    assert_eq!(code(m.wait(T)), 128 + 15);
    expect_hooks(&pod, 1);
    // The runtime's SIGTERM comes from outside the pod's PID namespace.
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}

#[test]
#[ignore = "needs root and util-linux: make unit runs it as root (scripts/privileged-tests.sh)"]
fn a_lookalike_mount_of_another_directory_is_not_taken_for_main() {
    // Another container of the pod (parentless, in a mount namespace of
    // its own) with a mount of its own directory at main's identifying
    // mount point, started before main: not from the id volume, so never
    // an instance of main. On the mount point alone (before the source
    // check) it was the oldest match: seen, and its exit got main's hook.
    require_root_and_util_linux();
    let mut pod = Pod::new("lookalike");
    let mut sc = pod.sidecar(&pod.hook(), &[]);
    let src = pod.out("lookalike-src");
    fs::create_dir_all(&src).unwrap();
    let mp = pod.id_mount_point();
    fs::create_dir_all(&mp).unwrap();
    let mut fake = pod.spawn_plain_process(&format!(
        "mount --bind {} {} && exec sleep 30",
        src.display(),
        mp.display()
    ));
    fake.start();
    let needle = format!(" {} ", mp.display());
    wait_for("the lookalike's mount", T, || {
        fs::read_to_string(format!("/proc/{}/mountinfo", fake.pid))
            .is_ok_and(|m| m.contains(&needle))
    });
    assert_eq!(code(pod.run_main(&["true"])), 0);
    expect_hooks(&pod, 1);
    kill(fake.pid, libc::SIGKILL);
    fake.wait(T);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pod.lines("hooks").len(), 1, "{}", sc.log_text());
    assert_eq!(pod.records("seen-").len(), 1, "{}", sc.log_text());
    kill(sc.pid, libc::SIGTERM);
    assert_eq!(code(sc.wait(T)), 0);
}
