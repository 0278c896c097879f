//! The sidecar's termination message: one line per hook run of the pod (of
//! every watched container, from the records in the state directories), oldest
//! first, within the kubelet's 4 KiB ([`TERMINATION_MESSAGE_MAX_BYTES`]; the
//! oldest runs are left out first, and the first line says how many).
//!
//! ```text
//! kube-prestop hook runs, oldest first (1 older left out):
//! container=main instance=12-873455 container_exit=exit:3 hook=exit:0 duration_ms=2310 grace_cut=false
//! container=main instance=40-873999 container_exit=exit:0 hook=skipped-run-on duration_ms=0 grace_cut=false
//! container=side instance=55-874000 container_exit=signal:9 hook=running duration_ms=- grace_cut=false
//! ```
//!
//! `hook` is a [`HookToken`]: `exit:N`, `signal:N`, `not-found`,
//! `not-executable`, `skipped-prestop` (the kubelet ran the preStop itself),
//! `skipped-run-on`, `abandoned` (interrupted twice), `running` (another
//! sidecar's hook, still running when this message was written) or `cut`:
//! this sidecar's own hook was still running when SIGTERM came and the
//! message was not rewritten afterwards, i.e. the grace period's SIGKILL
//! ended it (`grace_cut=true`); or `missed`, instance `-`: the sidecar was
//! stopped without ever having seen its container run, and whether the
//! runtime created it could not be told (a run created but not seen is a
//! late run instead, below). The watcher rewrites the message after each
//! run and on SIGTERM; the kubelet reads it when the sidecar has stopped.
//!
//! A *late* run (the watcher never saw the container run, and ran its hook
//! at its own stop with `KUBE_PRESTOP_LATE=1`, [`crate::ENV_HOOK_LATE`]) is
//! the line of instance `0-0` ([`crate::UNSEEN_INSTANCE_ID`]; PID 0 is no
//! process of the pod, so no other run has it), with `container_exit=unknown`
//! since its exit status was never read; [`RunLine::is_late`] reads it. The
//! line carries no other field for it, so every reader of the six fields
//! reads late runs' lines, and every sidecar that runs late hooks has
//! written them so:
//!
//! ```text
//! container=main instance=0-0 container_exit=unknown hook=exit:0 duration_ms=0 grace_cut=false
//! ```

use std::fmt;

use crate::record::{ContainerEnd, DoneRecord, HookStatus, Outcome, Parsed, SkipReason};

/// The sidecar's `terminationMessagePath`, where the watcher writes the
/// summary of the pod's hook runs (the kubelet's default path, set
/// explicitly by the webhook).
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The kubelet's limit on one container's termination message (bytes):
/// `getTerminationMessage` in `pkg/kubelet/kuberuntime/kuberuntime_container.go`
/// reads the file's last `kubecontainer.MaxContainerTerminationMessageLength`
/// (4 KiB) bytes. The watcher keeps its message within it (newest runs last).
pub const TERMINATION_MESSAGE_MAX_BYTES: usize = 4096;
/// The kubelet's limit on the termination messages of one pod (bytes), split
/// evenly among its containers and init containers: `normalizeStatus` in
/// `pkg/kubelet/status/status_manager.go` (v1.37) keeps the *first*
/// `MaxPodTerminationMessageLogLength / (len(containers) +
/// len(initContainers))` bytes of each message
/// (`pkg/kubelet/container/runtime.go`: `MaxPodTerminationMessageLogLength
/// = 1024 * 12`).
pub const POD_TERMINATION_MESSAGES_MAX_BYTES: usize = 12 * 1024;

/// The bytes of its termination message that the kubelet keeps for one
/// container of a pod with `pod_containers` containers and init containers
/// (the injected ones included): the lesser of
/// [`TERMINATION_MESSAGE_MAX_BYTES`] and an even share of
/// [`POD_TERMINATION_MESSAGES_MAX_BYTES`]. 4,096 for up to 3 containers,
/// 3,072 for 4, 1,228 for 10; `0` counts as 1.
pub fn termination_message_budget(pod_containers: usize) -> usize {
    (POD_TERMINATION_MESSAGES_MAX_BYTES / pod_containers.max(1)).min(TERMINATION_MESSAGE_MAX_BYTES)
}

