//! The ConfigMaps that carry the static sidecar binary, one per namespace
//! where pods are injected, so that the sidecar can run the binary from a
//! ConfigMap volume instead of an install init container copying it into an
//! emptyDir first.
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
//! [`SidecarConfigMaps::config_map_for`]: a ready namespace gets the name;
//! any other gets `None` (the install init container), and the object is
//! created in the background, at most one creation per namespace at a time
//! and none for [`RETRY_AFTER`] after one that failed, doubled after each
//! further failure up to [`MAX_RETRY_AFTER`] ([`Attempts`]).
//!
//! With [`SidecarConfigMaps::provision`], the namespaces the webhook
//! configuration selects get their object ahead of their first pod
//! ([`Selected`], from a metadata-only watch on Namespaces), and one that
//! was deleted comes back within [`PROVISION_INTERVAL`].
//!
//! Needs RBAC on `configmaps` across namespaces: `list`, `watch`, `create`;
//! and for [`SidecarConfigMaps::provision`], `namespaces`: `list`, `watch`.

mod attempts;
mod readiness;
mod selected;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::{WatchStreamExt, watcher};

pub use attempts::Attempts;
pub use readiness::Readiness;
pub use selected::Selected;

use crate::metrics::Metrics;
use crate::metrics::labels::CreationOutcome;

/// Prefix of the ConfigMap name; the rest is [`NAME_HASH_CHARS`] lowercase
/// hex digits of the binary's sha256 (33 characters in all: a valid DNS
/// subdomain and DNS label).
pub const NAME_PREFIX: &str = "kube-prestop-sidecar-";

/// How many leading hex digits of the sha256 the name carries (48 bits).
pub const NAME_HASH_CHARS: usize = 12;

/// The `binaryData` key holding the binary (the file name in the volume):
/// the contract's, which the engine mounts.
pub const BINARY_KEY: &str = kube_prestop_sidecar::contract::BINARY_CONFIG_MAP_KEY;

/// Largest accepted binary, in bytes: 1 MiB, the API server's limit on a
/// ConfigMap's data.
pub const MAX_BINARY_BYTES: u64 = 1_048_576;

/// Annotation holding the full sha256 of the binary, 64 lowercase hex digits.
pub const SHA256_ANNOTATION: &str = "kube-prestop.io/sha256";

/// Label key naming the manager of the objects.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "kube-prestop";
/// Label key naming the objects' role.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`COMPONENT_LABEL`].
pub const COMPONENT: &str = "sidecar-binary";
/// Label key holding the webhook version that created the object
/// (informational, not part of the selector).
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// Label selector of the watch: both labels every created object carries.
pub const LABEL_SELECTOR: &str =
    "app.kubernetes.io/managed-by=kube-prestop,app.kubernetes.io/component=sidecar-binary";

/// How long no creation is attempted in a namespace after an attempt that
/// failed (or found an object that the watch had not reported); doubled
/// after each further one in a row, up to [`MAX_RETRY_AFTER`].
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Longest wait between two creation attempts in one namespace (16 min).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(16 * 60);

/// Longest wait for the API server's answer to one create; past it the
/// attempt counts as failed.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Field manager of the creates.
pub const FIELD_MANAGER: &str = "kube-prestop-webhook";

/// Objects per page of the watch's (re)lists: each is up to 1 MiB, so a
/// page bounds the memory a relist takes.
pub const WATCH_PAGE_SIZE: u32 = 10;

/// After a create found the name taken (409), how long the watch has to
/// report a matching object before the webhook logs that the object there
/// is not its own.
pub const FOREIGN_CHECK_AFTER: Duration = Duration::from_secs(10);

/// How often [`SidecarConfigMaps::provision`] looks for selected namespaces
/// without the object (besides at once when a namespace appears or
/// changes).
pub const PROVISION_INTERVAL: Duration = Duration::from_secs(5);

