//! The contract between the webhook, which writes pod specs, and the sidecar
//! binary, which runs inside them.
//!
//! Both binaries build their half of the contract from this module only: the
//! webhook calls the `*_command` builders to write container commands and
//! probes, and the sidecar parses the same subcommands and flags and lays out
//! the same files. Changing anything here changes both sides at once; the
//! tests at the bottom pin the wire format, because pods created by an older
//! webhook keep running with the binary their install image carried.
//!
//! # Shared volume layout
//!
//! One `emptyDir` volume per pod, named [`VOLUME_NAME`] (or a suffixed
//! variant when the pod already uses that name), mounted at [`MOUNT_PATH`] in
//! the install init container, in every kube-prestop sidecar and in every
//! watched container:
//!
//! ```text
//! /.kube-prestop/
//!   bin/kube-prestop                 the static sidecar binary (install copies it here, or
//!                                    a ConfigMap volume over bin/ shows it here)
//!   bin/kube-prestop-sidecar         the binary when the install image is an image volume over bin/
//!   state/<container>/armed          the watcher for <container> is armed (the postStart handler waits for it; names the watcher, see armed_record)
//!   state/<container>/seen-<id>      the watcher found instance <id> (so an exit while it is down is not missed)
//!   state/<container>/prestop-<id>   the kubelet started <container>'s preStop for instance <id>
//!   state/<container>/running-<id>   our hook run for instance <id> started (retry bookkeeping)
//!   state/<container>/done-<id>      our hook run for instance <id> finished (its exit status)
//!   id/<container>/                  source of <container>'s identifying mount
//! ```
//!
//! A watched container `X` additionally mounts `id/X` (read-only) at
//! `/.kube-prestop-id/X` (see [`id_mount_path`]). That mount point appears
//! in `/proc/PID/mountinfo` of every process of `X` and of no other container,
//! which is how the sidecar finds `X`'s processes in the shared PID namespace
//! (mountinfo is readable across users; `/proc/PID/ns/*` is not).
//!
//! An *instance* of a container is one run of its container process (the
//! kubelet restarts it under `restartPolicy: OnFailure`); it is named by
//! [`instance_id`] from the process's PID and its start time.

use std::path::{Path, PathBuf};

/// Name of the shared `emptyDir` volume the webhook adds to a pod.
pub const VOLUME_NAME: &str = "kube-prestop";

/// Where the shared volume is mounted in the install init container, the
/// sidecars and the watched containers.
pub const MOUNT_PATH: &str = "/.kube-prestop";

/// Path of the sidecar binary inside the install image; the install init
/// container runs it with [`install_command`].
pub const INSTALL_IMAGE_BINARY: &str = "/kube-prestop-sidecar";

/// Path of the sidecar binary inside the shared volume, as seen by every
/// container that mounts it at [`MOUNT_PATH`].
pub const BINARY_PATH: &str = "/.kube-prestop/bin/kube-prestop";

/// Directory of [`BINARY_PATH`]. When the binary comes from a ConfigMap
/// instead of the install init container, the ConfigMap's volume is mounted
/// here (read-only, over the shared volume's `bin` directory), so the
/// binary's path is the same either way.
pub const BINARY_DIR: &str = "/.kube-prestop/bin";

/// Name of the volume holding the sidecar binary's ConfigMap (see
/// [`BINARY_DIR`]); a suffix is added on collision like [`VOLUME_NAME`].
pub const BINARY_VOLUME_NAME: &str = "kube-prestop-bin";

/// Key of the sidecar binary in the ConfigMap's `binaryData`; the file the
/// ConfigMap volume shows at [`BINARY_PATH`].
pub const BINARY_CONFIG_MAP_KEY: &str = "kube-prestop";

/// Path of the sidecar binary when the install image itself is mounted as
/// an image volume (`spec.volumes[].image`) at [`BINARY_DIR`]: the image's
/// [`INSTALL_IMAGE_BINARY`] seen through that mount. The node's runtime
/// unpacks the image for the node's platform, so it is always the node's
/// architecture. The runtimes mount only whole images or directories of
/// them (containerd 2.4 refuses a file `subPath`: "only directory subpath
/// is supported"), hence a path of its own rather than [`BINARY_PATH`].
pub const IMAGE_VOLUME_BINARY_PATH: &str = "/.kube-prestop/bin/kube-prestop-sidecar";

