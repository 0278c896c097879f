//! The binary's command line and its behaviour on bad input, without
//! namespaces (runs as any user).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::{T, bin, code, kill, wait_exit, wait_for};
use kube_prestop_contract as contract;
use kube_prestop_sidecar::procfs;

fn tmp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kps-cli-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// An `armed` mark as a running watcher writes it, naming this test process.
fn live_armed_record() -> String {
    armed_record(std::process::id() as i32)
}

/// A well-formed `armed` mark naming running process `pid`, with its true
/// start time: what X's processes can write in their state volume.
fn armed_record(pid: i32) -> String {
    let st = procfs::read_stat(std::path::Path::new(procfs::PROC_ROOT), pid).unwrap();
    contract::ArmedRecord {
        pid,
        start_time_ticks: st.start_time,
    }
    .to_string()
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        code(out.status),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    for (args, needle) in [
        (vec![], "missing subcommand"),
        (vec!["frobnicate"], "unknown subcommand"),
        (
            vec!["watch", "--container", "main", "--bogus", "--", "true"],
            "unknown flag \"--bogus\"",
        ),
        (
            vec!["watch", "--container", "main"],
            "needs the hook command",
        ),
        (
            vec!["watch", "--container", "Main_1", "--", "true"],
            "not a valid container name",
        ),
        (vec!["probe"], "needs --container"),
        (vec!["post-start"], "needs --container"),
        (
            vec!["post-start", "--container", "main", "--timeout", "soon"],
            "not a whole number of seconds",
        ),
        (vec!["install"], "needs --dest"),
        (
            vec!["post-start", "--container", "--timeout", "5"],
            "--container needs a value",
        ),
        (
            vec!["post-start", "--container", "main", "--timeout", "+1"],
            "not a whole number of seconds",
        ),
    ] {
        let (c, err) = run(&args);
        assert_eq!(c, 2, "{args:?}: {err}");
        assert!(err.starts_with("kube-prestop: error: "), "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.contains("usage:"), "{err}");
    }
    let (c, _) = run(&["--help"]);
    assert_eq!(c, 0);
}

#[test]
fn probe_passes_only_once_armed() {
    let d = tmp("probe");
    let root = d.to_str().unwrap();
    let (c, err) = run(&["probe", "--container", "main", "--root", root]);
    assert_eq!(c, 1);
    assert!(err.contains("not armed"));
    fs::create_dir_all(d.join("state/main")).unwrap();
    // A mark left by a watcher that is gone does not count.
    fs::write(
        d.join("state/main/armed"),
        contract::ArmedRecord {
            pid: i32::MAX,
            start_time_ticks: 1,
        }
        .to_string(),
    )
    .unwrap();
    let (c, err) = run(&["probe", "--container", "main", "--root", root]);
    assert_eq!(c, 1);
    assert!(err.contains("not running"), "{err}");
    // Nor one naming a running process that is not the container's
    // watcher (this test process; PID 1): X can write such a mark. A real
    // watcher's mark passes in `tests/pod.rs`, which has the namespaces.
    for record in [live_armed_record(), armed_record(1)] {
        fs::write(d.join("state/main/armed"), record).unwrap();
        let (c, err) = run(&["probe", "--container", "main", "--root", root]);
        assert_eq!(c, 1, "{err}");
        assert!(err.contains("not this container's watcher"), "{err}");
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn post_start_fails_open_on_timeout() {
    let d = tmp("post-start");
    let root = d.to_str().unwrap();
    // Never armed: after the timeout it still succeeds (a failing postStart
    // would make the kubelet restart the sidecar and never start X), and
    // says why on stderr.
    let post_start = || {
        run(&[
            "post-start",
            "--container",
            "main",
            "--timeout",
            "0",
            "--root",
            root,
        ])
    };
    let (c, err) = post_start();
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("not armed after 0 s"), "{err}");
    assert!(err.contains("missing"), "{err}");
    // A mark naming a watcher that is gone (SIGKILLed before it could remove
    // it) does not end the wait either.
    fs::create_dir_all(d.join("state/main")).unwrap();
    fs::write(
        d.join("state/main/armed"),
        contract::ArmedRecord {
            pid: i32::MAX,
            start_time_ticks: 1,
        }
        .to_string(),
    )
    .unwrap();
    let (c, err) = post_start();
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains("not armed after 0 s") && err.contains("not running"),
        "{err}"
    );
    // (Armed while it waits, by a real watcher: `tests/pod.rs`, which has
    // the namespaces a watcher is verified by.)
    fs::remove_dir_all(&d).unwrap();
}

/// A well-formed `armed` mark planted by X (which mounts its state volume
/// read-write and sees every process of the pod) naming a running process
/// that is not the watcher, one whose stderr is a full pipe nobody reads,
/// the write end of a FIFO without a reader, a read-only descriptor of a
/// file outside the state directory, or PID 1: `post-start` is not armed
/// by it and still ends at its `--timeout` (fail-open), `probe` fails, and
/// nothing is written through that process's fd 2. (Before, `post-start`
/// took any live PID for the watcher and then blocked for ever in the
/// `write` to the pipe or the `open` of the FIFO, and appended its line to
/// the file, as a newcomer's attack pass found.)
#[test]
fn a_planted_mark_naming_another_process_neither_arms_nor_blocks_nor_writes() {
    use std::time::{Duration, Instant};
    let d = tmp("planted-pid");
    let root = d.to_str().unwrap();
    fs::create_dir_all(d.join("state/main")).unwrap();
    // A full pipe that nobody reads.
    let (r, w) = nix::unistd::pipe().unwrap();
    nix::fcntl::fcntl(
        &w,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    while nix::unistd::write(&w, &[b'x'; 4096]).is_ok() {}
    nix::fcntl::fcntl(
        &w,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .unwrap();
    // A FIFO whose only reader is gone.
    let fifo = d.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let rw = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let wo = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    drop(rw);
    // A file outside the state directory, open read-only.
    let victim = d.join("victim");
    fs::write(&victim, "untouched\n").unwrap();
    let sleeper = |stderr: Stdio| {
        Command::new("sleep")
            .arg("60")
            .stderr(stderr)
            .spawn()
            .unwrap()
    };
    let mut children = [
        ("a full pipe", sleeper(Stdio::from(w))),
        ("a FIFO without a reader", sleeper(Stdio::from(wo))),
        (
            "a read-only file",
            sleeper(Stdio::from(fs::File::open(&victim).unwrap())),
        ),
    ];
    let mut named: Vec<(&str, i32)> = children
        .iter()
        .map(|(what, c)| (*what, c.id() as i32))
        .collect();
    named.push(("PID 1", 1));
    for (what, pid) in named {
        fs::write(d.join("state/main/armed"), armed_record(pid)).unwrap();
        let start = Instant::now();
        let (c, err) = run_bounded(
            &[
                "post-start",
                "--container",
                "main",
                "--timeout",
                "1",
                "--root",
                root,
            ],
            Duration::from_secs(15),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let took = start.elapsed();
        assert_eq!(c, 0, "{what}: {err}");
        assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
        assert!(
            err.contains("not armed after 1 s")
                && err.contains(&format!(
                    "names running pid {pid}, which is not this container's watcher"
                )),
            "{what}: {err}"
        );
        let (c, err) = run_bounded(
            &["probe", "--container", "main", "--root", root],
            Duration::from_secs(15),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(c, 1, "{what}: {err}");
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched\n");
    for (_, c) in &mut children {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    drop(r);
    fs::remove_dir_all(&d).unwrap();
}

/// When `state/<container>` itself is not a directory (a FIFO, a link),
/// `post-start` and `probe` name that directory as refused, not the
/// `armed` mark under it, which was never looked at.
#[test]
fn a_refused_state_directory_is_named_in_the_message() {
    use std::time::Duration;
    let d = tmp("refused-dir");
    let root = d.to_str().unwrap();
    fs::create_dir_all(d.join("state")).unwrap();
    let dir = d.join("state/main");
    let armed = dir.join("armed");
    nix::unistd::mkfifo(&dir, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let (c, err) = run_bounded(
        &[
            "post-start",
            "--container",
            "main",
            "--timeout",
            "0",
            "--root",
            root,
        ],
        Duration::from_secs(15),
    )
    .unwrap();
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains(&format!(
            "refused, not read: {}: it is a FIFO",
            dir.display()
        )),
        "{err}"
    );
    assert!(!err.contains(&armed.display().to_string()), "{err}");
    fs::remove_file(&dir).unwrap();
    fs::create_dir_all(d.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(d.join("elsewhere"), &dir).unwrap();
    let (c, err) = run(&["probe", "--container", "main", "--root", root]);
    assert_eq!(c, 1, "{err}");
    assert!(
        err.contains(&format!(
            "refused, not read: {}: it is a symbolic link",
            dir.display()
        )),
        "{err}"
    );
    assert!(!err.contains(&armed.display().to_string()), "{err}");
    fs::remove_dir_all(&d).unwrap();
}

/// Runs the binary with `args`, killing it if it has not exited within
/// `limit`: `Err` with what it printed when it hung.
fn run_bounded(args: &[&str], limit: std::time::Duration) -> Result<(i32, String), String> {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    match status {
        Some(st) => Ok((code(st), err)),
        None => Err(format!("{args:?} still running after {limit:?}: {err}")),
    }
}

/// A FIFO, a socket, or a link (to a FIFO, to `/dev/zero`) planted where
/// the `armed` mark belongs (X mounts its state volume read-write) never
/// blocks `post-start` or `probe` nor is followed: `post-start` still
/// fails open at its timeout and `probe` fails at once, each naming the
/// path and what was found there. (Before, both blocked in `open(2)` on
/// the FIFO for ever; the kubelet runs postStart without a time limit.)
#[test]
fn a_planted_non_regular_armed_mark_neither_blocks_nor_is_followed() {
    use std::time::Duration;
    let d = tmp("planted-armed");
    let root = d.to_str().unwrap();
    let dir = d.join("state/main");
    fs::create_dir_all(&dir).unwrap();
    let mark = dir.join("armed");
    let fifo = d.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let plants: [(&str, &dyn Fn()); 4] = [
        ("a FIFO", &|| {
            nix::unistd::mkfifo(&mark, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap()
        }),
        ("a socket", &|| {
            std::mem::forget(std::os::unix::net::UnixListener::bind(&mark).unwrap())
        }),
        ("a symbolic link", &|| {
            std::os::unix::fs::symlink(&fifo, &mark).unwrap()
        }),
        ("a symbolic link", &|| {
            std::os::unix::fs::symlink("/dev/zero", &mark).unwrap()
        }),
    ];
    for (what, plant) in plants {
        let _ = fs::remove_file(&mark);
        plant();
        let limit = Duration::from_secs(10);
        let (c, err) = run_bounded(
            &[
                "post-start",
                "--container",
                "main",
                "--timeout",
                "1",
                "--root",
                root,
            ],
            limit,
        )
        .unwrap();
        assert_eq!(c, 0, "{what}: {err}");
        assert!(err.contains("not armed after 1 s"), "{what}: {err}");
        assert!(
            err.contains(&mark.display().to_string()) && err.contains(what),
            "{what}: {err}"
        );
        let (c, err) =
            run_bounded(&["probe", "--container", "main", "--root", root], limit).unwrap();
        assert_eq!(c, 1, "{what}: {err}");
        assert!(
            err.contains(&mark.display().to_string()) && err.contains(what),
            "{what}: {err}"
        );
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn install_copies_itself_world_executable() {
    let d = tmp("install");
    let dest = d.join("vol/bin/kube-prestop");
    let (c, err) = run(&["install", "--dest", dest.to_str().unwrap()]);
    assert_eq!(c, 0, "{err}");
    let mode = fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    assert_eq!(fs::read(&dest).unwrap(), fs::read(bin()).unwrap());
    let parent = fs::metadata(d.join("vol/bin"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(parent, 0o755);
    // The installed copy runs.
    let out = Command::new(&dest).arg("--version").output().unwrap();
    assert!(out.status.success());
    // An unwritable destination fails with a message.
    let (c, err) = run(&["install", "--dest", "/proc/kube-prestop/x"]);
    assert_eq!(c, 1);
    assert!(err.contains("install failed"), "{err}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn wrapper_runs_the_command_even_when_it_cannot_mark() {
    let d = tmp("wrapper");
    let out = d.join("ran");
    // No container process anywhere has the identifying mount: no mark, but
    // the user's command still runs, with its own exit status.
    let st = Command::new(bin())
        .args([
            "prestop",
            "--container",
            "main",
            "--root",
            "/proc/nope",
            "--",
        ])
        .args(["sh", "-c", &format!("echo ran > {}; exit 4", out.display())])
        .output()
        .unwrap();
    assert_eq!(code(st.status), 4);
    assert_eq!(fs::read_to_string(&out).unwrap(), "ran\n");
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("running the preStop command anyway"), "{err}");
    // Malformed wrapper flags: still runs the command after `--`.
    let st = Command::new(bin())
        .args(["prestop", "--bogus", "--", "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    assert_eq!(code(st.status), 5);
    // A preStop command that does not exist: 127, like a shell.
    let (c, err) = run(&[
        "prestop",
        "--container",
        "main",
        "--root",
        "/nonexistent",
        "--",
        "/nonexistent/cmd",
    ]);
    assert_eq!(c, 127);
    assert!(err.contains("command not found"), "{err}");
    fs::remove_dir_all(&d).unwrap();
}

/// `watch --container main` with its root on `/proc` (read-only: it
/// cannot arm there), `hook` after `--`, a 30 s grace period and its
/// stderr to `log`.
fn watch_on_a_read_only_volume(
    hook: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
    log: &std::path::Path,
) -> std::process::Child {
    Command::new(bin())
        .args([
            "watch",
            "--container",
            "main",
            "--root",
            "/proc/kube-prestop-vol",
            "--",
        ])
        .args(hook)
        .env("KUBE_PRESTOP_GRACE_PERIOD_SECONDS", "30")
        .stdin(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

#[test]
fn watch_stays_up_on_a_read_only_volume_and_exits_0_on_sigterm() {
    let d = tmp("rovol");
    let log = d.join("log");
    let mut child = watch_on_a_read_only_volume(["true"], &log);
    wait_for("the arming error", T, || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("cannot arm")
    });
    assert!(child.try_wait().unwrap().is_none(), "must keep running");
    kill(child.id() as i32, libc::SIGTERM);
    assert_eq!(code(wait_exit(&mut child, T)), 0);
    let text = fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().all(|l| l.starts_with("kube-prestop: ")),
        "{text}"
    );
    assert!(text.contains("SIGTERM received"), "{text}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn prestop_runs_a_command_with_non_utf8_arguments_verbatim() {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let d = tmp("prestop-bytes");
    let out = d.join("arg");
    let arg = std::ffi::OsString::from_vec(b"caf\xe9".to_vec());
    for flags in [
        &["--container", "main", "--root", "/proc/nope"][..],
        // Malformed flags: the fall-back runs it verbatim too.
        &["--bogus"],
    ] {
        let _ = fs::remove_file(&out);
        let st = Command::new(bin())
            .arg("prestop")
            .args(flags)
            .args(["--", "sh", "-c", "printf %s \"$1\" > \"$2\"; exit 4", "sh"])
            .arg(&arg)
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&st.stderr);
        assert_eq!(code(st.status), 4, "{flags:?}: {err}");
        assert_eq!(fs::read(&out).unwrap(), arg.as_bytes(), "{flags:?}");
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn watch_keeps_a_non_utf8_hook_argument() {
    use std::os::unix::ffi::OsStringExt as _;
    let d = tmp("watch-bytes");
    let log = d.join("log");
    let mut child = watch_on_a_read_only_volume(
        [
            std::ffi::OsString::from("printf"),
            std::ffi::OsString::from_vec(b"caf\xe9".to_vec()),
        ],
        &log,
    );
    wait_for("the watcher to start or fail", T, || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        text.contains("cannot arm") || text.contains("error")
    });
    let text = fs::read_to_string(&log).unwrap();
    if child.try_wait().unwrap().is_none() {
        kill(child.id() as i32, libc::SIGTERM);
    }
    let status = wait_exit(&mut child, T);
    assert!(text.contains(r#"hook=["printf", "caf\xE9"]"#), "{text}");
    assert_eq!(code(status), 0, "{text}");
    fs::remove_dir_all(&d).unwrap();
}

/// A shell command that writes "ran" to `out` and exits 4.
fn marker_command(out: &std::path::Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("echo ran > {}; exit 4", out.display()),
    ]
}

#[test]
fn prestop_help_before_the_separator_still_runs_the_command() {
    let d = tmp("prestop-help");
    for help in ["-h", "--help", "--help=1", "-hc"] {
        let out = d.join(format!("ran{help}"));
        let st = Command::new(bin())
            .args([
                "prestop",
                "--container",
                "main",
                "--root",
                "/proc/nope",
                help,
            ])
            .arg("--")
            .args(marker_command(&out))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&st.stderr);
        assert_eq!(code(st.status), 4, "{help}: {err}");
        assert_eq!(fs::read_to_string(&out).unwrap(), "ran\n", "{help}");
        assert!(err.contains("running the preStop command"), "{help}: {err}");
    }
    // Without a command after `--` it is a plain request for the usage.
    for args in [
        &["prestop", "--help"][..],
        &["prestop", "--container", "main", "-h"],
    ] {
        let st = Command::new(bin()).args(args).output().unwrap();
        assert_eq!(code(st.status), 0, "{args:?}");
        assert!(
            String::from_utf8_lossy(&st.stdout).contains("usage:"),
            "{args:?}"
        );
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn watch_refuses_to_create_a_missing_root() {
    let d = tmp("missing-root");
    let root = d.join("not-mounted");
    let log = d.join("log");
    let mut child = Command::new(bin())
        .args(["watch", "--container", "main", "--root"])
        .arg(&root)
        .args(["--", "true"])
        .env("KUBE_PRESTOP_GRACE_PERIOD_SECONDS", "30")
        .stdin(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for("the arming attempt", T, || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        text.contains("cannot arm") || text.contains("armed container=")
    });
    kill(child.id() as i32, libc::SIGTERM);
    assert_eq!(code(wait_exit(&mut child, T)), 0);
    let text = fs::read_to_string(&log).unwrap();
    assert!(!root.exists(), "{} was created: {text}", root.display());
    let state = root.join("state/main");
    assert!(
        text.contains(&format!("{} does not exist", state.display())),
        "{text}"
    );
    fs::remove_dir_all(&d).unwrap();
}
