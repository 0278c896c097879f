//! The sidecar's termination message: one line per hook run of the pod (of
//! every watched container, from the records in the shared volume), oldest
//! first, within the kubelet's 4 KiB ([`contract::TERMINATION_MESSAGE_MAX_BYTES`];
//! the oldest runs are left out first, and the first line says how many).
//!
//! ```text
//! kube-prestop hook runs, oldest first (1 older left out):
//! container=main instance=12-873455 container_exit=exit:3 hook=exit:0 duration_ms=2310 grace_cut=false
//! container=main instance=40-873999 container_exit=exit:0 hook=skipped-run-on duration_ms=0 grace_cut=false
//! container=side instance=55-874000 container_exit=signal:9 hook=running duration_ms=- grace_cut=false
//! ```
//!
//! `hook` is `exit:N`, `signal:N`, `not-found`, `not-executable`,
//! `skipped-prestop` (the kubelet ran the preStop itself), `skipped-run-on`,
//! `abandoned` (interrupted twice), `running` (another sidecar's hook, still
//! running when this message was written) or `cut`: this sidecar's own hook
//! was still running when SIGTERM came and the message was not rewritten
//! afterwards, i.e. the grace period's SIGKILL ended it (`grace_cut=true`).
//! The watcher rewrites the message after each run and on SIGTERM; the
//! kubelet reads it when the sidecar has stopped.

use std::fs;
use std::path::Path;

use crate::contract;
use crate::state::{self, StateStore};

/// One hook run, as the message shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLine {
    /// The watched container.
    pub container: String,
    /// The instance id.
    pub instance: String,
    /// `exit:N`, `signal:N` or `unknown`.
    pub container_exit: String,
    /// The hook's outcome (see the module docs).
    pub hook: String,
    /// How long the hook ran, in ms, when it ended.
    pub duration_ms: Option<u64>,
    /// The grace period's SIGKILL ended it.
    pub grace_cut: bool,
    /// When the exit was observed (clock ticks since boot): the order.
    pub exit_ticks: u64,
}

impl RunLine {
    fn render(&self) -> String {
        format!(
            "container={} instance={} container_exit={} hook={} duration_ms={} grace_cut={}\n",
            self.container,
            self.instance,
            self.container_exit,
            self.hook,
            self.duration_ms
                .map_or_else(|| "-".to_owned(), |d| d.to_string()),
            self.grace_cut
        )
    }
}