/// Every path the webhook writes the binary's commands with: [`BINARY_PATH`]
/// (install init container, ConfigMap) and [`IMAGE_VOLUME_BINARY_PATH`].
pub const BINARY_PATHS: [&str; 2] = [BINARY_PATH, IMAGE_VOLUME_BINARY_PATH];

/// Directory of the install image holding every shipped architecture's
/// binary, one `<arch>/`[`ARCHITECTURE_BINARY_NAME`] each, `<arch>` a
/// `kubernetes.io/arch` value (`amd64`, `arm64`).
pub const ARCHITECTURES_DIR: &str = "/architectures";

/// File name of the binary in each architecture's directory of
/// [`ARCHITECTURES_DIR`] (and of the copies `install --dest-dir` makes).
pub const ARCHITECTURE_BINARY_NAME: &str = "kube-prestop-sidecar";

/// The `kubernetes.io/arch` value (Go's `GOARCH`) of the architecture this
/// binary was built for, `None` for one Kubernetes has no name for here.
pub const fn own_architecture() -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some("amd64")
    } else if cfg!(target_arch = "aarch64") {
        Some("arm64")
    } else {
        None
    }
}

/// Parent of the per-container identifying mount points.
pub const ID_MOUNT_ROOT: &str = "/.kube-prestop-id";

/// File name, inside a container's state directory, of the mark the watcher
/// writes once it is armed; the sidecar's postStart handler
/// ([`post_start_command`]) waits for it, and [`probe_command`] checks it.
/// Its content names the watcher process ([`armed_record`]).
pub const ARMED_FILE: &str = "armed";

/// Subcommand that copies the binary into the shared volume.
pub const SUBCOMMAND_INSTALL: &str = "install";
/// Subcommand of the native sidecar: watch a container, run its hook on exit.
pub const SUBCOMMAND_WATCH: &str = "watch";
/// Subcommand that replaces a watched container's `preStop.exec.command`.
pub const SUBCOMMAND_PRESTOP: &str = "prestop";
/// Subcommand that checks once whether the watcher is armed (exit 0 iff so);
/// for debugging with `kubectl exec`, and the startupProbe of pods injected
/// by kube-prestop 0.1 before the postStart handler replaced it.
pub const SUBCOMMAND_PROBE: &str = "probe";
/// Subcommand of the sidecar's `lifecycle.postStart` handler: returns once
/// the watcher is armed, or after [`POST_START_TIMEOUT_SECONDS`].
///
/// The kubelet runs a postStart handler to completion before it returns from
/// starting the container, and it starts the next init container or the
/// regular containers only in a later sync, after seeing this native sidecar
/// running (`computeInitContainerActions` in
/// `pkg/kubelet/kuberuntime/kuberuntime_container.go`). So X starts only once
/// the watcher is armed, without a startupProbe's period (1 s minimum) and
/// its extra pod sync, which cost about a second of pod start.
pub const SUBCOMMAND_POST_START: &str = "post-start";
/// How long the postStart handler waits for the watcher to arm (seconds)
/// before it lets the kubelet go on with the pod anyway, so that a watcher
/// that cannot arm never blocks the Job (fail-open; the watcher's own log
/// says why it could not arm). The kubelet puts no time limit on an exec
/// postStart handler.
pub const POST_START_TIMEOUT_SECONDS: u64 = 30;

