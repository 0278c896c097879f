//! Bookkeeping of creation attempts per namespace: at most one in flight,
//! and none for a while after one that did not make the namespace ready,
//! twice as long after each further failure in a row (up to a ceiling), so
//! a namespace that can never hold the object (a `count/configmaps` quota)
//! costs a few requests an hour, not one a minute. Pure: the caller passes
//! the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube_prestop_metrics::labels::CreationOutcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// An attempt runs, after `failures` failed ones in a row.
    InFlight { failures: u32 },
    /// No new attempt before `until`; `failures` in a row so far.
    CoolingDown { until: Instant, failures: u32 },
}

/// Per-namespace attempt state. Namespaces absent from the map may start an
/// attempt. Entries of namespaces that were never retried stay (one per
/// namespace that ever failed; bounded by the namespace count).
#[derive(Debug, Clone)]
pub struct Attempts {
    retry_after: Duration,
    max_retry_after: Duration,
    entries: HashMap<String, Entry>,
}

impl Attempts {
    /// No attempt is started for `retry_after` after one ended in
    /// [`CreationOutcome::Exists`] or [`CreationOutcome::Error`]; after `n`
    /// such endings in a row, for `retry_after × 2^(n-1)`, at most
    /// `max_retry_after`.
    pub fn new(retry_after: Duration, max_retry_after: Duration) -> Self {
        Self {
            retry_after,
            max_retry_after,
            entries: HashMap::new(),
        }
    }

    /// Start an attempt in `namespace` at `now` if none is in flight and the
    /// namespace is not cooling down; `true` when the caller must now make
    /// the attempt and then call [`Self::finish`].
    pub fn try_start(&mut self, namespace: &str, now: Instant) -> bool {
        let failures = match self.entries.get(namespace) {
            Some(Entry::InFlight { .. }) => return false,
            Some(Entry::CoolingDown { until, .. }) if now < *until => return false,
            Some(Entry::CoolingDown { failures, .. }) => *failures,
            None => 0,
        };
        self.entries
            .insert(namespace.to_owned(), Entry::InFlight { failures });
        true
    }

    /// End the attempt in `namespace` at `now`; returns the cool-down it
    /// starts (`None` after `Created`, which forgets the namespace: a later
    /// deletion of the object allows an immediate new attempt).
    pub fn finish(
        &mut self,
        namespace: &str,
        outcome: CreationOutcome,
        now: Instant,
    ) -> Option<Duration> {
        match outcome {
            CreationOutcome::Created => {
                self.entries.remove(namespace);
                None
            }
            CreationOutcome::Exists | CreationOutcome::Error => {
                let before = match self.entries.get(namespace) {
                    Some(Entry::InFlight { failures } | Entry::CoolingDown { failures, .. }) => {
                        *failures
                    }
                    None => 0,
                };
                let failures = before.saturating_add(1);
                let wait = self
                    .retry_after
                    .saturating_mul(1u32 << (failures - 1).min(16))
                    .min(self.max_retry_after);
                let until = now.checked_add(wait).unwrap_or(now);
                self.entries
                    .insert(namespace.to_owned(), Entry::CoolingDown { until, failures });
                Some(wait)
            }
        }
    }

    /// Forget `namespace`'s failures (the object turned up there after all):
    /// a later deletion may be answered at once. An attempt in flight stays
    /// in flight.
    pub fn forget(&mut self, namespace: &str) {
        if let Some(Entry::CoolingDown { .. }) = self.entries.get(namespace) {
            self.entries.remove(namespace);
        }
    }

    /// Whether an attempt is in flight in `namespace`.
    pub fn in_flight(&self, namespace: &str) -> bool {
        matches!(self.entries.get(namespace), Some(Entry::InFlight { .. }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);
    const MAX: Duration = Duration::from_secs(60 * 16);

    #[test]
    fn one_attempt_in_flight_per_namespace() {
        let t0 = Instant::now();
        let mut a = Attempts::new(WINDOW, MAX);
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
        let mut a = Attempts::new(WINDOW, MAX);
        assert!(a.try_start("a", t0));
        a.finish("a", CreationOutcome::Created, t0);
        assert!(!a.in_flight("a"));
        assert!(a.try_start("a", t0));
    }

    #[test]
    fn error_and_exists_cool_down_for_the_window() {
        for outcome in [CreationOutcome::Error, CreationOutcome::Exists] {
            let t0 = Instant::now();
            let mut a = Attempts::new(WINDOW, MAX);
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
    fn failures_in_a_row_double_the_cool_down_up_to_the_ceiling() {
        let mut t = Instant::now();
        let mut a = Attempts::new(WINDOW, MAX);
        let mut waits = Vec::new();
        for _ in 0..7 {
            assert!(a.try_start("a", t));
            let wait = a.finish("a", CreationOutcome::Error, t).unwrap();
            assert!(!a.try_start("a", t + wait - Duration::from_millis(1)));
            waits.push(wait.as_secs() / 60);
            t += wait;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 16, 16]);
        // A success resets it.
        assert!(a.try_start("a", t));
        assert_eq!(a.finish("a", CreationOutcome::Created, t), None);
        assert!(a.try_start("a", t));
        assert_eq!(a.finish("a", CreationOutcome::Error, t), Some(WINDOW));
    }

    #[test]
    fn forget_ends_a_cool_down_but_not_an_attempt() {
        let t0 = Instant::now();
        let mut a = Attempts::new(WINDOW, MAX);
        assert!(a.try_start("a", t0));
        a.forget("a");
        assert!(a.in_flight("a"));
        a.finish("a", CreationOutcome::Exists, t0);
        assert!(!a.try_start("a", t0));
        a.forget("a");
        assert!(a.try_start("a", t0));
    }
}
