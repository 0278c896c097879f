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
//!   state/<container>/armed          the watcher for <container> is armed (the postStart handler waits for it; names the watcher, see ArmedRecord)
//!   state/<container>/seen-<id>      the watcher found instance <id> (so an exit while it is down is not missed)
//!   state/<container>/prestop-<id>   the kubelet started <container>'s preStop for instance <id>
//!   state/<container>/running-<id>   our hook run for instance <id> started (retry bookkeeping)
//!   state/<container>/done-<id>      our hook run for instance <id> finished (its outcome)
//!   id/<container>/                  source of <container>'s identifying mount; the kubelet
//!                                    creates it when it prepares <container>'s first start
//! ```
//!
//! The sidecars mount `id/` read-only at [`IDS_MOUNT_PATH`] and no container
//! of the pod mounts it writable (the install init container, which mounts
//! the whole volume, is done before any of them starts), so `id/X` exists
//! only once the kubelet made it: the watcher's evidence that `X` was
//! started when it never saw `X` run ([`ENV_HOOK_LATE`]).
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