/// Flag naming the watched container (a DNS label, as in the pod spec).
pub const FLAG_CONTAINER: &str = "--container";
/// Flag of `install`: where to write the binary.
pub const FLAG_DEST: &str = "--dest";
/// Flag of `install` (instead of [`FLAG_DEST`]): a directory that receives
/// every architecture's binary as `<dir>/<arch>/`[`ARCHITECTURE_BINARY_NAME`],
/// from the image's [`ARCHITECTURES_DIR`]; from an image without that
/// directory (single-architecture images of kube-prestop 0.x), this binary
/// as its own architecture ([`own_architecture`]). The webhook Deployment's
/// init container runs it to hand the webhook the binaries for its
/// per-architecture ConfigMaps.
pub const FLAG_DEST_DIR: &str = "--dest-dir";
/// Flag of `post-start`: how long to wait (whole seconds; default
/// [`POST_START_TIMEOUT_SECONDS`]).
pub const FLAG_TIMEOUT: &str = "--timeout";
/// Flag overriding the shared volume's mount path (tests; default [`MOUNT_PATH`]).
pub const FLAG_ROOT: &str = "--root";
/// Flag overriding the parent of identifying mount points (tests; default [`ID_MOUNT_ROOT`]).
pub const FLAG_ID_ROOT: &str = "--id-root";
/// Flag of `watch`: the containers the kubelet starts after this sidecar
/// (comma-separated names: later native sidecars, then the pod's regular
/// containers), as the webhook knows them from the pod spec. When it names
/// only the watched container, every container the runtime sets up in the
/// pod's PID namespace after the sidecar is armed is an instance of it, which
/// lets the watcher recognise an instance that was set up, ran and ended
/// entirely while the watcher was not scheduled (see `finder`). Left out for
/// `hostPID` pods, where other pods' containers are visible too.
pub const FLAG_STARTED_AFTER: &str = "--started-after";
/// Flag of `watch`: when the hook runs, by how the container ended
/// ([`RunOn`]: `always`, `success`, `failure`; default `always`, and the
/// webhook leaves the flag out then). From the annotation
/// `kube-prestop.io/run-on`.
pub const FLAG_RUN_ON: &str = "--run-on";
/// Flag of `watch`: the hook's root directory ([`HookRoot`]: `sidecar`,
/// `container`; default `sidecar`, and the webhook leaves the flag out
/// then). From the annotation `kube-prestop.io/hook-root`.
pub const FLAG_HOOK_ROOT: &str = "--hook-root";
/// Flag of `watch`: where to write the termination message (tests; default
/// [`TERMINATION_MESSAGE_PATH`]).
pub const FLAG_TERMINATION_MESSAGE: &str = "--termination-message";
/// Separates the flags from the hook command, which is passed verbatim.
pub const COMMAND_SEPARATOR: &str = "--";

/// Environment variable set in the sidecar container: the pod's
/// `terminationGracePeriodSeconds` (seconds, default 30), so the sidecar can
/// log how much grace is left when SIGTERM arrives during a hook.
pub const ENV_GRACE_PERIOD_SECONDS: &str = "KUBE_PRESTOP_GRACE_PERIOD_SECONDS";
/// Environment variable given to the hook: the name of the container that exited.
pub const ENV_HOOK_CONTAINER: &str = "KUBE_PRESTOP_CONTAINER";
/// Environment variable given to the hook: the instance id ([`instance_id`])
/// of the container run that exited.
pub const ENV_HOOK_INSTANCE: &str = "KUBE_PRESTOP_INSTANCE";
/// Environment variable given to the hook: `1` for the first attempt, `2`
/// when a run interrupted by a sidecar restart is retried.
pub const ENV_HOOK_ATTEMPT: &str = "KUBE_PRESTOP_ATTEMPT";

/// Environment variable given to the hook: the watched container's exit
/// code, `0`–`255`, when it exited (not killed) and the kernel could tell
/// (`PIDFD_INFO_EXIT`, Linux ≥ 6.15). Unset otherwise.
pub const ENV_HOOK_EXIT_CODE: &str = "KUBE_PRESTOP_EXIT_CODE";
/// Environment variable given to the hook: the signal that killed the
/// watched container (`9` for SIGKILL, the OOM killer's), when the kernel
/// could tell. Unset otherwise; never set together with
/// [`ENV_HOOK_EXIT_CODE`].
pub const ENV_HOOK_EXIT_SIGNAL: &str = "KUBE_PRESTOP_EXIT_SIGNAL";
/// Environment variable given to the hook: a directory that is the exited
/// container's root file system as it was, volumes included
/// (`/proc/<watcher pid>/fd/<n>`, a directory file descriptor the watcher
/// holds on the container's root, with its mount namespace held too). `/`
/// when the hook runs chrooted there ([`HookRoot::Container`]). Unset when
/// the watcher could not hold it (the log says why).
pub const ENV_HOOK_ROOT: &str = "KUBE_PRESTOP_ROOT";

/// The sidecar's `terminationMessagePath`, where the watcher writes the
/// summary of the pod's hook runs (the kubelet's default path, set
/// explicitly by the webhook).
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The kubelet's limit on one container's termination message (bytes):
/// `getTerminationMessage` in `pkg/kubelet/kuberuntime/kuberuntime_container.go`
/// reads the file's last `kubecontainer.MaxContainerTerminationMessageLength`
/// (4 KiB) bytes. The watcher keeps its message within it (newest runs last).
pub const TERMINATION_MESSAGE_MAX_BYTES: usize = 4096;