/// A sidecar binary that cannot be served from a ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum SidecarConfigMapError {
    /// The file could not be opened or read.
    #[error("sidecar binary {path}: {source}")]
    Read {
        /// The file given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty.
    #[error("sidecar binary {path} is empty")]
    Empty {
        /// The file given.
        path: String,
    },
    /// The file exceeds [`MAX_BINARY_BYTES`].
    #[error(
        "sidecar binary {path} is {size} bytes, over the ConfigMap limit of {MAX_BINARY_BYTES} bytes (1 MiB)"
    )]
    TooLarge {
        /// The file given.
        path: String,
        /// Its size in bytes (at least [`MAX_BINARY_BYTES`] + 1).
        size: u64,
    },
}

/// The static sidecar binary in memory with its sha256 and ConfigMap name.
/// Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct SidecarBinary {
    bytes: Arc<[u8]>,
    sha256: String,
    name: String,
}

impl std::fmt::Debug for SidecarBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarBinary")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl SidecarBinary {
    /// Read the binary at `path`: 1 to [`MAX_BINARY_BYTES`] bytes (at most
    /// that plus one byte is read). Errors: unreadable, empty, too large.
    pub fn load(path: &Path) -> Result<Self, SidecarConfigMapError> {
        let shown = || path.display().to_string();
        let read_err = |source| SidecarConfigMapError::Read {
            path: shown(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(MAX_BINARY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > MAX_BINARY_BYTES {
            let size = std::fs::metadata(path).map_or(read, |m| m.len().max(read));
            return Err(SidecarConfigMapError::TooLarge {
                path: shown(),
                size,
            });
        }
        if bytes.is_empty() {
            return Err(SidecarConfigMapError::Empty { path: shown() });
        }
        Ok(Self::from_bytes(bytes))
    }

    /// Hash `bytes` and name the object (no size checks: [`Self::load`]
    /// does them).
    fn from_bytes(bytes: Vec<u8>) -> Self {
        let sha256 = sha256_hex(&bytes);
        // 64 ASCII hex digits: the prefix always exists.
        let short = sha256.get(..NAME_HASH_CHARS).unwrap_or(&sha256);
        let name = format!("{NAME_PREFIX}{short}");
        Self {
            bytes: bytes.into(),
            sha256,
            name,
        }
    }

    /// The ConfigMap name: [`NAME_PREFIX`] + [`NAME_HASH_CHARS`] hex digits.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sha256 of the bytes, 64 lowercase hex digits.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The binary's size in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The binary itself.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The sha256 of `bytes` as 64 lowercase hex digits.
fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The ConfigMap to create in `namespace` for `binary` (see the module
/// documentation for its shape). Copies the bytes.
pub fn build_config_map(binary: &SidecarBinary, namespace: &str) -> ConfigMap {
    let labels = [
        (MANAGED_BY_LABEL, MANAGED_BY),
        (COMPONENT_LABEL, COMPONENT),
        (VERSION_LABEL, env!("CARGO_PKG_VERSION")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(binary.name.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                SHA256_ANNOTATION.to_owned(),
                binary.sha256.clone(),
            )])),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        binary_data: Some(BTreeMap::from([(
            BINARY_KEY.to_owned(),
            ByteString(binary.bytes.to_vec()),
        )])),
        data: None,
    }
}

/// The namespaces whose sidecar-binary ConfigMap is ready, and the creation
/// of missing ones; or nothing at all ([`Self::disabled`]). Cheap to clone
/// (shared state).
#[derive(Clone)]
pub struct SidecarConfigMaps {
    inner: Option<Arc<Inner>>,
    /// [`Self::fixed`]: this name in every namespace, no cluster.
    fixed: Option<Arc<str>>,
}

struct Inner {
    binary: SidecarBinary,
    readiness: RwLock<Readiness>,
    attempts: Mutex<Attempts>,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    metrics: Metrics,
}

impl std::fmt::Debug for SidecarConfigMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SidecarConfigMaps");
        match (&self.fixed, &self.inner) {
            (Some(name), _) => d.field("fixed", name),
            (None, None) => d.field("enabled", &false),
            (None, Some(inner)) => {
                let r = inner.readiness();
                d.field("name", &inner.binary.name)
                    .field("synced", &r.is_synced())
                    .field("ready_namespaces", &r.len())
            }
        }
        .finish()
    }
}

