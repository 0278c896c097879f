//! The per-container state directory (`<root>/state/<container>/`, see
//! [`kube_prestop_contract::state_files`]): in a pod, the container's own
//! state volume, an `emptyDir` mounted whole there.
//!
//! The volume is hostile input: in a pod, only the watched container X and
//! its sidecar mount X's state volume read-write (the other sidecars
//! read-only; `docs/security.md`), but X's own processes and hooks can
//! still write there. So nothing here follows a link or trusts a
//! file it did not create:
//!
//! - directories are opened one level at a time from `<root>` with
//!   `O_DIRECTORY | O_NOFOLLOW` (`openat(2)` on the parent's descriptor): a
//!   `state` or `<container>` that is a symbolic link is refused;
//! - every record is written to a temporary file `.tmp-<name>-<pid>` created
//!   with `O_CREAT | O_EXCL | O_NOFOLLOW`, then put in place: records
//!   written once per instance (`prestop-`, `done-`, and names this module
//!   does not know) with `linkat(2)`, which fails when the name exists in
//!   any form (file, link, directory), so a pre-existing record is refused;
//!   the ones a restarted watcher legitimately writes again (`seen-`,
//!   `running-` of a retried run, `armed`) with `renameat(2)` over a
//!   regular file only (a rename replaces a link, never follows it; a link
//!   or another kind of file there is refused). Either way a reader (the
//!   probe, a restarted sidecar) sees no record or a whole one;
//! - records are read only when they are regular files: the name is first
//!   looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`, so a FIFO, socket or
//!   device is never even opened, then opened with `O_NOFOLLOW | O_NONBLOCK
//!   | O_NOCTTY | O_CLOEXEC` (a FIFO swapped in meanwhile cannot block the
//!   open) and checked again with `fstat(2)`; at most [`MAX_RECORD_BYTES`]
//!   are read. Anything else is refused ([`StateError::Refused`], naming
//!   the path and what is there), which each reader treats as it treats a
//!   malformed record ([`StateStore::read_checked`]).
//!
//! A refusal is a [`StateError::Refused`] naming the path and what was
//! found; the callers log it on the sidecar's (or the preStop wrapper's)
//! stderr. Records are small `key=value` lines; their names and contents
//! are typed in the contract ([`RecordKind`], [`kube_prestop_contract::record`]).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};

use kube_prestop_contract::{self as contract, RecordKind, RunningRecord};

/// Largest record read back (bytes); a longer file is read only this far.
/// Records are a few `key=value` lines.
pub const MAX_RECORD_BYTES: u64 = 4096;

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state directory, or a parent of it, does not exist. In a pod it
    /// is the mount point of the container's state volume, which the
    /// container runtime makes; the store never creates it, so that a
    /// sidecar run outside a pod (by hand, without `--root`) does not
    /// write under the host's `/.kube-prestop`.
    #[error(
        "{path} does not exist: in a pod it is the mount point of the container's state volume, which the container runtime makes; the sidecar never creates it (outside a pod, give --root DIR with DIR/state/CONTAINER made)"
    )]
    Missing {
        /// The state directory.
        path: PathBuf,
    },
    /// The state directory could not be opened (other than missing).
    #[error("cannot open state directory {path}: {source}")]
    OpenDir {
        /// The directory, or the parent that could not be opened.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A record could not be read (other than absent or refused).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The record's path.
        path: PathBuf,
        /// The underlying error (`InvalidData` for text that is not UTF-8).
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
    /// Something other than what this store creates was found where it
    /// works: a symbolic link, a record that already exists, a file where a
    /// directory belongs. Nothing was followed or overwritten.
    #[error(
        "refusing {path}: {found} (this store never follows a link, overwrites a record written once per instance, or writes into what it did not create)"
    )]
    Refused {
        /// The path refused.
        path: PathBuf,
        /// What was found there.
        found: Found,
    },
}

/// What [`StateError::Refused`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A symbolic link.
    Symlink,
    /// A record of that name already exists (for records written once per
    /// instance).
    Exists,
    /// Neither a directory nor, for a record, a regular file (a FIFO, a
    /// device, a socket, a directory where a record belongs, a file where a
    /// directory belongs); what it is.
    OtherKind(FileKind),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Symlink => f.write_str("it is a symbolic link"),
            Found::Exists => f.write_str("a record of that name already exists"),
            Found::OtherKind(kind) => write!(f, "it is {kind}, not of the expected kind"),
        }
    }
}

