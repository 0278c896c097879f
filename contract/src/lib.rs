//! The contract between the kube-prestop webhook, which writes pod specs, and
//! the sidecar binary, which runs inside them.
//!
//! Both sides build their half of the contract from this crate only: the
//! webhook's engine calls the `*_command` builders to write container
//! commands and lifecycle handlers, and the sidecar parses the same
//! subcommands and flags, lays out the same files and writes the same
//! records. Changing anything here changes both sides at once; the tests pin
//! the wire format, because pods created by an older webhook keep running
//! with the binary their install image carried. The crate depends on `std`
//! only, so the engine that uses it stays pure and portable.
//!
//! Everything is re-exported at the root (`kube_prestop_contract::BINARY_PATH`);
//! the modules group it by job:
//!
//! - [`paths`]: volume names, mount points, binary paths, architectures;
//! - [`command`]: subcommands, flags and the command lines built from them;
//! - [`env`](mod@env): environment variables of the sidecar and of the hook;
//! - [`exit`]: exit statuses;
//! - [`names`]: DNS-label validation (container and volume names);
//! - [`state_files`]: the state directory and the names of its files;
//! - [`record`]: what those files hold (typed, with their exact text);
//! - [`termination`]: the sidecar's termination message.
//!
//! # Volume layout
//!
//! Every mount of ours is a whole volume, except each watched container's
//! identifying mount (a `subPath` costs the kubelet two `mount` execs
//! before it creates the container, a whole volume none). Per pod: the id
//! volume, an `emptyDir` named [`VOLUME_NAME`] (or a suffixed variant when
//! the pod already uses that name); the binary's volume
//! ([`BINARY_VOLUME_NAME`]: an image volume, a ConfigMap, or an `emptyDir`
//! the install init container fills); and per watched container `X` a
//! state volume, an `emptyDir` named `kube-prestop-state-X`
//! ([`STATE_VOLUME_PREFIX`]). A sidecar sees, under [`MOUNT_PATH`]:
//!
//! ```text
//! /.kube-prestop/
//!   bin/kube-prestop                 the static sidecar binary (the install init container's copy,
//!                                    or the ConfigMap's); binary volume, read-only
//!   bin/kube-prestop-sidecar         the binary when the install image is an image volume
//!   state/<container>/               <container>'s state volume: read-write in <container> and its
//!                                    sidecar, read-only in the other sidecars
//!   state/<container>/armed          the watcher for <container> is armed (the postStart handler waits for it; names the watcher, see ArmedRecord)
//!   state/<container>/seen-<id>      the watcher found instance <id> (so an exit while it is down is not missed)
//!   state/<container>/prestop-<id>   the kubelet started <container>'s preStop for instance <id>
//!   state/<container>/prestop-ended-<id>  that preStop ended (the wrapper's record of its end)
//!   state/<container>/running-<id>   our hook run for instance <id> started (retry bookkeeping)
//!   state/<container>/done-<id>      our hook run for instance <id> finished (its outcome)
//!   state/<container>/created/       the mount point of <container>'s identifying mount; the
//!                                    container runtime makes it when it creates <container>
//!   id/                              the id volume, read-only; always empty
//! ```
//!
//! `/.kube-prestop` and `/.kube-prestop/state` are not mounts: the runtime
//! makes them in the container's root file system as the parents of the
//! mount points. Only `<container>` and its sidecar mount `<container>`'s
//! state volume writable, and nothing of ours makes `state/<container>/created`,
//! so a root-owned one exists only once the runtime created `<container>`
//! ([`created_dir`]; what another container running as the same user can do
//! there: `docs/security.md`): the watcher's evidence that `<container>` was
//! started when it never saw it run ([`ENV_HOOK_LATE`]).
//!
//! A watched container `X` mounts the binary's volume (read-only), its own
//! state volume at `/.kube-prestop/state/X` (read-write) and the whole id
//! volume (read-only) at `/.kube-prestop/state/X/created` (see
//! [`id_mount_path`]), with no `subPath`. That mount point appears
//! in `/proc/PID/mountinfo` of every process of `X` and of no other container,
//! which is how the sidecar finds `X`'s processes in the shared PID namespace
//! (mountinfo is readable across users; `/proc/PID/ns/*` is not).
//!
//! An *instance* of a container is one run of its container process (the
//! kubelet restarts it under `restartPolicy: OnFailure`); it is named by
//! [`instance_id`] from the process's PID and its start time.

pub mod command;
pub mod env;
pub mod exit;
pub mod names;
pub mod paths;
pub mod record;
pub mod state_files;
pub mod termination;

pub use command::*;
pub use env::*;
pub use exit::*;
pub use names::*;
pub use paths::*;
pub use record::*;
pub use state_files::*;
pub use termination::*;