impl SidecarConfigMaps {
    /// Never names a ConfigMap, never creates one.
    pub fn disabled() -> Self {
        Self {
            inner: None,
            fixed: None,
        }
    }

    /// Names the ConfigMap `name` for every namespace, without a cluster:
    /// nothing is watched or created (tests, and rendering pods for a
    /// cluster where the ConfigMaps are known to exist).
    pub fn fixed(name: &str) -> Self {
        Self {
            inner: None,
            fixed: Some(Arc::from(name)),
        }
    }

    /// Watch the sidecar-binary ConfigMaps on `client` (whole objects, whose
    /// data is hashed and dropped; across namespaces, [`LABEL_SELECTOR`] and
    /// the name of `binary`) in a
    /// background task with kube-runtime's default backoff, and create
    /// missing ones on demand. Creations are counted in `metrics`. Must be
    /// called inside a tokio runtime (the tasks run on it); outside one,
    /// logs an error and returns [`Self::disabled`].
    pub fn start(client: kube::Client, binary: SidecarBinary, metrics: Metrics) -> Self {
        let this = Self::unwatched(client, binary, metrics);
        if let Some(inner) = &this.inner {
            Inner::watch(inner);
        }
        this
    }

    /// [`Self::start`] without the watch: nothing is ready or synced until
    /// events are fed to `observe` (tests).
    fn unwatched(client: kube::Client, binary: SidecarBinary, metrics: Metrics) -> Self {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Self {
                fixed: None,
                inner: Some(Arc::new(Inner {
                    readiness: RwLock::new(Readiness::new(binary.name.clone())),
                    attempts: Mutex::new(Attempts::new(RETRY_AFTER, MAX_RETRY_AFTER)),
                    binary,
                    client,
                    runtime,
                    metrics,
                })),
            },
            Err(e) => {
                tracing::error!(error = %e, "sidecar-binary ConfigMaps need a tokio runtime; disabled");
                Self::disabled()
            }
        }
    }

    /// The ConfigMap name to mount for a pod in `namespace`: `Some` when the
    /// object exists there (per the watch, or created by this process).
    /// Otherwise `None`, and unless `dry_run` (which never creates anything)
    /// a creation in `namespace` is scheduled in the background once the
    /// watch has listed (deduplicated, not within [`RETRY_AFTER`] of a
    /// failed one). Never blocks on I/O: one read lock, and on a miss one
    /// mutex and at most one task spawn.
    pub fn config_map_for(&self, namespace: &str, dry_run: bool) -> Option<String> {
        if let Some(name) = &self.fixed {
            return Some(name.to_string());
        }
        let inner = self.inner.as_ref()?;
        let (ready, synced) = {
            let r = inner.readiness();
            (r.is_ready(namespace), r.is_synced())
        };
        if ready {
            return Some(inner.binary.name.clone());
        }
        // Before the first list every namespace looks empty: creating then
        // would send one 409-bound POST of the whole binary per namespace.
        if !dry_run && synced {
            Inner::schedule(inner, namespace);
        }
        None
    }

    /// Create the object ahead of pods in every namespace matching
    /// `namespace_selector` (a label selector, e.g. the webhook
    /// configuration's `namespaceSelector` written as
    /// `kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin
    /// (kube-system,kube-prestop)`): a metadata-only watch on Namespaces
    /// schedules a creation as soon as a namespace matches, and every
    /// [`PROVISION_INTERVAL`] each matching namespace without the object is
    /// scheduled again (subject to the same deduplication and
    /// [`RETRY_AFTER`] as admission's). Nothing happens when disabled.
    pub fn provision(&self, namespace_selector: &str) {
        let Some(inner) = &self.inner else { return };
        let selected = Arc::new(Mutex::new(Selected::new()));
        let api = kube::Api::<PartialObjectMeta<Namespace>>::all(inner.client.clone());
        let stream =
            watcher(api, watcher::Config::default().labels(namespace_selector)).default_backoff();
        let (this, watched) = (self.clone(), Arc::clone(&selected));
        inner.runtime.spawn(async move {
            stream
                .for_each(|event| {
                    match event {
                        Ok(event) => {
                            let appeared = watched
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .apply(&event);
                            if let Some(namespace) = appeared {
                                this.config_map_for(&namespace, false);
                            }
                        }
                        Err(e) => tracing::warn!(
                            error = %e,
                            "namespace watch error (sidecar-binary ConfigMaps); retrying with backoff"
                        ),
                    }
                    std::future::ready(())
                })
                .await;
        });
        let this = self.clone();
        inner.runtime.spawn(async move {
            let mut every = tokio::time::interval(PROVISION_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let names: Vec<String> = selected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .names()
                    .map(str::to_owned)
                    .collect();
                for namespace in names {
                    this.config_map_for(&namespace, false);
                }
            }
        });
    }

    /// The name of the ConfigMaps (`None` when disabled).
    pub fn name(&self) -> Option<&str> {
        match (&self.fixed, &self.inner) {
            (Some(name), _) => Some(name),
            (None, inner) => inner.as_ref().map(|i| i.binary.name.as_str()),
        }
    }

    /// Whether the watch has completed its initial list (always true when
    /// disabled).
    pub fn is_synced(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|inner| inner.readiness().is_synced())
    }
}