/// The type of a file found in the state directory (`st_mode & S_IFMT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A FIFO (named pipe): opening it for reading without `O_NONBLOCK`
    /// blocks until a writer opens it.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A type bit pattern none of the above (or the type could not be read).
    Unknown,
}

impl FileKind {
    fn of(kind: SFlag) -> Self {
        match kind {
            SFlag::S_IFREG => Self::Regular,
            SFlag::S_IFDIR => Self::Directory,
            SFlag::S_IFLNK => Self::Symlink,
            SFlag::S_IFIFO => Self::Fifo,
            SFlag::S_IFSOCK => Self::Socket,
            SFlag::S_IFCHR => Self::CharDevice,
            SFlag::S_IFBLK => Self::BlockDevice,
            _ => Self::Unknown,
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Regular => "a regular file",
            Self::Directory => "a directory",
            Self::Symlink => "a symbolic link",
            Self::Fifo => "a FIFO",
            Self::Socket => "a socket",
            Self::CharDevice => "a character device",
            Self::BlockDevice => "a block device",
            Self::Unknown => "a file of unknown type",
        })
    }
}

/// [`Found`] for a file of type `kind` where a regular file belongs.
fn found_for(kind: SFlag) -> Found {
    match kind {
        SFlag::S_IFLNK => Found::Symlink,
        k => Found::OtherKind(FileKind::of(k)),
    }
}

/// The state directory of one watched container.
#[derive(Debug, Clone)]
pub struct StateStore {
    root: PathBuf,
    container: String,
    dir: PathBuf,
}