/// When the hook runs, by how the container ended (the exit status read
/// through the pidfd; see `exit_info` in the sidecar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunOn {
    /// On every exit of the container on its own (the default).
    #[default]
    Always,
    /// Only when it exited with code 0.
    Success,
    /// Only when it exited with a non-zero code or was killed by a signal.
    Failure,
}

impl RunOn {
    /// Every value, in the order the docs list them.
    pub const ALL: [Self; 3] = [Self::Always, Self::Success, Self::Failure];

    /// The value as written in the annotation and the flag.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }

    /// Parses `always`, `success` or `failure` (exactly; no whitespace, no
    /// other case). `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// Where the hook's root directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookRoot {
    /// The sidecar's own (the same image, but not the exited container's
    /// files outside volumes); [`ENV_HOOK_ROOT`] still points at those.
    #[default]
    Sidecar,
    /// The exited container's root file system (`chroot`), where the
    /// container has `CAP_SYS_CHROOT`; otherwise as [`HookRoot::Sidecar`],
    /// and the log says why.
    Container,
}

impl HookRoot {
    /// Every value.
    pub const ALL: [Self; 2] = [Self::Sidecar, Self::Container];

    /// The value as written in the annotation and the flag.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sidecar => "sidecar",
            Self::Container => "container",
        }
    }

    /// Parses `sidecar` or `container` (exactly). `None` otherwise.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// The settings of `watch` beyond the container and the hook.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchOptions {
    /// [`FLAG_STARTED_AFTER`]; left out when empty.
    pub started_after: Vec<String>,
    /// [`FLAG_RUN_ON`]; left out when [`RunOn::Always`].
    pub run_on: RunOn,
    /// [`FLAG_HOOK_ROOT`]; left out when [`HookRoot::Sidecar`].
    pub hook_root: HookRoot,
}

/// The state directory of `container` under the shared volume mounted at `root`:
/// `<root>/state/<container>`.
pub fn state_dir(root: &Path, container: &str) -> PathBuf {
    root.join("state").join(container)
}

/// The watcher's `armed` mark for `container` under the shared volume
/// mounted at `root`: `<root>/state/<container>/armed` ([`ARMED_FILE`]).
pub fn armed_mark(root: &Path, container: &str) -> PathBuf {
    state_dir(root, container).join(ARMED_FILE)
}

/// Key of the [`armed_record`] line holding the watcher's PID.
pub const ARMED_KEY_PID: &str = "pid";
/// Key of the [`armed_record`] line holding the watcher's start time.
pub const ARMED_KEY_START_TIME: &str = "start_time_ticks";

/// Content of the watcher's `armed` mark ([`ARMED_FILE`]): the watcher
/// process that wrote it, as `pid=<pid>\nstart_time_ticks=<ticks>\n` (its
/// PID as seen through the sidecar container's `/proc`, and field 22 of
/// `/proc/PID/stat`, as in [`instance_id`]).
///
/// The postStart handler runs in the same container as its watcher, so it
/// accepts the mark only while that very process runs (same PID and start
/// time): a mark that a SIGKILLed watcher could not remove never ends the
/// postStart handler of the restarted sidecar.
pub fn armed_record(pid: i32, start_time_ticks: u64) -> String {
    format!("{ARMED_KEY_PID}={pid}\n{ARMED_KEY_START_TIME}={start_time_ticks}\n")
}

/// Parses the content of an `armed` mark written with [`armed_record`] into
/// the watcher's PID and start time. `None` when a field is missing or
/// malformed (an empty mark, or one holding only the PID, as earlier
/// versions wrote it).
pub fn parse_armed_record(content: &str) -> Option<(i32, u64)> {
    let field = |key: &str| {
        content
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    };
    let pid: i32 = field(ARMED_KEY_PID)?.parse().ok()?;
    let start: u64 = field(ARMED_KEY_START_TIME)?.parse().ok()?;
    (pid > 0).then_some((pid, start))
}

/// Sub-path, inside the shared volume, of `container`'s identifying mount: `id/<container>`.
pub fn id_sub_path(container: &str) -> String {
    format!("id/{container}")
}

