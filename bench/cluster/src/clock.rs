//! The main container's own start time: busybox `adjtimex`'s print of the
//! kernel clock, and the bounds a start time must be inside to be kept.
//!
//! Why `adjtimex` and not another clock source: busybox's `date` prints
//! nanoseconds (`%N`) only when built with `FEATURE_DATE_NANO`, which the
//! test image is not guaranteed to have; `/proc/uptime` is not the wall
//! clock and has 10 ms steps. One `adjtimex(2)` call returns the wall
//! clock's seconds, its sub-second part and the status word that gives the
//! sub-second part's unit, all from the same call, and busybox prints all
//! three (miscutils/adjtimex.c: `status:` as a decimal `%d` followed by
//! the names of the bits it knows, which do not include STA_NANO, then
//! `time.tv_sec:` and `time.tv_usec:` as `%ld`).
//!
//! The unit: adjtimex(2), "If the STA_NANO status flag is set,
//! time.tv_usec is in nanoseconds; otherwise it is in microseconds."
//! STA_NANO is 0x2000 (`<linux/timex.h>`). It is set once anything (chrony,
//! ntpd, systemd-timesyncd) has set `ADJ_NANO`; a fresh machine of this
//! project's kind showed `status: 8256` (0x2040: STA_NANO | STA_UNSYNC) and
//! a `time.tv_usec` of 666,256,345. Read as µs (the parser before issue 28)
//! that is 666 s too late.

use std::fmt;

/// STA_NANO in the kernel's time status (`<linux/timex.h>`): `time.tv_usec`
/// holds nanoseconds.
pub const STA_NANO: i64 = 0x2000;

/// Nanoseconds per second.
const NS_PER_S: i128 = 1_000_000_000;

/// Why `adjtimex`'s print gave no time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockError {
    /// A line the bench needs is not there (or not a number): the command
    /// or busybox changed, an error of the bench, not of the sample.
    Missing(&'static str),
    /// The sub-second field is outside its unit's range: not a time.
    SubsecondOutOfRange {
        /// The printed `time.tv_usec`.
        value: i128,
        /// Whether STA_NANO was set (the field in ns, else µs).
        nano: bool,
    },
}

impl fmt::Display for ClockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(field) => write!(f, "adjtimex printed no number after {field:?}"),
            Self::SubsecondOutOfRange { value, nano } => write!(
                f,
                "time.tv_usec {value} is not a sub-second count of {} (STA_NANO {})",
                if *nano { "ns" } else { "µs" },
                if *nano { "set" } else { "unset" }
            ),
        }
    }
}

/// The first whitespace-separated token after `name` on the first line that
/// starts (after indentation) with it, as an integer.
fn field<'a>(lines: impl Iterator<Item = &'a str>, name: &'static str) -> Result<i128, ClockError> {
    lines
        .filter_map(|l| l.trim().strip_prefix(name))
        .find_map(|rest| rest.split_whitespace().next()?.parse::<i128>().ok())
        .ok_or(ClockError::Missing(name))
}

/// The wall clock busybox `adjtimex` printed (its `status:`,
/// `time.tv_sec:` and `time.tv_usec:` lines, any others ignored), in ns
/// since the Unix epoch; `time.tv_usec` is read in ns when the status has
/// [`STA_NANO`], else in µs (adjtimex(2)).
pub fn parse_adjtimex<'a>(
    lines: impl Iterator<Item = &'a str> + Clone,
) -> Result<i128, ClockError> {
    let status = field(lines.clone(), "status:")?;
    let sec = field(lines.clone(), "time.tv_sec:")?;
    let sub = field(lines, "time.tv_usec:")?;
    let nano = status & i128::from(STA_NANO) != 0;
    let (per_s, ns_each) = if nano {
        (NS_PER_S, 1)
    } else {
        (1_000_000, 1_000)
    };
    if !(0..per_s).contains(&sub) {
        return Err(ClockError::SubsecondOutOfRange { value: sub, nano });
    }
    Ok(sec * NS_PER_S + sub * ns_each)
}

/// Why an event the bench timed (ns, on the host's clock, which the node
/// shares: it is a network namespace here) cannot be true, if it cannot:
/// `event` ("main started") at `at` happened before `earliest` or after
/// `latest`, each given with what it is ("the Job create call"). The
/// message names the event, how far outside it is (s, to the ms) and the
/// bound it crossed. The windows of [`implausible`] and
/// [`crate::init_start::call_ms`].
pub fn outside(
    event: &str,
    at: i128,
    (earliest, earliest_is): (i128, &str),
    (latest, latest_is): (i128, &str),
) -> Option<String> {
    if at < earliest {
        return Some(format!(
            "{event} {:.3} s before {earliest_is}",
            (earliest - at) as f64 / 1e9
        ));
    }
    if at > latest {
        return Some(format!(
            "{event} {:.3} s after {latest_is}",
            (at - latest) as f64 / 1e9
        ));
    }
    None
}

