//! What the records in a container's state directory hold
//! ([`crate::state_files`]), and the values they are made of.
//!
//! Every record is `key=value` lines, each ending in `\n`, keys in a fixed
//! order:
//!
//! | file | type | content |
//! |---|---|---|
//! | `armed` | [`ArmedRecord`] | `pid=7\nstart_time_ticks=12345\n` |
//! | `seen-<id>` | [`SeenRecord`] | `pid=12\nstart_time_ticks=873455\n` |
//! | `prestop-<id>` | [`PrestopRecord`] | `wrapper_pid=40\n` |
//! | `running-<id>` | [`RunningRecord`] | `attempt=1\nexit_observed_ticks=873600\ncontainer_exit=exit:3\n` |
//! | `done-<id>` | [`DoneRecord`] | `outcome=ran\nattempt=1\nexit_status=0\nstatus=exit 0\nduration_ms=2310\nexit_observed_ticks=873600\ncontainer_exit=exit:3\n` |
//!
//! Readers trim keys and values, ignore lines without `=` and unknown keys,
//! and take the last line of a key written twice. Every container of a pod
//! runs the binary the pod was admitted with, so the records a binary reads
//! are normally its own; still, the records a reader acts on (`running-`,
//! `done-`) read every field as optional, and values a reader does not know
//! are kept verbatim ([`Parsed`]), so that what the termination message
//! passes on is the text as written, whatever wrote it. The tests pin the
//! bytes: pods admitted by an older webhook keep their older binary, and the
//! format is the same in every version.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::exit::{EXIT_COMMAND_NOT_EXECUTABLE, EXIT_COMMAND_NOT_FOUND};

/// A text that is none of the values a type knows (the error of the value
/// types' `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownValue {
    /// What was being parsed (`"outcome"`, `"hook status"`, ...).
    pub what: &'static str,
    /// The text, verbatim.
    pub value: String,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}", self.what, self.value)
    }
}

impl std::error::Error for UnknownValue {}

fn unknown(what: &'static str, value: &str) -> UnknownValue {
    UnknownValue {
        what,
        value: value.to_owned(),
    }
}

/// A value read from a record or a termination message: one this version
/// knows, or the text verbatim (written by another version, or not in the
/// canonical form `T` writes), so that passing it on changes no byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    /// A value this version knows; its text is exactly `T`'s `Display`.
    Known(T),
    /// Any other text, as read.
    Verbatim(String),
}

impl<T: FromStr + fmt::Display> Parsed<T> {
    /// [`Parsed::Known`] when `text` parses as `T` and `T` writes it back
    /// byte for byte; [`Parsed::Verbatim`] otherwise. Never fails.
    pub fn parse(text: &str) -> Self {
        match text.parse::<T>() {
            Ok(v) if v.to_string() == text => Self::Known(v),
            _ => Self::Verbatim(text.to_owned()),
        }
    }
}

impl<T> Parsed<T> {
    /// The known value, `None` for a verbatim text.
    pub fn known(&self) -> Option<&T> {
        match self {
            Self::Known(v) => Some(v),
            Self::Verbatim(_) => None,
        }
    }
}

impl<T: fmt::Display> fmt::Display for Parsed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known(v) => v.fmt(f),
            Self::Verbatim(s) => f.write_str(s),
        }
    }
}

