//! Bookkeeping of creation attempts per namespace: at most one in flight,
//! and none for a while after one that did not make the namespace ready.
//! Pure: the caller passes the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How one creation attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreationOutcome {
    /// `201 Created`: the namespace is ready.
    Created,
    /// `409 AlreadyExists`: not an error; the watch decides whether the
    /// existing object counts (it must carry the selector's labels and not
    /// be terminating).
    Exists,
    /// Any other answer, a transport error or a timeout.
    Error,
}

impl CreationOutcome {
    /// Every outcome, in the order of their metric label values.
    pub const ALL: [Self; 3] = [Self::Created, Self::Exists, Self::Error];

    /// The `result` label value: `created`, `exists` or `error`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Exists => "exists",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    InFlight,
    /// No new attempt before this instant.
    CoolingDown(Instant),
}

/// Per-namespace attempt state. Namespaces absent from the map may start an
/// attempt. Entries of namespaces that were never retried stay (one per
/// namespace that ever failed; bounded by the namespace count).
#[derive(Debug, Clone)]
pub struct Attempts {
    retry_after: Duration,
    entries: HashMap<String, Entry>,
}

impl Attempts {
    /// No attempt is started for `retry_after` after one ended in
    /// [`CreationOutcome::Exists`] or [`CreationOutcome::Error`].
    pub fn new(retry_after: Duration) -> Self {
        Self {
            retry_after,
            entries: HashMap::new(),
        }
    }

    /// Start an attempt in `namespace` at `now` if none is in flight and the
    /// namespace is not cooling down; `true` when the caller must now make
    /// the attempt and then call [`Self::finish`].
    pub fn try_start(&mut self, namespace: &str, now: Instant) -> bool {
        match self.entries.get(namespace) {
            Some(Entry::InFlight) => false,
            Some(Entry::CoolingDown(until)) if now < *until => false,
            _ => {
                self.entries.insert(namespace.to_owned(), Entry::InFlight);
                true
            }
        }
    }

    /// End the attempt in `namespace` at `now`. `Created` forgets the
    /// namespace (a later deletion of the object allows an immediate new
    /// attempt); `Exists` and `Error` start the cool-down.
    pub fn finish(&mut self, namespace: &str, outcome: CreationOutcome, now: Instant) {
        match outcome {
            CreationOutcome::Created => {
                self.entries.remove(namespace);
            }
            CreationOutcome::Exists | CreationOutcome::Error => {
                let until = now.checked_add(self.retry_after).unwrap_or(now);
                self.entries
                    .insert(namespace.to_owned(), Entry::CoolingDown(until));
            }
        }
    }

    /// Whether an attempt is in flight in `namespace`.
    pub fn in_flight(&self, namespace: &str) -> bool {
        self.entries.get(namespace) == Some(&Entry::InFlight)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    #[test]
    fn one_attempt_in_flight_per_namespace() {
        let t0 = Instant::now();
        let mut a = Attempts::new(WINDOW);
        assert!(a.try_start("a", t0));
        assert!(a.in_flight("a"));
        assert!(!a.try_start("a", t0));
        assert!(!a.try_start("a", t0 + WINDOW * 10));
        // Other namespaces are independent.
        assert!(a.try_start("b", t0));
    }

    #[test]
    fn created_allows_an_immediate_new_attempt() {
        let t0 = Instant::now();
        let mut a = Attempts::new(WINDOW);
        assert!(a.try_start("a", t0));
        a.finish("a", CreationOutcome::Created, t0);
        assert!(!a.in_flight("a"));
        assert!(a.try_start("a", t0));
    }

    #[test]
    fn error_and_exists_cool_down_for_the_window() {
        for outcome in [CreationOutcome::Error, CreationOutcome::Exists] {
            let t0 = Instant::now();
            let mut a = Attempts::new(WINDOW);
            assert!(a.try_start("a", t0));
            let t1 = t0 + Duration::from_secs(3);
            a.finish("a", outcome, t1);
            assert!(!a.in_flight("a"));
            assert!(!a.try_start("a", t1), "{outcome:?}");
            assert!(
                !a.try_start("a", t1 + WINDOW - Duration::from_millis(1)),
                "{outcome:?}"
            );
            assert!(a.try_start("a", t1 + WINDOW), "{outcome:?}");
            // The retry is itself deduplicated.
            assert!(!a.try_start("a", t1 + WINDOW * 2), "{outcome:?}");
        }
    }

    #[test]
    fn labels() {
        let labels: Vec<_> = CreationOutcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["created", "exists", "error"]);
    }
}
