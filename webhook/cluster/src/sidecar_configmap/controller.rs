//! The controller: a watch of the sidecar-binary ConfigMaps across
//! namespaces, the answer to admission's "is it ready in this namespace?",
//! and the creation of missing objects in the background (see the parent
//! module's documentation for the whole behaviour).

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMetaExt;
use kube::runtime::{WatchStreamExt, watcher};

use super::attempts::Attempts;
use super::binary::{BINARY_KEY, SidecarBinary, sha256_hex};
use super::object::{LABEL_SELECTOR, build_config_map};
use super::readiness::Readiness;
use super::scope::WriteScope;
use crate::node_facts::NodeWatch;
use kube_prestop_engine::NodeArchitectures;
use kube_prestop_metrics::Metrics;
use kube_prestop_metrics::labels::CreationOutcome;

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

/// The namespaces whose sidecar-binary ConfigMap is ready, and the creation
/// of missing ones; or nothing at all ([`Self::disabled`]). Cheap to clone
/// (shared state).
#[derive(Clone)]
pub struct SidecarConfigMaps {
    inner: Option<Arc<Inner>>,
    /// [`Self::fixed`]: this name (and architecture) in every namespace, no
    /// cluster.
    fixed: Option<(Arc<str>, Arc<str>)>,
}

struct Inner {
    binary: SidecarBinary,
    readiness: RwLock<Readiness>,
    attempts: Mutex<Attempts>,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    metrics: Metrics,
    /// Where objects may be created.
    scope: WriteScope,
}