/// The `key=value` lines of a record: keys and values trimmed, lines
/// without `=` ignored, the last of a repeated key kept.
fn fields(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

/// Writes one `key=value\n` line.
fn line(f: &mut fmt::Formatter<'_>, key: &str, value: &impl fmt::Display) -> fmt::Result {
    writeln!(f, "{key}={value}")
}

/// Writes `key=value\n` when there is a value.
fn opt_line(
    f: &mut fmt::Formatter<'_>,
    key: &str,
    value: Option<&impl fmt::Display>,
) -> fmt::Result {
    value.map_or(Ok(()), |v| line(f, key, v))
}

const KEY_PID: &str = "pid";
const KEY_START_TIME: &str = "start_time_ticks";
const KEY_WRAPPER_PID: &str = "wrapper_pid";
const KEY_OUTCOME: &str = "outcome";
const KEY_ATTEMPT: &str = "attempt";
const KEY_EXIT_STATUS: &str = "exit_status";
const KEY_STATUS: &str = "status";
const KEY_DURATION_MS: &str = "duration_ms";
const KEY_EXIT_OBSERVED_TICKS: &str = "exit_observed_ticks";
const KEY_CONTAINER_EXIT: &str = "container_exit";

/// A process named by its PID and its start time (field 22 of
/// `/proc/PID/stat`, clock ticks since boot): `pid=<pid>\nstart_time_ticks=<ticks>\n`.
fn write_process(f: &mut fmt::Formatter<'_>, pid: i32, start_time_ticks: u64) -> fmt::Result {
    line(f, KEY_PID, &pid)?;
    line(f, KEY_START_TIME, &start_time_ticks)
}

/// Reads [`write_process`]'s two fields; `None` when one is missing or
/// malformed, or the PID is not positive.
fn parse_process(text: &str) -> Option<(i32, u64)> {
    let f = fields(text);
    let pid: i32 = f.get(KEY_PID)?.parse().ok()?;
    let start: u64 = f.get(KEY_START_TIME)?.parse().ok()?;
    (pid > 0).then_some((pid, start))
}

/// Content of the watcher's `armed` mark ([`crate::ARMED_FILE`]): the
/// watcher process that wrote it, `pid=<pid>\nstart_time_ticks=<ticks>\n`
/// (its PID as seen through the sidecar container's `/proc`, and field 22 of
/// `/proc/PID/stat`, as in [`crate::instance_id`]).
///
/// The postStart handler runs in the same container as its watcher, so it
/// accepts the mark only while that very process runs (same PID and start
/// time): a mark that a SIGKILLed watcher could not remove never ends the
/// postStart handler of the restarted sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArmedRecord {
    /// The watcher's PID (> 0).
    pub pid: i32,
    /// The watcher's start time, clock ticks since boot.
    pub start_time_ticks: u64,
}

impl ArmedRecord {
    /// Parses a mark's content. `None` when a field is missing or malformed
    /// or the PID is not positive (an empty mark, or one holding only the
    /// PID, as versions before 0.2 wrote it).
    pub fn parse(text: &str) -> Option<Self> {
        parse_process(text).map(|(pid, start_time_ticks)| Self {
            pid,
            start_time_ticks,
        })
    }
}

impl fmt::Display for ArmedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_process(f, self.pid, self.start_time_ticks)
    }
}

/// Content of `seen-<id>`: the instance's process as the watcher found it,
/// `pid=<pid>\nstart_time_ticks=<ticks>\n` (the same fields as its id).
/// Only its existence is acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenRecord {
    /// The container process's PID in the pod's PID namespace (> 0).
    pub pid: i32,
    /// Its start time, clock ticks since boot.
    pub start_time_ticks: u64,
}

impl SeenRecord {
    /// Parses a record's content; `None` when a field is missing or
    /// malformed or the PID is not positive.
    pub fn parse(text: &str) -> Option<Self> {
        parse_process(text).map(|(pid, start_time_ticks)| Self {
            pid,
            start_time_ticks,
        })
    }
}

impl fmt::Display for SeenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_process(f, self.pid, self.start_time_ticks)
    }
}

/// Content of `prestop-<id>`, the mark the `prestop` wrapper writes before
/// it execs the container's preStop: `wrapper_pid=<pid>\n` (its PID in the
/// pod's PID namespace). Only its existence is acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrestopRecord {
    /// The wrapper's PID.
    pub wrapper_pid: u32,
}

impl PrestopRecord {
    /// Parses a mark's content; `None` when the field is missing or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let wrapper_pid = fields(text).get(KEY_WRAPPER_PID)?.parse().ok()?;
        Some(Self { wrapper_pid })
    }
}

impl fmt::Display for PrestopRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        line(f, KEY_WRAPPER_PID, &self.wrapper_pid)
    }
}

/// Content of `prestop-ended-<id>`, written by the `prestop` wrapper once
/// the kubelet's preStop command ended: `exit_status=N\n`, the status as a
/// shell reports it (`128 + signal` for a signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrestopEndedRecord {
    /// The preStop command's status.
    pub exit_status: i32,
}

impl PrestopEndedRecord {
    /// Parses a record's content; `None` when the field is missing or
    /// malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let exit_status = fields(text).get(KEY_EXIT_STATUS)?.parse().ok()?;
        Some(Self { exit_status })
    }
}