/// Mount point of `container`'s identifying mount: `/.kube-prestop-id/<container>`.
pub fn id_mount_path(container: &str) -> String {
    format!("{ID_MOUNT_ROOT}/{container}")
}

/// Name of one instance of a container: `<pid>-<starttime>`, from the
/// container process's PID (in the pod's PID namespace) and field 22 of
/// `/proc/PID/stat` (start time in clock ticks since boot). The pair is unique
/// for the life of the node, so restarts and PID reuse never alias.
pub fn instance_id(pid: i32, start_time_ticks: u64) -> String {
    format!("{pid}-{start_time_ticks}")
}

/// File name of the mark that the preStop wrapper writes for an instance.
pub fn prestop_mark_file(instance: &str) -> String {
    format!("prestop-{instance}")
}

/// File name of the mark the watcher writes when it first finds an instance
/// of the container. After a sidecar restart, a `seen-<id>` whose process is
/// gone and that has neither `done-<id>` nor `prestop-<id>` is an exit that
/// happened while the sidecar was down: its hook still runs.
pub fn seen_file(instance: &str) -> String {
    format!("{SEEN_PREFIX}{instance}")
}

/// Prefix of [`seen_file`] names.
pub const SEEN_PREFIX: &str = "seen-";
/// Prefix of [`prestop_mark_file`] names.
pub const PRESTOP_PREFIX: &str = "prestop-";
/// Prefix of [`running_file`] names.
pub const RUNNING_PREFIX: &str = "running-";
/// Prefix of [`done_file`] names.
pub const DONE_PREFIX: &str = "done-";

/// Exit status recorded for a hook whose command does not exist, and the
/// wrapper's exit status in that case (as a POSIX shell does).
pub const EXIT_COMMAND_NOT_FOUND: i32 = 127;
/// Exit status recorded for a hook whose command exists but cannot be
/// executed (permission denied, bad format), as a POSIX shell does.
pub const EXIT_COMMAND_NOT_EXECUTABLE: i32 = 126;
/// Exit status of every subcommand on a usage error (unknown flag, missing or
/// malformed argument).
pub const EXIT_USAGE: i32 = 2;

/// Splits an instance id built by [`instance_id`] into PID and start time
/// (clock ticks since boot). `None` when `id` is not of that shape.
pub fn parse_instance_id(id: &str) -> Option<(i32, u64)> {
    let (pid, start) = id.split_once('-')?;
    let pid: i32 = pid.parse().ok()?;
    let start: u64 = start.parse().ok()?;
    (pid > 0).then_some((pid, start))
}

