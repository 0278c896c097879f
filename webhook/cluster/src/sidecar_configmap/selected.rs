//! The namespaces whose pods the webhook configuration sends to the webhook
//! (its `namespaceSelector`, given to the webhook as a label selector),
//! folded from the events of a metadata-only watch on Namespaces: the only
//! namespaces where the sidecar-binary ConfigMap may be created
//! ([`super::WriteScope`]), and, with `--create-ahead`, each gets it ahead
//! of its first pod. Pure: no I/O, no clock.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

/// Names of the selected namespaces that are not being deleted, as last
/// reported by the watch. A relist replaces the set at `InitDone`, like
/// [`super::Readiness`].
#[derive(Debug, Clone, Default)]
pub struct Selected {
    names: BTreeSet<String>,
    relist: Option<BTreeSet<String>>,
}

impl Selected {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fold one watch event in. Returns the namespace that just appeared or
    /// changed and is live (a candidate for an immediate creation), if any.
    pub fn apply(
        &mut self,
        event: &watcher::Event<PartialObjectMeta<Namespace>>,
    ) -> Option<String> {
        let live = |ns: &PartialObjectMeta<Namespace>| {
            ns.metadata
                .name
                .clone()
                .filter(|_| ns.metadata.deletion_timestamp.is_none())
        };
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeSet::new());
                None
            }
            watcher::Event::InitApply(ns) => {
                if let (Some(name), Some(relist)) = (live(ns), self.relist.as_mut()) {
                    relist.insert(name);
                }
                None
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relist.take() {
                    self.names = listed;
                }
                None
            }
            watcher::Event::Apply(ns) => match live(ns) {
                Some(name) => {
                    self.names.insert(name.clone());
                    Some(name)
                }
                None => {
                    if let Some(name) = ns.metadata.name.as_deref() {
                        self.names.remove(name);
                    }
                    None
                }
            },
            watcher::Event::Delete(ns) => {
                if let Some(name) = ns.metadata.name.as_deref() {
                    self.names.remove(name);
                }
                None
            }
        }
    }

    /// Whether `namespace` is selected (and not being deleted).
    pub fn contains(&self, namespace: &str) -> bool {
        self.names.contains(namespace)
    }

    /// The selected namespaces, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    fn ns(name: &str, deleting: bool) -> PartialObjectMeta<Namespace> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                deletion_timestamp: deleting.then(|| Time(Default::default())),
                ..ObjectMeta::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    fn names(s: &Selected) -> Vec<&str> {
        s.names().collect()
    }

    #[test]
    fn relist_replaces_the_set_at_init_done() {
        let mut s = Selected::new();
        assert_eq!(
            s.apply(&watcher::Event::Apply(ns("old", false))),
            Some("old".into())
        );
        assert_eq!(s.apply(&watcher::Event::Init), None);
        assert_eq!(s.apply(&watcher::Event::InitApply(ns("a", false))), None);
        assert_eq!(s.apply(&watcher::Event::InitApply(ns("gone", true))), None);
        // The old set answers until the relist is complete.
        assert_eq!(names(&s), ["old"]);
        s.apply(&watcher::Event::InitDone);
        assert_eq!(names(&s), ["a"]);
    }

    #[test]
    fn a_namespace_being_deleted_or_deleted_leaves() {
        let mut s = Selected::new();
        s.apply(&watcher::Event::Apply(ns("a", false)));
        s.apply(&watcher::Event::Apply(ns("b", false)));
        assert_eq!(s.apply(&watcher::Event::Apply(ns("a", true))), None);
        assert_eq!(names(&s), ["b"]);
        s.apply(&watcher::Event::Delete(ns("b", false)));
        assert!(names(&s).is_empty());
    }
}
