//! A pod stand-in made of real namespaces, for the sidecar's integration tests.
//!
//! - `unshare --pid --fork --mount-proc` makes a PID namespace whose PID 1 is
//!   a `sleep` (the pod's `pause`), in a mount namespace with the pod's own `/proc`;
//! - the sidecar is started with `nsenter --target INIT --pid --mount`, so, like
//!   a container's first process, its parent (nsenter) is outside the PID
//!   namespace and it sees parent PID 0;
//! - a "main container" is started the same way, then `unshare --mount` gives
//!   it its own mount namespace where it bind-mounts a directory at the
//!   identifying mount point `<id-root>/main`, like the runtime does for the
//!   `id/main` subPath. Like `runc create`, it then waits (on a FIFO, runc's
//!   "exec fifo") until the harness "starts" it, and execs the payload.
//!
//! Everything is asserted from files: the hook appends a line to `out/hooks`,
//! and the state records are in `vol/state/main/`. Waits poll with deadlines.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-sidecar");
pub const C: &str = "main";

/// Skips (returns false, with a message) unless running as root with util-linux.
pub fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: namespace tests need root (CI runs them as root)");
        return false;
    }
    for tool in ["unshare", "nsenter"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("SKIPPED: {tool} (util-linux) is not installed");
            return false;
        }
    }
    true
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > end {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub const T: Duration = Duration::from_secs(20);

fn ppid_of(pid: i32) -> Option<i32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The (first) child of host process `parent`.
pub fn child_of(parent: i32) -> i32 {
    let mut found = None;
    wait_for(&format!("a child of {parent}"), T, || {
        found = fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            (ppid_of(pid) == Some(parent)).then_some(pid)
        });
        found.is_some()
    });
    found.unwrap()
}

pub fn kill(pid: i32, sig: i32) {
    // SAFETY: plain kill(2).
    unsafe { libc::kill(pid, sig) };
}

pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let mut st = None;
    wait_for("a process to exit", timeout, || {
        st = child.try_wait().unwrap();
        st.is_some()
    });
    st.unwrap()
}

pub struct Pod {
    pub dir: PathBuf,
    unshare: Child,
    pub init: i32,
    next_main: u32,
}

pub struct Sidecar {
    pub nsenter: Child,
    /// Host PID of the sidecar process.
    pub pid: i32,
    pub log: PathBuf,
}

impl Sidecar {
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
    pub fn alive(&mut self) -> bool {
        self.nsenter.try_wait().unwrap().is_none()
    }
    /// Waits for the sidecar to exit; returns its exit status as seen by
    /// nsenter (which exits with the child's code, or 128+signal).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_exit(&mut self.nsenter, timeout)
    }
}

pub struct Main {
    pub nsenter: Child,
    /// Host PID of the container process.
    pub pid: i32,
    fifo: PathBuf,
}

impl Main {
    /// "runc start": let the container process exec its payload.
    pub fn start(&self) {
        fs::write(&self.fifo, b"go\n").unwrap();
    }
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_exit(&mut self.nsenter, timeout)
    }
}

