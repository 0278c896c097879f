//! The sidecar's own CPU throttling, from its cgroup's `cpu.stat`: how often
//! the CFS bandwidth limit (the container's `resources.limits.cpu`) held it
//! back. Logged once at the sidecar's end, so an operator can tell whether the
//! limit, not only the request, delayed the watcher or its hooks (a hook runs
//! as the sidecar's child, in the sidecar's cgroup, and its CPU time counts
//! against the same limit).
//!
//! Where the file is: runc mounts the container's own cgroup at
//! `/sys/fs/cgroup` (cgroup v1: a tmpfs with each controller's directory of
//! the container bind-mounted, or mounted in the container's cgroup
//! namespace, and `cpu` a symlink to `cpu,cpuacct`; cgroup v2: the unified
//! hierarchy in the container's cgroup namespace). Source: runc v1.5.3,
//! `libcontainer/rootfs_linux.go`, `mountCgroupV1` and `mountCgroupV2`.
//!
//! The fields (kernel 6.x): cgroup v1 `cpu.stat` has `nr_periods`,
//! `nr_throttled` and `throttled_time` in nanoseconds
//! (`Documentation/scheduler/sched-bwc.rst`); cgroup v2 `cpu.stat` has
//! `nr_periods`, `nr_throttled` and `throttled_usec` in microseconds, only
//! when the `cpu` controller is enabled for the group
//! (`Documentation/admin-guide/cgroup-v2.rst`, "cpu.stat").

use std::fmt;
use std::path::Path;
use std::time::Duration;

/// Where `cpu.stat` is looked for, in this order: cgroup v2's unified
/// hierarchy, then cgroup v1's `cpu,cpuacct` (or a separate `cpu`)
/// controller.
pub const CPU_STAT_PATHS: [&str; 3] = [
    "/sys/fs/cgroup/cpu.stat",
    "/sys/fs/cgroup/cpu,cpuacct/cpu.stat",
    "/sys/fs/cgroup/cpu/cpu.stat",
];

/// The CFS bandwidth counters of one cgroup, since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods (`cpu.cfs_period_us`, 100 ms by default) in which
    /// the group was runnable; 0 for a group without a limit.
    pub periods: u64,
    /// Of those, the periods in which the group used up its quota and was
    /// held back until the next.
    pub throttled_periods: u64,
    /// The total time the group's threads were held back.
    pub throttled: Duration,
}

impl fmt::Display for Throttling {
    /// `nr_periods=N nr_throttled=N throttled=S.SSSs`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nr_periods={} nr_throttled={} throttled={:.3}s",
            self.periods,
            self.throttled_periods,
            self.throttled.as_secs_f64()
        )
    }
}

/// Why no [`Throttling`] could be told.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuStatError {
    /// None of [`CPU_STAT_PATHS`] could be read (for example a runtime that
    /// does not mount the cgroup filesystem into the container).
    #[error("no cpu.stat to read ({0})")]
    Unreadable(String),
    /// The file has no bandwidth fields: cgroup v2 without the `cpu`
    /// controller enabled for this group (no CPU limit can be enforced).
    #[error("{0} has no nr_periods/nr_throttled (no CPU bandwidth control for this cgroup)")]
    NoBandwidth(String),
    /// A field's value is not a number.
    #[error("{path}: field {field} is not a number: {value:?}")]
    Malformed {
        path: String,
        field: String,
        value: String,
    },
}

