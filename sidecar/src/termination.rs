//! Writing the sidecar's termination message: the runs recorded in the
//! state directories ([`collect`]), rendered by the contract
//! ([`kube_prestop_contract::termination`], which documents the format),
//! written to the file the kubelet reads ([`write()`]).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use kube_prestop_contract::{
    ContainerEnd, DoneRecord, HookRun, HookToken, MAX_RUNS_SHOWN, Parsed, RecordKind, RunLine,
    RunningRecord, is_dns_label,
};
use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::state::StateStore;

/// The most runs read from one container's state directory: the newest
/// [`MAX_RUNS_SHOWN`] (52, what a 4 KiB message holds in its shortest
/// lines), so none that the message could show is missed, whatever number
/// of records the directory holds (a container can plant any number in its
/// own directory, and every sidecar of the pod reads it).
pub const MAX_RUNS_PER_CONTAINER: usize = MAX_RUNS_SHOWN;

/// The most state directories of other containers read (besides the
/// watched container's own, always read): more than the containers one
/// message can show ([`MAX_RUNS_SHOWN`]), and more than a pod has in
/// practice. Directory names are DNS labels, but their number is not
/// bounded otherwise; beyond this, the first by name are read, and the
/// runs of the others are neither shown nor counted.
pub const MAX_OTHER_STATE_DIRS: usize = 128;

/// What [`collect`] read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The runs read.
    pub runs: Vec<HookRun>,
    /// Older runs not read ([`StateStore::newest_runs`]): for the
    /// message's "left out" count
    /// ([`kube_prestop_contract::render_with_left_out`]).
    pub left_out: usize,
}

/// The runs recorded under `<root>/state/*/`: every `done-<id>`, and every
/// `running-<id>` without one (`hook=running`), of at most the newest
/// [`MAX_RUNS_PER_CONTAINER`] instances of each directory, whose others
/// are counted in [`Collected::left_out`]. `own`'s directory (the watched
/// container's) is always read, and at most [`MAX_OTHER_STATE_DIRS`]
/// others. Unreadable directories and records are skipped; the directories
/// are opened as [`StateStore`] opens them (no link followed).
pub fn collect(root: &Path, own: &str) -> Collected {
    let mut out = Collected::default();
    let mut containers = other_containers(root, own);
    if is_dns_label(own) {
        containers.insert(own.to_owned());
    }
    for container in containers {
        collect_container(&StateStore::new(root, &container), &container, &mut out);
    }
    out
}

/// The first [`MAX_OTHER_STATE_DIRS`] names (by name) of `<root>/state/`
/// that are DNS labels, other than `own`; `state` is not followed if a
/// link, and is read as a stream.
fn other_containers(root: &Path, own: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(dir) = Dir::open(&root.join("state"), flags, Mode::empty()) else {
        return names;
    };
    for e in dir.into_iter().flatten() {
        let Some(name) = OsStr::from_bytes(e.file_name().to_bytes()).to_str() else {
            continue;
        };
        if name == own || !is_dns_label(name) {
            continue;
        }
        if names.len() == MAX_OTHER_STATE_DIRS {
            match names.last() {
                Some(last) if name < last.as_str() => {
                    names.pop_last();
                }
                _ => continue,
            }
        }
        names.insert(name.to_owned());
    }
    names
}

/// Reads `store`'s newest runs into `out`.
fn collect_container(store: &StateStore, container: &str, out: &mut Collected) {
    let Ok(newest) = store.newest_runs(MAX_RUNS_PER_CONTAINER) else {
        return;
    };
    out.left_out += newest.left_out;
    for (id, kind) in newest.instances {
        let Some(text) = store.read(&kind.file_name(&id)) else {
            continue;
        };
        let (container_exit, hook, duration_ms, exit_ticks) = if kind == RecordKind::Done {
            let rec = DoneRecord::parse(&text);
            let token = HookToken::of_done(&rec);
            (
                rec.container_exit,
                token,
                rec.duration_ms,
                rec.exit_observed_ticks,
            )
        } else {
            let rec = RunningRecord::parse(&text);
            (
                rec.container_exit,
                HookToken::Running,
                None,
                rec.exit_observed_ticks,
            )
        };
        out.runs.push(HookRun {
            line: RunLine {
                container: container.to_owned(),
                instance: id,
                container_exit: container_exit.unwrap_or(Parsed::Known(ContainerEnd::Unknown)),
                hook,
                duration_ms,
                grace_cut: false,
            },
            exit_ticks: exit_ticks.unwrap_or(0),
        });
    }
}