impl Inner {
    /// Spawn the watch feeding [`Self::observe`].
    fn watch(this: &Arc<Self>) {
        let api = kube::Api::<ConfigMap>::all(this.client.clone());
        let config = watcher::Config::default()
            .labels(LABEL_SELECTOR)
            .fields(&format!("metadata.name={}", this.binary.name))
            .page_size(WATCH_PAGE_SIZE);
        let stream = watcher(api, config).default_backoff();
        let watching = Arc::clone(this);
        this.runtime.spawn(async move {
            stream
                .for_each(|event| {
                    match event {
                        Ok(event) => Self::observe(&watching, &event),
                        Err(e) => tracing::warn!(
                            error = %e,
                            "sidecar-binary ConfigMap watch error; retrying with backoff"
                        ),
                    }
                    std::future::ready(())
                })
                .await;
        });
    }

    fn readiness(&self) -> std::sync::RwLockReadGuard<'_, Readiness> {
        self.readiness
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The object is there after all: past failures in its namespace no
    /// longer delay an answer to its deletion.
    fn forget_attempts(&self, cm: &ConfigMap) {
        if let Some(namespace) = cm.metadata.namespace.as_deref() {
            self.attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(namespace);
        }
    }

    /// Whether `cm` holds exactly this binary.
    fn holds_binary(&self, cm: &ConfigMap) -> bool {
        cm.binary_data
            .as_ref()
            .and_then(|d| d.get(BINARY_KEY))
            .is_some_and(|b| sha256_hex(&b.0) == self.binary.sha256)
    }

    /// Fold one event of the watch in: objects that do not hold this binary
    /// count as absent (and are logged); a deleted object that counted is
    /// created again.
    fn observe(this: &Arc<Self>, event: &watcher::Event<ConfigMap>) {
        let meta = |cm: &ConfigMap| cm.metadata.clone().into_response_partial::<ConfigMap>();
        let foreign = |cm: &ConfigMap| {
            tracing::warn!(
                namespace = cm.metadata.namespace.as_deref().unwrap_or(""),
                name = %this.binary.name,
                sha256 = %this.binary.sha256,
                "a ConfigMap of this name does not hold the sidecar binary (another sha256); pods there get the install init container; delete it to let the webhook make its own"
            );
        };
        let (event, deleted) = match event {
            watcher::Event::Init => (watcher::Event::Init, None),
            watcher::Event::InitDone => (watcher::Event::InitDone, None),
            watcher::Event::InitApply(cm) => {
                if !this.holds_binary(cm) {
                    foreign(cm);
                    return;
                }
                this.forget_attempts(cm);
                (watcher::Event::InitApply(meta(cm)), None)
            }
            watcher::Event::Apply(cm) if cm.metadata.deletion_timestamp.is_none() => {
                if this.holds_binary(cm) {
                    this.forget_attempts(cm);
                    (watcher::Event::Apply(meta(cm)), None)
                } else {
                    foreign(cm);
                    (watcher::Event::Delete(meta(cm)), None)
                }
            }
            watcher::Event::Apply(cm) | watcher::Event::Delete(cm) => (
                watcher::Event::Delete(meta(cm)),
                cm.metadata.namespace.clone(),
            ),
        };
        let recreate = {
            let mut r = this
                .readiness
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let first = !r.is_synced();
            let was_ready = deleted.as_deref().is_some_and(|ns| r.is_ready(ns));
            r.apply(&event);
            if matches!(event, watcher::Event::InitDone) {
                if first {
                    tracing::info!(name = %this.binary.name, namespaces = r.len(), "sidecar-binary ConfigMaps listed");
                } else {
                    tracing::debug!(name = %this.binary.name, namespaces = r.len(), "sidecar-binary ConfigMaps relisted");
                }
            }
            deleted.filter(|_| was_ready && r.is_synced())
        };
        // Pods admitted with it may not have mounted it yet: make it again
        // (in a namespace being deleted, the API server refuses; see
        // `create`).
        if let Some(namespace) = recreate {
            tracing::info!(%namespace, name = %this.binary.name, "the sidecar-binary ConfigMap was deleted; creating it again");
            Self::schedule(this, &namespace);
        }
    }