impl fmt::Display for PrestopEndedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        line(f, KEY_EXIT_STATUS, &self.exit_status)
    }
}

/// How a hook ended: the `status` of a [`DoneRecord`], `exit 3`,
/// `signal 9`, `command not found` or `command not executable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStatus {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal number.
    Signaled(i32),
    /// The command does not exist (recorded as 127, like a shell).
    NotFound,
    /// The command exists but cannot be executed (recorded as 126).
    NotExecutable,
}

impl HookStatus {
    /// The status as a shell would report it: the exit code, 128 + signal,
    /// [`EXIT_COMMAND_NOT_FOUND`] or [`EXIT_COMMAND_NOT_EXECUTABLE`] (the
    /// record's `exit_status`).
    pub fn code(&self) -> i32 {
        match self {
            Self::Exited(c) => *c,
            Self::Signaled(s) => 128 + s,
            Self::NotFound => EXIT_COMMAND_NOT_FOUND,
            Self::NotExecutable => EXIT_COMMAND_NOT_EXECUTABLE,
        }
    }
}

impl fmt::Display for HookStatus {
    /// `exit 3`, `signal 9`, `command not found`, `command not executable`
    /// (for logs and the record's `status`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(c) => write!(f, "exit {c}"),
            Self::Signaled(s) => write!(f, "signal {s}"),
            Self::NotFound => f.write_str("command not found"),
            Self::NotExecutable => f.write_str("command not executable"),
        }
    }
}

impl FromStr for HookStatus {
    type Err = UnknownValue;

    /// The inverse of `Display`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let num = |n: &str| n.parse::<i32>().map_err(|_| unknown("hook status", s));
        match s {
            "command not found" => Ok(Self::NotFound),
            "command not executable" => Ok(Self::NotExecutable),
            _ => match s.split_once(' ') {
                Some(("exit", n)) => num(n).map(Self::Exited),
                Some(("signal", n)) => num(n).map(Self::Signaled),
                _ => Err(unknown("hook status", s)),
            },
        }
    }
}

/// How the watched container ended, as records and the termination message
/// write it (`container_exit=`): `exit:3`, `signal:9` or `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerEnd {
    /// `exit(code)`: 0–255.
    Exit(u8),
    /// Killed by this signal.
    Signal(i32),
    /// Not known (the kernel could not tell, or the sidecar was down).
    Unknown,
}

impl fmt::Display for ContainerEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exit(c) => write!(f, "exit:{c}"),
            Self::Signal(s) => write!(f, "signal:{s}"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

impl FromStr for ContainerEnd {
    type Err = UnknownValue;

    /// The inverse of `Display`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || unknown("container exit", s);
        match s.split_once(':') {
            _ if s == "unknown" => Ok(Self::Unknown),
            Some(("exit", n)) => n.parse().map(Self::Exit).map_err(|_| err()),
            Some(("signal", n)) => n.parse().map(Self::Signal).map_err(|_| err()),
            _ => Err(err()),
        }
    }
}

/// Why a hook did not run for an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The kubelet ran the container's preStop itself (`prestop-<id>` exists).
    Prestop,
    /// `--run-on` excludes how the container ended.
    RunOn,
}

/// What became of an instance's hook: the `outcome` of a [`DoneRecord`],
/// `ran`, `skipped-prestop`, `skipped-run-on` or `abandoned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The hook ran (or could not start); the record's `status` says how it ended.
    Ran,
    /// The hook did not run.
    Skipped(SkipReason),
    /// The hook was interrupted by sidecar restarts twice and is not retried.
    Abandoned,
}

impl Outcome {
    /// Every value.
    pub const ALL: [Self; 4] = [
        Self::Ran,
        Self::Skipped(SkipReason::Prestop),
        Self::Skipped(SkipReason::RunOn),
        Self::Abandoned,
    ];

    /// The value as records write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ran => "ran",
            Self::Skipped(SkipReason::Prestop) => "skipped-prestop",
            Self::Skipped(SkipReason::RunOn) => "skipped-run-on",
            Self::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = UnknownValue;

    /// Exactly one of [`Outcome::as_str`]'s values.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| unknown("outcome", s))
    }
}