impl std::fmt::Debug for SidecarConfigMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SidecarConfigMaps");
        match (&self.fixed, &self.inner) {
            (Some((name, arch)), _) => d.field("fixed", name).field("architecture", arch),
            (None, None) => d.field("enabled", &false),
            (None, Some(inner)) => {
                let r = inner.readiness();
                d.field("name", &inner.binary.name())
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

    /// Names the ConfigMap `name`, holding the binary of `architecture`,
    /// for every namespace, without a cluster: nothing is watched or
    /// created (tests, and rendering pods for a cluster where the
    /// ConfigMaps are known to exist).
    pub fn fixed(name: &str, architecture: &str) -> Self {
        Self {
            inner: None,
            fixed: Some((Arc::from(name), Arc::from(architecture))),
        }
    }

    /// The architecture of the binary these ConfigMaps hold (`None` when
    /// disabled).
    pub fn architecture(&self) -> Option<&str> {
        match (&self.fixed, &self.inner) {
            (Some((_, arch)), _) => Some(arch),
            (None, inner) => inner.as_ref().map(|i| i.binary.architecture()),
        }
    }

    /// Watch the sidecar-binary ConfigMaps on `client` (whole objects, whose
    /// data is hashed and dropped; across namespaces, [`LABEL_SELECTOR`] and
    /// the name of `binary`) in a
    /// background task with kube-runtime's default backoff, and create
    /// missing ones on demand, only in the namespaces `scope` allows.
    /// Creations are counted in `metrics`. Must be
    /// called inside a tokio runtime (the tasks run on it); outside one,
    /// logs an error and returns [`Self::disabled`].
    pub fn start(
        client: kube::Client,
        binary: SidecarBinary,
        metrics: Metrics,
        scope: WriteScope,
    ) -> Self {
        let this = Self::unwatched(client, binary, metrics, scope);
        if let Some(inner) = &this.inner {
            Inner::watch(inner);
        }
        this
    }

    /// [`Self::start`] without the watch: nothing is ready or synced until
    /// events are fed to `observe` (tests).
    fn unwatched(
        client: kube::Client,
        binary: SidecarBinary,
        metrics: Metrics,
        scope: WriteScope,
    ) -> Self {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Self {
                fixed: None,
                inner: Some(Arc::new(Inner {
                    readiness: RwLock::new(Readiness::new(binary.name().to_owned())),
                    attempts: Mutex::new(Attempts::new(RETRY_AFTER, MAX_RETRY_AFTER)),
                    binary,
                    client,
                    runtime,
                    metrics,
                    scope,
                })),
            },
            Err(e) => {
                tracing::error!(error = %e, "sidecar-binary ConfigMaps need a tokio runtime; disabled");
                Self::disabled()
            }
        }
    }

    /// The ConfigMap name to mount for a pod in `namespace`: `Some` when the
    /// object exists there (per the watch, or created by this process),
    /// `None` otherwise. No side effect: one read lock.
    pub fn ready_name(&self, namespace: &str) -> Option<String> {
        if let Some((name, _)) = &self.fixed {
            return Some(name.to_string());
        }
        let inner = self.inner.as_ref()?;
        inner
            .readiness()
            .is_ready(namespace)
            .then(|| inner.binary.name().to_owned())
    }

    /// Schedule the creation of the object in `namespace` in the background
    /// when it is missing there, the watch has listed, and the write scope
    /// allows the namespace (selected by the namespace selector as its
    /// watch reports, not excluded; otherwise nothing is sent, and the
    /// refusal is counted and logged); deduplicated, not within
    /// [`RETRY_AFTER`] of a failed one. `namespace` is typically the
    /// caller's word (an admission request's): it never decides a write
    /// alone. Never blocks on I/O: read locks, and on a miss one mutex and
    /// at most one task spawn.
    pub fn schedule_creation(&self, namespace: &str) {
        let Some(inner) = self.inner.as_ref() else {
            return;
        };
        let (ready, synced) = {
            let r = inner.readiness();
            (r.is_ready(namespace), r.is_synced())
        };
        // Before the first list every namespace looks empty: creating then
        // would send one 409-bound POST of the whole binary per namespace.
        if !ready && synced {
            Inner::schedule(inner, namespace);
        }
    }

    /// Create the object ahead of pods in every namespace of the write
    /// scope (the namespaces its selector selects, as its watch reports
    /// them, e.g. the webhook configuration's `namespaceSelector` written
    /// as `kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin
    /// (kube-system,kube-prestop)`): a creation is scheduled as soon as a
    /// namespace appears there, and every [`PROVISION_INTERVAL`] each such
    /// namespace without the object is scheduled again (subject to the same
    /// deduplication and [`RETRY_AFTER`] as admission's), as long as some
    /// node of the cluster has this binary's architecture (per `nodes`: a
    /// namespace gets no ConfigMap its pods could never mount). Nothing
    /// happens when disabled.
    pub fn provision(&self, nodes: NodeWatch) {
        let Some(inner) = &self.inner else { return };
        let arch = inner.binary.architecture().to_owned();
        let wanted = move || match nodes.summary().architectures {
            NodeArchitectures::Known(set) => set.contains(&arch),
            NodeArchitectures::Unknown(_) => false,
        };
        let scope = inner.scope.clone();
        let mut appeared = scope.subscribe();
        let this = self.clone();
        inner.runtime.spawn(async move {
            let mut every = tokio::time::interval(PROVISION_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    changed = appeared.changed() => {
                        if changed.is_err() {
                            // The scope is gone: nothing will appear again.
                            every.tick().await;
                        }
                    }
                }
                if !wanted() {
                    continue;
                }
                for namespace in scope.selected_names() {
                    this.schedule_creation(&namespace);
                }
            }
        });
    }

    /// The name of the ConfigMaps (`None` when disabled).
    pub fn name(&self) -> Option<&str> {
        match (&self.fixed, &self.inner) {
            (Some((name, _)), _) => Some(name),
            (None, inner) => inner.as_ref().map(|i| i.binary.name()),
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
            .fields(&format!("metadata.name={}", this.binary.name()))
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

    /// Whether `cm` holds exactly this binary and is immutable, as the
    /// webhook makes it. One that can be updated could have its binary
    /// replaced under every pod that mounts it (the kubelet refreshes a
    /// mounted ConfigMap's files in running pods, unless it is immutable or
    /// mounted by `subPath`: Kubernetes docs, "ConfigMaps", "Mounted
    /// ConfigMaps are updated automatically"), so it never counts, even
    /// with the right content now.
    fn holds_binary(&self, cm: &ConfigMap) -> bool {
        cm.immutable == Some(true)
            && cm
                .binary_data
                .as_ref()
                .and_then(|d| d.get(BINARY_KEY))
                .is_some_and(|b| sha256_hex(&b.0) == self.binary.sha256())
    }

    /// Fold one event of the watch in: objects that do not hold this binary
    /// count as absent (and are logged); a deleted object that counted is
    /// created again.
    fn observe(this: &Arc<Self>, event: &watcher::Event<ConfigMap>) {
        let meta = |cm: &ConfigMap| cm.metadata.clone().into_response_partial::<ConfigMap>();
        let foreign = |cm: &ConfigMap| {
            tracing::warn!(
                namespace = cm.metadata.namespace.as_deref().unwrap_or(""),
                name = %this.binary.name(),
                sha256 = %this.binary.sha256(),
                "a ConfigMap of this name does not hold the sidecar binary (another sha256), or is not immutable; pods there get the install init container; delete it to let the webhook make its own"
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
                    tracing::info!(name = %this.binary.name(), namespaces = r.len(), "sidecar-binary ConfigMaps listed");
                } else {
                    tracing::debug!(name = %this.binary.name(), namespaces = r.len(), "sidecar-binary ConfigMaps relisted");
                }
            }
            deleted.filter(|_| was_ready && r.is_synced())
        };
        // Pods admitted with it may not have mounted it yet: make it again
        // (in a namespace being deleted, the API server refuses; see
        // `create`).
        if let Some(namespace) = recreate {
            tracing::info!(%namespace, name = %this.binary.name(), "the sidecar-binary ConfigMap was deleted; creating it again");
            Self::schedule(this, &namespace);
        }
    }

    /// Start a creation in `namespace` if the write scope allows it (the
    /// one way to a create: admission's misses, re-creations after a
    /// deletion and provisioning all come through here).
    fn schedule(this: &Arc<Self>, namespace: &str) {
        if !this.scope.permit(namespace, this.binary.name()) {
            return;
        }
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
        let name = self.binary.name();
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
#[path = "controller_tests.rs"]
mod tests;
