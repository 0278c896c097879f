//! The ConfigMaps that carry the static sidecar binary, one per namespace
//! where pods are injected and architecture (`kube-prestop.io/arch`), so
//! that the sidecar can run the binary from a ConfigMap volume instead of an
//! install init container copying it into an emptyDir first. One
//! [`SidecarConfigMaps`] per architecture's binary ([`load_binaries`] reads
//! each one's architecture from its ELF header); the engine mounts one only
//! for a pod whose node architecture it knows (`engine::delivery`).
//!
//! Each object is content-addressed: named [`NAME_PREFIX`] + the first
//! [`NAME_HASH_CHARS`] hex digits of the binary's sha256, `immutable: true`,
//! the binary under `binaryData.`[`BINARY_KEY`], the labels of
//! [`LABEL_SELECTOR`] plus `app.kubernetes.io/version`, and the full sha256
//! in the [`SHA256_ANNOTATION`] annotation. A new binary gets a new name;
//! objects are never updated (nor deleted: objects of older binaries stay).
//!
//! [`SidecarConfigMaps`] keeps, from a watch across all namespaces (by label
//! and name, in pages of [`WATCH_PAGE_SIZE`] objects; each object's data is
//! hashed and dropped), the set of namespaces where the current object
//! exists, holds exactly this binary (its sha256) and is not being deleted
//! ([`Readiness`]). An object of that name with other content (made by
//! someone else ahead of the webhook) never counts, and is logged. When the
//! object is deleted from a namespace, it is created again at once (a pod
//! admitted just before would otherwise wait for its volume). Admission asks
//! [`SidecarConfigMaps::ready_name`]: a ready namespace gets the name;
//! any other gets `None` (the install init container), and
//! [`SidecarConfigMaps::schedule_creation`] creates the object in the
//! background, at most one creation per namespace at a time
//! and none for [`RETRY_AFTER`] after one that failed, doubled after each
//! further failure up to [`MAX_RETRY_AFTER`] ([`Attempts`]).
//!
//! Objects are created only in namespaces a [`WriteScope`] allows: those
//! the webhook's configured namespace selector selects, as a metadata-only
//! watch of Namespaces reports them ([`Selected`]), never `kube-system` or
//! the webhook's own namespace, and never because a request named a
//! namespace (anyone reaching the HTTPS port can post a review). A refused
//! creation sends nothing, and is counted and logged.
//!
//! With [`SidecarConfigMaps::provision`], the namespaces of the scope get
//! their object ahead of their first pod, and one that was deleted comes
//! back within [`PROVISION_INTERVAL`].
//!
//! Needs RBAC on `configmaps` across namespaces: `list`, `watch`, `create`;
//! on `namespaces`: `list`, `watch`.
//!
//! Files, one concern each: `binary.rs` (loading and naming the binary),
//! `object.rs` (the ConfigMap object), `controller.rs` (the watch, the
//! readiness answer and the creations), with the pure bookkeeping they use
//! in `readiness.rs`, `attempts.rs` and `selected.rs`; `scope.rs` (where
//! objects may be created).

mod attempts;
mod binary;
mod controller;
mod object;
mod readiness;
mod scope;
mod selected;

pub use attempts::Attempts;
pub use binary::{
    BINARY_KEY, MAX_BINARY_BYTES, NAME_HASH_CHARS, NAME_PREFIX, SidecarBinary,
    SidecarConfigMapError, elf_architecture, load_binaries,
};
pub use controller::{
    CREATE_TIMEOUT, FIELD_MANAGER, FOREIGN_CHECK_AFTER, MAX_RETRY_AFTER, PROVISION_INTERVAL,
    RETRY_AFTER, SidecarConfigMaps, WATCH_PAGE_SIZE,
};
pub use object::{
    ARCH_LABEL, COMPONENT, COMPONENT_LABEL, LABEL_SELECTOR, MANAGED_BY, MANAGED_BY_LABEL,
    SHA256_ANNOTATION, VERSION_LABEL, build_config_map,
};
pub use readiness::Readiness;
pub use scope::{ALWAYS_EXCLUDED, MAX_WARNED_NAMESPACES, Verdict, WARN_EVERY, WriteScope};
pub use selected::Selected;
