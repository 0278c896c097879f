//! Writing the sidecar's termination message: the runs recorded in the
//! state directories ([`collect`]), rendered by the contract
//! ([`kube_prestop_contract::termination`], which documents the format),
//! written to the file the kubelet reads ([`write()`]).

use std::fs;
use std::path::Path;

use kube_prestop_contract::{
    ContainerEnd, DoneRecord, HookRun, HookToken, Parsed, RecordKind, RunLine, RunningRecord,
    is_dns_label,
};

use crate::state::{self, StateStore};

/// The runs recorded under `<root>/state/*/`: every `done-<id>`, and every
/// `running-<id>` without one (`hook=running`). Unreadable directories and
/// records are skipped.
pub fn collect(root: &Path) -> Vec<HookRun> {
    let mut out = Vec::new();
    let Ok(dirs) = fs::read_dir(root.join("state")) else {
        return out;
    };
    for d in dirs.flatten() {
        let Some(container) = d.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_dns_label(&container) {
            continue;
        }
        let store = StateStore::new(root, &container);
        let Ok(names) = store.list() else { continue };
        for (id, r) in state::group_by_instance(&store, &names) {
            let kind = if r.done {
                RecordKind::Done
            } else if r.running_attempt.is_some() {
                RecordKind::Running
            } else {
                continue;
            };
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
            out.push(HookRun {
                line: RunLine {
                    container: container.clone(),
                    instance: id.clone(),
                    container_exit: container_exit.unwrap_or(Parsed::Known(ContainerEnd::Unknown)),
                    hook,
                    duration_ms,
                    grace_cut: false,
                },
                exit_ticks: exit_ticks.unwrap_or(0),
            });
        }
    }
    out
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
        let mut runs = collect(&root);
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
        let message = kube_prestop_contract::termination::render(&collect(&root), 4096);
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
}
