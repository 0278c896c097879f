//! The mutation (`docs/ARCHITECTURE.md` §3, "Mutation, for each watched
//! container X").
//!
//! Resulting `initContainers` order: the user's init containers and native
//! sidecars unchanged, then the install init container (only when the
//! binary comes neither from an image volume nor from a ConfigMap, see
//! [`crate::delivery`]), then one native sidecar per
//! watched container in `containers` order. The kubelet starts
//! init containers in order (the next one only in a later pod sync, once it
//! sees a native sidecar running, which is after the sidecar's postStart
//! handler returned: ours returns once the watcher is armed) and stops native
//! sidecars in reverse order at pod end,
//! so ours stop first while the user's sidecars (mesh or database proxies)
//! are still up during the hook.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    ExecAction, HTTPGetAction, ImageVolumeSource, KeyToPath, Lifecycle, LifecycleHandler, Pod,
    PodSpec, ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_prestop_contract as contract;

use super::annotations::{self, PodOverrides};
use super::config::EngineConfig;
use super::delivery::{self, Choice, Delivery};
use super::gate;
use super::names;
use super::resources::{self, ResourceContext};
use super::select::exec_prestop;
use super::workload::{self, WorkloadKind};
use super::{ClusterContext, EngineError};

/// UID and GID of the install init container (the conventional "nonroot").
pub const INSTALL_UID: i64 = 65532;
/// Default `terminationGracePeriodSeconds` of a pod (seconds).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;
/// File mode of the sidecar binary in its ConfigMap volume (`0555`: read
/// and execute for every UID the containers may run as; the volume is
/// mounted read-only).
pub const BINARY_FILE_MODE: i32 = 0o555;

fn taken_container_names(spec: &PodSpec) -> BTreeSet<String> {
    spec.containers
        .iter()
        .map(|c| c.name.clone())
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| c.name.clone()),
        )
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| c.name.clone()),
        )
        .collect()
}

/// `path` as the container's mount point it names, for comparing mount
/// points: absolute, components separated by single slashes, no `.`
/// components, each `..` removing the component before it (none above the
/// root), no trailing slash; a relative path is taken from the root. This
/// is Go's `filepath.Clean` of the rooted path, which is how the runtime
/// resolves a destination inside the container's root (runc's
/// `securejoin`, symlinks aside). The API server does not refuse such
/// paths: `ValidateVolumeMounts` (kubernetes/kubernetes
/// `pkg/apis/core/validation/validation.go`) only requires a non-empty
/// `mountPath` unique as a string, and checks `..` in `subPath` alone
/// (`validateLocalDescendingPath`), so `//.kube-prestop` or
/// `/x/../.kube-prestop` pass it.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Refuses any container of the pod, init containers included, that
/// mounts something under `/.kube-prestop`: not only the watched ones,
/// whose mounts we add there, but every other, which could otherwise show
/// a mount of its own at a watched container's identifying mount point
/// (`/.kube-prestop/state/X/created`). The finder tells such a mount from
/// X's by its source (the id volume's file system and root), except under
/// gVisor, whose mount tables name no source and where it compares the
/// directory's mode, owner and times with the id volume's
/// (`docs/platforms.md`, gVisor): there an untouched `emptyDir` of the pod
/// made in the same clock tick would pass. With no container of the pod
/// mounting there, none can.
fn check_all_mounts(spec: &PodSpec) -> Result<(), EngineError> {
    for (i, c) in spec.containers.iter().enumerate() {
        check_mounts("containers", i, c)?;
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        check_mounts("initContainers", i, c)?;
    }
    Ok(())
}

/// Refuses the container at `index` of `spec.<list>` (`containers`,
/// `initContainers`) when it already mounts something at our mount points.
fn check_mounts(list: &str, index: usize, c: &Container) -> Result<(), EngineError> {
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let cleaned = clean(&m.mount_path);
        let p = cleaned.as_str();
        let ours =
            p == contract::MOUNT_PATH || p.starts_with(&format!("{}/", contract::MOUNT_PATH));
        if ours {
            return Err(EngineError::MountPathConflict {
                container: c.name.clone(),
                path: m.mount_path.clone(),
                field: format!("spec.{list}[{index}].volumeMounts[{j}].mountPath"),
            });
        }
    }
    Ok(())
}

/// Security context of the install init container: non-root as
/// [`INSTALL_UID`]:[`INSTALL_UID`], read-only root filesystem, no privilege
/// escalation, not privileged, every capability dropped, seccomp
/// `RuntimeDefault`. That is what Pod Security's `restricted` profile asks
/// of a container, so the pods we inject still pass it in a namespace that
/// enforces it. Public for the cluster bench's `init-start`, which measures
/// what this context costs the container's start.
pub fn install_security_context() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(INSTALL_UID),
        run_as_group: Some(INSTALL_UID),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// An `emptyDir` volume named `name`.
