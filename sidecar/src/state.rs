//! The per-container state directory in the shared volume
//! (`<root>/state/<container>/`, see [`kube_prestop_contract::state_files`]).
//!
//! Every record is written atomically: to a temporary file `.tmp-<name>-<pid>`
//! in the same directory, then `rename(2)`d over the final name, so a reader
//! (the probe, a restarted sidecar) sees either no record or a whole one.
//! Records are small `key=value` lines; their names and contents are typed
//! in the contract ([`RecordKind`], [`kube_prestop_contract::record`]).

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use kube_prestop_contract::{self as contract, RecordKind, RunningRecord};

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state directory could not be created (volume missing or read-only).
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A record could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The record's final path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The directory could not be listed.
    #[error("cannot list {path}: {source}")]
    List {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// The state directory of one watched container.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    /// The store of `container` in the shared volume mounted at `root`.
    pub fn new(root: &Path, container: &str) -> Self {
        Self {
            dir: contract::state_dir(root, container),
        }
    }

    /// The directory path.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory (and `state/`) if missing, mode 0777: the
    /// wrapper runs with the watched container's user, which may differ from
    /// the sidecar's when a pod sets users per container, and must still be
    /// able to write its mark. The volume is private to the pod.
    pub fn ensure_dir(&self) -> Result<(), StateError> {
        let err = |source| StateError::CreateDir {
            path: self.dir.clone(),
            source,
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o777)
            .create(&self.dir)
            .map_err(err)?;
        for d in [Some(self.dir.as_path()), self.dir.parent()]
            .into_iter()
            .flatten()
        {
            // Best effort against the umask; fails harmlessly when not ours.
            let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o777));
        }
        Ok(())
    }

    /// Path of record `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes record `name` atomically (temporary file + rename), mode 0666.
    pub fn write(&self, name: &str, content: &str) -> Result<(), StateError> {
        let path = self.path(name);
        let tmp = self.dir.join(format!(".tmp-{name}-{}", std::process::id()));
        let res = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o666)
                .open(&tmp)?;
            f.write_all(content.as_bytes())?;
            drop(f);
            fs::rename(&tmp, &path)
        })();
        res.map_err(|source| {
            let _ = fs::remove_file(&tmp);
            StateError::Write { path, source }
        })
    }

    /// Whether record `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.path(name).exists()
    }

    /// Reads record `name`'s text (parse it with the record's type in
    /// [`kube_prestop_contract::record`]); `None` if absent or unreadable.
    pub fn read(&self, name: &str) -> Option<String> {
        crate::procfs::read_small(&self.path(name)).ok()
    }

    /// Removes record `name`; a missing record is not an error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match fs::remove_file(self.path(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Names of all records (temporary files excluded).
    pub fn list(&self) -> Result<Vec<String>, StateError> {
        let err = |source| StateError::List {
            path: self.dir.clone(),
            source,
        };
        let mut names = Vec::new();
        for e in fs::read_dir(&self.dir).map_err(err)? {
            let e = e.map_err(err)?;
            if let Some(n) = e.file_name().to_str()
                && !n.starts_with('.')
            {
                names.push(n.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// What the records say about one instance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstanceRecords {
    /// `seen-<id>` exists.
    pub seen: bool,
    /// `prestop-<id>` exists: the kubelet ran the preStop itself.
    pub prestop: bool,
    /// `prestop-ended-<id>` exists: that preStop command ended.
    pub prestop_ended: bool,
    /// `running-<id>`'s `attempt`, if the record exists (0 if unreadable).
    pub running_attempt: Option<u32>,
    /// `done-<id>` exists.
    pub done: bool,
}

/// Groups record names by instance id (records of other shapes are ignored).
pub fn group_by_instance(
    store: &StateStore,
    names: &[String],
) -> BTreeMap<String, InstanceRecords> {
    let mut out: BTreeMap<String, InstanceRecords> = BTreeMap::new();
    for n in names {
        let Some((kind, id)) = RecordKind::parse_file_name(n) else {
            continue;
        };
        let r = out.entry(id.to_owned()).or_default();
        match kind {
            RecordKind::Seen => r.seen = true,
            RecordKind::Prestop => r.prestop = true,
            RecordKind::PrestopEnded => r.prestop_ended = true,
            RecordKind::Running => {
                r.running_attempt = Some(
                    store
                        .read(n)
                        .and_then(|text| RunningRecord::parse(&text).attempt)
                        .unwrap_or(0),
                )
            }
            RecordKind::Done => r.done = true,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube_prestop_contract::SeenRecord;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kps-state-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn writes_are_atomic_and_listed() {
        let root = tmpdir("w");
        let s = StateStore::new(&root, "main");
        s.ensure_dir().unwrap();
        let seen = SeenRecord {
            pid: 1,
            start_time_ticks: 2,
        };
        s.write("seen-1-2", &seen.to_string()).unwrap();
        s.write("running-1-2", "attempt=2\n").unwrap();
        s.write("prestop-3-4", "").unwrap();
        s.write("done-5-6", "").unwrap();
        s.write("armed", "").unwrap();
        fs::write(s.dir().join(".tmp-x"), "").unwrap();
        let names = s.list().unwrap();
        assert!(!names.iter().any(|n| n.starts_with('.')));
        assert_eq!(SeenRecord::parse(&s.read("seen-1-2").unwrap()), Some(seen));
        let g = group_by_instance(&s, &names);
        assert_eq!(g.len(), 3);
        assert_eq!(g["1-2"].running_attempt, Some(2));
        assert!(g["1-2"].seen && !g["1-2"].done);
        assert!(g["3-4"].prestop);
        assert!(g["5-6"].done);
        s.remove("armed").unwrap();
        s.remove("armed").unwrap();
        assert!(!s.exists("armed"));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unwritable_dir_is_an_error() {
        let s = StateStore::new(Path::new("/proc/kube-prestop-nope"), "main");
        assert!(matches!(s.ensure_dir(), Err(StateError::CreateDir { .. })));
        assert!(matches!(s.write("x", "y"), Err(StateError::Write { .. })));
        assert!(s.list().is_err());
    }
}