/// The `hook=` value of a [`RunLine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookToken {
    /// The hook ran: `exit:N`, `signal:N`, `not-found`, `not-executable`.
    Ended(HookStatus),
    /// The hook did not run: `skipped-prestop`, `skipped-run-on`.
    Skipped(SkipReason),
    /// `abandoned`: interrupted by sidecar restarts twice.
    Abandoned,
    /// `running`: started (a `running-<id>` record) and not done.
    Running,
    /// `cut`: this sidecar's hook was running when SIGTERM came.
    Cut,
    /// `missed`: the sidecar was stopped without ever having seen the
    /// container run, and whether the runtime created it could not be told
    /// (it may not have run; if it did, its hook did not run). A run the
    /// runtime created but the sidecar did not see gets a late run
    /// instead. The line's instance is `-`.
    Missed,
    /// `unknown`: a `done-<id>` record without an outcome, or `ran` without
    /// a status.
    Unknown,
    /// A record's outcome or status this version does not know, passed on
    /// as records wrote it (spaces turned into `:` for a status).
    Verbatim(String),
}

impl HookToken {
    /// The token of a `done-<id>` record: its status for a hook that ran,
    /// else its outcome.
    pub fn of_done(record: &DoneRecord) -> Self {
        match &record.outcome {
            Some(Parsed::Known(Outcome::Ran)) => match &record.status {
                Some(Parsed::Known(s)) => Self::Ended(*s),
                Some(Parsed::Verbatim(s)) => Self::Verbatim(s.replace(' ', ":")),
                None => Self::Unknown,
            },
            Some(Parsed::Known(Outcome::Skipped(r))) => Self::Skipped(*r),
            Some(Parsed::Known(Outcome::Abandoned)) => Self::Abandoned,
            Some(Parsed::Verbatim(o)) => Self::Verbatim(o.clone()),
            None => Self::Unknown,
        }
    }

    /// Reads a token as [`HookToken`]'s `Display` writes it; any other text
    /// is [`HookToken::Verbatim`].
    pub fn parse(text: &str) -> Self {
        let status = match text {
            "not-found" => Some(HookStatus::NotFound),
            "not-executable" => Some(HookStatus::NotExecutable),
            _ => text
                .replacen(':', " ", 1)
                .parse::<HookStatus>()
                .ok()
                .filter(|s| matches!(s, HookStatus::Exited(_) | HookStatus::Signaled(_))),
        };
        let token = match (status, text) {
            (Some(s), _) => Self::Ended(s),
            (None, "running") => Self::Running,
            (None, "cut") => Self::Cut,
            (None, "missed") => Self::Missed,
            (None, "unknown") => Self::Unknown,
            (None, "abandoned") => Self::Abandoned,
            (None, _) => match text.parse::<Outcome>() {
                Ok(Outcome::Skipped(r)) => Self::Skipped(r),
                _ => Self::Verbatim(text.to_owned()),
            },
        };
        if token.to_string() == text {
            token
        } else {
            Self::Verbatim(text.to_owned())
        }
    }
}

impl fmt::Display for HookToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ended(HookStatus::Exited(c)) => write!(f, "exit:{c}"),
            Self::Ended(HookStatus::Signaled(s)) => write!(f, "signal:{s}"),
            Self::Ended(HookStatus::NotFound) => f.write_str("not-found"),
            Self::Ended(HookStatus::NotExecutable) => f.write_str("not-executable"),
            Self::Skipped(r) => Outcome::Skipped(*r).fmt(f),
            Self::Abandoned => Outcome::Abandoned.fmt(f),
            Self::Running => f.write_str("running"),
            Self::Cut => f.write_str("cut"),
            Self::Missed => f.write_str("missed"),
            Self::Unknown => f.write_str("unknown"),
            Self::Verbatim(s) => f.write_str(s),
        }
    }
}