/// Whether `name` is a valid container name as the watcher accepts it: a DNS
/// label (RFC 1123: 1 to 63 lower-case alphanumerics or `-`, starting and
/// ending with an alphanumeric), as Kubernetes requires of container names.
/// This also keeps the name safe as a single path component.
pub fn is_valid_container_name(name: &str) -> bool {
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

/// File name of the mark written when our hook run for an instance starts.
pub fn running_file(instance: &str) -> String {
    format!("running-{instance}")
}

/// File name of the outcome written when our hook run for an instance ends.
pub fn done_file(instance: &str) -> String {
    format!("done-{instance}")
}

fn with_hook(mut head: Vec<String>, hook: &[String]) -> Vec<String> {
    head.push(COMMAND_SEPARATOR.to_owned());
    head.extend(hook.iter().cloned());
    head
}

/// Command of the install init container:
/// `/kube-prestop-sidecar install --dest /.kube-prestop/bin/kube-prestop`.
pub fn install_command() -> Vec<String> {
    vec![
        INSTALL_IMAGE_BINARY.to_owned(),
        SUBCOMMAND_INSTALL.to_owned(),
        FLAG_DEST.to_owned(),
        BINARY_PATH.to_owned(),
    ]
}

/// Command of the native sidecar that watches `container` and runs `hook`
/// (the container's original `preStop.exec.command`) when it exits on its own:
/// `/.kube-prestop/bin/kube-prestop watch --container X [--started-after A,B] -- HOOK...`.
/// `started_after` ([`FLAG_STARTED_AFTER`]) is left out when empty. Same as
/// [`watch_command_with`] with default run-on and hook root.
pub fn watch_command(container: &str, started_after: &[String], hook: &[String]) -> Vec<String> {
    watch_command_with(
        container,
        &WatchOptions {
            started_after: started_after.to_vec(),
            ..WatchOptions::default()
        },
        hook,
    )
}

/// [`watch_command`] with all options:
/// `... watch --container X [--started-after A,B] [--run-on V] [--hook-root V] -- HOOK...`;
/// each flag is left out at its default, so pods that use none of them get
/// the same command line as before the flags existed.
pub fn watch_command_with(container: &str, opts: &WatchOptions, hook: &[String]) -> Vec<String> {
    watch_command_at(BINARY_PATH, container, opts, hook)
}

/// [`watch_command_with`] running the binary at `binary` (one of
/// [`BINARY_PATHS`]).
pub fn watch_command_at(
    binary: &str,
    container: &str,
    opts: &WatchOptions,
    hook: &[String],
) -> Vec<String> {
    let mut cmd = vec![
        binary.to_owned(),
        SUBCOMMAND_WATCH.to_owned(),
        FLAG_CONTAINER.to_owned(),
        container.to_owned(),
    ];
    if !opts.started_after.is_empty() {
        cmd.push(FLAG_STARTED_AFTER.to_owned());
        cmd.push(opts.started_after.join(","));
    }
    if opts.run_on != RunOn::default() {
        cmd.push(FLAG_RUN_ON.to_owned());
        cmd.push(opts.run_on.as_str().to_owned());
    }
    if opts.hook_root != HookRoot::default() {
        cmd.push(FLAG_HOOK_ROOT.to_owned());
        cmd.push(opts.hook_root.as_str().to_owned());
    }
    with_hook(cmd, hook)
}

/// The wrapped `preStop.exec.command` of `container`:
/// `/.kube-prestop/bin/kube-prestop prestop --container X -- HOOK...`.
/// The wrapper records the kubelet's run, then `execvp`s `HOOK`.
pub fn prestop_command(container: &str, hook: &[String]) -> Vec<String> {
    prestop_command_at(BINARY_PATH, container, hook)
}

/// [`prestop_command`] running the binary at `binary` (one of
/// [`BINARY_PATHS`]).
pub fn prestop_command_at(binary: &str, container: &str, hook: &[String]) -> Vec<String> {
    with_hook(
        vec![
            binary.to_owned(),
            SUBCOMMAND_PRESTOP.to_owned(),
            FLAG_CONTAINER.to_owned(),
            container.to_owned(),
        ],
        hook,
    )
}

/// Command of the sidecar's `lifecycle.postStart` exec handler:
/// `/.kube-prestop/bin/kube-prestop post-start --container X`.
pub fn post_start_command(container: &str) -> Vec<String> {
    post_start_command_at(BINARY_PATH, container)
}

/// [`post_start_command`] running the binary at `binary` (one of
/// [`BINARY_PATHS`]).
pub fn post_start_command_at(binary: &str, container: &str) -> Vec<String> {
    vec![
        binary.to_owned(),
        SUBCOMMAND_POST_START.to_owned(),
        FLAG_CONTAINER.to_owned(),
        container.to_owned(),
    ]
}

/// Command of the one-shot armed check (see [`SUBCOMMAND_PROBE`]):
/// `/.kube-prestop/bin/kube-prestop probe --container X`.
pub fn probe_command(container: &str) -> Vec<String> {
    vec![
        BINARY_PATH.to_owned(),
        SUBCOMMAND_PROBE.to_owned(),
        FLAG_CONTAINER.to_owned(),
        container.to_owned(),
    ]
}

/// A command built by [`prestop_command`] taken apart again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedPreStop<'a> {
    /// The watched container named by `--container`.
    pub container: &'a str,
    /// The original preStop command, after `--`.
    pub hook: &'a [String],
}