fn empty_dir(name: String) -> Volume {
    Volume {
        name,
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// The whole id volume (the shared `emptyDir`, [`contract::VOLUME_NAME`]),
/// read-only at `/.kube-prestop/id`, for the sidecars: the finder learns
/// the volume's source on the node from this mount, and takes for X only a
/// process whose mount at X's identifying mount point has that source
/// ([`id_mount`]).
fn ids_mount(volume: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: contract::IDS_MOUNT_PATH.to_owned(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// X's identifying mount, in X only: the whole id volume, read-only, at
/// `/.kube-prestop/state/X/created`, inside X's state volume. The runtime
/// makes that missing mount point in the state volume when it creates X
/// (`docs/facts.md` K18): the evidence of X's start
/// ([`contract::created_dir`]). No `subPath` (each costs the kubelet two
/// `mount` execs before it creates X, K17). Listed after the state mount
/// ([`watched_mounts`]), though the runtime orders parents first anyway
/// (containerd's CRI sorts a container's mounts by depth, K18).
fn id_mount(x: &Container, volume: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: contract::id_mount_path(&x.name),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The whole state volume `volume` of the watched container named
/// `container` at `/.kube-prestop/state/<container>`: read-write in
/// that container (the preStop wrapper writes its mark) and in its sidecar,
/// read-only in every other sidecar (the termination message lists every
/// watched container's runs), in no other container. An `emptyDir`'s
/// directory is `root`-owned mode 0777 (`docs/facts.md` K16), so X's user
/// can write there whatever it is.
fn state_mount(container: &str, volume: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: contract::state_mount_path(container),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// How the containers of this pod reach the sidecar binary: the mount side
/// of the [`Delivery`] the engine chose, with the volume names it picked.
#[derive(Debug, Clone, Copy)]
enum BinaryMount<'a> {
    /// Copied by the install init container into the `emptyDir` named by
    /// the first field.
    Installed(&'a str),
    /// Mounted from the ConfigMap volume named by the first field, at
    /// [`contract::BINARY_DIR`].
    ConfigMapVolume(&'a str),
    /// Mounted from the image volume (the install image) named by the first
    /// field, at [`contract::BINARY_DIR`]: the binary is at
    /// [`contract::IMAGE_VOLUME_BINARY_PATH`].
    ImageVolume(&'a str),
}

impl BinaryMount<'_> {
    /// Where the containers find the binary.
    fn path(self) -> &'static str {
        match self {
            BinaryMount::Installed(_) | BinaryMount::ConfigMapVolume(_) => contract::BINARY_PATH,
            BinaryMount::ImageVolume(_) => contract::IMAGE_VOLUME_BINARY_PATH,
        }
    }

    /// The mount that gives a container the binary at [`Self::path`]: the
    /// whole volume holding it (the install init container's `emptyDir`,
    /// written before any sidecar starts, or the binary's ConfigMap or image
    /// volume), read-only at [`contract::BINARY_DIR`].
    fn mount(self) -> VolumeMount {
        let (BinaryMount::Installed(volume)
        | BinaryMount::ConfigMapVolume(volume)
        | BinaryMount::ImageVolume(volume)) = self;
        binary_dir_mount(volume, true)
    }
}

/// The whole volume `volume` at [`contract::BINARY_DIR`]: read-only
/// ([`BinaryMount::mount`]), or read-write in the install init container
/// only (it writes the binary, and is done before any sidecar starts). No
/// other container of ours mounts anything writable but its own state
/// volume ([`state_mount`]), so none of them can replace the binary, write
/// another container's records or fake another container's start
/// (`docs/security.md`, "What a container of the pod can do to another's
/// hook").
fn binary_dir_mount(volume: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: contract::BINARY_DIR.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// The volume that shows the ConfigMap `config_map`'s binary as
/// `kube-prestop` with mode [`BINARY_FILE_MODE`]. Not optional: the kubelet
/// waits for the ConfigMap rather than start a sidecar without its binary.
fn binary_volume(name: String, config_map: &str) -> Volume {
    Volume {
        name,
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_owned(),
            items: Some(vec![KeyToPath {
                key: contract::BINARY_CONFIG_MAP_KEY.to_owned(),
                path: contract::BINARY_CONFIG_MAP_KEY.to_owned(),
                mode: None,
            }]),
            default_mode: Some(BINARY_FILE_MODE),
            optional: Some(false),
        }),
        ..Default::default()
    }
}

/// The volume that shows the install image `config.install_image` itself
/// (read-only: image volumes always are), pulled with the install image's
/// pull policy. The node's runtime unpacks the image for its own platform.
fn image_volume(name: String, config: &EngineConfig) -> Volume {
    Volume {
        name,
        image: Some(ImageVolumeSource {
            reference: Some(config.install_image.clone()),
            pull_policy: Some(config.install_image_pull_policy.clone()),
        }),
        ..Default::default()
    }
}

/// The install init container named `name`, which writes the binary into
/// the `emptyDir` `volume`: `config`'s install image and pull policy,
/// [`contract::install_command`], `volume` read-write at
/// [`contract::BINARY_DIR`], [`install_security_context`], `resources`.
/// Public for the cluster bench's `init-start`, which starts this very
/// container.
pub fn install_container(
    name: String,
    volume: &str,
    config: &EngineConfig,
    resources: Option<ResourceRequirements>,
) -> Container {
    Container {
        name,
        image: Some(config.install_image.clone()),
        image_pull_policy: Some(config.install_image_pull_policy.clone()),
        command: Some(contract::install_command()),
        volume_mounts: Some(vec![binary_dir_mount(volume, false)]),
        security_context: Some(install_security_context()),
        resources,
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    }
}

/// X's env for the sidecar: `resourceFieldRef`s without `containerName`
/// (which refer to the container they are in) pinned to X, any user
/// `KUBE_PRESTOP_GRACE_PERIOD_SECONDS` replaced by ours (last).
pub fn sidecar_env(x: &Container, grace_period_seconds: i64) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = x
        .env
        .iter()
        .flatten()
        .filter(|e| e.name != contract::ENV_GRACE_PERIOD_SECONDS)
        .cloned()
        .map(|mut e| {
            if let Some(r) = e
                .value_from
                .as_mut()
                .and_then(|v| v.resource_field_ref.as_mut())
                && r.container_name.as_deref().is_none_or(str::is_empty)
            {
                r.container_name = Some(x.name.clone());
            }
            e
        })
        .collect();
    env.push(EnvVar {
        name: contract::ENV_GRACE_PERIOD_SECONDS.to_owned(),
        value: Some(grace_period_seconds.to_string()),
        value_from: None,
    });
    env
}

/// The native sidecar watching `x`, whose preStop command is `hook`;
/// `opts` are its `watch` flags, and `gated` whether it has a postStart
/// handler (the start gate; not with [`gate::Plan::None`]): `started_after` names the containers the
/// kubelet starts after it ([`contract::FLAG_STARTED_AFTER`]; empty for
/// `hostPID` pods), `run_on` and `hook_root` come from the annotations; the
/// binary's delivery gives the binary's path and mount
/// ([`BinaryMount::mount`]); `states` names every watched container and its
/// state volume (X's is mounted read-write, the others read-only:
/// [`state_mount`]); `ids` is the id volume ([`ids_mount`], read-only).
/// Added to X's own mounts.
fn sidecar_container(
    name: String,
    x: &Container,
    hook: &[String],
    (opts, gated): (&contract::WatchOptions, bool),
    (binary, states, ids): (BinaryMount<'_>, &[(&str, &str)], &str),
    grace_period_seconds: i64,
    resources: Option<ResourceRequirements>,
) -> Container {
    let mut mounts = x.volume_mounts.clone().unwrap_or_default();
    mounts.push(binary.mount());
    mounts.extend(
        states
            .iter()
            .map(|&(container, volume)| state_mount(container, volume, container != x.name)),
    );
    mounts.push(ids_mount(ids));
    let binary = binary.path();
    Container {
        name,
        image: x.image.clone(),
        image_pull_policy: x.image_pull_policy.clone(),
        command: Some(contract::watch_command_at(binary, &x.name, opts, hook)),
        args: None,
        env: Some(sidecar_env(x, grace_period_seconds)),
        env_from: x.env_from.clone(),
        volume_mounts: Some(mounts),
        volume_devices: x.volume_devices.clone(),
        working_dir: x.working_dir.clone(),
        security_context: x.security_context.clone(),
        restart_policy: Some("Always".to_owned()),
        ports: opts.gate_port.map(|port| {
            vec![ContainerPort {
                container_port: i32::from(port),
                protocol: Some("TCP".to_owned()),
                ..Default::default()
            }]
        }),
        // Not a startupProbe: its first success comes on its period (1 s
        // minimum) and needs one more pod sync, about a second of pod start.
        // The kubelet finishes a postStart handler before it moves on, and
        // ours ends once the watcher is armed (bounded: see
        // `contract::POST_START_TIMEOUT_SECONDS`). None with the gate `none`.
        lifecycle: gated.then(|| Lifecycle {
            post_start: Some(post_start(binary, &x.name, opts.gate_port)),
            ..Default::default()
        }),
        resources,
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    }
}

/// The sidecar's postStart handler, the start gate: an `httpGet` of
/// [`contract::GATE_PATH`] on `gate_port` (the watcher answers once armed:
/// one request from the kubelet, `runHTTPHandler` in kubelet v1.37.2
/// `pkg/kubelet/lifecycle/handlers.go`), else an exec of the binary's
/// `post-start` (a `runc exec`: about 40 ms more of pod start).
fn post_start(binary: &str, container: &str, gate_port: Option<u16>) -> LifecycleHandler {
    match gate_port {
        Some(port) => LifecycleHandler {
            http_get: Some(HTTPGetAction {
                path: Some(contract::GATE_PATH.to_owned()),
                port: IntOrString::Int(i32::from(port)),
                scheme: Some("HTTP".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        None => LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(contract::post_start_command_at(binary, container)),
            }),
            ..Default::default()
        },
    }
}

/// X's mounts: the binary, read-only ([`BinaryMount::mount`]: the wrapper
/// runs it), X's own state volume `state` read-write ([`state_mount`]: the
/// wrapper writes its mark there), and the identifying mount ([`id_mount`]
/// of the id volume `ids`). Nothing else of ours.
fn watched_mounts(
    x: &Container,
    (state, ids): (&str, &str),
    binary: BinaryMount<'_>,
) -> Vec<VolumeMount> {
    vec![
        binary.mount(),
        state_mount(&x.name, state, false),
        id_mount(x, ids),
    ]
}

/// What injection changes in one watched container X.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedChange {
    /// Index of X in `spec.containers`.
    pub index: usize,
    /// X's new `lifecycle.preStop.exec.command`: the wrapper around the
    /// original command.
    pub prestop_command: Vec<String>,
    /// Appended to X's `volumeMounts`: the binary (read-only), X's state
    /// directory (read-write) and X's identifying mount.
    pub volume_mounts: Vec<VolumeMount>,
}

/// Mounts added to a container that is not watched.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerMounts {
    /// Index of the container in `spec.containers`.
    pub index: usize,
    /// Appended to its `volumeMounts`.
    pub volume_mounts: Vec<VolumeMount>,
}

/// Everything the mutation changes in a pod, as data: [`Mutation::apply`]
/// makes the changes on the pod, and `engine::patch` renders them as a JSON
/// Patch against the pod as received (so the webhook never has to diff
/// whole documents).
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// Appended to `spec.initContainers`, in this order: the install init
    /// container (unless the binary comes from an image volume or a
    /// ConfigMap), then one native sidecar per watched container.
    pub init_containers: Vec<Container>,
    /// Appended to `spec.volumes`: the shared `emptyDir` (the id volume),
    /// then the volume holding the binary (image volume, ConfigMap volume or
    /// the install init container's `emptyDir`), then one state `emptyDir`
    /// per watched container, in `containers` order.
    pub volumes: Vec<Volume>,
    /// The changes to the watched containers, in `spec.containers` order.
    pub watched: Vec<WatchedChange>,
    /// Mounts of the binary (read-only) in the regular containers that are
    /// not watched, for Argo's kill command ([`argo_kill_commands`]); empty
    /// for other pods.
    pub other_mounts: Vec<ContainerMounts>,
    /// Whether `spec.shareProcessNamespace` is set to `true` (not with
    /// `hostPID: true`).
    pub share_process_namespace: bool,
    /// Annotations set, added or overwritten: status, version and (when
    /// the pod has none) kubectl's default container.
    pub annotations: Vec<(String, String)>,
    /// Annotations of the pod removed: [`annotations::SKIPPED`] when the
    /// pod carries one (copied with a manifest, or set by its author), since
    /// an injected pod was not skipped; empty otherwise.
    pub removed_annotations: Vec<String>,
    /// Labels set, added or overwritten: [`annotations::INJECTED_LABEL`]
    /// (what the outcome exporter's watch selects).
    pub labels: Vec<(String, String)>,
    /// Where the binary comes from and why (not a change to the pod: for
    /// the caller's log, metrics and ConfigMap creation).
    pub binary: Choice,
}

impl Mutation {
    /// Makes the changes on `pod` (the pod they were planned for).
    pub fn apply(self, pod: &mut Pod) {
        if let Some(spec) = pod.spec.as_mut() {
            for change in self.watched {
                let Some(x) = spec.containers.get_mut(change.index) else {
                    continue;
                };
                if let Some(exec) = x
                    .lifecycle
                    .as_mut()
                    .and_then(|l| l.pre_stop.as_mut())
                    .and_then(|p| p.exec.as_mut())
                {
                    exec.command = Some(change.prestop_command);
                }
                x.volume_mounts
                    .get_or_insert_with(Vec::new)
                    .extend(change.volume_mounts);
            }
            for change in self.other_mounts {
                if let Some(c) = spec.containers.get_mut(change.index) {
                    c.volume_mounts
                        .get_or_insert_with(Vec::new)
                        .extend(change.volume_mounts);
                }
            }
            spec.init_containers
                .get_or_insert_with(Vec::new)
                .extend(self.init_containers);
            spec.volumes
                .get_or_insert_with(Vec::new)
                .extend(self.volumes);
            if self.share_process_namespace {
                spec.share_process_namespace = Some(true);
            }
        }
        let annotations = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.extend(self.annotations);
        for key in &self.removed_annotations {
            annotations.remove(key);
        }
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(self.labels);
    }
}

/// Builds the whole mutation of `pod` for the containers at `watched`
/// (indices into `spec.containers`, each with an exec preStop); `pod` is
/// only read.
///
/// Errors: [`EngineError::UnsupportedArchitecture`] from
/// [`delivery::choose`]; [`EngineError::PodTooLarge`] when the sidecars'
/// `--started-after` lists alone would be over
/// [`crate::MAX_PATCHED_POD_BYTES`] (checked before they are built);
/// [`EngineError::MountPathConflict`] when a container or
/// init container of the pod already mounts under `/.kube-prestop`
/// ([`check_all_mounts`]);
/// resource errors from [`resources::container_resources`]; annotation
/// errors from [`PodOverrides::sidecar_resources`].
pub fn build(
    pod: &Pod,
    watched: &[usize],
    overrides: &PodOverrides,
    cluster: &ClusterContext,
    config: &EngineConfig,
) -> Result<Mutation, EngineError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Err(EngineError::Invalid("pod has no spec".to_owned()));
    };

    // Resources, from the pod as it was.
    let ctx = ResourceContext {
        qos: resources::pod_qos(spec)?,
        pod_level: resources::has_pod_level_resources(spec),
        explicit: overrides.has_resources(),
    };
    let sidecar_defaults = overrides.sidecar_resources(&config.sidecar_resources)?;
    let sidecar_resources =
        resources::container_resources(&sidecar_defaults, ctx, &cluster.limit_ranges)?;

    // Names.
    let mut taken = taken_container_names(spec);
    let mut volume_names: BTreeSet<String> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect();
    let volume = names::first_free(contract::VOLUME_NAME, &volume_names);
    volume_names.insert(volume.clone());
    let mut volumes = vec![empty_dir(volume.clone())];

    // The binary: from an image volume, the ConfigMap of the pod's node
    // architecture, else copied by the install init container (one more
    // kubelet pod sync); `delivery::choose` says which and why.
    let choice = delivery::choose(
        spec,
        config.sidecar_binary_source,
        &cluster.binary,
        &config.shipped_architectures,
    )?;
    let mut init_containers = Vec::with_capacity(watched.len() + 1);
    let binary_volume_name = names::first_free(contract::BINARY_VOLUME_NAME, &volume_names);
    volume_names.insert(binary_volume_name.clone());
    let binary = match &choice.delivery {
        Delivery::ImageVolume => {
            volumes.push(image_volume(binary_volume_name.clone(), config));
            BinaryMount::ImageVolume(&binary_volume_name)
        }
        Delivery::ConfigMap { name, .. } => {
            volumes.push(binary_volume(binary_volume_name.clone(), name));
            BinaryMount::ConfigMapVolume(&binary_volume_name)
        }
        Delivery::InstallContainer => {
            let install_resources = resources::container_resources(
                &config.install_resources,
                ResourceContext {
                    explicit: false,
                    ..ctx
                },
                &cluster.limit_ranges,
            )?;
            let install_name = names::first_free(names::INSTALL_CONTAINER, &taken);
            taken.insert(install_name.clone());
            volumes.push(empty_dir(binary_volume_name.clone()));
            init_containers.push(install_container(
                install_name,
                &binary_volume_name,
                config,
                install_resources,
            ));
            BinaryMount::Installed(&binary_volume_name)
        }
    };

    check_all_mounts(spec)?;
    let grace = spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
    // Watched containers, their hooks and their sidecars' names, in order: a
    // sidecar is started before the next one (`docs/facts.md` K2), so each watcher is
    // told which containers start after it (`--started-after`).
    let mut sidecars: Vec<(&Container, &[String], String)> = Vec::new();
    // Each watched container's name and state volume, in the same order.
    let mut state_volumes: Vec<(String, String)> = Vec::with_capacity(watched.len());
    let mut changes = Vec::with_capacity(watched.len());
    for &i in watched {
        let Some(x) = spec.containers.get(i) else {
            continue;
        };
        let Some(hook) = exec_prestop(x) else {
            continue;
        };
        let name = names::sidecar_name(&x.name, &taken);
        taken.insert(name.clone());
        sidecars.push((x, hook, name));
        let state = names::state_volume_name(&x.name, &volume_names);
        volume_names.insert(state.clone());
        volumes.push(empty_dir(state.clone()));
        changes.push(WatchedChange {
            index: i,
            prestop_command: contract::prestop_command_at(binary.path(), &x.name, hook),
            volume_mounts: watched_mounts(x, (&state, &volume), binary),
        });
        state_volumes.push((x.name.clone(), state));
    }
    let host_pid = spec.host_pid == Some(true);
    check_quadratic_size(spec, &sidecars, host_pid)?;
    // Every container and init container of the patched pod: the kubelet
    // splits its termination-message budget among them (`--pod-containers`).
    let pod_containers = spec.containers.len()
        + spec.init_containers.as_ref().map_or(0, Vec::len)
        + init_containers.len()
        + sidecars.len();
    // The start gate: an httpGet to each watcher where the kubelet's request
    // reaches it (`gate::plan`), else the exec; none when asked for.
    let gate = gate::plan(pod, spec, overrides.gate, sidecars.len());
    let states: Vec<(&str, &str)> = state_volumes
        .iter()
        .map(|(c, v)| (c.as_str(), v.as_str()))
        .collect();
    for (k, (x, hook, name)) in sidecars.iter().enumerate() {
        // With hostPID every pod's containers are visible: no inference.
        let started_after: Vec<String> = if host_pid {
            Vec::new()
        } else {
            sidecars[k + 1..]
                .iter()
                .map(|(_, _, n)| n.clone())
                .chain(spec.containers.iter().map(|c| c.name.clone()))
                .collect()
        };
        init_containers.push(sidecar_container(
            name.clone(),
            x,
            hook,
            (
                &contract::WatchOptions {
                    started_after,
                    run_on: overrides.run_on_for(&x.name),
                    hook_root: overrides.hook_root_for(&x.name),
                    pod_containers,
                    gate_port: gate.port(k),
                },
                gate != gate::Plan::None,
            ),
            (binary, &states, &volume),
            grace,
            sidecar_resources.clone(),
        ));
    }

    let mut annotations = vec![
        (
            annotations::STATUS.to_owned(),
            annotations::STATUS_INJECTED.to_owned(),
        ),
        (
            annotations::VERSION.to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
    ];
    let has_default = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::DEFAULT_CONTAINER));
    // kubectl (`podcmd.FindOrDefaultContainerByName`) shows the annotated
    // container, else `spec.containers[0]`, never an init container. Naming
    // that same first container keeps `kubectl logs POD` on the job's own
    // output (and drops kubectl's "Defaulted container" notice), whichever
    // container is watched.
    if let Some(first) = spec.containers.first()
        && !has_default
        && !sidecars.is_empty()
    {
        annotations.push((
            annotations::DEFAULT_CONTAINER.to_owned(),
            first.name.clone(),
        ));
    }

    if let gate::Plan::HttpGet(ports) = &gate {
        annotations.extend(gate::mesh_exclusions(pod, ports));
    }

    let other_mounts = if host_pid {
        Vec::new()
    } else {
        argo_kill_commands(pod, spec, &changes, binary, &mut annotations)?
    };

    // A `skipped` annotation says the pod was admitted uninjected; on a pod
    // injected now it would be false, so it goes.
    let removed_annotations = pod
        .metadata
        .annotations
        .as_ref()
        .filter(|a| a.contains_key(annotations::SKIPPED))
        .map(|_| vec![annotations::SKIPPED.to_owned()])
        .unwrap_or_default();

    Ok(Mutation {
        init_containers,
        volumes,
        watched: changes,
        other_mounts,
        share_process_namespace: !host_pid,
        annotations,
        removed_annotations,
        labels: vec![(
            annotations::INJECTED_LABEL.to_owned(),
            annotations::INJECTED_LABEL_VALUE.to_owned(),
        )],
        binary: choice,
    })
}

