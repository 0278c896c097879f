//! Which namespaces hold the sidecar-binary ConfigMap, folded from the
//! events of a metadata-only watch. Pure: no I/O, no clock.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

/// The set of namespaces in which the ConfigMap named `name` exists and is
/// not being deleted, as last reported by the watch (plus namespaces where
/// this process just created it, see [`Self::mark_ready`]).
///
/// A relist (`Init`, `InitApply`..., `InitDone`) is buffered and replaces
/// the set at `InitDone` in one step: until then the previous set keeps
/// answering, and afterwards a namespace whose object vanished while the
/// watch was down is gone.
#[derive(Debug, Clone)]
pub struct Readiness {
    name: String,
    ready: HashSet<String>,
    /// The namespaces listed so far by a relist in progress.
    relist: Option<HashSet<String>>,
    synced: bool,
}

impl Readiness {
    /// An empty, unsynced set for the ConfigMap named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ready: HashSet::new(),
            relist: None,
            synced: false,
        }
    }

    /// Fold one watch event in. Objects with another name are ignored; an
    /// object with `deletionTimestamp` set counts as absent.
    pub fn apply(&mut self, event: &watcher::Event<PartialObjectMeta<ConfigMap>>) {
        match event {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                if let (Some(ns), Some(relist)) =
                    (self.live_namespace(&obj.metadata), &mut self.relist)
                {
                    relist.insert(ns.to_owned());
                }
            }
            watcher::Event::InitDone => {
                // Without a preceding `Init` (not emitted by kube-runtime)
                // there is nothing buffered: keep the current set.
                if let Some(listed) = self.relist.take() {
                    self.ready = listed;
                }
                self.synced = true;
            }
            watcher::Event::Apply(obj) => {
                if self.is_ours(&obj.metadata)
                    && let Some(ns) = obj.metadata.namespace.as_deref()
                {
                    if obj.metadata.deletion_timestamp.is_none() {
                        self.ready.insert(ns.to_owned());
                    } else {
                        self.ready.remove(ns);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                if self.is_ours(&obj.metadata)
                    && let Some(ns) = obj.metadata.namespace.as_deref()
                {
                    self.ready.remove(ns);
                }
            }
        }
    }

    /// Record that this process created the object in `namespace` (the watch
    /// confirms it shortly). Not added to a relist in progress: the list
    /// decides, and a later `Apply` restores it.
    pub fn mark_ready(&mut self, namespace: &str) {
        self.ready.insert(namespace.to_owned());
    }

    /// Whether the object exists in `namespace` and is not being deleted.
    pub fn is_ready(&self, namespace: &str) -> bool {
        self.ready.contains(namespace)
    }

    /// Whether the watch has completed at least one (re)list.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The number of ready namespaces.
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Whether no namespace is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    fn is_ours(&self, meta: &ObjectMeta) -> bool {
        meta.name.as_deref() == Some(self.name.as_str())
    }

    /// The namespace of `meta` when it is our object and not being deleted.
    fn live_namespace<'a>(&self, meta: &'a ObjectMeta) -> Option<&'a str> {
        if self.is_ours(meta) && meta.deletion_timestamp.is_none() {
            meta.namespace.as_deref()
        } else {
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::core::PartialObjectMetaExt;

    const NAME: &str = "kube-prestop-sidecar-0123456789ab";

    fn meta(namespace: &str, name: &str) -> PartialObjectMeta<ConfigMap> {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        }
        .into_response_partial()
    }

    fn deleting(namespace: &str, name: &str) -> PartialObjectMeta<ConfigMap> {
        let mut obj = meta(namespace, name);
        obj.metadata.deletion_timestamp = Some(Time(Default::default()));
        obj
    }

    fn ready_set(r: &Readiness) -> Vec<&str> {
        let mut v: Vec<_> = r.ready.iter().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    fn list(r: &mut Readiness, objects: &[PartialObjectMeta<ConfigMap>]) {
        r.apply(&watcher::Event::Init);
        for o in objects {
            r.apply(&watcher::Event::InitApply(o.clone()));
        }
        r.apply(&watcher::Event::InitDone);
    }

    #[test]
    fn initial_list_counts_only_live_objects_with_the_name() {
        let mut r = Readiness::new(NAME);
        assert!(!r.is_synced());
        list(
            &mut r,
            &[
                meta("a", NAME),
                meta("b", "kube-prestop-sidecar-ffffffffffff"),
                deleting("c", NAME),
                meta("d", NAME),
            ],
        );
        assert!(r.is_synced());
        assert_eq!(ready_set(&r), ["a", "d"]);
        assert!(r.is_ready("a") && !r.is_ready("b") && !r.is_ready("c"));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn relist_replaces_the_set_at_init_done_only() {
        let mut r = Readiness::new(NAME);
        list(&mut r, &[meta("a", NAME), meta("b", NAME)]);
        r.apply(&watcher::Event::Init);
        r.apply(&watcher::Event::InitApply(meta("b", NAME)));
        r.apply(&watcher::Event::InitApply(meta("c", NAME)));
        // Mid-relist, the previous set still answers.
        assert_eq!(ready_set(&r), ["a", "b"]);
        r.apply(&watcher::Event::InitDone);
        // "a" vanished while the watch was down.
        assert_eq!(ready_set(&r), ["b", "c"]);
    }

    #[test]
    fn empty_relist_empties_the_set() {
        let mut r = Readiness::new(NAME);
        list(&mut r, &[meta("a", NAME)]);
        list(&mut r, &[]);
        assert!(r.is_empty());
        assert!(r.is_synced());
    }

    #[test]
    fn apply_and_delete() {
        let mut r = Readiness::new(NAME);
        list(&mut r, &[]);
        r.apply(&watcher::Event::Apply(meta("a", NAME)));
        r.apply(&watcher::Event::Apply(meta("b", "other")));
        assert_eq!(ready_set(&r), ["a"]);
        // Another object's deletion in "a" changes nothing.
        r.apply(&watcher::Event::Delete(meta("a", "other")));
        assert_eq!(ready_set(&r), ["a"]);
        r.apply(&watcher::Event::Delete(meta("a", NAME)));
        assert!(r.is_empty());
    }

    #[test]
    fn deletion_timestamp_on_apply_removes() {
        let mut r = Readiness::new(NAME);
        list(&mut r, &[meta("a", NAME)]);
        r.apply(&watcher::Event::Apply(deleting("a", NAME)));
        assert!(!r.is_ready("a"));
        // A terminating object never becomes ready.
        r.apply(&watcher::Event::Apply(deleting("b", NAME)));
        assert!(r.is_empty());
    }

    #[test]
    fn mark_ready_then_relist_without_it_drops_it() {
        let mut r = Readiness::new(NAME);
        list(&mut r, &[]);
        r.mark_ready("a");
        assert!(r.is_ready("a"));
        r.apply(&watcher::Event::Init);
        r.mark_ready("b");
        assert!(r.is_ready("b"));
        r.apply(&watcher::Event::InitApply(meta("a", NAME)));
        r.apply(&watcher::Event::InitDone);
        assert_eq!(ready_set(&r), ["a"]);
    }
}