/// Writes `message` to the existing file `path`, truncating it (the kubelet
/// creates the file it mounts at `terminationMessagePath` and reads it after
/// the container stopped). Never creates the file: outside a pod there is
/// nothing to write to.
///
/// # Errors
/// The open's or write's error (`ENOENT` when the file does not exist).
pub fn write(path: &Path, message: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(message.as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use kube_prestop_contract::{HookStatus, Outcome, SkipReason};

    #[test]
    fn collects_every_containers_records() {
        let root = std::env::temp_dir().join(format!("kps-term-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let a = StateStore::new(&root, "a");
        let b = StateStore::new(&root, "b");
        fs::create_dir_all(a.dir()).unwrap(); // the runtime\'s mount point
        fs::create_dir_all(b.dir()).unwrap(); // the runtime\'s mount point
        let ran = DoneRecord::new(
            Outcome::Ran,
            1,
            Some(HookStatus::Exited(2)),
            Some(5),
            7,
            ContainerEnd::Signal(9),
        );
        a.write("done-1-1", &ran.to_string()).unwrap();
        let skipped = DoneRecord::new(
            Outcome::Skipped(SkipReason::RunOn),
            1,
            None,
            None,
            9,
            ContainerEnd::Exit(0),
        );
        a.write("done-2-2", &skipped.to_string()).unwrap();
        // An older running record without container_exit.
        b.write("running-3-3", "attempt=1\nexit_observed_ticks=8\n")
            .unwrap();
        b.write("seen-4-4", "").unwrap();
        let mut runs = collect(&root, "a").runs;
        runs.sort_by_key(|r| r.exit_ticks);
        let lines: Vec<String> = runs.iter().map(|r| r.line.to_string()).collect();
        assert_eq!(
            lines,
            [
                "container=a instance=1-1 container_exit=signal:9 hook=exit:2 duration_ms=5 grace_cut=false",
                "container=b instance=3-3 container_exit=unknown hook=running duration_ms=- grace_cut=false",
                "container=a instance=2-2 container_exit=exit:0 hook=skipped-run-on duration_ms=- grace_cut=false",
            ]
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_late_run_is_the_line_readers_take_for_late() {
        // The late run's record (`done-0-0`, exit status unknown) beside a
        // seen run's: the outcome exporter reads the late fact from the
        // line's instance (`RunLine::is_late`).
        let root = std::env::temp_dir().join(format!("kps-term-late-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let main = StateStore::new(&root, "main");
        fs::create_dir_all(main.dir()).unwrap(); // the runtime\'s mount point
        let late = DoneRecord::new(
            Outcome::Ran,
            1,
            Some(HookStatus::Exited(0)),
            Some(0),
            20,
            ContainerEnd::Unknown,
        );
        let id = kube_prestop_contract::UNSEEN_INSTANCE_ID;
        main.write(&RecordKind::Done.file_name(id), &late.to_string())
            .unwrap();
        let seen = DoneRecord::new(
            Outcome::Ran,
            1,
            Some(HookStatus::Exited(0)),
            Some(1),
            10,
            ContainerEnd::Exit(1),
        );
        main.write("done-19-4407228", &seen.to_string()).unwrap();
        let message =
            kube_prestop_contract::termination::render(&collect(&root, "main").runs, 4096);
        assert_eq!(
            message,
            "kube-prestop hook runs, oldest first:\n\
             container=main instance=19-4407228 container_exit=exit:1 hook=exit:0 duration_ms=1 grace_cut=false\n\
             container=main instance=0-0 container_exit=unknown hook=exit:0 duration_ms=0 grace_cut=false\n"
        );
        let parsed = kube_prestop_contract::parse_message(&message).unwrap();
        let lates: Vec<bool> = parsed.runs.iter().map(RunLine::is_late).collect();
        assert_eq!(lates, [false, true]);
        fs::remove_dir_all(&root).unwrap();
    }

    /// A directory planted with 100,000 `done-` records (another
    /// container's, or the container's own): only the newest
    /// [`MAX_RUNS_PER_CONTAINER`] are read, by the order of their ids, the
    /// rest counted; a `running-` record beside its `done-` is one run.
    #[test]
    fn a_planted_directory_is_read_only_for_its_newest_runs() {
        let root = std::env::temp_dir().join(format!("kps-term-many-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let main = StateStore::new(&root, "main");
        let other = StateStore::new(&root, "other");
        fs::create_dir_all(main.dir()).unwrap(); // the runtime\'s mount point
        fs::create_dir_all(other.dir()).unwrap(); // the runtime\'s mount point
        let done = DoneRecord::new(
            Outcome::Ran,
            1,
            Some(HookStatus::Exited(0)),
            Some(1),
            5,
            ContainerEnd::Exit(0),
        )
        .to_string();
        const PLANTED: u64 = 100_000;
        for i in 0..PLANTED {
            // Start times out of name order: `9-…` sorts after `10-…` by
            // name, not by start time.
            let name = format!("done-{}-{}", (i * 7919) % 30_000 + 1, 1_000 + i);
            fs::write(other.dir().join(name), &done).unwrap();
        }
        // A running record beside a done one of the same run, among the
        // newest, and one of an old run without a done record.
        fs::write(
            other.dir().join(format!(
                "running-{}-{}",
                ((PLANTED - 1) * 7919) % 30_000 + 1,
                1_000 + PLANTED - 1
            )),
            "attempt=1\n",
        )
        .unwrap();
        fs::write(other.dir().join("running-5-7"), "attempt=1\n").unwrap();
        fs::write(other.dir().join("seen-5-8"), "").unwrap();
        main.write("done-1-1", &done).unwrap();
        main.write("running-2-2", "attempt=1\n").unwrap();

        let got = collect(&root, "main");
        let mut others: Vec<&HookRun> = got
            .runs
            .iter()
            .filter(|r| r.line.container == "other")
            .collect();
        assert_eq!(others.len(), MAX_RUNS_PER_CONTAINER);
        others.sort_by_key(|r| {
            kube_prestop_contract::parse_instance_id(&r.line.instance)
                .unwrap()
                .1
        });
        let starts: Vec<u64> = others
            .iter()
            .map(|r| {
                kube_prestop_contract::parse_instance_id(&r.line.instance)
                    .unwrap()
                    .1
            })
            .collect();
        let newest: Vec<u64> =
            (1_000 + PLANTED - MAX_RUNS_PER_CONTAINER as u64..1_000 + PLANTED).collect();
        assert_eq!(starts, newest);
        // The run with both records is shown once, as done.
        assert!(others.iter().all(|r| r.line.hook != HookToken::Running));
        // 100,000 done runs and `running-5-7`, less those kept.
        assert_eq!(got.left_out, PLANTED as usize + 1 - MAX_RUNS_PER_CONTAINER);
        // The watched container's own runs are all read.
        let mut mine: Vec<String> = got
            .runs
            .iter()
            .filter(|r| r.line.container == "main")
            .map(|r| format!("{} {}", r.line.instance, r.line.hook))
            .collect();
        mine.sort();
        assert_eq!(mine, ["1-1 exit:0", "2-2 running"]);
        // The message counts what was not read with what did not fit.
        let message = kube_prestop_contract::termination::render_with_left_out(
            &got.runs,
            got.left_out,
            Some("main"),
            4096,
        );
        let parsed = kube_prestop_contract::parse_message(&message).unwrap();
        assert_eq!(
            parsed.left_out + parsed.runs.len(),
            PLANTED as usize + 1 + 2
        );
        // The watched container's runs are shown, whatever the others.
        assert_eq!(
            parsed.runs.iter().filter(|r| r.container == "main").count(),
            2
        );
        fs::remove_dir_all(&root).unwrap();
    }

    /// The late run (`0-0`) is the newest of its directory, kept among
    /// planted ones with later start times. An `own` that is no DNS label
    /// is not read as the watched container's: the directories are read as
    /// other containers'.
    #[test]
    fn the_late_run_is_kept_among_many() {
        let root = std::env::temp_dir().join(format!("kps-term-late-many-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let main = StateStore::new(&root, "main");
        fs::create_dir_all(main.dir()).unwrap(); // the runtime\'s mount point
        for i in 0..(MAX_RUNS_PER_CONTAINER as u64 + 10) {
            fs::write(main.dir().join(format!("done-3-{}", 100 + i)), "").unwrap();
        }
        fs::write(main.dir().join("done-0-0"), "").unwrap();
        let got = collect(&root, "main");
        assert_eq!(got.runs.len(), MAX_RUNS_PER_CONTAINER);
        assert_eq!(got.left_out, 11);
        assert!(got.runs.iter().any(|r| r.line.is_late()));
        assert_eq!(collect(&root, "../main").runs.len(), MAX_RUNS_PER_CONTAINER);
        fs::remove_dir_all(&root).unwrap();
    }
}