impl Pod {
    pub fn new(name: &str) -> Pod {
        let dir = std::env::temp_dir().join(format!("kps-it-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for d in ["vol", "idroot/main", "idsrc", "out"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        let unshare = Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "sleep",
                "infinity",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let init = child_of(unshare.id() as i32);
        // Wait until init runs in its namespaces (its /proc is the pod's).
        wait_for("pod init", T, || {
            fs::read_to_string(format!("/proc/{init}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep"))
        });
        Pod {
            dir,
            unshare,
            init,
            next_main: 0,
        }
    }

    pub fn vol(&self) -> PathBuf {
        self.dir.join("vol")
    }
    pub fn idroot(&self) -> PathBuf {
        self.dir.join("idroot")
    }
    pub fn out(&self, f: &str) -> PathBuf {
        self.dir.join("out").join(f)
    }
    pub fn state(&self) -> PathBuf {
        self.vol().join("state").join(C)
    }

    /// Names of the state records starting with `prefix`.
    pub fn records(&self, prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.state())
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                    .filter(|n| n.starts_with(prefix))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    pub fn record(&self, name: &str) -> String {
        fs::read_to_string(self.state().join(name)).unwrap_or_default()
    }

    /// Lines of an output file (missing file: none).
    pub fn lines(&self, f: &str) -> Vec<String> {
        fs::read_to_string(self.out(f))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The standard test hook: appends "<container> <instance> <attempt>" to out/hooks.
    pub fn hook(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "echo \"$KUBE_PRESTOP_CONTAINER $KUBE_PRESTOP_INSTANCE $KUBE_PRESTOP_ATTEMPT\" >> {}",
                self.out("hooks").display()
            ),
        ]
    }

    /// Starts `watch` in the pod; waits until it is armed.
    pub fn sidecar(&self, hook: &[String], env: &[(&str, &str)]) -> Sidecar {
        let n = fs::read_dir(self.dir.join("out")).unwrap().count();
        let log = self.dir.join(format!("sidecar-{n}.log"));
        let _ = fs::remove_file(self.state().join("armed"));
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={}", self.init))
            .args(["--pid", "--mount", "--"])
            .arg(BIN)
            .args(["watch", "--container", C, "--root"])
            .arg(self.vol())
            .arg("--id-root")
            .arg(self.idroot())
            .arg("--")
            .args(hook)
            .stdin(Stdio::null())
            .stdout(fs::File::create(self.dir.join(format!("sidecar-{n}.out"))).unwrap())
            .stderr(fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let nsenter = cmd.spawn().unwrap();
        let pid = child_of(nsenter.id() as i32);
        let armed = self.state().join("armed");
        wait_for("the sidecar to arm", T, || armed.exists());
        Sidecar { nsenter, pid, log }
    }

    /// "runc create": a main container process with the identifying mount,
    /// waiting to be started. Returns once the mount is in place.
    pub fn create_main(&mut self, payload: &[&str]) -> Main {
        self.next_main += 1;
        let fifo = self.dir.join(format!("start-{}", self.next_main));
        let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
        let script = format!(
            "mount --bind {src} {mp} || exit 99; read _ < {fifo}; exec \"$@\"",
            src = self.dir.join("idsrc").display(),
            mp = self.idroot().join(C).display(),
            fifo = fifo.display()
        );
        let nsenter = Command::new("nsenter")
            .arg(format!("--target={}", self.init))
            .args([
                "--pid",
                "--mount",
                "--",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
            ])
            .arg(script)
            .arg("main")
            .args(payload)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child_of(nsenter.id() as i32);
        let mp = format!(" {} ", self.idroot().join(C).display());
        wait_for("the main container's identifying mount", T, || {
            fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| m.contains(&mp))
        });
        Main { nsenter, pid, fifo }
    }

    /// Create, start and wait for a main container; returns its exit status.
    pub fn run_main(&mut self, payload: &[&str]) -> ExitStatus {
        let mut m = self.create_main(payload);
        m.start();
        m.wait(T)
    }

    /// Runs the `prestop` wrapper inside the main container's namespaces (as
    /// the kubelet's exec does); returns its exit status.
    pub fn prestop(&self, main: &Main, hook: &[&str]) -> ExitStatus {
        Command::new("nsenter")
            .arg(format!("--target={}", main.pid))
            .args(["--pid", "--mount", "--"])
            .arg(BIN)
            .args(["prestop", "--container", C, "--root"])
            .arg(self.vol())
            .arg("--id-root")
            .arg(self.idroot())
            .arg("--")
            .args(hook)
            .stdin(Stdio::null())
            .status()
            .unwrap()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // Killing the namespace's init kills every process in it.
        kill(self.init, libc::SIGKILL);
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// The `key=value` map of a record.
pub fn fields(rec: &str) -> std::collections::BTreeMap<String, String> {
    rec.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}
