//! A pod stand-in made of real namespaces, for the sidecar's integration tests.
//!
//! - `unshare --pid --fork --mount-proc` makes a PID namespace whose PID 1 is
//!   a `sleep` (the pod's `pause`), in a mount namespace with the pod's own `/proc`;
//! - the sidecar is started with `nsenter --target INIT --pid --mount`, so, like
//!   a container's first process, its parent (nsenter) is outside the PID
//!   namespace and it sees parent PID 0;
//! - a "main container" is made like runc makes one: `unshare --mount` creates
//!   its mount namespace, `nsenter --target INIT --pid` forks the container
//!   process into the pod's PID namespace (parent outside: parent PID 0), born
//!   in its final mount namespace; it mounts the pod's `/proc`, makes the
//!   missing identifying mount point `vol/state/main/created` in main's state
//!   directory and bind-mounts the whole id volume there (what the runtime
//!   does for main's mount of the id volume inside its state volume). Like
//!   after `runc create`, it then
//!   waits on a FIFO (runc's "exec fifo") until the harness "starts" it, and
//!   execs the payload.
//!
//! `vol/` is the sidecar's `--root` (`/.kube-prestop` in a pod), laid out as
//! a sidecar sees its mounts there. `vol/id/` is the whole id volume, as
//! the runtime mounts it: `volumes/kube-prestop/` (the volume's directory on
//! the node) bind-mounted read-only there in the pod's mount namespace,
//! where the sidecar runs, so the finder takes the identifying mount's
//! source from it (`IdSource::Volume`) as in a pod; the main container's
//! identifying mount binds `volumes/kube-prestop` too. `vol/state/main/`,
//! main's state volume, is a plain directory (read by the tests from the
//! host) made with the pod, mode 0777 like an `emptyDir`'s, as the runtime
//! makes the volume's mount point before any container starts (the sidecar
//! never creates it), so the mount point the main container makes there is
//! what the sidecar sees as `state/main/created`, the evidence of main's
//! start.
//!
//! Everything is asserted from files: the hook appends a line to `out/hooks`,
//! and the state records are in `vol/state/main/`. Waits poll with deadlines.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The binary under test: the one cargo built for the tests, or the one
/// named by `KPS_TEST_BIN` (to run the suite against the static release
/// binary, e.g. `KPS_TEST_BIN=target/x86_64-unknown-linux-musl/release/kube-prestop-sidecar`).
pub fn bin() -> String {
    std::env::var("KPS_TEST_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kube-prestop-sidecar").to_owned())
}
pub const C: &str = "main";

/// A test that was asked to run (the namespace tests are `#[ignore]`d with
/// their reason, and `scripts/privileged-tests.sh` runs them only as root or
/// under `CI=true`) but cannot run here: it fails, naming `why`. It never
/// passes without having run.
pub fn cannot_run(why: &str) -> ! {
    panic!("cannot run: {why}");
}

/// Fails the test ([`cannot_run`]) unless it runs as root with util-linux's
/// `unshare` and `nsenter`, which the namespace tests need.
pub fn require_root_and_util_linux() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        cannot_run("namespace tests need root (CI runs them as root)");
    }
    for tool in ["unshare", "nsenter"] {
        if Command::new(tool).arg("--version").output().is_err() {
            cannot_run(&format!("{tool} (util-linux) is not installed"));
        }
    }
}

/// The PID of host process `pid` in its innermost PID namespace (`NSpid`).
pub fn ns_pid(pid: i32) -> i32 {
    let st = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    st.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Whether host process `holder` has `/proc/<ns_pid>/mountinfo` open (the
/// watcher holds a candidate's mount table that way).
pub fn holds_mountinfo_of(holder: i32, ns_pid: i32) -> bool {
    let want = format!("/proc/{ns_pid}/mountinfo");
    fs::read_dir(format!("/proc/{holder}/fd")).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| fs::read_link(e.path()).is_ok_and(|l| l.to_str() == Some(want.as_str())))
    })
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes.
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_for_or_show(what, timeout, String::new, cond);
}