/// Content of `running-<id>`, written when our hook run for an instance
/// starts: `attempt=N\nexit_observed_ticks=T\ncontainer_exit=E\n`. A
/// restarted watcher that finds it without a `done-<id>` retries the run
/// once; the termination message shows it as `hook=running`. Every field is
/// optional when read (see the module docs); the watcher writes all three.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunningRecord {
    /// 1 for a first run, 2 for the one retry.
    pub attempt: Option<u32>,
    /// When the exit was observed, in clock ticks since boot.
    pub exit_observed_ticks: Option<u64>,
    /// How the container ended.
    pub container_exit: Option<Parsed<ContainerEnd>>,
}

impl RunningRecord {
    /// The record the watcher writes: every field set.
    pub fn new(attempt: u32, exit_observed_ticks: u64, container_exit: ContainerEnd) -> Self {
        Self {
            attempt: Some(attempt),
            exit_observed_ticks: Some(exit_observed_ticks),
            container_exit: Some(Parsed::Known(container_exit)),
        }
    }

    /// Parses a record's content; never fails (a missing or malformed
    /// number is `None`).
    pub fn parse(text: &str) -> Self {
        let f = fields(text);
        Self {
            attempt: f.get(KEY_ATTEMPT).and_then(|v| v.parse().ok()),
            exit_observed_ticks: f.get(KEY_EXIT_OBSERVED_TICKS).and_then(|v| v.parse().ok()),
            container_exit: f.get(KEY_CONTAINER_EXIT).map(|v| Parsed::parse(v)),
        }
    }
}

impl fmt::Display for RunningRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        opt_line(f, KEY_ATTEMPT, self.attempt.as_ref())?;
        opt_line(
            f,
            KEY_EXIT_OBSERVED_TICKS,
            self.exit_observed_ticks.as_ref(),
        )?;
        opt_line(f, KEY_CONTAINER_EXIT, self.container_exit.as_ref())
    }
}

/// Content of `done-<id>`, written when our hook run for an instance ended
/// or was skipped or abandoned: `outcome`, `attempt`, for a hook that ran
/// `exit_status` ([`HookStatus::code`]) and `status` ([`HookStatus`]'s
/// text), `duration_ms` when it ran or was skipped by `--run-on`,
/// `exit_observed_ticks` and `container_exit`, in that order. Its existence
/// means the instance needs nothing more; the termination message shows
/// its fields. Every field is optional when read (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DoneRecord {
    /// What became of the hook.
    pub outcome: Option<Parsed<Outcome>>,
    /// The attempt (0 for an instance skipped by recovery, else 1 or 2).
    pub attempt: Option<u32>,
    /// The hook's status as a shell reports it ([`HookStatus::code`]).
    pub exit_status: Option<i32>,
    /// How the hook ended.
    pub status: Option<Parsed<HookStatus>>,
    /// How long the hook ran, in milliseconds.
    pub duration_ms: Option<u64>,
    /// When the container's exit was observed, in clock ticks since boot.
    pub exit_observed_ticks: Option<u64>,
    /// How the container ended.
    pub container_exit: Option<Parsed<ContainerEnd>>,
}

impl DoneRecord {
    /// The record the watcher writes: `exit_status` and `status` from
    /// `status`, when the hook ran.
    pub fn new(
        outcome: Outcome,
        attempt: u32,
        status: Option<HookStatus>,
        duration_ms: Option<u64>,
        exit_observed_ticks: u64,
        container_exit: ContainerEnd,
    ) -> Self {
        Self {
            outcome: Some(Parsed::Known(outcome)),
            attempt: Some(attempt),
            exit_status: status.map(|s| s.code()),
            status: status.map(Parsed::Known),
            duration_ms,
            exit_observed_ticks: Some(exit_observed_ticks),
            container_exit: Some(Parsed::Known(container_exit)),
        }
    }

    /// Parses a record's content; never fails (a missing or malformed
    /// number is `None`, an unknown text [`Parsed::Verbatim`]).
    pub fn parse(text: &str) -> Self {
        let f = fields(text);
        let num = |k: &str| f.get(k).and_then(|v| v.parse().ok());
        Self {
            outcome: f.get(KEY_OUTCOME).map(|v| Parsed::parse(v)),
            attempt: f.get(KEY_ATTEMPT).and_then(|v| v.parse().ok()),
            exit_status: f.get(KEY_EXIT_STATUS).and_then(|v| v.parse().ok()),
            status: f.get(KEY_STATUS).map(|v| Parsed::parse(v)),
            duration_ms: num(KEY_DURATION_MS),
            exit_observed_ticks: num(KEY_EXIT_OBSERVED_TICKS),
            container_exit: f.get(KEY_CONTAINER_EXIT).map(|v| Parsed::parse(v)),
        }
    }
}

