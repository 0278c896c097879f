//! The per-container state directory (its own state volume) and the names of
//! its files: `<root>/state/<container>/armed` and one record per instance
//! and kind (`seen-<id>`, `prestop-<id>`, `running-<id>`, `done-<id>`). What
//! the records hold is in [`crate::record`].

use std::fmt;
use std::path::{Path, PathBuf};

/// The state directory of `container` under the mount path of ours
/// `root`: `<root>/state/<container>` (where its state volume is mounted).
pub fn state_dir(root: &Path, container: &str) -> PathBuf {
    root.join(crate::STATE_DIR).join(container)
}

/// File name, inside a container's state directory, of the mark the watcher
/// writes once it is armed; the sidecar's postStart handler
/// ([`crate::post_start_command`]) waits for it, and
/// [`crate::probe_command`] checks it. Its content names the watcher process
/// ([`crate::ArmedRecord`]).
pub const ARMED_FILE: &str = "armed";

/// Name of one instance of a container: `<pid>-<starttime>`, from the
/// container process's PID (in the pod's PID namespace) and field 22 of
/// `/proc/PID/stat` (start time in clock ticks since boot). The pair is unique
/// for the life of the node, so restarts and PID reuse never alias.
pub fn instance_id(pid: i32, start_time_ticks: u64) -> String {
    format!("{pid}-{start_time_ticks}")
}

/// The instance id of a *late* run ([`crate::ENV_HOOK_LATE`]): a run of the
/// container that the watcher never saw, so whose PID and start time it does
/// not know. PID 0 is never a process of the pod, so it names no real
/// instance; [`instance_id`]`(0, 0)`.
pub const UNSEEN_INSTANCE_ID: &str = "0-0";

/// Splits an instance id built by [`instance_id`] into PID (> 0) and start
/// time (clock ticks since boot), or [`UNSEEN_INSTANCE_ID`] into `(0, 0)`.
/// `None` when `id` is not of that shape.
pub fn parse_instance_id(id: &str) -> Option<(i32, u64)> {
    if id == UNSEEN_INSTANCE_ID {
        return Some((0, 0));
    }
    let (pid, start) = id.split_once('-')?;
    let pid: i32 = pid.parse().ok()?;
    let start: u64 = start.parse().ok()?;
    (pid > 0).then_some((pid, start))
}

/// The kinds of per-instance record in a state directory; each record's file
/// is `<prefix><instance id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// `seen-<id>`: the watcher found the instance
    /// ([`crate::SeenRecord`]). After a sidecar restart, a `seen-<id>`
    /// whose process is gone and that has neither `done-<id>` nor
    /// `prestop-<id>` is an exit that happened while the sidecar was down:
    /// its hook still runs.
    Seen,
    /// `prestop-<id>`: the kubelet started the container's preStop, the
    /// wrapper's mark ([`crate::PrestopRecord`]).
    Prestop,
    /// `prestop-ended-<id>`: the kubelet's preStop command ended, written by
    /// the wrapper after it ([`crate::PrestopEndedRecord`]). A `prestop-<id>`
    /// without it, whose wrapper is gone, is a preStop cut short: the
    /// runtime killed it with the container (containerd's shim kills every
    /// process of a container that shares the pod's PID namespace when its
    /// init process exits).
    PrestopEnded,
    /// `running-<id>`: our hook run for the instance started
    /// ([`crate::RunningRecord`]; retry bookkeeping).
    Running,
    /// `done-<id>`: our hook run for the instance finished, or was skipped
    /// or abandoned ([`crate::DoneRecord`]).
    Done,
}

impl RecordKind {
    /// Every kind.
    pub const ALL: [Self; 5] = [
        Self::Seen,
        Self::Prestop,
        Self::PrestopEnded,
        Self::Running,
        Self::Done,
    ];

    /// The file name prefix: `seen-`, `prestop-`, `prestop-ended-`,
    /// `running-`, `done-` (`prestop-ended-<id>` is never taken for a
    /// `prestop-` record: `ended-<id>` is no instance id).
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::Seen => "seen-",
            Self::Prestop => "prestop-",
            Self::PrestopEnded => "prestop-ended-",
            Self::Running => "running-",
            Self::Done => "done-",
        }
    }

    /// The file name of this kind's record for `instance`:
    /// `<prefix><instance>`.
    pub fn file_name(self, instance: &str) -> String {
        format!("{}{instance}", self.prefix())
    }

    /// Splits a file name of a state directory into its kind and instance
    /// id. `None` for other files ([`ARMED_FILE`], temporary files) and for
    /// ids that [`parse_instance_id`] rejects.
    pub fn parse_file_name(name: &str) -> Option<(Self, &str)> {
        Self::ALL.into_iter().find_map(|kind| {
            name.strip_prefix(kind.prefix())
                .filter(|id| parse_instance_id(id).is_some())
                .map(|id| (kind, id))
        })
    }
}

impl fmt::Display for RecordKind {
    /// The prefix without its last `-`: `seen`, `prestop`, `prestop-ended`,
    /// `running`, `done`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix().trim_end_matches('-'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_pinned() {
        assert_eq!(
            state_dir(Path::new("/.kube-prestop"), "main"),
            PathBuf::from("/.kube-prestop/state/main")
        );
        assert_eq!(
            state_dir(Path::new("/.kube-prestop"), "main").join(ARMED_FILE),
            PathBuf::from("/.kube-prestop/state/main/armed")
        );
        assert_eq!(instance_id(7, 12345), "7-12345");
        assert_eq!(RecordKind::Prestop.file_name("7-1"), "prestop-7-1");
        assert_eq!(RecordKind::Running.file_name("7-1"), "running-7-1");
        assert_eq!(RecordKind::Done.file_name("7-1"), "done-7-1");
        assert_eq!(RecordKind::Seen.file_name("7-1"), "seen-7-1");
        assert_eq!(RecordKind::Done.to_string(), "done");
    }

    #[test]
    fn file_names_parse_back() {
        for kind in RecordKind::ALL {
            let name = kind.file_name("42-9001");
            assert_eq!(RecordKind::parse_file_name(&name), Some((kind, "42-9001")));
        }
        for other in [
            "armed",
            ".tmp-done-1-2-77",
            "done-",
            "done-x-1",
            "done-0-1",
            "gone-1-2",
        ] {
            assert_eq!(RecordKind::parse_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn instance_ids_parse_back() {
        assert_eq!(parse_instance_id(&instance_id(42, 9001)), Some((42, 9001)));
        assert_eq!(parse_instance_id("42"), None);
        assert_eq!(parse_instance_id("x-1"), None);
        assert_eq!(parse_instance_id("0-1"), None);
        assert_eq!(parse_instance_id(UNSEEN_INSTANCE_ID), Some((0, 0)));
        assert_eq!(instance_id(0, 0), UNSEEN_INSTANCE_ID);
        assert_eq!(parse_instance_id("00-0"), None);
        assert_eq!(parse_instance_id("1-2-3"), None);
    }
}