/// One line of the message, one hook run (without its `\n`):
/// `container=C instance=ID container_exit=E hook=H duration_ms=MS|- grace_cut=true|false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLine {
    /// The watched container (a DNS label).
    pub container: String,
    /// The instance id ([`crate::instance_id`]).
    pub instance: String,
    /// How the container ended.
    pub container_exit: Parsed<ContainerEnd>,
    /// What became of the hook.
    pub hook: HookToken,
    /// How long the hook ran, in ms, when it ended (`-` otherwise).
    pub duration_ms: Option<u64>,
    /// The grace period's SIGKILL ended it.
    pub grace_cut: bool,
}

impl RunLine {
    /// Parses a line as `Display` writes it (the six fields in that order,
    /// one space apart, no `\n`). `None` for any other line.
    pub fn parse(line: &str) -> Option<Self> {
        let mut parts = line.split(' ');
        let mut field = |key: &str| {
            parts
                .next()
                .and_then(|p| p.strip_prefix(key))
                .and_then(|p| p.strip_prefix('='))
        };
        let container = field("container")?.to_owned();
        let instance = field("instance")?.to_owned();
        let container_exit = Parsed::parse(field("container_exit")?);
        let hook = HookToken::parse(field("hook")?);
        let duration_ms = match field("duration_ms")? {
            "-" => None,
            ms => Some(ms.parse().ok()?),
        };
        let grace_cut = field("grace_cut")?.parse().ok()?;
        let parsed = Self {
            container,
            instance,
            container_exit,
            hook,
            duration_ms,
            grace_cut,
        };
        (parts.next().is_none() && parsed.to_string() == line).then_some(parsed)
    }

    /// Whether this is a *late* run's line: instance
    /// [`crate::UNSEEN_INSTANCE_ID`] (`0-0`), the run of the container that
    /// the watcher never saw, whose hook ran (or was skipped, or cut) at the
    /// sidecar's stop with [`crate::ENV_HOOK_LATE`]. `false` for every other
    /// line, a `missed` one (instance `-`) included.
    pub fn is_late(&self) -> bool {
        self.instance == crate::UNSEEN_INSTANCE_ID
    }
}

impl fmt::Display for RunLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "container={} instance={} container_exit={} hook={} duration_ms=",
            self.container, self.instance, self.container_exit, self.hook
        )?;
        match self.duration_ms {
            Some(ms) => write!(f, "{ms}")?,
            None => f.write_str("-")?,
        }
        write!(f, " grace_cut={}", self.grace_cut)
    }
}

/// A hook run to show: its line, and when the container's exit was
/// observed (clock ticks since boot), which orders the lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// The line.
    pub line: RunLine,
    /// When the exit was observed, in clock ticks since boot (not shown).
    pub exit_ticks: u64,
}

/// The shortest line [`render`] can write for a run, `\n` included: a
/// one-letter container, a three-character instance (`0-0`, `1-0`), empty
/// `container_exit` and `hook` (a record's unknown values are passed on
/// verbatim, and could be empty), `duration_ms=-`, `grace_cut=false`:
/// `container=a instance=0-0 container_exit= hook= duration_ms=- grace_cut=false`.
pub const MIN_RUN_LINE_BYTES: usize = 77;

/// The shortest first line of a message (none left out), `\n` included.
pub const MIN_HEADER_BYTES: usize = 38;

/// The most runs one message can show: [`TERMINATION_MESSAGE_MAX_BYTES`]
/// less the shortest header, in lines of [`MIN_RUN_LINE_BYTES`] (52).
/// A reader of the records needs no more than the newest this many runs of
/// any one container: older ones could never be shown.
pub const MAX_RUNS_SHOWN: usize =
    (TERMINATION_MESSAGE_MAX_BYTES - MIN_HEADER_BYTES) / MIN_RUN_LINE_BYTES;

/// The message's first line when `left_out` older runs did not fit.
fn header(left_out: usize) -> String {
    if left_out == 0 {
        "kube-prestop hook runs, oldest first:\n".to_owned()
    } else {
        format!("kube-prestop hook runs, oldest first ({left_out} older left out):\n")
    }
}

/// The message for `runs` (any order), at most `max` bytes: oldest first
/// (by exit time, then container, then instance); when they do not fit, the
/// oldest are left out and the header says how many. Empty when there are
/// no runs. [`render_with_left_out`] with none left out before and no
/// container preferred.
pub fn render(runs: &[HookRun], max: usize) -> String {
    render_with_left_out(runs, 0, None, max)
}