/// [`wait_for`], and on a timeout the panic message carries `context()`
/// too when it is not empty (e.g. the sidecar's log), so that a failure in
/// CI says what the watcher saw.
pub fn wait_for_or_show(
    what: &str,
    timeout: Duration,
    context: impl Fn() -> String,
    mut cond: impl FnMut() -> bool,
) {
    let end = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > end {
            let context = context();
            if context.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}; {context}");
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

/// One pod stand-in at a time per test binary: the tests are about the
/// sidecar's behaviour, not about how a 2-core machine copes with a dozen
/// pods churning processes at once (that load only adds scheduling delay).
static ONE_POD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Pod {
    _serial: std::sync::MutexGuard<'static, ()>,
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
    /// Host PID of the nsenter process that runs the sidecar.
    pub fn nsenter_pid(&self) -> i32 {
        i32::try_from(self.nsenter.id()).unwrap_or(0)
    }
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
    /// "runc start": let the container process exec its payload. Like
    /// `runc start`, this is a separate short-lived process (a far lighter
    /// one than runc, a Go program the shim has to exec).
    pub fn start(&self) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("echo go > {}", self.fifo.display()))
            .status()
            .unwrap();
        assert!(st.success());
    }
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_exit(&mut self.nsenter, timeout)
    }
}

