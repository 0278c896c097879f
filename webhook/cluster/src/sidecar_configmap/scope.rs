//! Where the webhook may create its sidecar-binary ConfigMaps: only in
//! namespaces its configured namespace selector (`--namespace-selector`,
//! the webhook configuration's `namespaceSelector`) selects, as a
//! metadata-only watch of Namespaces reports them, and never in the
//! namespaces excluded whatever the selector says (`kube-system`, the
//! webhook's own). The namespace of an admission request is the caller's
//! word: anyone who reaches the HTTPS port can post a review naming any
//! namespace, so the request alone never decides a write.
//!
//! A namespace not (yet) seen as selected gets no write: before the watch's
//! first list nothing is selected. Each refusal is counted
//! (`kube_prestop_sidecar_configmap_refusals_total`) and logged at warn at
//! most once per namespace every [`WARN_EVERY`] (for at most
//! [`MAX_WARNED_NAMESPACES`] namespaces at a time, each name kept and
//! logged cut to 63 characters and escaped: names in a crafted review cost
//! no memory past that bound, and write no log line of their own).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};

use super::selected::Selected;
use kube_prestop_engine::shown::{MAX_SHOWN_NAME_CHARS, Shown, shown};
use kube_prestop_metrics::Metrics;
use kube_prestop_metrics::labels::Refusal;

/// Namespaces never written into, whatever the selector (the webhook's own
/// namespace is added by the caller).
pub const ALWAYS_EXCLUDED: [&str; 1] = ["kube-system"];

/// Shortest time between two warnings about refused writes in one
/// namespace.
pub const WARN_EVERY: Duration = Duration::from_secs(10 * 60);

/// Most namespaces whose last warning time is kept; past it, refusals in
/// further namespaces are counted but not logged until entries expire.
pub const MAX_WARNED_NAMESPACES: usize = 4096;

/// Whether a namespace may get the sidecar-binary ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Selected by the selector and not excluded.
    Allowed,
    /// Refused, for this reason.
    Refused(Refusal),
}

/// The namespaces the webhook may write into. Cheap to clone (shared
/// state).
#[derive(Clone)]
pub struct WriteScope {
    inner: Arc<Inner>,
}

struct Inner {
    selector: String,
    excluded: BTreeSet<String>,
    selected: RwLock<Selected>,
    /// Bumped whenever a selected namespace appears or changes (for
    /// [`super::SidecarConfigMaps::provision`]).
    appeared: tokio::sync::watch::Sender<u64>,
    warned: Mutex<WarnLimiter>,
    metrics: Metrics,
}

impl std::fmt::Debug for WriteScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteScope")
            .field("selector", &self.inner.selector)
            .field("excluded", &self.inner.excluded)
            .field("selected", &self.selected_names().len())
            .finish()
    }
}

impl WriteScope {
    /// Namespaces matching the label selector `selector` (e.g.
    /// `kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin
    /// (kube-system,kube-prestop)`), from a metadata-only watch of
    /// Namespaces on `client` in a background task (kube-runtime's default
    /// backoff; needs RBAC `list`, `watch` on `namespaces`), except
    /// [`ALWAYS_EXCLUDED`] and `excluded`. Refusals are counted in
    /// `metrics`. Must be called inside a tokio runtime.
    pub fn start(
        client: kube::Client,
        selector: &str,
        excluded: impl IntoIterator<Item = String>,
        metrics: Metrics,
    ) -> Self {
        let this = Self::unwatched(selector, excluded, metrics);
        let api = kube::Api::<PartialObjectMeta<Namespace>>::all(client);
        let stream = watcher(api, watcher::Config::default().labels(selector)).default_backoff();
        let scope = this.clone();
        tokio::spawn(async move {
            stream
                .for_each(|event| {
                    match event {
                        Ok(event) => scope.apply(&event),
                        Err(e) => tracing::warn!(
                            error = %e,
                            "namespace watch error (where sidecar-binary ConfigMaps may be created); retrying with backoff"
                        ),
                    }
                    std::future::ready(())
                })
                .await;
        });
        this
    }