/// [`render`] for `runs` that are what was kept of more: `left_out` runs
/// were already left out by the caller (the sidecar reads only the newest
/// runs of each state directory, `collect`), and the header counts them
/// with the ones that do not fit. Empty when there are no runs.
///
/// With `own` (the watched container of the sidecar writing the message),
/// the runs of other containers are left out first, oldest first, and
/// `own`'s only when no other's is left: another container decides its
/// own lines, their `exit_observed_ticks` included, so without it one that
/// planted enough runs with late exit times in its state directory would
/// fill the message and leave out all of `own`'s. Then the header's count
/// ("N older left out") may include runs newer than some shown.
pub fn render_with_left_out(
    runs: &[HookRun],
    left_out: usize,
    own: Option<&str>,
    max: usize,
) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<&HookRun> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        (a.exit_ticks, &a.line.container, &a.line.instance).cmp(&(
            b.exit_ticks,
            &b.line.container,
            &b.line.instance,
        ))
    });
    let lines: Vec<String> = sorted.iter().map(|r| format!("{}\n", r.line)).collect();
    // The bytes of the lines kept, less each line left out as it goes: one
    // pass over other containers' lines, then one over `own`'s (summing
    // what is left again for each line left out took minutes at SIGTERM
    // for the 200,000 records a container can plant in its own state
    // directory, which every sidecar of the pod reads).
    let mut body: usize = lines.iter().map(String::len).sum();
    let mut kept = vec![true; lines.len()];
    let mut skip = 0;
    for owns in [false, true] {
        for (i, r) in sorted.iter().enumerate() {
            if header(left_out + skip).len() + body <= max {
                break;
            }
            if (own == Some(r.line.container.as_str())) == owns {
                kept[i] = false;
                body -= lines[i].len();
                skip += 1;
            }
        }
    }
    let mut out = header(left_out + skip);
    for (l, k) in lines.iter().zip(&kept) {
        if *k {
            out.push_str(l);
        }
    }
    if out.len() > max {
        // Only the header is left and even it does not fit (tiny `max`).
        let mut cut = max;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// The start of the message's first line, with or without the count of runs
/// left out (see [`render`]).
const HEADER_START: &str = "kube-prestop hook runs, oldest first";

/// A termination message as a reader sees it ([`parse_message`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// Runs the writer left out (the header's count; 0 without one).
    pub left_out: usize,
    /// The lines that parse as [`RunLine`], in the message's order.
    pub runs: Vec<RunLine>,
    /// Lines that do not: another writer's text, or the last line cut short
    /// by the kubelet (which keeps the *first* bytes of each message when a
    /// pod's messages exceed [`POD_TERMINATION_MESSAGES_MAX_BYTES`]).
    pub unreadable_lines: usize,
}

/// Why a text is not a termination message of kube-prestop's sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageError {
    /// Longer than [`TERMINATION_MESSAGE_MAX_BYTES`]: no sidecar writes it,
    /// and the kubelet keeps no more.
    TooLarge,
    /// The first line is not [`render`]'s header.
    NoHeader,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TooLarge => "termination message over 4096 bytes",
            Self::NoHeader => "not a kube-prestop termination message (no header)",
        })
    }
}

impl std::error::Error for MessageError {}