/// The file type bits of `st`.
fn kind_of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// What is at `name` in `dir`, without following a link; `None` if nothing.
fn lstat_at(dir: &OwnedFd, name: &str) -> Result<Option<SFlag>, Errno> {
    match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(kind_of(&st))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a record named `name` may be replaced by a later write of the
/// same name: a restarted watcher writes `seen-<id>` again for an instance
/// that still runs, `running-<id>` again for the retried run, and `armed`
/// once per start. Every other record is written once.
fn replaceable(name: &str) -> bool {
    name == contract::ARMED_FILE
        || matches!(
            RecordKind::parse_file_name(name),
            Some((RecordKind::Seen | RecordKind::Running, _))
        )
}

impl StateStore {
    /// The store of `container` under `root` (`<root>/state/<container>`).
    pub fn new(root: &Path, container: &str) -> Self {
        Self {
            root: root.to_owned(),
            container: container.to_owned(),
            dir: contract::state_dir(root, container),
        }
    }

    /// The directory path.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the directory `name` in `parent` (`None`: the root) without
    /// following a link: `O_DIRECTORY | O_NOFOLLOW`.
    fn open_dir_at(&self, parent: Option<&OwnedFd>, name: &Path) -> Result<OwnedFd, Refusal> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let res = match parent {
            Some(p) => openat(p.as_fd(), name, flags, Mode::empty()),
            None => nix::fcntl::open(name, flags, Mode::empty()),
        };
        res.map_err(|e| match (e, parent) {
            // O_NOFOLLOW on a link gives ELOOP; O_DIRECTORY on a file ENOTDIR.
            (Errno::ELOOP | Errno::ENOTDIR, Some(p)) => {
                match lstat_at(p, &name.to_string_lossy()) {
                    Ok(Some(k)) => Refusal::Found(found_for(k)),
                    _ => Refusal::Io(io::Error::from(e)),
                }
            }
            (e, _) => Refusal::Io(io::Error::from(e)),
        })
    }

    /// Opens `<root>`, `<root>/state` and then `<root>/state/<container>`,
    /// the last two without following a link. Nothing is created.
    fn open_dir(&self) -> Result<OwnedFd, (PathBuf, Refusal)> {
        let mut fd = self
            .open_dir_at(None, &self.root)
            .map_err(|r| (self.root.clone(), r))?;
        let mut path = self.root.clone();
        for part in [Path::new("state"), Path::new(&self.container)] {
            path.push(part);
            fd = self
                .open_dir_at(Some(&fd), part)
                .map_err(|r| (path.clone(), r))?;
        }
        Ok(fd)
    }

    /// Checks that the directory exists and can be opened, without
    /// following a link; it never creates it. In a pod it is the mount
    /// point of X's state volume, which the runtime made before X or its
    /// sidecar started (and `<root>`, `state/` as its parents), in X and
    /// in the sidecar alike; an `emptyDir`'s directory is mode 0777
    /// (`docs/facts.md` K16), so X's user can write there whatever it is.
    ///
    /// Errors: [`StateError::Missing`], naming the directory, when it or a
    /// parent does not exist (a sidecar run outside a pod, e.g. by hand
    /// without `--root`: nothing is written under the host's
    /// `/.kube-prestop`); [`StateError::Refused`] when `state` or the
    /// container's directory is a link or not a directory;
    /// [`StateError::OpenDir`] when it cannot be opened otherwise.
    pub fn check_dir(&self) -> Result<(), StateError> {
        self.open_dir().map(drop).map_err(|(path, r)| match r {
            Refusal::Io(e) if e.kind() == io::ErrorKind::NotFound => StateError::Missing {
                path: self.dir.clone(),
            },
            r => r.into_error(path, |path, source| StateError::OpenDir { path, source }),
        })
    }

    /// Path of record `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes record `name` (see the module's documentation for how): a new
    /// file, mode [`RECORD_MODE`] (0444), never through a link.
    ///
    /// Errors: [`StateError::Refused`] when the directory or the record's
    /// name is a link, when a record written once per instance exists
    /// already, or when something other than a regular file holds the
    /// name; [`StateError::Write`] for any other failure (read-only or
    /// missing volume, full disk).
    pub fn write(&self, name: &str, content: &str) -> Result<(), StateError> {
        let path = self.path(name);
        let write_err = |path: PathBuf, source| StateError::Write { path, source };
        let dir = self
            .open_dir()
            .map_err(|(p, r)| r.into_error(p, write_err))?;
        let tmp = format!(".tmp-{name}-{}", std::process::id());
        let file = create_new(&dir, &tmp).map_err(|r| r.into_error(self.path(&tmp), write_err))?;
        let res = write_all(file, content)
            .map_err(Refusal::Io)
            .and_then(|()| place(&dir, &tmp, name));
        let _ = unlinkat(dir.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        res.map_err(|r| r.into_error(path, write_err))
    }

    /// Whether record `name` exists (in any form: a link, a FIFO, a socket
    /// count, unfollowed and unopened: only `fstatat(AT_SYMLINK_NOFOLLOW)`).
    /// The records checked only for existence (`prestop-ended-<id>`, and
    /// `prestop-<id>` that cannot be read) carry no content the watcher
    /// uses, and whoever can plant another kind of file there (X's
    /// processes) could as well write a regular one, so any kind counts.
    pub fn exists(&self, name: &str) -> bool {
        self.open_dir()
            .ok()
            .is_some_and(|dir| matches!(lstat_at(&dir, name), Ok(Some(_))))
    }

    /// Reads record `name`'s text (parse it with the record's type in
    /// [`kube_prestop_contract::record`]); `None` if absent, unreadable, a
    /// link or not a regular file ([`Self::read_checked`] says which).
    pub fn read(&self, name: &str) -> Option<String> {
        self.read_checked(name).ok().flatten()
    }

    /// Reads record `name`'s text, at most [`MAX_RECORD_BYTES`] bytes,
    /// never blocking and never following a link: the name is looked at
    /// first (`fstatat(AT_SYMLINK_NOFOLLOW)`) and only a regular file is
    /// opened, with `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
    /// O_CLOEXEC`, then checked again with `fstat(2)` (a FIFO put there in
    /// between is opened without blocking, and refused). A FIFO, socket or
    /// device is never opened (opening a device can have side effects).
    ///
    /// `Ok(None)` when the record, or the state directory, does not exist.
    /// Errors: [`StateError::Refused`] naming the path when it is a link
    /// ([`Found::Symlink`]) or not a regular file ([`Found::OtherKind`]
    /// with its type), also for `state/` or the container's directory;
    /// [`StateError::Read`] when it cannot be opened or read otherwise
    /// (text that is not UTF-8: `InvalidData`); [`StateError::OpenDir`]
    /// when the directory cannot be opened. Callers treat a refused or
    /// unreadable record as a malformed one.
    pub fn read_checked(&self, name: &str) -> Result<Option<String>, StateError> {
        let path = self.path(name);
        let read_err = |path: PathBuf, source| StateError::Read { path, source };
        let dir = match self.open_dir() {
            Ok(dir) => dir,
            Err((_, Refusal::Io(e))) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err((p, r)) => {
                return Err(r.into_error(p, |path, source| StateError::OpenDir { path, source }));
            }
        };
        match lstat_at(&dir, name) {
            Ok(None) => return Ok(None),
            Ok(Some(SFlag::S_IFREG)) => {}
            Ok(Some(k)) => {
                return Err(StateError::Refused {
                    path,
                    found: found_for(k),
                });
            }
            Err(e) => return Err(read_err(path, e.into())),
        }
        let fd = match openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            // Replaced by a link since the look (O_NOFOLLOW: ELOOP), or by
            // a socket (ENXIO): refused, naming what is there now.
            Err(e @ (Errno::ELOOP | Errno::ENXIO)) => {
                return Err(match lstat_at(&dir, name) {
                    Ok(Some(k)) if k != SFlag::S_IFREG => StateError::Refused {
                        path,
                        found: found_for(k),
                    },
                    _ => read_err(path, e.into()),
                });
            }
            Err(e) => return Err(read_err(path, e.into())),
        };
        let st = fstat(fd.as_fd()).map_err(|e| read_err(path.clone(), e.into()))?;
        if kind_of(&st) != SFlag::S_IFREG {
            return Err(StateError::Refused {
                path,
                found: found_for(kind_of(&st)),
            });
        }
        let mut text = String::new();
        File::from(fd)
            .take(MAX_RECORD_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| read_err(path, e))?;
        Ok(Some(text))
    }

    /// Removes record `name` (the entry itself, never what a link points
    /// at); a missing record or directory is not an error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let dir = match self.open_dir() {
            Ok(dir) => dir,
            Err((_, Refusal::Io(e))) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err((path, r)) => {
                return Err(match r {
                    Refusal::Io(e) => e,
                    Refusal::Found(found) => {
                        io::Error::other(StateError::Refused { path, found }.to_string())
                    }
                });
            }
        };
        match unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Names of all records (temporary files excluded).
    ///
    /// Errors: [`StateError::Refused`] when the directory is a link;
    /// [`StateError::List`] when it cannot be read.
    pub fn list(&self) -> Result<Vec<String>, StateError> {
        let list_err = |path: PathBuf, source| StateError::List { path, source };
        let dir = self
            .open_dir()
            .map_err(|(p, r)| r.into_error(p, list_err))?;
        let entries =
            nix::dir::Dir::from_fd(dir).map_err(|e| list_err(self.dir.clone(), e.into()))?;
        let mut names = Vec::new();
        for e in entries {
            let e = e.map_err(|e| list_err(self.dir.clone(), e.into()))?;
            if let Some(n) = OsStr::from_bytes(e.file_name().to_bytes()).to_str()
                && !n.starts_with('.')
            {
                names.push(n.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// What [`StateStore::newest_runs`] found: the newest instances with a run
/// record, and how many older ones it left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NewestRuns {
    /// The kept instances, oldest first, each with the record to read:
    /// [`RecordKind::Done`] when `done-<id>` exists, else
    /// [`RecordKind::Running`].
    pub instances: Vec<(String, RecordKind)>,
    /// Instances with a `done-` or `running-` record that were not kept.
    pub left_out: usize,
}

/// The order of instances in [`StateStore::newest_runs`], oldest first,
/// from the id alone ([`contract::parse_instance_id`]): by start time
/// (clock ticks since boot), then PID, then the id's text (ids that parse
/// alike, `1-01` and `1-1`, stay apart). The late run's id
/// ([`contract::UNSEEN_INSTANCE_ID`], `0-0`) is the newest: its hook runs
/// at the sidecar's stop, after every run it saw. The container's
/// instances run one after the other, so in a directory its watcher wrote
/// the start order is the exit order the message is sorted by.
fn run_order(id: &str) -> Option<(bool, u64, i32, String)> {
    let (pid, start) = contract::parse_instance_id(id)?;
    Some((
        id == contract::UNSEEN_INSTANCE_ID,
        start,
        pid,
        id.to_owned(),
    ))
}

impl StateStore {
    /// The `k` newest instances (by [`run_order`], from the names alone)
    /// that have a `done-<id>` or `running-<id>` record, and how many
    /// others do: the directory is streamed, never listed whole, so memory
    /// and work per name stay bounded whatever it holds (a container can
    /// plant any number of names in its own directory, and every sidecar of
    /// the pod reads it for its termination message). A `running-<id>`
    /// name is counted only when no `done-<id>` exists (one `fstatat(2)`),
    /// so an instance is counted once. Names are not opened.
    ///
    /// Errors: as [`Self::list`].
    pub fn newest_runs(&self, k: usize) -> Result<NewestRuns, StateError> {
        let list_err = |path: PathBuf, source| StateError::List { path, source };
        let dir = self
            .open_dir()
            .map_err(|(p, r)| r.into_error(p, list_err))?;
        // A second descriptor of the directory to look names up in while
        // the first is read.
        let probe = dir.try_clone().map_err(|e| list_err(self.dir.clone(), e))?;
        let entries =
            nix::dir::Dir::from_fd(dir).map_err(|e| list_err(self.dir.clone(), e.into()))?;
        let mut kept: BTreeMap<(bool, u64, i32, String), RecordKind> = BTreeMap::new();
        let mut left_out = 0;
        for e in entries {
            let e = e.map_err(|e| list_err(self.dir.clone(), e.into()))?;
            let Some(name) = OsStr::from_bytes(e.file_name().to_bytes()).to_str() else {
                continue;
            };
            let Some((kind @ (RecordKind::Done | RecordKind::Running), id)) =
                RecordKind::parse_file_name(name)
            else {
                continue;
            };
            let Some(key) = run_order(id) else { continue };
            if let Some(k) = kept.get_mut(&key) {
                if kind == RecordKind::Done {
                    *k = RecordKind::Done;
                }
                continue;
            }
            if kind == RecordKind::Running
                && matches!(
                    lstat_at(&probe, &RecordKind::Done.file_name(id)),
                    Ok(Some(_))
                )
            {
                // Counted (kept or left out) by its `done-<id>`.
                continue;
            }
            if kept.len() == k {
                match kept.first_key_value() {
                    Some((oldest, _)) if *oldest < key => {
                        kept.pop_first();
                    }
                    _ => {
                        left_out += 1;
                        continue;
                    }
                }
                left_out += 1;
            }
            kept.insert(key, kind);
        }
        Ok(NewestRuns {
            instances: kept.into_iter().map(|((_, _, _, id), k)| (id, k)).collect(),
            left_out,
        })
    }
}

/// Why an operation on the store failed, before it is given its path.
#[derive(Debug)]
enum Refusal {
    /// Refused: see [`Found`].
    Found(Found),
    /// Any other failure.
    Io(io::Error),
}

impl Refusal {
    /// The [`StateError`] for `path`: [`StateError::Refused`], or `other`
    /// for an I/O failure.
    fn into_error(
        self,
        path: PathBuf,
        other: impl FnOnce(PathBuf, io::Error) -> StateError,
    ) -> StateError {
        match self {
            Refusal::Found(found) => StateError::Refused { path, found },
            Refusal::Io(e) => other(path, e),
        }
    }
}

/// Mode of every record (and of its temporary file): read-only for all.
///
/// Readable by all so that the wrapper (X's user) and the watcher (the
/// sidecar's user, possibly another) can each read what the other wrote.
/// Writable by none: no side ever opens an existing record for writing. A
/// record is written once, through the descriptor that created its
/// temporary file (`O_CREAT | O_EXCL` hands back a writable descriptor
/// whatever the mode), then linked or renamed into place; a rewrite of a
/// replaceable record is a new temporary file renamed over the old one,
/// and removal is an `unlinkat(2)`: both need write permission on the
/// directory (the `emptyDir`'s 0777), none on the file. (Earlier builds made
/// it 0666, which let any user of the pod rewrite another's record in
/// place.)
pub const RECORD_MODE: u32 = 0o444;

/// Creates `name` in `dir` with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode
/// [`RECORD_MODE`] whatever the umask.
/// A leftover of ours (same name: this PID wrote it before and died, or the
/// PID was reused) is unlinked once, never followed, and the create retried.
fn create_new(dir: &OwnedFd, name: &str) -> Result<File, Refusal> {
    let open = || {
        openat(
            dir.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(RECORD_MODE),
        )
    };
    let fd = match open() {
        Err(Errno::EEXIST) => {
            unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
                .map_err(|e| Refusal::Io(e.into()))?;
            open()
        }
        other => other,
    }
    .map_err(|e| Refusal::Io(e.into()))?;
    // Against the umask (a umask of 077 would leave 0400), so that the
    // wrapper (X's user) and the watcher (the sidecar's) can both read
    // what the other wrote; see [`RECORD_MODE`].
    let _ = fchmod(fd.as_fd(), Mode::from_bits_truncate(RECORD_MODE));
    Ok(File::from(fd))
}

fn write_all(mut file: File, content: &str) -> io::Result<()> {
    file.write_all(content.as_bytes())
}

/// Puts the written temporary file `tmp` in place as `name`: `linkat(2)`
/// (refused if `name` exists) for records written once, `renameat(2)` over
/// nothing or a regular file for the [`replaceable`] ones.
fn place(dir: &OwnedFd, tmp: &str, name: &str) -> Result<(), Refusal> {
    let io_err = |e: Errno| Refusal::Io(e.into());
    if replaceable(name) {
        match lstat_at(dir, name).map_err(io_err)? {
            None | Some(SFlag::S_IFREG) => {}
            Some(k) => return Err(Refusal::Found(found_for(k))),
        }
        return renameat(dir.as_fd(), tmp, dir.as_fd(), name).map_err(io_err);
    }
    // No AT_SYMLINK_FOLLOW: links `tmp` itself (a file we just created).
    match linkat(dir.as_fd(), tmp, dir.as_fd(), name, AtFlags::empty()) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => Err(Refusal::Found(match lstat_at(dir, name) {
            Ok(Some(SFlag::S_IFREG)) => Found::Exists,
            Ok(Some(k)) => found_for(k),
            _ => Found::OtherKind(FileKind::Unknown),
        })),
        Err(e) => Err(io_err(e)),
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
    use std::fs;

    /// Makes the store's directory, as the runtime makes the state
    /// volume's mount point in a pod (the store never does).
    fn made(s: &StateStore) {
        fs::create_dir_all(s.dir()).unwrap();
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kps-state-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn writes_are_atomic_and_listed() {
        let root = tmpdir("w");
        let s = StateStore::new(&root, "main");
        made(&s);
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

    /// A record written once per instance is refused when its name exists
    /// already (a file planted by another process), and the planted file is
    /// left as it was.
    #[test]
    fn pre_existing_record_is_refused() {
        let root = tmpdir("exists");
        let s = StateStore::new(&root, "main");
        made(&s);
        fs::write(s.path("prestop-1-2"), "forged\n").unwrap();
        let err = s.write("prestop-1-2", "wrapper_pid=3\n").unwrap_err();
        assert!(
            matches!(
                err,
                StateError::Refused {
                    found: Found::Exists,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("prestop-1-2"), "{err}");
        assert_eq!(
            fs::read_to_string(s.path("prestop-1-2")).unwrap(),
            "forged\n"
        );
        // A record written once is written once: the second write is refused.
        s.write("done-5-6", "outcome=ran\n").unwrap();
        assert!(matches!(
            s.write("done-5-6", "outcome=ran\n"),
            Err(StateError::Refused {
                found: Found::Exists,
                ..
            })
        ));
        // The replaceable ones are rewritten over a regular file.
        s.write("running-1-2", "attempt=1\n").unwrap();
        s.write("running-1-2", "attempt=2\n").unwrap();
        assert_eq!(s.read("running-1-2").as_deref(), Some("attempt=2\n"));
        assert!(!s.list().unwrap().iter().any(|n| n.contains("tmp")));
        fs::remove_dir_all(&root).unwrap();
    }

    /// A symbolic link planted at a record's name is never followed: its
    /// target stays untouched and the write is refused, for records
    /// written once and for replaceable ones alike; reading through it
    /// gives nothing.
    #[test]
    fn planted_symlink_is_refused_and_not_followed() {
        let root = tmpdir("link");
        let s = StateStore::new(&root, "main");
        made(&s);
        let target = root.join("target");
        fs::write(&target, "secret\n").unwrap();
        for name in [
            "done-1-2",
            "prestop-1-2",
            "seen-1-2",
            "running-1-2",
            "armed",
        ] {
            std::os::unix::fs::symlink(&target, s.path(name)).unwrap();
            let err = s.write(name, "x=1\n").unwrap_err();
            assert!(
                matches!(
                    err,
                    StateError::Refused {
                        found: Found::Symlink,
                        ..
                    }
                ),
                "{name}: {err}"
            );
            assert_eq!(s.read(name), None, "{name}");
            assert!(s.exists(name), "{name}");
        }
        assert_eq!(fs::read_to_string(&target).unwrap(), "secret\n");
        // A dangling link is refused too (O_EXCL-like: the name is taken).
        std::os::unix::fs::symlink(root.join("nowhere"), s.path("done-7-8")).unwrap();
        assert!(matches!(
            s.write("done-7-8", "x=1\n"),
            Err(StateError::Refused {
                found: Found::Symlink,
                ..
            })
        ));
        assert!(!root.join("nowhere").exists());
        // Removing a link removes the link, not its target.
        s.remove("armed").unwrap();
        assert!(target.exists());
        fs::remove_dir_all(&root).unwrap();
    }

    /// A planted temporary file (even a link) is never followed: it is
    /// unlinked and the record created afresh.
    #[test]
    fn planted_temporary_file_is_not_followed() {
        let root = tmpdir("tmp");
        let s = StateStore::new(&root, "main");
        made(&s);
        let target = root.join("target");
        fs::write(&target, "keep\n").unwrap();
        let tmp = s.path(&format!(".tmp-done-1-2-{}", std::process::id()));
        std::os::unix::fs::symlink(&target, &tmp).unwrap();
        s.write("done-1-2", "outcome=ran\n").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep\n");
        assert_eq!(s.read("done-1-2").as_deref(), Some("outcome=ran\n"));
        assert!(fs::symlink_metadata(&tmp).is_err());
        fs::remove_dir_all(&root).unwrap();
    }

    /// The container's directory (or `state/`) replaced by a symbolic link
    /// is refused: nothing is written, listed or read through it.
    #[test]
    fn directory_replaced_by_symlink_is_refused() {
        for level in ["container", "state"] {
            let root = tmpdir(&format!("dirlink-{level}"));
            let elsewhere = root.join("elsewhere");
            fs::create_dir_all(elsewhere.join("main")).unwrap();
            fs::write(elsewhere.join("main").join("done-1-2"), "outcome=ran\n").unwrap();
            let s = StateStore::new(&root, "main");
            if level == "container" {
                fs::create_dir_all(root.join("state")).unwrap();
                std::os::unix::fs::symlink(elsewhere.join("main"), s.dir()).unwrap();
            } else {
                std::os::unix::fs::symlink(&elsewhere, root.join("state")).unwrap();
            }
            for res in [
                s.check_dir(),
                s.write("seen-1-2", "pid=1\n"),
                s.list().map(drop),
            ] {
                assert!(
                    matches!(
                        res,
                        Err(StateError::Refused {
                            found: Found::Symlink,
                            ..
                        })
                    ),
                    "{level}: {res:?}"
                );
            }
            assert_eq!(s.read("done-1-2"), None, "{level}");
            assert!(!s.exists("done-1-2"), "{level}");
            assert!(s.remove("done-1-2").is_err(), "{level}");
            assert!(!elsewhere.join("main").join("seen-1-2").exists(), "{level}");
            assert!(elsewhere.join("main").join("done-1-2").exists(), "{level}");
            fs::remove_dir_all(&root).unwrap();
        }
    }

    /// A FIFO planted as a record neither blocks the reader nor is read;
    /// `read_checked` names the path and what is there.
    #[test]
    fn planted_fifo_is_not_read() {
        let root = tmpdir("fifo");
        let s = StateStore::new(&root, "main");
        made(&s);
        nix::unistd::mkfifo(&s.path("running-1-2"), Mode::from_bits_truncate(0o666)).unwrap();
        assert_eq!(s.read("running-1-2"), None);
        let err = s.read_checked("running-1-2").unwrap_err();
        assert!(
            matches!(
                err,
                StateError::Refused {
                    found: Found::OtherKind(FileKind::Fifo),
                    ..
                }
            ),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&s.path("running-1-2").display().to_string()) && msg.contains("a FIFO"),
            "{msg}"
        );
        // A socket and a link are refused the same way, never opened or
        // followed; an absent record is no error.
        let _socket = std::os::unix::net::UnixListener::bind(s.path("seen-1-2")).unwrap();
        assert!(matches!(
            s.read_checked("seen-1-2"),
            Err(StateError::Refused {
                found: Found::OtherKind(FileKind::Socket),
                ..
            })
        ));
        std::os::unix::fs::symlink(s.path("running-1-2"), s.path("done-1-2")).unwrap();
        assert!(matches!(
            s.read_checked("done-1-2"),
            Err(StateError::Refused {
                found: Found::Symlink,
                ..
            })
        ));
        assert!(s.read_checked("done-9-9").unwrap().is_none());
        assert!(matches!(
            s.write("running-1-2", "attempt=1\n"),
            Err(StateError::Refused {
                found: Found::OtherKind(FileKind::Fifo),
                ..
            })
        ));
        fs::remove_dir_all(&root).unwrap();
    }

    /// The store never makes its directory: in a pod
    /// `<root>/state/<container>` is the mount point of the container's
    /// state volume, which the runtime makes; a missing one (a sidecar run
    /// by hand without `--root`) is refused, naming it, and nothing is
    /// created, not even `<root>`.
    #[test]
    fn a_missing_state_directory_is_refused_not_created() {
        let root = tmpdir("missing");
        let s = StateStore::new(&root, "main");
        for made in [None, Some(root.clone()), Some(root.join("state"))] {
            if let Some(d) = &made {
                fs::create_dir_all(d).unwrap();
            }
            let e = s.check_dir().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("{} does not exist", s.dir().display())),
                "{made:?}: {e}"
            );
            assert!(!s.dir().exists(), "{made:?}");
            assert_eq!(root.exists(), made.is_some(), "{made:?}");
        }
        fs::create_dir_all(s.dir()).unwrap();
        s.check_dir().unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    /// Every record is mode 0444 ([`RECORD_MODE`]): readable by the other
    /// side's user, writable by none (nothing rewrites a record in place),
    /// also under a umask of 077. The umask is process-wide, so that part
    /// runs in a child: this test binary again, running only this test,
    /// with `umask(077)` set before its `exec`.
    #[test]
    fn records_are_mode_0444_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt as _;
        use std::os::unix::process::CommandExt as _;
        const CHILD: &str = "KPS_STATE_MODE_CHILD";
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        let root = match std::env::var_os(CHILD) {
            Some(root) => PathBuf::from(root),
            None => tmpdir("mode"),
        };
        let s = StateStore::new(&root, "main");
        made(&s);
        for name in ["done-1-2", "seen-1-2", "armed"] {
            s.write(name, "x=1\n").unwrap();
            assert_eq!(mode(&s.path(name)), 0o444, "{name}");
        }
        // A replaceable record is rewritten (a new file renamed over it),
        // still 0444.
        s.write("seen-1-2", "x=2\n").unwrap();
        assert_eq!(mode(&s.path("seen-1-2")), 0o444);
        assert_eq!(s.read("seen-1-2").as_deref(), Some("x=2\n"));
        if std::env::var_os(CHILD).is_some() {
            return;
        }
        let child_root = tmpdir("mode-umask");
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "state::tests::records_are_mode_0444_whatever_the_umask",
            "--test-threads=1",
        ])
        .env(CHILD, &child_root);
        // SAFETY: umask(2) is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::stat::umask(Mode::from_bits_truncate(0o077));
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The child's umask was in effect: its directory is 0700.
        assert_eq!(mode(StateStore::new(&child_root, "main").dir()) & 0o077, 0);
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&child_root).unwrap();
    }

    #[test]
    fn unwritable_dir_is_an_error() {
        let s = StateStore::new(Path::new("/proc/kube-prestop-nope"), "main");
        assert!(matches!(s.check_dir(), Err(StateError::Missing { .. })));
        assert!(matches!(s.write("x", "y"), Err(StateError::Write { .. })));
        assert!(s.list().is_err());
    }
}
