//! Subcommands and flags of the sidecar binary, and the command lines the
//! webhook writes with them (container commands, the postStart handler, the
//! wrapped preStop), parsed back by the sidecar's `cli` and, for the wrapped
//! preStop, by the webhook (idempotency).

use crate::paths::{BINARY_PATH, BINARY_PATHS, INSTALL_IMAGE_BINARY};

/// Subcommand that copies the binary into the binary's volume.
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
/// Subcommand that sends a signal to the first process of the container it
/// runs in (`kube-prestop signal SIGNAL`, SIGNAL a number), found in the
/// pod's shared PID namespace, where that process is not PID 1.
///
/// Argo Workflows' controller stops a step's containers by exec'ing
/// `argoexec kill SIGNAL 1` (or `/bin/sh -c "kill -SIGNAL 1"`) in each
/// (argo-workflows v4.0.5 `workflow/signal/signal.go` `SignalContainer`).
/// In a pod with `shareProcessNamespace: true`, PID 1 is the pod sandbox's
/// pause process, which exits on SIGTERM (kubernetes `build/pause/linux/pause.c`),
/// and the kernel then kills every process of the namespace (`docs/facts.md`
/// L10): the whole pod,
/// a running hook included (kubernetes.io, "Share Process Namespace between
/// Containers in a Pod": `kill -HUP 1` signals the pod sandbox). The webhook
/// therefore gives each regular container of an injected Argo pod this
/// command through Argo's per-container kill-command annotation
/// ([`argo_kill_command_at`]).
pub const SUBCOMMAND_SIGNAL: &str = "signal";
/// The placeholder Argo replaces with the signal number in a kill command
/// (`SignalContainer`: `fmt.Sprintf(v, s)` on every argument holding `%d`).
pub const ARGO_SIGNAL_PLACEHOLDER: &str = "%d";
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
/// every architecture's binary as `<dir>/<arch>/`[`ARCHITECTURE_BINARY_NAME`](crate::ARCHITECTURE_BINARY_NAME),
/// from the image's [`ARCHITECTURES_DIR`](crate::ARCHITECTURES_DIR); from an image without that
/// directory (single-architecture images of kube-prestop 0.x), this binary
/// as its own architecture ([`own_architecture`](crate::own_architecture)). The webhook Deployment's
/// init container runs it to hand the webhook the binaries for its
/// per-architecture ConfigMaps.
pub const FLAG_DEST_DIR: &str = "--dest-dir";
/// Flag of `post-start`: how long to wait (whole seconds; default
/// [`POST_START_TIMEOUT_SECONDS`]).
pub const FLAG_TIMEOUT: &str = "--timeout";
/// Flag overriding the parent of our mounts (tests; default [`MOUNT_PATH`](crate::MOUNT_PATH)).
pub const FLAG_ROOT: &str = "--root";
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
/// [`TERMINATION_MESSAGE_PATH`](crate::TERMINATION_MESSAGE_PATH)).
pub const FLAG_TERMINATION_MESSAGE: &str = "--termination-message";
/// Flag of `watch`: how many containers and init containers the pod has,
/// the injected ones included, so that the termination message fits the
/// kubelet's share for each
/// ([`termination_message_budget`](crate::termination_message_budget)).
/// Left out when 0 (unknown: the watcher then writes up to
/// [`TERMINATION_MESSAGE_MAX_BYTES`](crate::TERMINATION_MESSAGE_MAX_BYTES)).
pub const FLAG_POD_CONTAINERS: &str = "--pod-containers";
/// Flag of `watch`: the TCP port of the sidecar's start gate, the port its
/// `lifecycle.postStart` `httpGet` handler asks (see [`GATE_PATH`]). The
/// watcher listens on it from its first instruction and answers a request
/// once it is armed (at the latest after [`POST_START_TIMEOUT_SECONDS`]).
/// Given only with the pod annotation `kube-prestop.io/gate: http-get`;
/// left out when the sidecar's postStart handler is the exec of
/// [`SUBCOMMAND_POST_START`] (the default).
pub const FLAG_GATE_PORT: &str = "--gate-port";
/// Path of the start gate's `httpGet` postStart handler. The watcher answers
/// any path the same way; this one says what the request waits for.
pub const GATE_PATH: &str = "/armed";
/// The first port the webhook tries for a sidecar's start gate; the `k`-th
/// sidecar of a pod gets the `k`-th port from here on that no container of
/// the pod declares (`containerPort` or `hostPort`). Above the ports of the
/// common service meshes' sidecars (Istio 15000-15090, Linkerd 4140-4191)
/// and below the kernel's default ephemeral range (32768-60999,
/// `net.ipv4.ip_local_port_range`), so no outgoing connection of the pod
/// holds it by chance.
pub const GATE_PORT_BASE: u16 = 17430;
/// Separates the flags from the hook command, which is passed verbatim.
pub const COMMAND_SEPARATOR: &str = "--";

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
    /// files outside volumes); [`ENV_HOOK_ROOT`](crate::ENV_HOOK_ROOT) still points at those.
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
    /// [`FLAG_POD_CONTAINERS`]; left out when 0.
    pub pod_containers: usize,
    /// [`FLAG_GATE_PORT`]; left out when `None` (the exec gate).
    pub gate_port: Option<u16>,
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
/// `... watch --container X [--started-after A,B] [--run-on V] [--hook-root V] [--pod-containers N] -- HOOK...`;
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
    if opts.pod_containers > 0 {
        cmd.push(FLAG_POD_CONTAINERS.to_owned());
        cmd.push(opts.pod_containers.to_string());
    }
    if let Some(port) = opts.gate_port {
        cmd.push(FLAG_GATE_PORT.to_owned());
        cmd.push(port.to_string());
    }
    with_hook(cmd, hook)
}

/// The wrapped `preStop.exec.command` of `container`:
/// `/.kube-prestop/bin/kube-prestop prestop --container X -- HOOK...`.
/// The wrapper records the kubelet's run, then `execvp`s `HOOK`.
pub fn prestop_command(container: &str, hook: &[String]) -> Vec<String> {
    prestop_command_at(BINARY_PATH, container, hook)
}

/// Argo's kill command for a container of an injected pod, with the binary
/// at `binary`: `[binary, "signal", "%d"]` (see [`SUBCOMMAND_SIGNAL`]).
pub fn argo_kill_command_at(binary: &str) -> Vec<String> {
    vec![
        binary.to_owned(),
        SUBCOMMAND_SIGNAL.to_owned(),
        ARGO_SIGNAL_PLACEHOLDER.to_owned(),
    ]
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
    use crate::paths::IMAGE_VOLUME_BINARY_PATH;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    /// Commands built for the image volume's binary differ from the others
    /// only in the binary's path, and the wrapped preStop is recognised
    /// with either path.
    #[test]
    fn image_volume_commands() {
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
        assert_eq!(
            prestop_command("main", &s(&["true"])),
            s(&[
                "/.kube-prestop/bin/kube-prestop",
                "prestop",
                "--container",
                "main",
                "--",
                "true"
            ])
        );
        assert_eq!(
            [
                FLAG_DEST_DIR,
                FLAG_TIMEOUT,
                FLAG_ROOT,
                FLAG_TERMINATION_MESSAGE
            ],
            ["--dest-dir", "--timeout", "--root", "--termination-message"]
        );
        assert_eq!(POST_START_TIMEOUT_SECONDS, 30);
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
                    pod_containers: 3,
                    gate_port: Some(GATE_PORT_BASE),
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
                "--pod-containers",
                "3",
                "--gate-port",
                "17430",
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