    /// [`Self::start`] without the watch: nothing is selected until events
    /// are fed to [`Self::apply`] (tests, and callers that watch
    /// themselves).
    pub fn unwatched(
        selector: &str,
        excluded: impl IntoIterator<Item = String>,
        metrics: Metrics,
    ) -> Self {
        let excluded = ALWAYS_EXCLUDED
            .iter()
            .map(|s| (*s).to_owned())
            .chain(excluded)
            .filter(|s| !s.is_empty())
            .collect();
        let (appeared, _) = tokio::sync::watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                selector: selector.to_owned(),
                excluded,
                selected: RwLock::new(Selected::new()),
                appeared,
                warned: Mutex::new(WarnLimiter::new(WARN_EVERY, MAX_WARNED_NAMESPACES)),
                metrics,
            }),
        }
    }

    /// Fold one event of the Namespace watch in.
    pub fn apply(&self, event: &watcher::Event<PartialObjectMeta<Namespace>>) {
        let appeared = self
            .inner
            .selected
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
        if matches!(event, watcher::Event::InitDone) {
            tracing::info!(
                selector = %self.inner.selector,
                namespaces = self.selected_names().len(),
                "namespaces where sidecar-binary ConfigMaps may be created listed"
            );
        }
        if appeared.is_some() || matches!(event, watcher::Event::InitDone) {
            self.inner.appeared.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The label selector watched.
    pub fn selector(&self) -> &str {
        &self.inner.selector
    }

    /// Whether `namespace` may be written now. No side effect.
    pub fn verdict(&self, namespace: &str) -> Verdict {
        if self.inner.excluded.contains(namespace) {
            return Verdict::Refused(Refusal::Excluded);
        }
        let selected = self
            .inner
            .selected
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(namespace);
        if selected {
            Verdict::Allowed
        } else {
            Verdict::Refused(Refusal::Unselected)
        }
    }

    /// [`Self::verdict`], and for a refusal: counted, and logged at warn
    /// (at most once per namespace every [`WARN_EVERY`]). `true` when the
    /// caller may create `name` in `namespace`.
    pub fn permit(&self, namespace: &str, name: &str) -> bool {
        let refusal = match self.verdict(namespace) {
            Verdict::Allowed => return true,
            Verdict::Refused(refusal) => refusal,
        };
        self.inner.metrics.record_sidecar_configmap_refusal(refusal);
        // The caller's word: shown cut and escaped, in the log line and as
        // the limiter's key (a namespace name is at most 63 characters; a
        // crafted one of megabytes is kept as its start and length).
        let shown_namespace = shown_namespace(namespace);
        let warn = self
            .inner
            .warned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .should_warn(&shown_namespace.to_string(), Instant::now());
        if warn {
            tracing::warn!(
                namespace = %shown_namespace,
                name,
                reason = refusal.label(),
                selector = %self.inner.selector,
                "not creating the sidecar-binary ConfigMap: the namespace is not selected by --namespace-selector (as the webhook's namespace watch sees it) or is excluded; a review for it did not come from the webhook configuration, or the namespace changed; its pods get the install init container (logged once per namespace every 10 min)"
            );
        }
        false
    }

    /// The selected namespaces that are not excluded, sorted.
    pub fn selected_names(&self) -> Vec<String> {
        self.inner
            .selected
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .names()
            .filter(|n| !self.inner.excluded.contains(*n))
            .map(str::to_owned)
            .collect()
    }

    /// A receiver that changes whenever a selected namespace appears or
    /// changes, or a (re)list completes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.appeared.subscribe()
    }
}

/// A namespace named in a review, as the refusal's log line and the
/// [`WarnLimiter`] show it: [`shown`] to [`MAX_SHOWN_NAME_CHARS`] (a
/// namespace's name is a DNS label), so a crafted name of megabytes costs
/// neither a line nor a limiter entry of that size.
fn shown_namespace(namespace: &str) -> Shown<'_> {
    shown(namespace, MAX_SHOWN_NAME_CHARS)
}