/// The message for `runs` (any order), at most `max` bytes: oldest first;
/// when they do not fit, the oldest are left out and the header says how
/// many. Empty when there are no runs.
pub fn render(runs: &[RunLine], max: usize) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<&RunLine> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        (a.exit_ticks, &a.container, &a.instance).cmp(&(b.exit_ticks, &b.container, &b.instance))
    });
    let lines: Vec<String> = sorted.iter().map(|r| r.render()).collect();
    let header = |left_out: usize| {
        if left_out == 0 {
            "kube-prestop hook runs, oldest first:\n".to_owned()
        } else {
            format!("kube-prestop hook runs, oldest first ({left_out} older left out):\n")
        }
    };
    let mut skip = 0;
    loop {
        let body: usize = lines[skip..].iter().map(String::len).sum();
        if header(skip).len() + body <= max || skip == lines.len() {
            break;
        }
        skip += 1;
    }
    let mut out = header(skip);
    for l in &lines[skip..] {
        out.push_str(l);
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

/// The `hook` token of a `done-<id>` record.
pub fn hook_token(rec: &std::collections::BTreeMap<String, String>) -> String {
    match rec.get("outcome").map(String::as_str) {
        Some("ran") => match rec.get("status").map(String::as_str) {
            Some("command not found") => "not-found".to_owned(),
            Some("command not executable") => "not-executable".to_owned(),
            Some(s) => s.replace(' ', ":"),
            None => "unknown".to_owned(),
        },
        Some(o) => o.to_owned(),
        None => "unknown".to_owned(),
    }
}

/// The runs recorded under `<root>/state/*/`: every `done-<id>`, and every
/// `running-<id>` without one (`hook=running`). Unreadable directories and
/// records are skipped.
pub fn collect(root: &Path) -> Vec<RunLine> {
    let mut out = Vec::new();
    let Ok(dirs) = fs::read_dir(root.join("state")) else {
        return out;
    };
    for d in dirs.flatten() {
        let Some(container) = d.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !contract::is_valid_container_name(&container) {
            continue;
        }
        let store = StateStore::new(root, &container);
        let Ok(names) = store.list() else { continue };
        for (id, r) in state::group_by_instance(&store, &names) {
            let (name, running) = if r.done {
                (contract::done_file(&id), false)
            } else if r.running_attempt.is_some() {
                (contract::running_file(&id), true)
            } else {
                continue;
            };
            let Some(rec) = store.read(&name) else {
                continue;
            };
            let num = |k: &str| rec.get(k).and_then(|v| v.parse::<u64>().ok());
            out.push(RunLine {
                container: container.clone(),
                instance: id.clone(),
                container_exit: rec
                    .get("container_exit")
                    .cloned()
                    .unwrap_or_else(|| "unknown".to_owned()),
                hook: if running {
                    "running".to_owned()
                } else {
                    hook_token(&rec)
                },
                duration_ms: if running { None } else { num("duration_ms") },
                grace_cut: false,
                exit_ticks: num("exit_observed_ticks").unwrap_or(0),
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
    use crate::state::format_record;

    fn line(c: &str, id: &str, ticks: u64) -> RunLine {
        RunLine {
            container: c.into(),
            instance: id.into(),
            container_exit: "exit:3".into(),
            hook: "exit:0".into(),
            duration_ms: Some(12),
            grace_cut: false,
            exit_ticks: ticks,
        }
    }

    #[test]
    fn oldest_first_and_within_the_limit() {
        let runs = vec![line("b", "2-2", 20), line("a", "1-1", 10)];
        let m = render(&runs, 4096);
        assert_eq!(
            m,
            "kube-prestop hook runs, oldest first:\n\
             container=a instance=1-1 container_exit=exit:3 hook=exit:0 duration_ms=12 grace_cut=false\n\
             container=b instance=2-2 container_exit=exit:3 hook=exit:0 duration_ms=12 grace_cut=false\n"
        );
        assert_eq!(render(&[], 4096), "");
        let many: Vec<RunLine> = (0..200)
            .map(|i| line("main", &format!("{i}-{i}"), i))
            .collect();
        let m = render(&many, contract::TERMINATION_MESSAGE_MAX_BYTES);
        assert!(m.len() <= contract::TERMINATION_MESSAGE_MAX_BYTES);
        // The newest is kept, the oldest left out and counted.
        assert!(m.contains("instance=199-199 "));
        assert!(!m.contains("instance=0-0 "));
        let kept = m.lines().count() - 1;
        assert!(m.starts_with(&format!(
            "kube-prestop hook runs, oldest first ({} older left out):\n",
            200 - kept
        )));
        assert!(render(&many, 10).len() <= 10);
    }

    #[test]
    fn collects_every_containers_records() {
        let root = std::env::temp_dir().join(format!("kps-term-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let a = StateStore::new(&root, "a");
        let b = StateStore::new(&root, "b");
        a.ensure_dir().unwrap();
        b.ensure_dir().unwrap();
        a.write(
            "done-1-1",
            &format_record(&[
                ("outcome", "ran".into()),
                ("status", "exit 2".into()),
                ("duration_ms", "5".into()),
                ("exit_observed_ticks", "7".into()),
                ("container_exit", "signal:9".into()),
            ]),
        )
        .unwrap();
        a.write(
            "done-2-2",
            &format_record(&[
                ("outcome", "skipped-run-on".into()),
                ("exit_observed_ticks", "9".into()),
                ("container_exit", "exit:0".into()),
            ]),
        )
        .unwrap();
        b.write(
            "running-3-3",
            &format_record(&[("attempt", "1".into()), ("exit_observed_ticks", "8".into())]),
        )
        .unwrap();
        b.write("seen-4-4", "").unwrap();
        let mut runs = collect(&root);
        runs.sort_by_key(|r| r.exit_ticks);
        let hooks: Vec<(&str, &str, &str)> = runs
            .iter()
            .map(|r| {
                (
                    r.container.as_str(),
                    r.container_exit.as_str(),
                    r.hook.as_str(),
                )
            })
            .collect();
        assert_eq!(
            hooks,
            vec![
                ("a", "signal:9", "exit:2"),
                ("b", "unknown", "running"),
                ("a", "exit:0", "skipped-run-on"),
            ]
        );
        assert_eq!(runs[0].duration_ms, Some(5));
        assert_eq!(runs[1].duration_ms, None);
        fs::remove_dir_all(&root).unwrap();
    }
}