impl Pod {
    pub fn new(name: &str) -> Pod {
        let serial = ONE_POD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("kps-it-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // `vol/id`: the sidecar's mount point of the whole id volume, which
        // the runtime makes when it creates the sidecar; `volumes/...`: the
        // id volume's directory on the node.
        for d in ["vol/id", "out", "volumes/kube-prestop"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        // Main's state volume at its mount point, which the runtime makes
        // (the sidecar refuses to): an `emptyDir`'s directory, mode 0777.
        let state = dir.join("vol/state").join(C);
        fs::create_dir_all(&state).unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            fs::set_permissions(&state, fs::Permissions::from_mode(0o777)).unwrap();
        }
        for i in 0..12 {
            fs::create_dir_all(dir.join("rootfs").join(i.to_string())).unwrap();
        }
        // The kubelet creates the file it mounts at terminationMessagePath.
        fs::write(dir.join("termination-log"), "").unwrap();
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
        // The runtime's mount of the whole id volume, read-only, where the
        // sidecars run (the pod's mount namespace).
        let (src, dst) = (dir.join("volumes/kube-prestop"), dir.join("vol/id"));
        let st = Command::new("nsenter")
            .arg(format!("--target={init}"))
            .args(["--mount", "--", "sh", "-c"])
            .arg(format!(
                "mount --bind {src} {dst} && mount -o remount,bind,ro {dst}",
                src = src.display(),
                dst = dst.display()
            ))
            .status()
            .unwrap();
        assert!(st.success(), "the id volume's mount: {st}");
        Pod {
            _serial: serial,
            dir,
            unshare,
            init,
            next_main: 0,
        }
    }

    pub fn vol(&self) -> PathBuf {
        self.dir.join("vol")
    }
    /// The id volume's directory "on the node": what the sidecar sees at
    /// `vol/id` (read-only) and the kubelet writes in.
    pub fn id_volume(&self) -> PathBuf {
        self.dir.join("volumes").join("kube-prestop")
    }
    /// Main's identifying mount point, `vol/state/main/created`: in main's
    /// mount namespace the id volume's mount, in the sidecar's the plain
    /// directory the "runtime" made for it.
    pub fn id_mount_point(&self) -> PathBuf {
        self.state().join("created")
    }
    pub fn out(&self, f: &str) -> PathBuf {
        self.dir.join("out").join(f)
    }
    /// The sidecar's termination message (its `--termination-message` file).
    pub fn termination_message(&self) -> String {
        fs::read_to_string(self.dir.join("termination-log")).unwrap_or_default()
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
    pub fn sidecar(&self, hook: &[impl AsRef<OsStr>], env: &[(&str, &str)]) -> Sidecar {
        self.sidecar_with(hook, env, &[])
    }

    /// [`Pod::sidecar`] with extra `watch` flags (before `--`).
    pub fn sidecar_with(
        &self,
        hook: &[impl AsRef<OsStr>],
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Sidecar {
        self.sidecar_run_as(&[], hook, env, flags)
    }

    /// [`Pod::sidecar_with`] as user and group 65534 without capabilities
    /// (a sidecar with less privilege than the root "container"); the
    /// volume, output and termination-message files are opened up to it.
    pub fn sidecar_unprivileged(&self, hook: &[String], flags: &[&str]) -> Sidecar {
        use std::os::unix::fs::PermissionsExt as _;
        for d in [self.dir.clone(), self.vol(), self.dir.join("out")] {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        }
        fs::set_permissions(
            self.dir.join("termination-log"),
            fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        self.sidecar_run_as(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ],
            hook,
            &[],
            flags,
        )
    }

    fn sidecar_run_as(
        &self,
        prefix: &[&str],
        hook: &[impl AsRef<OsStr>],
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Sidecar {
        let n = fs::read_dir(self.dir.join("out")).unwrap().count();
        let log = self.dir.join(format!("sidecar-{n}.log"));
        let _ = fs::remove_file(self.state().join("armed"));
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={}", self.init))
            .args(["--pid", "--mount", "--"])
            .args(prefix)
            .arg(bin())
            .args(["watch", "--container", C, "--root"])
            .arg(self.vol())
            .arg("--termination-message")
            .arg(self.dir.join("termination-log"))
            .args(flags)
            .arg("--")
            .args(hook)
            .stdin(Stdio::null())
            .stdout(fs::File::create(self.dir.join(format!("sidecar-{n}.out"))).unwrap())
            // Appending, as a container's log pipe behaves: post-start
            // writes into this log too (through /proc/PID/fd/2, O_APPEND),
            // and a plain file's own offset would overwrite its line.
            .stderr(
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            );
        for (k, v) in env {
            cmd.env(k, v);
        }
        let nsenter = cmd.spawn().unwrap();
        let pid = child_of(nsenter.id() as i32);
        let armed = self.state().join("armed");
        wait_for("the sidecar to arm", T, || armed.exists());
        Sidecar { nsenter, pid, log }
    }

    /// A new FIFO `<dir>/<prefix>-<n>` that a main container waits on
    /// until [`Main::start`] writes to it.
    fn new_fifo(&mut self, prefix: &str) -> PathBuf {
        self.next_main += 1;
        let fifo = self.dir.join(format!("{prefix}-{}", self.next_main));
        let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
        fifo
    }

    /// Spawns `sh -c script main PAYLOAD...` as a main container waiting on
    /// `fifo` (see [`Pod::main_command`]); does not wait for anything.
    fn spawn_main(&self, script: String, payload: &[&str], fifo: PathBuf) -> Main {
        let nsenter = self
            .main_command()
            .arg(script)
            .arg("main")
            .args(payload)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child_of(nsenter.id() as i32);
        Main { nsenter, pid, fifo }
    }

    /// "runc create": a main container process with the identifying mount,
    /// waiting to be started. Returns once the mount is in place.
    pub fn create_main(&mut self, payload: &[&str]) -> Main {
        let fifo = self.new_fifo("start");
        let script = format!(
            "{setup}; read _ < {fifo}; exec \"$@\"",
            setup = self.main_setup(true),
            fifo = fifo.display()
        );
        let main = self.spawn_main(script, payload, fifo);
        let (pid, mp) = (main.pid, format!(" {} ", self.id_mount_point().display()));
        wait_for("the main container's identifying mount", T, || {
            fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| m.contains(&mp))
        });
        main
    }

    /// The shell commands a main container runs first, as `runc init` does
    /// before it waits for `runc start`: the pod's `/proc`, the identifying
    /// mount, and (`rootfs`) the rest of a typical container's mounts (`/dev`,
    /// `/dev/pts`, `/dev/shm`, `/dev/mqueue`, `/sys`, `/sys/fs/cgroup`, the
    /// `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf` and termination-log
    /// binds, a service-account token and a volume): one `mount` each.
    fn main_setup(&self, rootfs: bool) -> String {
        let mut s = format!(
            "mount -t proc proc /proc && mkdir -p {mp} && mount --bind {src} {mp} || exit 99",
            src = self.id_volume().display(),
            mp = self.id_mount_point().display(),
        );
        if rootfs {
            for i in 0..12 {
                s.push_str(&format!(
                    "; mount -t tmpfs m{i} {} || exit 98",
                    self.dir.join("rootfs").join(i.to_string()).display()
                ));
            }
        }
        s
    }

    /// `unshare --mount ... nsenter --pid ... sh -c`, waiting for the script.
    fn main_command(&self) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "--", "nsenter"])
            .arg(format!("--pid=/proc/{}/ns/pid", self.init))
            .args(["--", "sh", "-c"]);
        c
    }