/// When to warn again about one namespace: pure, the caller passes the
/// time. Keeps at most `capacity` namespaces; when full, expired entries are
/// dropped, and if none expired the namespace is not warned about (the
/// metric still counts it).
#[derive(Debug)]
struct WarnLimiter {
    every: Duration,
    capacity: usize,
    last: HashMap<String, Instant>,
}

impl WarnLimiter {
    fn new(every: Duration, capacity: usize) -> Self {
        Self {
            every,
            capacity,
            last: HashMap::new(),
        }
    }

    fn should_warn(&mut self, namespace: &str, now: Instant) -> bool {
        if let Some(last) = self.last.get_mut(namespace) {
            if now.duration_since(*last) < self.every {
                return false;
            }
            *last = now;
            return true;
        }
        if self.last.len() >= self.capacity {
            let every = self.every;
            self.last
                .retain(|_, last| now.duration_since(*last) < every);
            if self.last.len() >= self.capacity {
                return false;
            }
        }
        self.last.insert(namespace.to_owned(), now);
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    pub(crate) fn ns(name: &str) -> PartialObjectMeta<Namespace> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    #[tokio::test]
    async fn only_listed_selected_and_not_excluded_namespaces_are_allowed() {
        let metrics = Metrics::new();
        let scope = WriteScope::unwatched(
            "kube-prestop.io/inject=enabled",
            ["kube-prestop".to_owned()],
            metrics.clone(),
        );
        // Before the first list nothing is selected.
        assert_eq!(
            scope.verdict("team-a"),
            Verdict::Refused(Refusal::Unselected)
        );
        scope.apply(&watcher::Event::Init);
        scope.apply(&watcher::Event::InitApply(ns("team-a")));
        // A selector that wrongly matches an excluded namespace.
        scope.apply(&watcher::Event::InitApply(ns("kube-system")));
        scope.apply(&watcher::Event::InitDone);
        assert_eq!(scope.verdict("team-a"), Verdict::Allowed);
        assert!(scope.permit("team-a", "cm"));
        assert_eq!(
            scope.verdict("kube-system"),
            Verdict::Refused(Refusal::Excluded)
        );
        assert_eq!(
            scope.verdict("kube-prestop"),
            Verdict::Refused(Refusal::Excluded)
        );
        assert_eq!(scope.selected_names(), ["team-a"]);
        assert!(!scope.permit("other", "cm"));
        assert!(!scope.permit("other", "cm"));
        assert!(!scope.permit("kube-system", "cm"));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"kube_prestop_sidecar_configmap_refusals_total{reason="unselected"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"kube_prestop_sidecar_configmap_refusals_total{reason="excluded"} 1"#),
            "{text}"
        );
        // Unlabelled: the selector watch reports a deletion.
        scope.apply(&watcher::Event::Delete(ns("team-a")));
        assert_eq!(
            scope.verdict("team-a"),
            Verdict::Refused(Refusal::Unselected)
        );
    }

    #[test]
    fn warnings_are_limited_per_namespace_and_in_number() {
        let t0 = Instant::now();
        let every = Duration::from_secs(600);
        let mut w = WarnLimiter::new(every, 2);
        assert!(w.should_warn("a", t0));
        assert!(!w.should_warn("a", t0 + Duration::from_secs(1)));
        assert!(w.should_warn("b", t0));
        // Full, nothing expired: not logged.
        assert!(!w.should_warn("c", t0 + Duration::from_secs(2)));
        // Expired entries make room; "a" warns again after the period.
        assert!(w.should_warn("a", t0 + every));
        assert!(w.should_warn("c", t0 + every + every));
        assert!(w.last.len() <= 2);
    }

    #[test]
    fn a_crafted_namespace_is_shown_cut_and_escaped() {
        assert_eq!(shown_namespace("team-a").to_string(), "team-a");
        let huge = format!("x\n{}", "y".repeat(3_000_000));
        let key = shown_namespace(&huge).to_string();
        assert!(key.len() < 100, "{} bytes", key.len());
        assert!(key.starts_with("x\\nyyy"), "{key}");
        assert!(key.ends_with("...(3000002 bytes)"), "{key}");
    }
}