/// Recognises a preStop command that [`prestop_command`] or
/// [`prestop_command_at`] wrapped, with any of [`BINARY_PATHS`] (used by the
/// webhook for idempotency). Returns `None` for any other command.
pub fn parse_prestop_command(command: &[String]) -> Option<WrappedPreStop<'_>> {
    match command {
        [bin, sub, flag, container, sep, hook @ ..]
            if BINARY_PATHS.contains(&bin.as_str())
                && sub == SUBCOMMAND_PRESTOP
                && flag == FLAG_CONTAINER
                && sep == COMMAND_SEPARATOR =>
        {
            Some(WrappedPreStop { container, hook })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    /// The image-volume delivery: the install image mounted at BINARY_DIR
    /// shows its binary at IMAGE_VOLUME_BINARY_PATH; commands built for it
    /// differ from the others only in the binary's path, and the wrapped
    /// preStop is recognised with either path.
    #[test]
    fn image_volume_paths_and_commands() {
        assert_eq!(
            IMAGE_VOLUME_BINARY_PATH,
            format!("{BINARY_DIR}{INSTALL_IMAGE_BINARY}")
        );
        assert_eq!(
            INSTALL_IMAGE_BINARY.trim_start_matches('/'),
            ARCHITECTURE_BINARY_NAME
        );
        assert_eq!(BINARY_PATHS, [BINARY_PATH, IMAGE_VOLUME_BINARY_PATH]);
        let hook = s(&["sh", "-c", "echo bye"]);
        let wrapped = prestop_command_at(IMAGE_VOLUME_BINARY_PATH, "main", &hook);
        assert_eq!(
            wrapped,
            s(&[
                "/.kube-prestop/bin/kube-prestop-sidecar",
                "prestop",
                "--container",
                "main",
                "--",
                "sh",
                "-c",
                "echo bye"
            ])
        );
        assert_eq!(
            parse_prestop_command(&wrapped),
            Some(WrappedPreStop {
                container: "main",
                hook: hook.as_slice()
            })
        );
        assert_eq!(
            post_start_command_at(IMAGE_VOLUME_BINARY_PATH, "main")[0],
            IMAGE_VOLUME_BINARY_PATH
        );
        let watch = watch_command_at(
            IMAGE_VOLUME_BINARY_PATH,
            "main",
            &WatchOptions::default(),
            &hook,
        );
        assert_eq!(watch[0], IMAGE_VOLUME_BINARY_PATH);
        assert_eq!(
            watch[1..],
            watch_command_with("main", &WatchOptions::default(), &hook)[1..]
        );
        let other = s(&[
            "/bin/kube-prestop",
            "prestop",
            "--container",
            "main",
            "--",
            "x",
        ]);
        assert!(parse_prestop_command(&other).is_none());
        assert!(own_architecture().is_some_and(|a| a == "amd64" || a == "arm64"));
    }

    #[test]
    fn wire_format_is_pinned() {
        assert_eq!(
            install_command(),
            s(&[
                "/kube-prestop-sidecar",
                "install",
                "--dest",
                "/.kube-prestop/bin/kube-prestop"
            ])
        );
        assert_eq!(
            watch_command("main", &s(&["main"]), &s(&["sh", "-c", "echo bye"])),
            s(&[
                "/.kube-prestop/bin/kube-prestop",
                "watch",
                "--container",
                "main",
                "--started-after",
                "main",
                "--",
                "sh",
                "-c",
                "echo bye"
            ])
        );
        assert_eq!(
            post_start_command("main"),
            s(&[
                "/.kube-prestop/bin/kube-prestop",
                "post-start",
                "--container",
                "main"
            ])
        );
        assert_eq!(
            probe_command("main"),
            s(&[
                "/.kube-prestop/bin/kube-prestop",
                "probe",
                "--container",
                "main"
            ])
        );
        assert_eq!(id_mount_path("main"), "/.kube-prestop-id/main");
        assert_eq!(id_sub_path("main"), "id/main");
        assert_eq!(
            state_dir(Path::new(MOUNT_PATH), "main"),
            PathBuf::from("/.kube-prestop/state/main")
        );
        assert_eq!(
            armed_mark(Path::new(MOUNT_PATH), "main"),
            PathBuf::from("/.kube-prestop/state/main/armed")
        );
        assert_eq!(armed_record(7, 12345), "pid=7\nstart_time_ticks=12345\n");
        assert_eq!(instance_id(7, 12345), "7-12345");
        assert_eq!(prestop_mark_file("7-1"), "prestop-7-1");
        assert_eq!(running_file("7-1"), "running-7-1");
        assert_eq!(done_file("7-1"), "done-7-1");
        assert_eq!(seen_file("7-1"), "seen-7-1");
        assert!(seen_file("7-1").starts_with(SEEN_PREFIX));
        assert!(prestop_mark_file("7-1").starts_with(PRESTOP_PREFIX));
        assert!(running_file("7-1").starts_with(RUNNING_PREFIX));
        assert!(done_file("7-1").starts_with(DONE_PREFIX));
    }

    #[test]
    fn watch_options_are_flags_only_when_not_default() {
        let hook = s(&["true"]);
        assert_eq!(
            watch_command_with("main", &WatchOptions::default(), &hook),
            watch_command("main", &[], &hook)
        );
        assert_eq!(
            watch_command_with(
                "main",
                &WatchOptions {
                    started_after: s(&["main"]),
                    run_on: RunOn::Failure,
                    hook_root: HookRoot::Container,
                },
                &hook
            ),
            s(&[
                "/.kube-prestop/bin/kube-prestop",
                "watch",
                "--container",
                "main",
                "--started-after",
                "main",
                "--run-on",
                "failure",
                "--hook-root",
                "container",
                "--",
                "true"
            ])
        );
        for v in RunOn::ALL {
            assert_eq!(RunOn::parse(v.as_str()), Some(v));
        }
        for v in HookRoot::ALL {
            assert_eq!(HookRoot::parse(v.as_str()), Some(v));
        }
        assert_eq!(RunOn::parse("Always"), None);
        assert_eq!(RunOn::parse(" failure"), None);
        assert_eq!(RunOn::parse(""), None);
        assert_eq!(HookRoot::parse("host"), None);
        assert_eq!(ENV_HOOK_EXIT_CODE, "KUBE_PRESTOP_EXIT_CODE");
        assert_eq!(ENV_HOOK_EXIT_SIGNAL, "KUBE_PRESTOP_EXIT_SIGNAL");
        assert_eq!(ENV_HOOK_ROOT, "KUBE_PRESTOP_ROOT");
    }

    #[test]
    fn binary_path_is_the_same_from_a_config_map() {
        let from_config_map = Path::new(BINARY_DIR).join(BINARY_CONFIG_MAP_KEY);
        assert_eq!(from_config_map, Path::new(BINARY_PATH));
        assert!(BINARY_DIR.starts_with(&format!("{MOUNT_PATH}/")));
    }

    #[test]
    fn instance_ids_parse_back() {
        assert_eq!(parse_instance_id(&instance_id(42, 9001)), Some((42, 9001)));
        assert_eq!(parse_instance_id("42"), None);
        assert_eq!(parse_instance_id("x-1"), None);
        assert_eq!(parse_instance_id("0-1"), None);
        assert_eq!(parse_instance_id("1-2-3"), None);
    }

    #[test]
    fn armed_records_parse_back() {
        assert_eq!(
            parse_armed_record(&armed_record(42, 9001)),
            Some((42, 9001))
        );
        assert_eq!(parse_armed_record(""), None);
        assert_eq!(parse_armed_record("pid=42\n"), None);
        assert_eq!(parse_armed_record("start_time_ticks=1\n"), None);
        assert_eq!(parse_armed_record("pid=0\nstart_time_ticks=1\n"), None);
        assert_eq!(parse_armed_record("pid=x\nstart_time_ticks=1\n"), None);
        assert_eq!(parse_armed_record("pid=4\nstart_time_ticks=-1\n"), None);
    }

    #[test]
    fn container_names_are_dns_labels() {
        assert!(is_valid_container_name("main"));
        assert!(is_valid_container_name("a-1"));
        assert!(is_valid_container_name(&"a".repeat(63)));
        assert!(!is_valid_container_name(&"a".repeat(64)));
        assert!(!is_valid_container_name(""));
        assert!(!is_valid_container_name("-a"));
        assert!(!is_valid_container_name("a-"));
        assert!(!is_valid_container_name("A"));
        assert!(!is_valid_container_name("../x"));
        assert!(!is_valid_container_name("a/b"));
    }

    #[test]
    fn binary_path_is_inside_the_mount() {
        assert!(BINARY_PATH.starts_with(&format!("{MOUNT_PATH}/")));
    }

    #[test]
    fn prestop_command_round_trips() {
        let hook = s(&["/bin/cleanup", "--", "x"]);
        let cmd = prestop_command("job", &hook);
        let parsed = parse_prestop_command(&cmd);
        assert_eq!(
            parsed,
            Some(WrappedPreStop {
                container: "job",
                hook: &hook
            })
        );
        assert_eq!(parse_prestop_command(&hook), None);
        assert_eq!(parse_prestop_command(&[]), None);
    }
}