/// Bytes of the [`contract::FLAG_STARTED_AFTER`] values the sidecars
/// `sidecars` (in start order, each with its name last) of a pod with spec
/// `spec` would get: sidecar k names the sidecars after it and then every
/// container of `spec.containers`, comma-separated. Computed in O(n) from
/// the names' lengths, without building the lists (whose total size is
/// quadratic in the number of sidecars); saturates at `usize::MAX`.
fn started_after_bytes(spec: &PodSpec, sidecars: &[(&Container, &[String], String)]) -> usize {
    let containers = spec.containers.len();
    let containers_bytes = spec
        .containers
        .iter()
        .fold(0usize, |sum, c| sum.saturating_add(c.name.len()));
    let mut later_sidecars_bytes = 0usize;
    let mut total = 0usize;
    // From the last sidecar back: `later_sidecars_bytes` is the length of
    // the names after sidecar k, `later` their count.
    for (later, (_, _, name)) in sidecars.iter().rev().enumerate() {
        let names = later.saturating_add(containers);
        let commas = names.saturating_sub(1);
        total = total
            .saturating_add(later_sidecars_bytes)
            .saturating_add(containers_bytes)
            .saturating_add(commas);
        later_sidecars_bytes = later_sidecars_bytes.saturating_add(name.len());
    }
    total
}