    /// A main container set up like `runc init` really does it, including
    /// the step the other stand-ins leave out: it waits for [`Main::start`] *before*
    /// making any mount (so a watcher can see it first with the host's root),
    /// then makes its root (a recursive bind of `/`) and the identifying
    /// mount under it, `pivot_root`s into it and detaches the old root, and
    /// execs the payload. Does not wait for it.
    pub fn spawn_pivoting_main(&mut self, payload: &[&str]) -> Main {
        let gate = self.new_fifo("gate");
        let root = self.dir.join(format!("root-{}", self.next_main));
        fs::create_dir_all(&root).unwrap();
        let script = format!(
            "read _ < {gate}; mount --rbind / {root} && mkdir -p {root}{mp} && mount --bind {src} {root}{mp} && cd {root} && pivot_root . . && umount -l . && cd / || exit 97; exec \"$@\"",
            gate = gate.display(),
            root = root.display(),
            src = self.id_volume().display(),
            mp = self.id_mount_point().display(),
        );
        self.spawn_main(script, payload, gate)
    }

    /// A main container set up in youki's order (libcontainer 0.7.0,
    /// `container_init_process`): the process is created in the pod's PID
    /// namespace while still in the *runtime's* mount namespace (here the
    /// test's), and only then unshares its own (`unshare(CLONE_NEWNS)` in
    /// `apply_rest_namespaces`), makes its mounts and waits to be started.
    /// It waits on the returned gate before the unshare, so a watcher can
    /// be made to see it first in the runtime's mount namespace (what a
    /// youki container looks like in the microseconds before its unshare).
    /// Open the gate with [`Pod::open_gate`], then [`Main::start`] it.
    pub fn spawn_late_unsharing_main(&mut self, payload: &[&str]) -> (PathBuf, Main) {
        let gate = self.new_fifo("gate");
        let start = self.new_fifo("start");
        let inner = format!(
            "{setup}; read _ < {start}; exec \"$@\"",
            setup = self.main_setup(false),
            start = start.display()
        );
        let script = format!(
            "read _ < {gate}; exec unshare --mount --propagation private -- sh -c '{inner}' \"$@\"",
            gate = gate.display(),
        );
        let nsenter = Command::new("nsenter")
            .arg(format!("--pid=/proc/{}/ns/pid", self.init))
            .args(["--", "sh", "-c"])
            .arg(script)
            .arg("main")
            .arg("main")
            .args(payload)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child_of(nsenter.id() as i32);
        (
            gate,
            Main {
                nsenter,
                pid,
                fifo: start,
            },
        )
    }