    fn schedule(this: &Arc<Self>, namespace: &str) {
        let start = this
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_start(namespace, Instant::now());
        if start {
            let inner = Arc::clone(this);
            let namespace = namespace.to_owned();
            this.runtime
                .spawn(async move { inner.create(namespace).await });
        }
    }

    /// One creation attempt; records and logs its outcome.
    async fn create(&self, namespace: String) {
        let (outcome, error) = self.post(&namespace).await;
        if outcome == CreationOutcome::Created {
            // Ready before the attempt ends: no moment with neither.
            self.readiness
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .mark_ready(&namespace);
        }
        let wait = self
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finish(&namespace, outcome, Instant::now());
        self.metrics.record_sidecar_configmap_creation(outcome);
        let name = &self.binary.name;
        let retry_in_seconds = wait.map(|w| w.as_secs());
        match (outcome, error) {
            (CreationOutcome::Created, _) => {
                tracing::info!(%namespace, name, "created the sidecar-binary ConfigMap");
            }
            (CreationOutcome::Exists, _) => {
                tracing::debug!(
                    %namespace,
                    name,
                    retry_in_seconds,
                    "the sidecar-binary ConfigMap already exists"
                );
                // Another replica's, normally: the watch reports it within
                // moments. If it never does, the object there is not ours.
                tokio::time::sleep(FOREIGN_CHECK_AFTER).await;
                if !self.readiness().is_ready(&namespace) {
                    tracing::warn!(
                        %namespace,
                        name,
                        retry_in_seconds,
                        selector = LABEL_SELECTOR,
                        "a ConfigMap of this name exists but is not the webhook's (without its labels, or with other content); pods there get the install init container; delete it to let the webhook make its own"
                    );
                }
            }
            (CreationOutcome::Error, Some(error)) if error.contains("being terminated") => {
                tracing::debug!(%namespace, name, error, "namespace is being deleted: no sidecar-binary ConfigMap");
            }
            (CreationOutcome::Error, error) => tracing::warn!(
                %namespace,
                name,
                error = error.as_deref().unwrap_or(""),
                retry_in_seconds,
                "cannot create the sidecar-binary ConfigMap; pods there use the install init container"
            ),
        }
    }

    /// One create call: its outcome, and for an error, what went wrong.
    async fn post(&self, namespace: &str) -> (CreationOutcome, Option<String>) {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), namespace);
        let object = build_config_map(&self.binary, namespace);
        let params = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        };
        match tokio::time::timeout(CREATE_TIMEOUT, api.create(&params, &object)).await {
            Ok(Ok(_)) => (CreationOutcome::Created, None),
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                (CreationOutcome::Exists, None)
            }
            Ok(Err(e)) => (CreationOutcome::Error, Some(e.to_string())),
            Err(_) => (
                CreationOutcome::Error,
                Some(format!("no answer within {} s", CREATE_TIMEOUT.as_secs())),
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