/// `{"mountPath":"","name":""}`: a volume mount's JSON without its two
/// values.
const EMPTY_MOUNT_JSON_BYTES: usize = r#"{"mountPath":"","name":""}"#.len();

/// Bytes, at least, of the state-volume mounts the sidecars `sidecars` get:
/// each mounts every watched container X's state volume ([`state_mount`]),
/// in JSON at least `{"mountPath":"/.kube-prestop/state/X","name":"kube-prestop-state-X"}`
/// (a name over 63 characters is hashed to 63, [`names::state_volume_name`]).
/// Computed in O(n) from the names' lengths, without building the mounts
/// (whose number is the square of the number of sidecars); saturates at
/// `usize::MAX`.
fn state_mounts_bytes(sidecars: &[(&Container, &[String], String)]) -> usize {
    let per_sidecar = sidecars.iter().fold(0usize, |sum, (x, _, _)| {
        let path = contract::state_mount_path(&x.name).len();
        let name =
            (contract::STATE_VOLUME_PREFIX.len() + x.name.len()).min(contract::MAX_DNS_LABEL_LEN);
        sum.saturating_add(EMPTY_MOUNT_JSON_BYTES + path + name)
    });
    per_sidecar.saturating_mul(sidecars.len())
}

/// Refuses a mutation whose parts that grow with the square of the number
/// of sidecars, the sidecars' [`contract::FLAG_STARTED_AFTER`] values
/// ([`started_after_bytes`]; none with `hostPID`) and their state-volume
/// mounts ([`state_mounts_bytes`]), alone (a lower bound of the patch's
/// size) are over [`crate::MAX_PATCHED_POD_BYTES`], before they are built.
///
/// Errors: [`EngineError::PodTooLarge`].
fn check_quadratic_size(
    spec: &PodSpec,
    sidecars: &[(&Container, &[String], String)],
    host_pid: bool,
) -> Result<(), EngineError> {
    let started_after = if host_pid {
        0
    } else {
        started_after_bytes(spec, sidecars)
    };
    let bytes = started_after.saturating_add(state_mounts_bytes(sidecars));
    if bytes > crate::MAX_PATCHED_POD_BYTES {
        return Err(EngineError::PodTooLarge {
            sidecars: sidecars.len(),
            containers: spec.containers.len(),
            bytes,
            max_bytes: crate::MAX_PATCHED_POD_BYTES,
        });
    }
    Ok(())
}