    /// Opens a gate made by [`Pod::spawn_late_unsharing_main`].
    pub fn open_gate(&self, gate: &Path) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("echo go > {}", gate.display()))
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// A process in the pod's PID namespace with a mount namespace of its
    /// own that never pivots (like a runtime's exec or a failed set-up):
    /// waits for [`Main::start`], then runs `sh -c script`.
    pub fn spawn_plain_process(&mut self, script: &str) -> Main {
        let gate = self.new_fifo("gate");
        self.spawn_main(format!("read _ < {}; {script}", gate.display()), &[], gate)
    }

    /// A main container with no create/start split at all: it bind-mounts
    /// and execs the payload straight away (harsher than a real runtime,
    /// whose container process waits between `runc create` and `runc start`).
    /// Returns its exit status.
    pub fn run_main_ungated(&mut self, payload: &[&str]) -> ExitStatus {
        let script = format!("{setup}; exec \"$@\"", setup = self.main_setup(false));
        self.main_command()
            .arg(script)
            .arg("main")
            .args(payload)
            .stdin(Stdio::null())
            .status()
            .unwrap()
    }

    /// The directory of the main container's `i`-th private tmpfs mount
    /// (made by [`Pod::create_main`] in the container's own mount
    /// namespace, so invisible from the sidecar's): a file written there is
    /// "a file outside volumes".
    pub fn private_dir(&self, i: usize) -> PathBuf {
        self.dir.join("rootfs").join(i.to_string())
    }

    /// Create a main container, wait until the sidecar has seen it (one
    /// more `seen-` record), start it and wait for it; returns its exit
    /// status. For the tests of what follows an exit: whether the watcher
    /// catches a container that ends within milliseconds of its start,
    /// unhelped, is measured on a real runtime by the cluster bench (issue
    /// 24), not asserted here.
    pub fn run_main(&mut self, payload: &[&str]) -> ExitStatus {
        let before = self.records("seen-").len();
        let mut m = self.create_main(payload);
        wait_for_or_show(
            "the sidecar to see the created main container",
            T,
            || format!("state directory: {:?}", self.records("")),
            || self.records("seen-").len() > before,
        );
        m.start();
        m.wait(T)
    }

    /// Runs the `prestop` wrapper inside the main container's namespaces (as
    /// the kubelet's exec does); returns its exit status.
    pub fn prestop(&self, main: &Main, hook: &[impl AsRef<OsStr>]) -> ExitStatus {
        self.prestop_command(main, &[], hook).status().unwrap()
    }

    /// The `prestop` wrapper's command inside the main container's
    /// namespaces, run through `before` (e.g. a shell that waits for a gate
    /// and then execs its arguments) when not empty.
    pub fn prestop_command(
        &self,
        main: &Main,
        before: &[&str],
        hook: &[impl AsRef<OsStr>],
    ) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--target={}", main.pid))
            .args(["--pid", "--mount", "--"])
            .args(before)
            .arg(bin())
            .args(["prestop", "--container", C, "--root"])
            .arg(self.vol())
            .arg("--")
            .args(hook)
            .stdin(Stdio::null());
        c
    }

    /// A started main container that the sidecar has seen (`sleep 1000`),
    /// and its instance id.
    pub fn watched_sleeper(&mut self) -> (Main, String) {
        let m = self.create_main(&["sleep", "1000"]);
        m.start();
        wait_for("the sidecar to see the main container", T, || {
            !self.records("seen-").is_empty()
        });
        let id = self.records("seen-")[0]
            .trim_start_matches("seen-")
            .to_owned();
        (m, id)
    }

    /// Runs the sidecar's `post-start` handler in the pod's PID and mount
    /// namespaces (as the kubelet's exec in the sidecar container does),
    /// waiting at most `timeout_secs`; returns its exit status and stderr.
    pub fn post_start(&self, timeout_secs: u64) -> (i32, String) {
        let out = Command::new("nsenter")
            .arg(format!("--target={}", self.init))
            .args(["--pid", "--mount", "--"])
            .arg(bin())
            .args(["post-start", "--container", C, "--timeout"])
            .arg(timeout_secs.to_string())
            .arg("--root")
            .arg(self.vol())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            code(out.status),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Sidecar {
    /// Ends and reaps the nsenter process (killing the pod's namespace ends
    /// the sidecar, not nsenter, which lives outside it), so that no test
    /// leaves a process behind, even a stopped one.
    fn drop(&mut self) {
        if self.nsenter.try_wait().ok().flatten().is_none() {
            let _ = self.nsenter.kill();
            let _ = self.nsenter.wait();
        }
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
