//! The interval issue 28 states the pod start goal with: a percentile
//! bootstrap confidence interval of the difference of two medians.
//!
//! Method: percentile bootstrap (Efron and Tibshirani, "An Introduction to
//! the Bootstrap", 1993, ch. 13): each group is resampled with replacement,
//! independently and at its own size (the groups are independent pods, not
//! pairs), the difference of the resamples' medians taken each time, and
//! the interval is the 2.5th and 97.5th percentiles of those differences.
//! Medians and percentiles are the bench's own
//! ([`kube_prestop_e2e::metrics::percentile`]: linear interpolation between
//! order statistics), so the point estimate is the table's p50 difference.

use kube_prestop_e2e::metrics::percentile;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt as _, SeedableRng as _};

/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 10_000;
/// The generator's seed: a run's interval is reproducible from its samples
/// (Xoshiro256++ is one of rand's portable generators; the sampling code is
/// the `rand` version in Cargo.lock).
pub const SEED: u64 = 28;
/// Coverage of the interval.
pub const LEVEL: f64 = 0.95;

/// A difference of medians with its bootstrap interval (the unit of the
/// inputs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MedianDiff {
    /// median(a) - median(b) of the samples themselves.
    pub estimate: f64,
    /// Lower bound of the interval.
    pub lo: f64,
    /// Upper bound of the interval.
    pub hi: f64,
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    percentile(v, 0.5)
}

/// One resample of `from` with replacement, at its size, into `into`.
fn resample(rng: &mut Xoshiro256PlusPlus, from: &[f64], into: &mut Vec<f64>) {
    into.clear();
    into.extend((0..from.len()).map(|_| from[rng.random_range(0..from.len())]));
}

/// median(a) - median(b) and its [`LEVEL`] percentile bootstrap interval
/// over `resamples` resamples from `seed`; `None` when a group is empty or
/// `resamples` is 0.
pub fn median_diff(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<MedianDiff> {
    if a.is_empty() || b.is_empty() || resamples == 0 {
        return None;
    }
    let estimate = median(&mut a.to_vec())? - median(&mut b.to_vec())?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let (mut ra, mut rb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let mut diffs = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        resample(&mut rng, a, &mut ra);
        resample(&mut rng, b, &mut rb);
        diffs.push(median(&mut ra)? - median(&mut rb)?);
    }
    diffs.sort_by(f64::total_cmp);
    let tail = (1.0 - LEVEL) / 2.0;
    Some(MedianDiff {
        estimate,
        lo: percentile(&diffs, tail)?,
        hi: percentile(&diffs, 1.0 - tail)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Twenty pod start times (ms), spread like one phase's reference pods.
    fn group(offset: f64) -> Vec<f64> {
        [
            687.0, 702.5, 655.1, 731.9, 690.3, 812.4, 699.0, 675.8, 720.6, 746.2, 668.4, 705.7,
            694.1, 801.0, 683.3, 711.2, 726.8, 659.9, 697.6, 788.5,
        ]
        .iter()
        .map(|v| v + offset)
        .collect()
    }

    #[test]
    fn a_known_shift_is_inside_the_interval() {
        let d = median_diff(&group(50.0), &group(0.0), RESAMPLES, SEED).unwrap();
        assert!((d.estimate - 50.0).abs() < 1e-9, "{d:?}");
        assert!(d.lo <= 50.0 && 50.0 <= d.hi, "{d:?}");
        assert!(d.lo < d.hi, "{d:?}");
        // Not wider than the groups' own spread.
        assert!(d.hi - d.lo < 100.0, "{d:?}");
    }

    #[test]
    fn identical_groups_give_an_interval_around_zero() {
        let d = median_diff(&group(0.0), &group(0.0), RESAMPLES, SEED).unwrap();
        assert_eq!(d.estimate, 0.0);
        assert!(d.lo < 0.0 && 0.0 < d.hi, "{d:?}");
    }

    #[test]
    fn a_shift_larger_than_the_spread_excludes_zero() {
        let d = median_diff(&group(500.0), &group(0.0), RESAMPLES, SEED).unwrap();
        assert!(d.lo > 0.0, "{d:?}");
    }

    #[test]
    fn the_seed_makes_it_reproducible() {
        let (a, b) = (group(30.0), group(0.0));
        assert_eq!(
            median_diff(&a, &b, 1_000, SEED),
            median_diff(&a, &b, 1_000, SEED)
        );
    }

    #[test]
    fn groups_of_different_sizes_and_empty_ones() {
        let d = median_diff(&group(10.0)[..7], &group(0.0), 1_000, SEED).unwrap();
        assert!(d.lo <= d.estimate && d.estimate <= d.hi, "{d:?}");
        assert_eq!(median_diff(&[], &group(0.0), 1_000, SEED), None);
        assert_eq!(median_diff(&group(0.0), &[1.0], 0, SEED), None);
    }
}