/// In an Argo Workflows pod (owner Workflow and its label, whether or not
/// the `argo-workflows` kind is enabled), gives every regular container
/// without one Argo's kill-command annotation
/// ([`workload::argo_kill_command_annotation`]) running our binary's
/// `signal` subcommand ([`contract::SUBCOMMAND_SIGNAL`]), and mounts the
/// binary read-only in those that are not watched (the watched ones have
/// it). Argo's default, `kill SIGNAL 1`, would signal the pod sandbox's
/// pause process once the pod shares its PID namespace, and its exit takes
/// every container down (see [`contract::SUBCOMMAND_SIGNAL`]). A kill
/// command the pod already has stays. Adds the annotations to
/// `annotations`; returns the mounts. A container mounting under
/// `/.kube-prestop` was refused before ([`check_all_mounts`]).
///
/// Errors: [`EngineError::Invalid`] when the kill command does not
/// serialize (plain strings; not expected).
fn argo_kill_commands(
    pod: &Pod,
    spec: &PodSpec,
    watched: &[WatchedChange],
    binary: BinaryMount<'_>,
    annotations: &mut Vec<(String, String)>,
) -> Result<Vec<ContainerMounts>, EngineError> {
    if !WorkloadKind::ArgoWorkflows.matches(&pod.metadata) {
        return Ok(Vec::new());
    }
    let existing = pod.metadata.annotations.as_ref();
    let command = serde_json::to_string(&contract::argo_kill_command_at(binary.path()))
        .map_err(|e| EngineError::Invalid(format!("Argo kill command: {e}")))?;
    let watched: BTreeSet<usize> = watched.iter().map(|w| w.index).collect();
    let mut mounts = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let key = workload::argo_kill_command_annotation(&c.name);
        if existing.is_some_and(|a| a.contains_key(&key)) {
            continue;
        }
        if !watched.contains(&i) {
            mounts.push(ContainerMounts {
                index: i,
                volume_mounts: vec![binary.mount()],
            });
        }
        annotations.push((key, command.clone()));
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ResourceFieldSelector};

    #[test]
    fn resource_field_ref_is_pinned_only_when_unnamed() {
        let field = |name: Option<&str>| EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: name.map(str::to_owned),
                resource: "limits.memory".into(),
                divisor: None,
            }),
            ..Default::default()
        };
        let x = Container {
            name: "main".into(),
            env: Some(vec![
                EnvVar {
                    name: "MEM".into(),
                    value_from: Some(field(None)),
                    value: None,
                },
                EnvVar {
                    name: "EMPTY".into(),
                    value_from: Some(field(Some(""))),
                    value: None,
                },
                EnvVar {
                    name: "OTHER".into(),
                    value_from: Some(field(Some("helper"))),
                    value: None,
                },
                EnvVar {
                    name: contract::ENV_GRACE_PERIOD_SECONDS.into(),
                    value: Some("999".into()),
                    value_from: None,
                },
            ]),
            ..Default::default()
        };
        let env = sidecar_env(&x, 45);
        let pinned = |i: usize| {
            env[i]
                .value_from
                .as_ref()
                .unwrap()
                .resource_field_ref
                .as_ref()
                .unwrap()
                .container_name
                .clone()
        };
        assert_eq!(pinned(0).as_deref(), Some("main"));
        assert_eq!(pinned(1).as_deref(), Some("main"));
        assert_eq!(pinned(2).as_deref(), Some("helper"));
        assert_eq!(env.len(), 4);
        assert_eq!(env[3].name, contract::ENV_GRACE_PERIOD_SECONDS);
        assert_eq!(env[3].value.as_deref(), Some("45"));
    }

    /// Every container of the pod, init containers included, is checked:
    /// an unwatched one mounting at a watched container's identifying
    /// mount point could pass for it under gVisor.
    #[test]
    fn a_mount_under_ours_in_any_container_is_a_conflict() {
        let c = |name: &str, path: Option<&str>| Container {
            name: name.into(),
            volume_mounts: path.map(|p| {
                vec![VolumeMount {
                    name: "v".into(),
                    mount_path: p.into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        let field = |spec: &PodSpec| match check_all_mounts(spec) {
            Err(EngineError::MountPathConflict { field, .. }) => Some(field),
            _ => None,
        };
        let mut spec = PodSpec {
            containers: vec![c("main", Some("/data")), c("other", None)],
            init_containers: Some(vec![c("init", Some("/cache"))]),
            ..Default::default()
        };
        assert_eq!(field(&spec), None);
        spec.containers[1] = c("other", Some("/.kube-prestop/state/main/created"));
        assert_eq!(
            field(&spec).as_deref(),
            Some("spec.containers[1].volumeMounts[0].mountPath")
        );
        spec.containers[1] = c("other", None);
        spec.init_containers = Some(vec![c("init", Some("//.kube-prestop"))]);
        assert_eq!(
            field(&spec).as_deref(),
            Some("spec.initContainers[0].volumeMounts[0].mountPath")
        );
    }

    #[test]
    fn mount_conflicts() {
        let with = |path: &str| Container {
            name: "x".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "v".into(),
                mount_path: path.into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(check_mounts("containers", 0, &with("/data")).is_ok());
        assert!(check_mounts("containers", 0, &with("/.kube-prestop-other")).is_ok());
        assert!(check_mounts("containers", 0, &with("/.kube-prestop-id/x")).is_ok());
        assert!(check_mounts("containers", 0, &with("/x/.kube-prestop")).is_ok());
        assert!(check_mounts("containers", 0, &with("/..kube-prestop")).is_ok());
        for bad in [
            "/.kube-prestop",
            "/.kube-prestop/",
            "/.kube-prestop/x",
            "/.kube-prestop/state/x/created",
            // Spelt otherwise, the same mount point for the runtime.
            "//.kube-prestop",
            "/./.kube-prestop",
            "/.kube-prestop/.",
            "/x/../.kube-prestop",
            "/../.kube-prestop",
            ".kube-prestop",
        ] {
            assert!(
                matches!(
                    check_mounts("containers", 0, &with(bad)),
                    Err(EngineError::MountPathConflict { .. })
                ),
                "{bad}"
            );
        }
    }

    /// A Job pod with `n` containers named `c0`, `c1`, ..., each with an
    /// exec preStop.
    fn job_pod(n: usize, host_pid: bool) -> Pod {
        let containers: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "name": format!("c{i}"), "image": "busybox",
                    "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "batch", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1",
                "controller": true
            }]},
            "spec": {"restartPolicy": "Never", "hostPID": host_pid, "containers": containers}
        }))
        .unwrap()
    }

    /// The `--started-after` values of the mutation's sidecars.
    fn started_after_values(m: &Mutation) -> Vec<String> {
        m.init_containers
            .iter()
            .filter_map(|c| {
                let command = c.command.as_ref()?;
                let at = command
                    .iter()
                    .position(|a| a == contract::FLAG_STARTED_AFTER)?;
                command.get(at + 1).cloned()
            })
            .collect()
    }

    #[test]
    fn started_after_bytes_is_what_the_sidecars_get() {
        for n in [1, 2, 3, 7] {
            let pod = job_pod(n, false);
            let crate::Plan::Inject(m) =
                crate::plan(&pod, &ClusterContext::default(), &EngineConfig::default()).unwrap()
            else {
                panic!("not injected");
            };
            let values = started_after_values(&m);
            assert_eq!(values.len(), n);
            let spec = pod.spec.as_ref().unwrap();
            let sidecars: Vec<(&Container, &[String], String)> = m
                .init_containers
                .iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| (&spec.containers[0], &[][..], c.name.clone()))
                .collect();
            assert_eq!(
                started_after_bytes(spec, &sidecars),
                values.iter().map(String::len).sum::<usize>(),
                "{n} containers"
            );
        }
    }

    #[test]
    fn thousands_of_watched_containers_are_refused_before_the_mutation_is_built() {
        let pod = job_pod(3000, false);
        let verdict = crate::review(&pod, &ClusterContext::default(), &EngineConfig::default());
        let Err(e) = &verdict.plan else {
            panic!("not refused: {:?}", verdict.plan.map(|_| ()));
        };
        assert_eq!(e.as_str(), "pod_too_large", "{e}");
        let message = e.to_string();
        assert!(message.contains("3000 sidecars"), "{message}");
        assert!(message.contains("--started-after"), "{message}");
        assert!(message.contains("state-volume mounts"), "{message}");
        assert!(
            message.contains(&crate::MAX_PATCHED_POD_BYTES.to_string()),
            "{message}"
        );
        // Under hostPID (no --started-after) too: the state-volume mounts
        // alone (each sidecar mounts every watched container's) would be
        // 9 million mounts.
        let verdict = crate::review(
            &job_pod(3000, true),
            &ClusterContext::default(),
            &EngineConfig::default(),
        );
        assert!(
            matches!(&verdict.plan, Err(e) if e.as_str() == "pod_too_large"),
            "hostPID: not refused"
        );
        // A hundred still fit, with or without hostPID.
        for pod in [job_pod(100, false), job_pod(100, true)] {
            let plan = crate::plan(&pod, &ClusterContext::default(), &EngineConfig::default());
            assert!(matches!(plan, Ok(crate::Plan::Inject(_))));
        }
    }

    #[test]
    fn state_mounts_bytes_is_a_lower_bound_of_the_sidecars_state_mounts() {
        for (n, long) in [(1, false), (2, false), (7, false), (3, true)] {
            let mut pod = job_pod(n, false);
            if long {
                // Names of 63 characters: hashed volume names.
                for (i, c) in pod.spec.as_mut().unwrap().containers.iter_mut().enumerate() {
                    c.name = format!("{i}{}", "x".repeat(62));
                }
            }
            let crate::Plan::Inject(m) =
                crate::plan(&pod, &ClusterContext::default(), &EngineConfig::default()).unwrap()
            else {
                panic!("not injected");
            };
            let spec = pod.spec.as_ref().unwrap();
            let sidecars: Vec<(&Container, &[String], String)> = spec
                .containers
                .iter()
                .map(|c| (c, &[][..], String::new()))
                .collect();
            let state = contract::state_mount_path("");
            let rendered: usize = m
                .init_containers
                .iter()
                .flat_map(|c| c.volume_mounts.iter().flatten())
                .filter(|v| v.mount_path.starts_with(&state))
                .map(|v| serde_json::to_string(v).unwrap().len())
                .sum();
            let bound = state_mounts_bytes(&sidecars);
            let read_only = r#","readOnly":true"#.len() * n * (n - 1);
            assert_eq!(bound + read_only, rendered, "{n} containers, long {long}");
        }
    }

    #[test]
    fn install_is_restricted() {
        let sc = install_security_context();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.capabilities.unwrap().drop.unwrap(), vec!["ALL"]);
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }
}
