//! A budget of bytes held at once across requests, counted in whole KiB
//! ([`UNIT`]): the one mechanism under the body budget
//! ([`crate::body::BodyBudget`], request bodies in flight) and the parse
//! budget ([`crate::admission::ParseBudget`], the estimated memory of the
//! reviews being parsed). Each of those keeps its own policy (the body
//! budget's reserve for ordinary bodies, the parse budget's bound of half
//! per review, their minimum sizes); this module only counts.
//!
//! A share is a tokio [`OwnedSemaphorePermit`] of one permit per KiB, given
//! back when it is dropped. Nothing here waits: a request that does not fit
//! now is refused (`None`), and its caller sheds it.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: one permit is this many bytes (1 KiB).
pub const UNIT: usize = 1024;

/// A budget of bytes, shared by every clone (cheap to clone).
#[derive(Debug, Clone)]
pub struct ByteBudget {
    permits: Arc<Semaphore>,
    /// The whole budget, in [`UNIT`]s.
    total_units: usize,
}

impl ByteBudget {
    /// A budget of `bytes`, rounded up to whole KiB, at least one KiB.
    /// (Any `usize` of bytes is fewer KiB than tokio's most permits,
    /// `usize::MAX >> 3`, so this does not panic.)
    pub fn new(bytes: usize) -> Self {
        let total_units = bytes.div_ceil(UNIT).max(1);
        Self {
            permits: Arc::new(Semaphore::new(total_units)),
            total_units,
        }
    }

    /// The whole budget, bytes (a multiple of [`UNIT`]).
    pub fn bytes(&self) -> usize {
        self.total_units * UNIT
    }

    /// The whole budget, in [`UNIT`]s (KiB).
    pub fn units(&self) -> usize {
        self.total_units
    }

    /// Bytes of the budget held now by shares not yet dropped (a multiple
    /// of [`UNIT`]; for logs, tests and debugging).
    pub fn in_use_bytes(&self) -> usize {
        (self.total_units - self.permits.available_permits()) * UNIT
    }

    /// A share of `bytes` (rounded up to whole KiB, at least one KiB), held
    /// until the permit is dropped; `None` when that much is not left now,
    /// or is over `u32::MAX` KiB (tokio's most in one permit). Never waits.
    pub fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.grow(None, bytes, 0)
    }

    /// Grows `held` (a share of this budget, `None` for none yet) to cover
    /// `bytes` (rounded up to whole KiB, at least one KiB), taking only the
    /// KiB it lacks, provided at least `keep_free_units` KiB stay free
    /// after it. A share that already covers `bytes` is returned as it is.
    /// `None` when the budget has not that much left now (or the growth is
    /// over `u32::MAX` KiB); then `held` is dropped, giving back what it
    /// held. Never waits.
    pub fn grow(
        &self,
        held: Option<OwnedSemaphorePermit>,
        bytes: usize,
        keep_free_units: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let need = bytes.div_ceil(UNIT).max(1);
        if need <= have {
            return held;
        }
        let more = need - have;
        if self.permits.available_permits() < more.saturating_add(keep_free_units) {
            return None;
        }
        let extra = self
            .permits
            .clone()
            .try_acquire_many_owned(u32::try_from(more).ok()?)
            .ok()?;
        Some(match held {
            Some(mut held) => {
                held.merge(extra);
                held
            }
            None => extra,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_rounded_up_to_whole_kib_at_least_one() {
        assert_eq!(ByteBudget::new(0).bytes(), 1024);
        assert_eq!(ByteBudget::new(1).units(), 1);
        assert_eq!(ByteBudget::new(1024).bytes(), 1024);
        assert_eq!(ByteBudget::new(1025).bytes(), 2048);
        assert_eq!(ByteBudget::new(64 * 1024 * 1024).units(), 64 * 1024);
    }

    #[test]
    fn a_share_is_whole_kib_and_given_back_when_dropped() {
        let budget = ByteBudget::new(4 * 1024);
        let empty = budget.take(0).unwrap();
        assert_eq!(budget.in_use_bytes(), 1024);
        let one = budget.take(1).unwrap();
        assert_eq!(budget.in_use_bytes(), 2 * 1024);
        let two = budget.take(1025).unwrap();
        assert_eq!(budget.in_use_bytes(), 4 * 1024);
        assert!(budget.take(1).is_none());
        drop((empty, one, two));
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn clones_share_one_budget() {
        let budget = ByteBudget::new(2 * 1024);
        let other = budget.clone();
        let held = budget.take(2 * 1024).unwrap();
        assert_eq!(other.in_use_bytes(), 2 * 1024);
        assert!(other.take(1).is_none());
        drop(held);
        assert!(other.take(1).is_some());
    }

    #[test]
    fn growing_takes_only_what_is_lacking() {
        let budget = ByteBudget::new(10 * 1024);
        let held = budget.grow(None, 3 * 1024, 0).unwrap();
        assert_eq!(held.num_permits(), 3);
        // Already covered: returned as it is.
        let held = budget.grow(Some(held), 2 * 1024, 0).unwrap();
        assert_eq!(held.num_permits(), 3);
        let held = budget.grow(Some(held), 7 * 1024, 0).unwrap();
        assert_eq!(held.num_permits(), 7);
        assert_eq!(budget.in_use_bytes(), 7 * 1024);
        // Failed growth drops the share: everything is given back.
        assert!(budget.grow(Some(held), 11 * 1024, 0).is_none());
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn growing_leaves_the_units_asked_to_stay_free() {
        let budget = ByteBudget::new(8 * 1024);
        let held = budget.grow(None, 6 * 1024, 2).unwrap();
        assert!(budget.grow(None, 1, 2).is_none());
        // Without the reserve the last two KiB can be taken.
        let rest = budget.grow(None, 2 * 1024, 0).unwrap();
        assert_eq!(budget.in_use_bytes(), 8 * 1024);
        drop((held, rest));
        // A reserve larger than the budget refuses everything.
        assert!(budget.grow(None, 1, usize::MAX).is_none());
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn a_weight_past_the_semaphore_is_refused_not_a_panic() {
        let budget = ByteBudget::new(1024);
        assert!(budget.take(usize::MAX).is_none());
        assert!(budget.grow(None, usize::MAX, 0).is_none());
        // Over u32::MAX KiB in one permit, even when the budget has them.
        let huge = ByteBudget::new((u32::MAX as usize + 1) * UNIT);
        assert!(huge.take((u32::MAX as usize + 1) * UNIT).is_none());
        assert_eq!(huge.in_use_bytes(), 0);
    }
}