/// Why a main-started time cannot be true, if it cannot (all in ns on the
/// host's clock, which the node shares: it is a network namespace here).
///
/// - Not before `job_created`: the bench's clock just before the Job create
///   call; no container of the Job's pod runs before the Job exists.
/// - Not after `finished_seen - ran_at_least`: `finished_seen` is the
///   bench's clock once its watch had seen the pod finished, and the main
///   container's first instruction is followed by its `sleep`
///   (`ran_at_least`) before it exits, and the pod finishes after that.
///
/// Everything else (how long it took) is a measurement, not refused.
pub fn implausible(
    main_started: i128,
    job_created: i128,
    finished_seen: i128,
    ran_at_least: i128,
) -> Option<String> {
    outside(
        "main started",
        main_started,
        (job_created, "the Job create call"),
        (
            finished_seen - ran_at_least,
            &format!(
                "the latest it can have (the pod seen finished, less the container's {:.1} s sleep)",
                ran_at_least as f64 / 1e9
            ),
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// busybox 1.35 `adjtimex` on this machine (Debian busybox-static
    /// 1:1.35.0-4+deb12u1+b1), status 0x2040: STA_NANO | STA_UNSYNC.
    const NANO: &str = "    mode:         0
-o  offset:       0 us
-f  freq.adjust:  0 (65536 = 1ppm)
    maxerror:     16000000
    esterror:     16000000
    status:       8256 (UNSYNC)
-p  timeconstant: 2
    precision:    1 us
    tolerance:    32768000
-t  tick:         10000 us
    time.tv_sec:  1796294115
    time.tv_usec: 101842856
    return value: 5 (clock not synchronized)
";

    /// The same busybox where nothing has set ADJ_NANO: status 0x0040
    /// (STA_UNSYNC alone, the kernel's initial status), µs.
    const MICRO: &str = "    mode:         0
-o  offset:       0 us
-f  freq.adjust:  0 (65536 = 1ppm)
    maxerror:     16000000
    esterror:     16000000
    status:       64 (UNSYNC)
-p  timeconstant: 2
    precision:    1 us
    tolerance:    32768000
-t  tick:         10000 us
    time.tv_sec:  1796173201
    time.tv_usec: 250
    return value: 5 (clock not synchronized)
";

    /// What the bench's container prints: `adjtimex | grep -E '...'`.
    fn grepped(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| l.contains("status:") || l.contains("tv_"))
            .collect()
    }

    #[test]
    fn reads_nanoseconds_when_sta_nano_is_set() {
        for lines in [NANO.lines().collect::<Vec<_>>(), grepped(NANO)] {
            assert_eq!(
                parse_adjtimex(lines.iter().copied()),
                Ok(1_796_294_115_101_842_856)
            );
        }
    }

    #[test]
    fn reads_microseconds_when_sta_nano_is_unset() {
        for lines in [MICRO.lines().collect::<Vec<_>>(), grepped(MICRO)] {
            assert_eq!(
                parse_adjtimex(lines.iter().copied()),
                Ok(1_796_173_201_000_250_000)
            );
        }
    }

    /// Older busybox (1.1x) printed `status:       8256 ( UNSYNC )` and
    /// `-f  frequency:`; the fields read are the same.
    #[test]
    fn reads_the_older_busybox_layout() {
        let lines = [
            "    status:       8257 ( PLL | UNSYNC )",
            "    time.tv_sec:  1796294115",
            "    time.tv_usec: 999999999",
        ];
        assert_eq!(
            parse_adjtimex(lines.iter().copied()),
            Ok(1_796_294_115_999_999_999)
        );
    }

    #[test]
    fn refuses_a_subsecond_field_out_of_its_unit() {
        // The reading (ns) under a status without STA_NANO: not µs.
        let lines = [
            "    status:       64 (UNSYNC)",
            "    time.tv_sec:  1796294115",
            "    time.tv_usec: 666256345",
        ];
        assert_eq!(
            parse_adjtimex(lines.iter().copied()),
            Err(ClockError::SubsecondOutOfRange {
                value: 666_256_345,
                nano: false
            })
        );
        let lines = ["status: 8256", "time.tv_sec: 1", "time.tv_usec: -1"];
        assert!(matches!(
            parse_adjtimex(lines.iter().copied()),
            Err(ClockError::SubsecondOutOfRange { nano: true, .. })
        ));
    }

    #[test]
    fn a_missing_line_is_an_error_of_the_bench() {
        // The command before issue 28 grepped only `tv_`: no status.
        let lines = ["    time.tv_sec:  1796294115", "    time.tv_usec: 250"];
        assert_eq!(
            parse_adjtimex(lines.iter().copied()),
            Err(ClockError::Missing("status:"))
        );
    }

    /// This machine's busybox, if it has one, against its own clock.
    #[test]
    fn agrees_with_this_machines_clock() {
        let Ok(out) = std::process::Command::new("busybox")
            .arg("adjtimex")
            .output()
        else {
            eprintln!("no busybox here: the live check did not run");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        let t = parse_adjtimex(text.lines()).unwrap();
        assert!(
            (now - t).abs() < 5 * NS_PER_S,
            "adjtimex {t} vs now {now}: {text}"
        );
    }

    #[test]
    fn refuses_times_outside_the_pods_life() {
        let s = NS_PER_S;
        // Job created at 100 s, pod seen finished at 104 s, sleep 1.5 s.
        let check = |started| implausible(started, 100 * s, 104 * s, 3 * s / 2);
        assert_eq!(check(101 * s), None);
        assert_eq!(check(100 * s), None);
        assert_eq!(check(104 * s - 3 * s / 2), None);
        assert!(
            check(99 * s)
                .unwrap()
                .contains("before the Job create call")
        );
        assert!(check(103 * s).unwrap().contains("after the latest"));
        // The old parser's error: ns read as µs, up to 1,000 s late.
        assert!(check(101 * s + 666 * s).is_some());
        assert_eq!(
            check(103 * s).unwrap(),
            "main started 0.500 s after the latest it can have (the pod seen finished, less the container's 1.5 s sleep)"
        );
    }

    #[test]
    fn a_window_names_the_event_the_distance_and_the_bound() {
        let s = NS_PER_S;
        let w = |at| outside("it", at, (10 * s, "the start"), (20 * s, "the end"));
        assert_eq!(w(10 * s), None);
        assert_eq!(w(20 * s), None);
        assert_eq!(w(9 * s).unwrap(), "it 1.000 s before the start");
        assert_eq!(w(20 * s + 1_500_000).unwrap(), "it 0.002 s after the end");
    }
}