/// Reads a message as [`render`] writes it: the header, then one
/// [`RunLine`] per line. The empty text (no runs) is an empty message.
/// Never panics, whatever the text: a line that is not a run line is
/// counted in [`Message::unreadable_lines`], not an error.
///
/// Errors: [`MessageError::TooLarge`] over
/// [`TERMINATION_MESSAGE_MAX_BYTES`]; [`MessageError::NoHeader`] when the
/// first line is not the header.
pub fn parse_message(text: &str) -> Result<Message, MessageError> {
    if text.len() > TERMINATION_MESSAGE_MAX_BYTES {
        return Err(MessageError::TooLarge);
    }
    if text.is_empty() {
        return Ok(Message::default());
    }
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or_default();
    let left_out = match first.strip_prefix(HEADER_START) {
        Some(":") => 0,
        Some(rest) => rest
            .strip_prefix(" (")
            .and_then(|r| r.strip_suffix(" older left out):"))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| header(*n).trim_end_matches('\n') == first)
            .ok_or(MessageError::NoHeader)?,
        None => return Err(MessageError::NoHeader),
    };
    let mut message = Message {
        left_out,
        ..Message::default()
    };
    for line in lines.filter(|l| !l.is_empty()) {
        match RunLine::parse(line) {
            Some(run) => message.runs.push(run),
            None => message.unreadable_lines += 1,
        }
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run(c: &str, id: &str, ticks: u64) -> HookRun {
        HookRun {
            line: RunLine {
                container: c.into(),
                instance: id.into(),
                container_exit: Parsed::Known(ContainerEnd::Exit(3)),
                hook: HookToken::Ended(HookStatus::Exited(0)),
                duration_ms: Some(12),
                grace_cut: false,
            },
            exit_ticks: ticks,
        }
    }

    #[test]
    fn oldest_first_and_within_the_limit() {
        let runs = vec![run("b", "2-2", 20), run("a", "1-1", 10)];
        let m = render(&runs, 4096);
        assert_eq!(
            m,
            "kube-prestop hook runs, oldest first:\n\
             container=a instance=1-1 container_exit=exit:3 hook=exit:0 duration_ms=12 grace_cut=false\n\
             container=b instance=2-2 container_exit=exit:3 hook=exit:0 duration_ms=12 grace_cut=false\n"
        );
        assert_eq!(render(&[], 4096), "");
        let many: Vec<HookRun> = (0..200)
            .map(|i| run("main", &format!("{i}-{i}"), i))
            .collect();
        let m = render(&many, TERMINATION_MESSAGE_MAX_BYTES);
        assert!(m.len() <= TERMINATION_MESSAGE_MAX_BYTES);
        // A pod of 10 containers: the kubelet keeps 1,228 bytes of each.
        let budget = termination_message_budget(10);
        assert_eq!(budget, 1228);
        let m = render(&many, budget);
        assert!(m.len() <= budget, "{}", m.len());
        assert!(
            m.starts_with("kube-prestop hook runs, oldest first ("),
            "{m}"
        );
        assert!(m.ends_with("container=main instance=199-199 container_exit=exit:3 hook=exit:0 duration_ms=12 grace_cut=false\n"), "{m}");
        // The newest is kept, the oldest left out and counted.
        assert!(m.contains("instance=199-199 "));
        assert!(!m.contains("instance=0-0 "));
        let kept = m.lines().count() - 1;
        assert!(m.starts_with(&format!(
            "kube-prestop hook runs, oldest first ({} older left out):\n",
            200 - kept
        )));
        assert!(render(&many, 10).len() <= 10);
        assert_eq!(render(&many, 10), "kube-prest");
    }

    #[test]
    fn runs_left_out_before_are_counted_in_the_header() {
        let runs = vec![run("a", "1-1", 10)];
        let m = render_with_left_out(&runs, 7, None, 4096);
        assert!(
            m.starts_with("kube-prestop hook runs, oldest first (7 older left out):\n"),
            "{m}"
        );
        assert_eq!(parse_message(&m).unwrap().left_out, 7);
        let many: Vec<HookRun> = (0..200)
            .map(|i| run("main", &format!("{i}-{i}"), i))
            .collect();
        let m = render_with_left_out(&many, 1000, None, 1228);
        let parsed = parse_message(&m).unwrap();
        assert_eq!(parsed.left_out + parsed.runs.len(), 1200);
        assert_eq!(render_with_left_out(&[], 5, None, 4096), "");
    }

    /// Another container's runs with later exit times (planted, in a
    /// state directory it writes) fill the message: the watched
    /// container's own runs are kept, theirs left out first.
    #[test]
    fn the_own_containers_runs_are_left_out_last() {
        let mut runs: Vec<HookRun> = (0..100)
            .map(|i| run("other", &format!("{}-{i}", i + 1), u64::MAX - 100 + i))
            .collect();
        runs.push(run("main", "7-7", 5));
        runs.push(run("main", "8-8", 6));
        let without = render(&runs, 1228);
        assert!(!without.contains("container=main "), "{without}");
        let m = render_with_left_out(&runs, 3, Some("main"), 1228);
        assert!(m.len() <= 1228);
        let parsed = parse_message(&m).unwrap();
        let mine: Vec<&str> = parsed
            .runs
            .iter()
            .filter(|r| r.container == "main")
            .map(|r| r.instance.as_str())
            .collect();
        assert_eq!(mine, ["7-7", "8-8"]);
        // Oldest first still, the newest of the others kept after them.
        assert_eq!(parsed.runs[0].instance, "7-7");
        assert_eq!(parsed.runs.last().unwrap().instance, "100-99");
        assert_eq!(parsed.left_out + parsed.runs.len(), 3 + 102);
        // `own` alone past the limit: its oldest left out too.
        let mine_only: Vec<HookRun> = (0..200)
            .map(|i| run("main", &format!("{i}-{i}"), i))
            .collect();
        assert_eq!(
            render_with_left_out(&mine_only, 0, Some("main"), 1228),
            render(&mine_only, 1228)
        );
    }

    #[test]
    fn no_line_is_shorter_than_min_run_line_bytes() {
        let shortest = RunLine {
            container: "a".into(),
            instance: "0-0".into(),
            container_exit: Parsed::Verbatim(String::new()),
            hook: HookToken::Verbatim(String::new()),
            duration_ms: None,
            grace_cut: false,
        };
        assert_eq!(format!("{shortest}\n").len(), MIN_RUN_LINE_BYTES);
        assert_eq!(header(0).len(), MIN_HEADER_BYTES);
    }

    /// Many runs (a container can plant any number of records in its own
    /// state directory, which every sidecar of the pod summarises) are
    /// rendered within the limit, newest kept. In one pass: 200,000 took a
    /// debug build's watcher over ten minutes at SIGTERM when each line
    /// left out summed the rest again (this test then ran as long; no
    /// clock is asserted here, speed is for benchmarks).
    #[test]
    fn many_runs_render_within_the_limit() {
        let runs: Vec<HookRun> = (0..200_000u64)
            .map(|i| run("main", &format!("{}-{}", i + 2, i + 100), i))
            .collect();
        let message = render(&runs, TERMINATION_MESSAGE_MAX_BYTES);
        assert!(message.len() <= TERMINATION_MESSAGE_MAX_BYTES);
        let parsed = parse_message(&message).unwrap();
        assert_eq!(parsed.left_out + parsed.runs.len(), runs.len());
        assert_eq!(
            parsed.runs.last().map(|r| r.instance.as_str()),
            Some("200001-200099")
        );
    }

    #[test]
    fn lines_are_pinned_and_parse_back() {
        let cut = RunLine {
            container: "side".into(),
            instance: "55-874000".into(),
            container_exit: Parsed::Known(ContainerEnd::Signal(9)),
            hook: HookToken::Cut,
            duration_ms: None,
            grace_cut: true,
        };
        let text = "container=side instance=55-874000 container_exit=signal:9 hook=cut duration_ms=- grace_cut=true";
        assert_eq!(cut.to_string(), text);
        assert_eq!(RunLine::parse(text), Some(cut));
        for text in [
            "container=main instance=12-873455 container_exit=exit:3 hook=exit:0 duration_ms=2310 grace_cut=false",
            "container=main instance=40-873999 container_exit=exit:0 hook=skipped-run-on duration_ms=0 grace_cut=false",
            "container=side instance=55-874000 container_exit=unknown hook=running duration_ms=- grace_cut=false",
            "container=a instance=1-1 container_exit=unknown hook=skipped-prestop duration_ms=- grace_cut=false",
            "container=a instance=1-1 container_exit=unknown hook=abandoned duration_ms=- grace_cut=false",
            "container=a instance=1-1 container_exit=exit:1 hook=not-found duration_ms=0 grace_cut=false",
            "container=a instance=1-1 container_exit=exit:1 hook=not-executable duration_ms=0 grace_cut=false",
            "container=a instance=1-1 container_exit=exit:1 hook=signal:15 duration_ms=9 grace_cut=false",
            "container=a instance=1-1 container_exit=oom hook=later duration_ms=9 grace_cut=false",
        ] {
            let line = RunLine::parse(text);
            assert_eq!(line.map(|l| l.to_string()).as_deref(), Some(text));
        }
        for bad in [
            "",
            "container=a instance=1-1 container_exit=exit:1 hook=cut duration_ms=x grace_cut=false",
            "container=a instance=1-1 container_exit=exit:1 hook=cut duration_ms=- grace_cut=no",
            "container=a instance=1-1 container_exit=exit:1 hook=cut duration_ms=- grace_cut=true extra=1",
            "instance=1-1 container=a container_exit=exit:1 hook=cut duration_ms=- grace_cut=true",
        ] {
            assert_eq!(RunLine::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_of_done_records() {
        let token = |text: &str| HookToken::of_done(&DoneRecord::parse(text)).to_string();
        assert_eq!(token("outcome=ran\nstatus=exit 2\n"), "exit:2");
        assert_eq!(token("outcome=ran\nstatus=signal 9\n"), "signal:9");
        assert_eq!(
            token("outcome=ran\nstatus=command not found\n"),
            "not-found"
        );
        assert_eq!(
            token("outcome=ran\nstatus=command not executable\n"),
            "not-executable"
        );
        assert_eq!(token("outcome=ran\nstatus=stopped by 3\n"), "stopped:by:3");
        assert_eq!(token("outcome=ran\n"), "unknown");
        assert_eq!(token("outcome=skipped-prestop\n"), "skipped-prestop");
        assert_eq!(token("outcome=skipped-run-on\n"), "skipped-run-on");
        assert_eq!(token("outcome=abandoned\n"), "abandoned");
        assert_eq!(token("outcome=later\n"), "later");
        assert_eq!(token(""), "unknown");
        for t in [
            HookToken::Ended(HookStatus::Exited(0)),
            HookToken::Ended(HookStatus::Signaled(9)),
            HookToken::Ended(HookStatus::NotFound),
            HookToken::Ended(HookStatus::NotExecutable),
            HookToken::Skipped(SkipReason::Prestop),
            HookToken::Skipped(SkipReason::RunOn),
            HookToken::Abandoned,
            HookToken::Running,
            HookToken::Cut,
            HookToken::Missed,
            HookToken::Unknown,
        ] {
            assert_eq!(HookToken::parse(&t.to_string()), t);
        }
        assert_eq!(
            HookToken::parse("exit:+1"),
            HookToken::Verbatim("exit:+1".into())
        );
        assert_eq!(HookToken::parse("ran"), HookToken::Verbatim("ran".into()));
    }
    #[test]
    fn messages_parse_back() {
        let runs = vec![run("b", "2-2", 20), run("a", "1-1", 10)];
        let m = parse_message(&render(&runs, 4096)).unwrap();
        assert_eq!(m.left_out, 0);
        assert_eq!(m.unreadable_lines, 0);
        assert_eq!(
            m.runs,
            vec![run("a", "1-1", 10).line, run("b", "2-2", 20).line]
        );
        assert_eq!(parse_message(""), Ok(Message::default()));
        // Left out: the header's count.
        let many: Vec<HookRun> = (0..200)
            .map(|i| run("main", &format!("{i}-{i}"), i))
            .collect();
        let text = render(&many, 1228);
        let m = parse_message(&text).unwrap();
        assert_eq!(m.left_out + m.runs.len(), 200);
        assert!(m.left_out > 0);
        assert_eq!(m.unreadable_lines, 0);
        // The kubelet keeps the first bytes: the last line cut short is
        // unreadable, the others are kept.
        let cut = &text[..text.len() - 10];
        let m2 = parse_message(cut).unwrap();
        assert_eq!(m2.runs.len(), m.runs.len() - 1);
        assert_eq!(m2.unreadable_lines, 1);
        // A missed line (instance `-`).
        let missed = "kube-prestop hook runs, oldest first:\n\
             container=main instance=- container_exit=unknown hook=missed duration_ms=- grace_cut=false\n";
        let m = parse_message(missed).unwrap();
        assert_eq!(m.runs.len(), 1);
        assert_eq!(m.runs[0].hook, HookToken::Missed);
        assert_eq!(m.runs[0].instance, "-");
    }

    #[test]
    fn late_runs_are_the_lines_of_instance_0_0() {
        // Lines as the sidecar writes them (its namespace tests,
        // sidecar/tests/late.rs and hook_context.rs): a late run beside a
        // seen one; a late run the kubelet's preStop answered, a late hook
        // cut by the grace period, one that could not start; and seen runs
        // and a miss, as sidecars from before late hooks write them too.
        let late = "kube-prestop hook runs, oldest first:\n\
             container=main instance=0-0 container_exit=unknown hook=exit:0 duration_ms=0 grace_cut=false\n\
             container=upload instance=19-4407228 container_exit=exit:1 hook=exit:0 duration_ms=1 grace_cut=false\n";
        let m = parse_message(late).unwrap();
        assert_eq!(m.unreadable_lines, 0);
        let lates: Vec<(&str, bool)> = m
            .runs
            .iter()
            .map(|r| (r.container.as_str(), r.is_late()))
            .collect();
        assert_eq!(lates, [("main", true), ("upload", false)]);
        for (text, hook) in [
            (
                "container=main instance=0-0 container_exit=unknown hook=skipped-prestop duration_ms=- grace_cut=false",
                HookToken::Skipped(SkipReason::Prestop),
            ),
            (
                "container=main instance=0-0 container_exit=unknown hook=cut duration_ms=- grace_cut=true",
                HookToken::Cut,
            ),
            (
                "container=main instance=0-0 container_exit=unknown hook=not-found duration_ms=0 grace_cut=false",
                HookToken::Ended(HookStatus::NotFound),
            ),
        ] {
            let line = RunLine::parse(text).unwrap();
            assert!(line.is_late(), "{text}");
            assert_eq!(line.hook, hook);
            assert_eq!(line.to_string(), text);
        }
        let older = "kube-prestop hook runs, oldest first:\n\
             container=main instance=4-4407224 container_exit=exit:0 hook=skipped-run-on duration_ms=0 grace_cut=false\n\
             container=main instance=4-4407202 container_exit=exit:0 hook=cut duration_ms=- grace_cut=true\n\
             container=side instance=- container_exit=unknown hook=missed duration_ms=- grace_cut=false\n";
        let m = parse_message(older).unwrap();
        assert_eq!(m.runs.len(), 3);
        assert_eq!(m.unreadable_lines, 0);
        assert!(m.runs.iter().all(|r| !r.is_late()));
        // Only `0-0` itself: neither a PID 0 of another start time nor a
        // longer id that merely contains it.
        for instance in ["0-1", "10-0", "0-00", "-"] {
            let text = format!(
                "container=main instance={instance} container_exit=unknown hook=exit:0 duration_ms=1 grace_cut=false"
            );
            assert!(!RunLine::parse(&text).unwrap().is_late(), "{text}");
        }
    }

    #[test]
    fn hostile_messages_are_refused_or_counted() {
        assert_eq!(parse_message("hello"), Err(MessageError::NoHeader));
        assert_eq!(
            parse_message("kube-prestop hook runs, oldest first (x older left out):\n"),
            Err(MessageError::NoHeader)
        );
        assert_eq!(
            parse_message("kube-prestop hook runs, oldest first (01 older left out):\n"),
            Err(MessageError::NoHeader)
        );
        assert_eq!(
            parse_message("kube-prestop hook runs, oldest first:extra\n"),
            Err(MessageError::NoHeader)
        );
        let big = format!(
            "kube-prestop hook runs, oldest first:\n{}",
            "x".repeat(TERMINATION_MESSAGE_MAX_BYTES)
        );
        assert_eq!(parse_message(&big), Err(MessageError::TooLarge));
        let m = parse_message(
            "kube-prestop hook runs, oldest first:\ngarbage\n\u{0}\u{7f}é\ncontainer=a instance=1-1 container_exit=exit:0 hook=exit:0 duration_ms=1 grace_cut=false",
        )
        .unwrap();
        assert_eq!(m.unreadable_lines, 2);
        assert_eq!(m.runs.len(), 1);
        assert_eq!(
            parse_message("kube-prestop hook runs, oldest first (3 older left out):")
                .unwrap()
                .left_out,
            3
        );
    }
}