/// Parses the text of a `cpu.stat` file read from `path` (named in errors).
///
/// # Errors
/// [`CpuStatError::NoBandwidth`] when `nr_periods`, `nr_throttled` or a
/// throttled time (`throttled_time` or `throttled_usec`) is missing;
/// [`CpuStatError::Malformed`] when one of them is not an unsigned integer.
pub fn parse(path: &str, text: &str) -> Result<Throttling, CpuStatError> {
    let (mut periods, mut throttled_periods) = (None, None);
    let mut throttled = None;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        if !matches!(
            key,
            "nr_periods" | "nr_throttled" | "throttled_time" | "throttled_usec"
        ) {
            continue;
        }
        let n: u64 = value.parse().map_err(|_| CpuStatError::Malformed {
            path: path.to_owned(),
            field: key.to_owned(),
            value: value.to_owned(),
        })?;
        match key {
            "nr_periods" => periods = Some(n),
            "nr_throttled" => throttled_periods = Some(n),
            "throttled_time" => throttled = Some(Duration::from_nanos(n)),
            _ => throttled = Some(Duration::from_micros(n)),
        }
    }
    match (periods, throttled_periods, throttled) {
        (Some(periods), Some(throttled_periods), Some(throttled)) => Ok(Throttling {
            periods,
            throttled_periods,
            throttled,
        }),
        _ => Err(CpuStatError::NoBandwidth(path.to_owned())),
    }
}

/// Reads the first of [`CPU_STAT_PATHS`] that exists.
///
/// # Errors
/// [`CpuStatError::Unreadable`] naming each path and why it failed, or the
/// errors of [`parse`].
pub fn read() -> Result<Throttling, CpuStatError> {
    read_from(&CPU_STAT_PATHS.map(Path::new))
}

/// [`read`] over the given candidate paths (tests).
///
/// # Errors
/// As [`read`].
pub fn read_from(paths: &[&Path]) -> Result<Throttling, CpuStatError> {
    let mut why = Vec::new();
    for p in paths {
        match std::fs::read_to_string(p) {
            Ok(text) => return parse(&p.display().to_string(), &text),
            Err(e) => why.push(format!("{}: {e}", p.display())),
        }
    }
    Err(CpuStatError::Unreadable(why.join("; ")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cgroup_v1_counts_nanoseconds() {
        let t = parse(
            "v1",
            "nr_periods 1200\nnr_throttled 37\nthrottled_time 2450000000\n",
        )
        .unwrap();
        assert_eq!(
            t,
            Throttling {
                periods: 1200,
                throttled_periods: 37,
                throttled: Duration::from_millis(2450),
            }
        );
        assert_eq!(
            t.to_string(),
            "nr_periods=1200 nr_throttled=37 throttled=2.450s"
        );
    }

    #[test]
    fn cgroup_v2_counts_microseconds_among_other_fields() {
        let text = "usage_usec 81234\nuser_usec 50000\nsystem_usec 31234\n\
                    core_sched.force_idle_usec 0\nnr_periods 40\nnr_throttled 2\n\
                    throttled_usec 15000\nnr_bursts 0\nburst_usec 0\n";
        let t = parse("v2", text).unwrap();
        assert_eq!(t.periods, 40);
        assert_eq!(t.throttled_periods, 2);
        assert_eq!(t.throttled, Duration::from_millis(15));
    }

    #[test]
    fn v2_without_the_cpu_controller_has_no_bandwidth_fields() {
        let e = parse(
            "/sys/fs/cgroup/cpu.stat",
            "usage_usec 1\nuser_usec 1\nsystem_usec 0\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            CpuStatError::NoBandwidth("/sys/fs/cgroup/cpu.stat".into())
        );
        assert!(e.to_string().contains("no CPU bandwidth control"));
    }

    #[test]
    fn a_field_that_is_not_a_number_is_named() {
        let e = parse("f", "nr_periods x\nnr_throttled 0\nthrottled_time 0\n").unwrap_err();
        assert_eq!(e.to_string(), "f: field nr_periods is not a number: \"x\"");
    }

    #[test]
    fn the_first_readable_path_is_used_and_every_failure_named() {
        let dir = std::env::temp_dir().join(format!("kps-cpustat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let v1 = dir.join("cpu.stat");
        std::fs::write(&v1, "nr_periods 3\nnr_throttled 1\nthrottled_time 1000\n").unwrap();
        let missing = dir.join("missing");
        let t = read_from(&[&missing, &v1]).unwrap();
        assert_eq!(t.throttled, Duration::from_micros(1));
        let e = read_from(&[&missing]).unwrap_err();
        assert!(
            matches!(&e, CpuStatError::Unreadable(w) if w.contains("missing")),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