impl fmt::Display for DoneRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        opt_line(f, KEY_OUTCOME, self.outcome.as_ref())?;
        opt_line(f, KEY_ATTEMPT, self.attempt.as_ref())?;
        opt_line(f, KEY_EXIT_STATUS, self.exit_status.as_ref())?;
        opt_line(f, KEY_STATUS, self.status.as_ref())?;
        opt_line(f, KEY_DURATION_MS, self.duration_ms.as_ref())?;
        opt_line(
            f,
            KEY_EXIT_OBSERVED_TICKS,
            self.exit_observed_ticks.as_ref(),
        )?;
        opt_line(f, KEY_CONTAINER_EXIT, self.container_exit.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_and_seen_records_are_pinned() {
        let armed = ArmedRecord {
            pid: 7,
            start_time_ticks: 12345,
        };
        assert_eq!(armed.to_string(), "pid=7\nstart_time_ticks=12345\n");
        assert_eq!(ArmedRecord::parse(&armed.to_string()), Some(armed));
        let seen = SeenRecord {
            pid: 12,
            start_time_ticks: 873455,
        };
        assert_eq!(seen.to_string(), "pid=12\nstart_time_ticks=873455\n");
        assert_eq!(
            SeenRecord::parse("pid=12\nstart_time_ticks=873455\n"),
            Some(seen)
        );
        assert_eq!(
            ArmedRecord::parse(" pid = 42 \nnoise\nstart_time_ticks=9001"),
            Some(ArmedRecord {
                pid: 42,
                start_time_ticks: 9001
            })
        );
    }

    #[test]
    fn malformed_armed_records_are_rejected() {
        for bad in [
            "",
            "pid=42\n",
            "start_time_ticks=1\n",
            "pid=0\nstart_time_ticks=1\n",
            "pid=x\nstart_time_ticks=1\n",
            "pid=4\nstart_time_ticks=-1\n",
        ] {
            assert_eq!(ArmedRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prestop_record_is_pinned() {
        let r = PrestopRecord { wrapper_pid: 40 };
        assert_eq!(r.to_string(), "wrapper_pid=40\n");
        assert_eq!(PrestopRecord::parse("wrapper_pid=40\n"), Some(r));
        assert_eq!(PrestopRecord::parse(""), None);
    }

    #[test]
    fn running_record_is_pinned() {
        let r = RunningRecord::new(1, 873600, ContainerEnd::Exit(3));
        let text = "attempt=1\nexit_observed_ticks=873600\ncontainer_exit=exit:3\n";
        assert_eq!(r.to_string(), text);
        assert_eq!(RunningRecord::parse(text), r);
        // An older record with the attempt only, and an unreadable one.
        assert_eq!(
            RunningRecord::parse("attempt=2\n"),
            RunningRecord {
                attempt: Some(2),
                ..RunningRecord::default()
            }
        );
        assert_eq!(RunningRecord::parse("attempt=x\n").attempt, None);
        assert_eq!(RunningRecord::parse("attempt=x\n").to_string(), "");
    }

    #[test]
    fn done_records_are_pinned() {
        let cases = [
            (
                DoneRecord::new(
                    Outcome::Ran,
                    1,
                    Some(HookStatus::Exited(0)),
                    Some(2310),
                    873600,
                    ContainerEnd::Exit(3),
                ),
                "outcome=ran\nattempt=1\nexit_status=0\nstatus=exit 0\nduration_ms=2310\n\
                 exit_observed_ticks=873600\ncontainer_exit=exit:3\n",
            ),
            (
                DoneRecord::new(
                    Outcome::Ran,
                    2,
                    Some(HookStatus::Signaled(15)),
                    Some(5),
                    9,
                    ContainerEnd::Signal(9),
                ),
                "outcome=ran\nattempt=2\nexit_status=143\nstatus=signal 15\nduration_ms=5\n\
                 exit_observed_ticks=9\ncontainer_exit=signal:9\n",
            ),
            (
                DoneRecord::new(
                    Outcome::Ran,
                    1,
                    Some(HookStatus::NotFound),
                    Some(0),
                    9,
                    ContainerEnd::Unknown,
                ),
                "outcome=ran\nattempt=1\nexit_status=127\nstatus=command not found\n\
                 duration_ms=0\nexit_observed_ticks=9\ncontainer_exit=unknown\n",
            ),
            (
                DoneRecord::new(
                    Outcome::Ran,
                    1,
                    Some(HookStatus::NotExecutable),
                    Some(1),
                    9,
                    ContainerEnd::Exit(0),
                ),
                "outcome=ran\nattempt=1\nexit_status=126\nstatus=command not executable\n\
                 duration_ms=1\nexit_observed_ticks=9\ncontainer_exit=exit:0\n",
            ),
            (
                DoneRecord::new(
                    Outcome::Skipped(SkipReason::Prestop),
                    0,
                    None,
                    None,
                    10,
                    ContainerEnd::Unknown,
                ),
                "outcome=skipped-prestop\nattempt=0\nexit_observed_ticks=10\ncontainer_exit=unknown\n",
            ),
            (
                DoneRecord::new(
                    Outcome::Skipped(SkipReason::RunOn),
                    1,
                    None,
                    Some(0),
                    11,
                    ContainerEnd::Exit(0),
                ),
                "outcome=skipped-run-on\nattempt=1\nduration_ms=0\nexit_observed_ticks=11\n\
                 container_exit=exit:0\n",
            ),
            (
                DoneRecord::new(Outcome::Abandoned, 2, None, None, 12, ContainerEnd::Unknown),
                "outcome=abandoned\nattempt=2\nexit_observed_ticks=12\ncontainer_exit=unknown\n",
            ),
        ];
        for (record, text) in cases {
            assert_eq!(record.to_string(), text);
            assert_eq!(DoneRecord::parse(text), record, "{text}");
        }
    }

    #[test]
    fn unknown_values_are_kept_verbatim() {
        let text = "outcome=skipped-later\nstatus=exit +3\ncontainer_exit=oom\nextra=1\n";
        let r = DoneRecord::parse(text);
        assert_eq!(r.outcome, Some(Parsed::Verbatim("skipped-later".into())));
        assert_eq!(r.status, Some(Parsed::Verbatim("exit +3".into())));
        assert_eq!(r.container_exit, Some(Parsed::Verbatim("oom".into())));
        assert_eq!(
            r.to_string(),
            "outcome=skipped-later\nstatus=exit +3\ncontainer_exit=oom\n"
        );
        assert_eq!(DoneRecord::parse(""), DoneRecord::default());
    }

    #[test]
    fn values_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o));
        }
        assert_eq!(
            Outcome::ALL.map(Outcome::as_str),
            ["ran", "skipped-prestop", "skipped-run-on", "abandoned"]
        );
        assert!("Ran".parse::<Outcome>().is_err());
        for s in [
            HookStatus::Exited(0),
            HookStatus::Exited(255),
            HookStatus::Signaled(9),
            HookStatus::NotFound,
            HookStatus::NotExecutable,
        ] {
            assert_eq!(s.to_string().parse::<HookStatus>(), Ok(s));
        }
        for bad in ["exit", "exit x", "signal", "killed 9", ""] {
            assert!(bad.parse::<HookStatus>().is_err(), "{bad}");
        }
        for e in [
            ContainerEnd::Exit(0),
            ContainerEnd::Exit(255),
            ContainerEnd::Signal(9),
            ContainerEnd::Unknown,
        ] {
            assert_eq!(e.to_string().parse::<ContainerEnd>(), Ok(e));
        }
        for bad in ["exit:256", "exit 3", "signal:", "unknown:1", ""] {
            assert!(bad.parse::<ContainerEnd>().is_err(), "{bad}");
        }
        assert_eq!(
            "oom".parse::<ContainerEnd>().map_err(|e| e.to_string()),
            Err("unknown container exit \"oom\"".to_owned())
        );
    }

    #[test]
    fn prestop_ended_record_is_pinned() {
        let r = PrestopEndedRecord { exit_status: 137 };
        assert_eq!(r.to_string(), "exit_status=137\n");
        assert_eq!(PrestopEndedRecord::parse("exit_status=137\n"), Some(r));
        assert_eq!(PrestopEndedRecord::parse("exit_status=x\n"), None);
        assert_eq!(PrestopEndedRecord::parse(""), None);
    }
}
