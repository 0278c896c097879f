//! Reading `/proc`: process listing, `/proc/PID/stat`, `/proc/PID/mountinfo`
//! and `/proc/loadavg`.
//!
//! Processes exit at any moment, so every per-process read can find the
//! process gone: that is [`ProcError::Gone`], an ordinary outcome the callers
//! handle by forgetting the process, never an error worth logging.
//!
//! Everything read here is readable across users in a shared PID namespace
//! (`docs/facts.md` L1): `stat` and `mountinfo` of another container's
//! processes need no ptrace permission.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where procfs is mounted in every container.
pub const PROC_ROOT: &str = "/proc";

/// Errors of a per-process read.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The process exited (or is a zombie whose namespaces are gone) while
    /// or before we read it: `ENOENT`, `ESRCH`, or `EINVAL` from
    /// `/proc/PID/mountinfo` of a zombie.
    #[error("process is gone")]
    Gone,
    /// The file was read but is not in the format the kernel documents in proc(5).
    #[error("malformed {0}")]
    Malformed(String),
    /// Any other I/O error (for example `EACCES` under an unusual hardening).
    #[error("{path}: {source}")]
    Io {
        /// The file that failed.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

fn io_err(path: &Path, source: io::Error) -> ProcError {
    match source.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) | Some(libc::EINVAL) => ProcError::Gone,
        _ => ProcError::Io {
            path: path.to_owned(),
            source,
        },
    }
}

/// The fields of `/proc/PID/stat` the watcher uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: one-letter state (`R`, `S`, `Z`, ...).
    pub state: u8,
    /// Field 4: parent PID as seen from the reader's PID namespace; `0` when
    /// the parent is outside it (a container's first process, whose parent is
    /// the runtime's shim on the host).
    pub ppid: i32,
    /// Field 22: start time in clock ticks (`sysconf(_SC_CLK_TCK)`) since boot.
    pub start_time: u64,
}

/// Parses the contents of `/proc/PID/stat`. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after the *last* `)`.
pub fn parse_stat(content: &str) -> Result<Stat, ProcError> {
    let bad = || ProcError::Malformed(format!("stat: {}", content.trim_end()));
    let rest = content
        .rfind(')')
        .map(|i| &content[i + 1..])
        .ok_or_else(bad)?;
    // rest starts with " S ppid ..." : fields 3.. of stat(5).
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = fields
        .first()
        .and_then(|s| s.bytes().next())
        .ok_or_else(bad)?;
    let ppid = fields.get(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    // field 22 is index 22 - 3 = 19 in `fields`.
    let start_time = fields
        .get(19)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok(Stat {
        state,
        ppid,
        start_time,
    })
}

/// Reads and parses `<proc>/<pid>/stat`.
pub fn read_stat(proc_root: &Path, pid: i32) -> Result<Stat, ProcError> {
    let path = proc_root.join(pid.to_string()).join("stat");
    let content = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    parse_stat(&content)
}

/// The calling process's PID as seen through the procfs mounted at
/// `proc_root` (the target of its `self` link), which is the PID namespace
/// that other processes reading the same mount see it in.
pub fn self_pid(proc_root: &Path) -> io::Result<i32> {
    let link = std::fs::read_link(proc_root.join("self"))?;
    link.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}/self -> {}", proc_root.display(), link.display()),
        )
    })
}

/// PIDs of all processes (thread-group leaders) listed in `proc_root`.
/// Entries vanishing during the listing are skipped.
pub fn list_pids(proc_root: &Path) -> io::Result<Vec<i32>> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(proc_root)? {
        let Ok(entry) = entry else { continue };
        if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// Decodes the octal escapes (`\040` space, `\011` tab, `\012` newline,
/// `\134` backslash) the kernel uses for paths in mountinfo.
pub fn unescape_mount_path(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount ID (field 1) of the mount in mountinfo `content` whose mount
/// point (field 5) is `mount_point`, or ends with it after a `/`; `None` if
/// there is none. The suffix form matches a container process that the
/// runtime is still setting up: its mounts are made under the root file
/// system's host path (`.../rootfs/.kube-prestop/state/X/created`) before
/// `pivot_root` makes them `/.kube-prestop/state/X/created`. Only processes in the pod's PID
/// namespace are ever looked at, and no other container of the pod mounts
/// anything at that path.
///
/// Mount IDs are unique among live mounts; an ID is reused only after its
/// mount is gone, i.e. after every mount namespace holding it is gone.
pub fn mountinfo_find_mount_point(content: &str, mount_point: &str) -> Option<u64> {
    find_mount(content, mount_point, &IdSource::Any)
}

/// Where a mount comes from: field 3 (`major:minor` of the file system) and
/// field 4 (the mount's root inside that file system) of a mountinfo line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSource {
    /// `major:minor` of the file system.
    pub dev: String,
    /// Path of the mount's root inside the file system (unescaped).
    pub root: String,
}

/// The identifying mount of a watched container: its mount point, and, when
/// known, the source it must come from.
///
/// The source matters in `hostPID` pods, where the processes of every pod on
/// the node are visible and other pods' containers of the same name carry
/// the same mount point: only this pod's id volume (same file system and
/// root) identifies this pod's container. In every pod it keeps another
/// container of the pod from passing for the watched one with a mount of
/// its own at that path (a container may make one in a user and mount
/// namespace of its own where the runtime lets it create them): the id
/// volume is mounted in no container but the sidecars (elsewhere) and the
/// watched containers (each at its own point), and only read-only, so it
/// has no mount of that volume at that point to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdMount {
    /// Mount point, matched as [`mountinfo_find_mount_point`] does.
    pub point: String,
    /// Where the mount must come from.
    pub source: IdSource,
}

/// Where a watched container's identifying mount must come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdSource {
    /// Anywhere: matched on the mount point alone (the tests' plain
    /// directories, where no volume is mounted).
    Any,
    /// Linux runtimes (runc, youki, crun): a bind mount of this file system
    /// and root, the pod's id volume (from the reader's own mount of the
    /// volume, [`id_volume_source`]).
    Volume(MountSource),
    /// gVisor: every bind mount from the host is a file system of its own
    /// in the sandbox, shown with root `/`, type `9p`, source `none` and a
    /// device number of its own in each container ([`gvisor_bind`]), so
    /// neither the device nor the root names the volume. Such a line at the
    /// mount point is taken only when (1) the process is in the reader's
    /// user namespace ([`same_user_namespace`]) and (2) the directory
    /// mounted there, looked at through the process's root
    /// (`/proc/PID/root/<point>`), is the one at `reference` in the
    /// reader's view ([`same_host_dir`]): the sidecar's `<root>/id` (the
    /// whole id volume), or, in the watched container (the preStop
    /// wrapper), its own identifying mount.
    ///
    /// Why (1): in the sandbox, `mount(2)` needs `CAP_SYS_ADMIN` in the
    /// user namespace that owns the caller's mount namespace (`Mount`,
    /// `pkg/sentry/syscalls/linux/sys_mount.go`), and a container without
    /// it gets there only by making a user namespace of its own
    /// (`unshare(CLONE_NEWUSER)`, which the sentry allows any process,
    /// `NewChildUserNamespace`, `pkg/sentry/kernel/auth/user_namespace.go`),
    /// from which it cannot return (`Setns` asks for `CAP_SYS_ADMIN` in the
    /// namespace joined, `pkg/sentry/kernel/task_clone.go`). So a process
    /// in the pod's own user namespace whose table shows a host bind mount
    /// at the point got it from runsc, from its container's OCI spec (or has
    /// `CAP_SYS_ADMIN`, which the security model trusts with the node
    /// anyway). (2) tells the watched container's bind from another mount
    /// at that path in another container's spec. gVisor does not apply the
    /// pod's seccomp profile unless runsc runs with `--oci-seccomp`, so (1)
    /// is what stands in for the source check there.
    /// gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237.
    Gvisor {
        /// The reader's view of the directory the mount must show.
        reference: PathBuf,
    },
}

impl IdMount {
    /// The mount ID of this identifying mount in mountinfo `content`, judged
    /// by the mountinfo line alone; with [`IdSource::Gvisor`] use
    /// [`IdMount::find_in`], which also looks at the directory.
    pub fn find(&self, content: &str) -> Option<u64> {
        find_mount(content, &self.point, &self.source)
    }

    /// The mount ID of this identifying mount in the mountinfo `content` of
    /// process `pid` (of `proc_root`): [`IdMount::find`], and with
    /// [`IdSource::Gvisor`] the directory at the mount point in the
    /// process's root must be the reference's ([`same_host_dir`]; a process
    /// whose root cannot be looked into, e.g. one that exited, does not
    /// match).
    pub fn find_in(&self, content: &str, proc_root: &Path, pid: i32) -> Option<u64> {
        let id = self.find(content)?;
        match &self.source {
            IdSource::Gvisor { reference } => {
                let dir = proc_root.join(pid.to_string());
                let seen = dir.join("root").join(self.point.trim_start_matches('/'));
                (same_user_namespace(proc_root, pid) && same_host_dir(&seen, reference))
                    .then_some(id)
            }
            IdSource::Any | IdSource::Volume(_) => Some(id),
        }
    }

    /// Whether this is gVisor's case ([`IdSource::Gvisor`]).
    pub fn is_gvisor(&self) -> bool {
        matches!(self.source, IdSource::Gvisor { .. })
    }
}

impl std::fmt::Display for IdMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            IdSource::Volume(src) => write!(f, "{} (from {} {})", self.point, src.dev, src.root),
            IdSource::Gvisor { reference } => write!(
                f,
                "{} (gVisor: the directory at {})",
                self.point,
                reference.display()
            ),
            IdSource::Any => f.write_str(&self.point),
        }
    }
}

/// Whether process `pid` is in the reader's user namespace: the links
/// `<proc>/<pid>/ns/user` and `<proc>/self/ns/user` name the same namespace
/// (`user:[inode]`; reading another process's needs ptrace read access, as
/// its root does). `false` when either cannot be read.
pub fn same_user_namespace(proc_root: &Path, pid: i32) -> bool {
    let ns = |p: &str| std::fs::read_link(proc_root.join(p).join("ns").join("user")).ok();
    matches!((ns(&pid.to_string()), ns("self")), (Some(a), Some(b)) if a == b)
}

/// Whether `seen` and `reference` are the same directory of the host, as
/// far as gVisor's sentry shows it: both directories (not followed through a
/// final symbolic link), with the same mode, owner, group, modification
/// time and status change time, to the nanosecond. The device and inode
/// numbers cannot be compared: the sentry gives each bind mount a device
/// number of its own (`GetAnonBlockDevMinor`) and numbers inodes per file
/// system (`inoFromKey`, `pkg/sentry/fsimpl/gofer/gofer.go`), while the
/// times are the host's (the gofer's `stat` of the host file). A process
/// cannot set a status change time (it is the kernel's clock at the last
/// change), so another directory does not pass for the id volume's, which
/// the kubelet made when it set the pod's volumes up and nothing changes
/// afterwards (every container mounts it read-only). gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237.
pub fn same_host_dir(seen: &Path, reference: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (
        std::fs::symlink_metadata(seen),
        std::fs::symlink_metadata(reference),
    ) else {
        return false;
    };
    a.is_dir()
        && b.is_dir()
        && (a.mode(), a.uid(), a.gid()) == (b.mode(), b.uid(), b.gid())
        && (a.mtime(), a.mtime_nsec()) == (b.mtime(), b.mtime_nsec())
        && (a.ctime(), a.ctime_nsec()) == (b.ctime(), b.ctime_nsec())
}

/// Whether mountinfo line `line` is how gVisor's sentry shows a bind mount
/// from the host (a gofer file system): root `/`, file system type `9p`,
/// source `none` (`GenerateProcMountInfo`, `pkg/sentry/vfs/mount.go`: field
/// 10 is always `none`; the root is the mount root's path in its own file
/// system, which for a host bind mount is that file system's root;
/// `gofer.Name` is `9p`, `pkg/sentry/fsimpl/gofer/gofer.go`;
/// gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237). Linux never shows
/// a bind mount of a volume so: its root is the volume directory's path in
/// the node's file system (a `subPath`: that path and the sub-path).
pub fn gvisor_bind(line: &str) -> bool {
    let mut fields = line.split(' ');
    let Some(root) = fields.nth(3) else {
        return false;
    };
    let mut after = fields.skip_while(|f| *f != "-").skip(1);
    root == "/" && after.next() == Some("9p") && after.next() == Some("none")
}

/// Whether the reader runs under gVisor, judged from its own mountinfo
/// `content`: its mount of the id volume at `<root>/id` (the sidecars) or
/// of `<container>`'s state volume at `<root>/state/<container>` (the
/// sidecar and the watched container; `root` is the mount path of ours,
/// [`kube_prestop_contract::MOUNT_PATH`] in a pod) is shown as gVisor shows
/// a bind mount from the host ([`gvisor_bind`]). Both are whole `emptyDir`
/// mounts, which the runtime bind-mounts from the host like a `subPath`.
/// Read from the reader's own mounts, which the kubelet made: no other
/// container has a say in it.
pub fn volume_is_gvisor_bind(content: &str, root: &str, container: &str) -> bool {
    let root = Path::new(root);
    let points = [
        ids_mount_point(root),
        kube_prestop_contract::state_dir(root, container)
            .to_string_lossy()
            .into_owned(),
    ];
    content.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|p| points.contains(&unescape_mount_path(p)))
            && gvisor_bind(line)
    })
}

/// The source of the mount whose mount point is exactly `mount_point` in
/// mountinfo `content`.
pub fn mountinfo_source_of(content: &str, mount_point: &str) -> Option<MountSource> {
    let mount_point = mount_point.trim_end_matches('/');
    content.lines().find_map(|line| {
        let mut fields = line.split(' ').skip(2);
        let dev = fields.next()?;
        let root = fields.next()?;
        (unescape_mount_path(fields.next()?) == mount_point).then(|| MountSource {
            dev: dev.to_owned(),
            root: unescape_mount_path(root),
        })
    })
}

/// `<root>/id`, where the sidecars mount the id volume
/// ([`kube_prestop_contract::IDS_MOUNT_PATH`] in a pod).
fn ids_mount_point(root: &Path) -> String {
    root.join(kube_prestop_contract::IDS_DIR)
        .to_string_lossy()
        .into_owned()
}

/// The source of the id volume's directory, from this process's mountinfo
/// `content` and the mount path of ours `root`: the mount at `<root>/id`,
/// where a sidecar mounts the whole id volume (the watched container and
/// the tests' plain directories have none). The runtime bind-mounts an
/// `emptyDir` from its directory on the node, so the mount's root is that
/// directory's path, and X's identifying mount, a whole mount of the same
/// volume, has the same file system and root. `None` for a root of `/`:
/// that is how gVisor shows every bind mount from the host
/// ([`gvisor_bind`]), and no `emptyDir` of the node's disk is the root of
/// its file system.
pub fn id_volume_source(content: &str, root: &str) -> Option<MountSource> {
    mountinfo_source_of(content, &ids_mount_point(Path::new(root))).filter(|s| s.root != "/")
}

fn find_mount(content: &str, mount_point: &str, source: &IdSource) -> Option<u64> {
    let mount_point = mount_point.trim_end_matches('/');
    content.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let id = fields.next()?.parse().ok()?;
        let dev = fields.nth(1)?;
        let root = fields.next()?;
        let mp = unescape_mount_path(fields.next()?);
        let hit = mp == mount_point
            || (mp.len() > mount_point.len()
                && mp.ends_with(mount_point)
                && (mount_point.starts_with('/')
                    || mp.as_bytes()[mp.len() - mount_point.len() - 1] == b'/'));
        let from_source = match source {
            IdSource::Any => true,
            IdSource::Volume(s) => s.dev == dev && s.root == unescape_mount_path(root),
            IdSource::Gvisor { .. } => gvisor_bind(line),
        };
        (hit && from_source).then_some(id)
    })
}

/// Whether mountinfo `content` has `mount_point` as
/// [`mountinfo_find_mount_point`] matches it.
pub fn mountinfo_has_mount_point(content: &str, mount_point: &str) -> bool {
    mountinfo_find_mount_point(content, mount_point).is_some()
}

/// Reads `<proc>/<pid>/mountinfo` and looks for `mount_point` as
/// [`mountinfo_has_mount_point`] does.
pub fn has_mount_point(proc_root: &Path, pid: i32, mount: &IdMount) -> Result<bool, ProcError> {
    Ok(open_mountinfo(proc_root, pid, mount)?.0.is_some())
}

/// Opens `<proc>/<pid>/mountinfo` and looks for `mount_point`. Returns the
/// mount ID found (if any) and the open file: while it stays open it holds a
/// reference to the process's mount namespace (procfs takes one at open), so
/// the namespace's mounts, and thus their IDs, stay allocated even after the
/// process exits.
pub fn open_mountinfo(
    proc_root: &Path,
    pid: i32,
    mount: &IdMount,
) -> Result<(Option<u64>, File), ProcError> {
    let path = proc_root.join(pid.to_string()).join("mountinfo");
    let mut f = File::open(&path).map_err(|e| io_err(&path, e))?;
    let mut content = String::new();
    f.read_to_string(&mut content)
        .map_err(|e| io_err(&path, e))?;
    Ok((mount.find_in(&content, proc_root, pid), f))
}

/// The mount ID on the first line of mountinfo text `start` (only the
/// first field is needed, so a short read of the table's start will do);
/// `None` for an empty table or malformed text.
pub fn parse_first_mount_id(start: &[u8]) -> Option<u64> {
    let end = start.iter().position(|b| *b == b' ')?;
    std::str::from_utf8(&start[..end]).ok()?.parse().ok()
}

/// Bytes read from the start of a mountinfo table by [`first_mount_id`]:
/// enough for the first field (a mount ID, at most 20 digits).
const MOUNT_MARK_READ: usize = 32;

/// The first mount ID of the mount table `file` (an open
/// `/proc/PID/mountinfo`) shows now, read with one `pread` at offset 0.
/// Two mount namespaces that exist at the same time never share a mount
/// ID (a namespace made by `unshare(CLONE_NEWNS)` gets copies with new
/// IDs; `fs/namespace.c`, `copy_tree`), so this tells which namespace a
/// table belongs to. `None` when the table is empty (nothing reachable
/// from the root the reader had at open, e.g. after `pivot_root`).
pub fn first_mount_id(file: &File) -> io::Result<Option<u64>> {
    let mut buf = [0u8; MOUNT_MARK_READ];
    let n = file.read_at(&mut buf, 0)?;
    Ok(parse_first_mount_id(&buf[..n]))
}

/// The first mount ID of `<proc>/<pid>/mountinfo` opened afresh: which mount
/// namespace (and root) the process has *now*. Three system calls (open,
/// one short `pread`, close), cheap enough to run on every search tick for
/// a young candidate. [`ProcError::Gone`] once the process has exited.
pub fn current_first_mount_id(proc_root: &Path, pid: i32) -> Result<Option<u64>, ProcError> {
    let path = proc_root.join(pid.to_string()).join("mountinfo");
    let f = File::open(&path).map_err(|e| io_err(&path, e))?;
    first_mount_id(&f).map_err(|e| io_err(&path, e))
}

/// An open `/proc/loadavg`, re-read with `pread` to learn the last PID the
/// kernel allocated in the reader's PID namespace (its fifth field is
/// `idr_get_cursor(&task_active_pid_ns(current)->idr) - 1`). When it has not
/// changed, no process was created since the last look, so the `/proc`
/// listing need not be read again: one system call per idle poll tick.
#[derive(Debug)]
pub struct LastPid {
    file: File,
    buf: [u8; 128],
}

impl LastPid {
    /// Opens `<proc>/loadavg`.
    pub fn open(proc_root: &Path) -> io::Result<Self> {
        Ok(Self {
            file: File::open(proc_root.join("loadavg"))?,
            buf: [0; 128],
        })
    }

    /// The last PID allocated in our PID namespace.
    pub fn read(&mut self) -> io::Result<u64> {
        let n = self.file.read_at(&mut self.buf, 0)?;
        parse_loadavg_last_pid(&self.buf[..n])
            .ok_or_else(|| io::Error::other("malformed /proc/loadavg"))
    }
}

/// The fifth field of `/proc/loadavg` (`0.00 0.01 0.05 1/123 4567`), or
/// `None` when the file does not maintain it: malformed, or a total of 0
/// tasks or a last PID of 0, which a real kernel never shows to a running
/// reader (Linux `fs/proc/loadavg.c`, v6.18: `nr_threads` counts the reader
/// itself, and the reader's own PID was allocated in its namespace).
/// gVisor's sentry prints `0.00 0.00 0.00 0/0 0` always (`loadavgData.Generate`
/// in `pkg/sentry/fsimpl/proc/tasks_files.go`, "TODO(b/62345059): Include
/// real data in fields"), so a field that never changes would hide every
/// process created after the first listing: without the field the scanner
/// lists `/proc` on every tick instead.
pub fn parse_loadavg_last_pid(content: &[u8]) -> Option<u64> {
    let mut fields = std::str::from_utf8(content).ok()?.split_ascii_whitespace();
    let (_, total) = fields.nth(3)?.split_once('/')?;
    let last: u64 = fields.next()?.parse().ok()?;
    (total.parse::<u64>().ok()? > 0 && last > 0).then_some(last)
}

/// Opens a pidfd for `pid` (`pidfd_open(2)`, Linux 5.3; allowed by the
/// default container seccomp profile and needs no ptrace permission).
/// Polling it for `POLLIN` reports the process's exit even though it is not
/// our child. `ESRCH`: no such process.
pub fn pidfd_open(pid: i32) -> Result<std::os::fd::OwnedFd, nix::errno::Errno> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain system call with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        Err(nix::errno::Errno::last())
    } else {
        // SAFETY: the kernel returned a new file descriptor that we own.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
    }
}

/// Clock ticks per second for [`Stat::start_time`] (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// Now, in the unit and clock of [`Stat::start_time`]: clock ticks since boot
/// (`CLOCK_BOOTTIME`, which the kernel uses for process start times).
pub fn now_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let hz = clock_ticks_per_second();
    (ts.tv_sec as u64) * hz + (ts.tv_nsec as u64) * hz / 1_000_000_000
}

/// Reads all of a small procfs file into a string. Not for the state
/// directory: it follows links and blocks on a FIFO (records are read with
/// [`crate::state::StateStore::read_checked`]).
pub fn read_small(path: &Path) -> io::Result<String> {
    let mut s = String::new();
    File::open(path)?.read_to_string(&mut s)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let line = "42 (a) b (c) ) S 0 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, b'S');
        assert_eq!(s.ppid, 0);
        assert_eq!(s.start_time, 123456);
        assert!(matches!(
            parse_stat("42 (x) S"),
            Err(ProcError::Malformed(_))
        ));
        assert!(parse_stat("").is_err());
    }

    #[test]
    fn self_pid_is_our_pid() {
        assert_eq!(
            self_pid(Path::new(PROC_ROOT)).unwrap(),
            std::process::id() as i32
        );
        assert!(self_pid(Path::new("/nonexistent-proc")).is_err());
    }

    #[test]
    fn own_stat_reads() {
        let me = std::process::id() as i32;
        let s = read_stat(Path::new(PROC_ROOT), me).unwrap();
        assert!(s.start_time <= now_ticks());
        assert!(matches!(
            read_stat(Path::new(PROC_ROOT), i32::MAX),
            Err(ProcError::Gone)
        ));
        assert!(matches!(
            has_mount_point(
                Path::new(PROC_ROOT),
                i32::MAX,
                &IdMount {
                    point: "/x".into(),
                    source: IdSource::Any
                }
            ),
            Err(ProcError::Gone)
        ));
        assert!(list_pids(Path::new(PROC_ROOT)).unwrap().contains(&me));
    }

    /// `main`'s identifying mount point.
    const POINT: &str = "/.kube-prestop/state/main/created";

    /// A whole `emptyDir`'s directory on the node, as a bind mount of it
    /// shows its root in mountinfo.
    fn empty_dir(pod: &str, volume: &str) -> String {
        format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~empty-dir/{volume}")
    }

    #[test]
    fn identifying_mount_from_this_pods_volume_only() {
        // hostPID: two pods' containers named `main`, same mount point; the
        // sidecar's own mount of the whole id volume names the file system
        // and root.
        let vol_a = empty_dir("uid-a", "kube-prestop");
        let vol_b = empty_dir("uid-b", "kube-prestop");
        let own = format!(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             40 22 8:1 {vol_a} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n"
        );
        let src = id_volume_source(&own, "/.kube-prestop").unwrap();
        assert_eq!(src.dev, "8:1");
        assert_eq!(src.root, vol_a);
        let id = IdMount {
            point: POINT.into(),
            source: IdSource::Volume(MountSource {
                dev: src.dev,
                root: src.root,
            }),
        };
        let other_pod = format!("50 22 8:1 {vol_b} {POINT} ro - ext4 /dev/sda1 rw\n");
        let this_pod = format!("51 22 8:1 {vol_a} {POINT} ro - ext4 /dev/sda1 rw\n");
        let other_fs = format!("52 22 8:2 {vol_a} {POINT} ro - ext4 /dev/sdb1 rw\n");
        // Another container of this pod with a whole volume of its own there.
        let whole = format!(
            "53 22 8:1 {} {POINT} ro - ext4 /dev/sda1 rw\n",
            empty_dir("uid-a", "scratch")
        );
        // The id volume's directory `main` (the layout with a `subPath`).
        let sub = format!("54 22 8:1 {vol_a}/main {POINT} ro - ext4 /dev/sda1 rw\n");
        // The sidecar's own mount of the id volume, elsewhere.
        let elsewhere = format!("55 22 8:1 {vol_a} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n");
        assert_eq!(id.find(&other_pod), None);
        assert_eq!(id.find(&this_pod), Some(51));
        assert_eq!(id.find(&other_fs), None);
        assert_eq!(id.find(&whole), None);
        assert_eq!(id.find(&sub), None);
        assert_eq!(id.find(&elsewhere), None);
        let any = IdMount {
            point: POINT.into(),
            source: IdSource::Any,
        };
        assert_eq!(any.find(&other_pod), Some(50));
        assert_eq!(mountinfo_source_of(&own, "/nowhere"), None);
    }

    /// The id volume's source comes from the sidecar's whole mount of it at
    /// `<root>/id`, never from the state volumes or the binary's.
    #[test]
    fn id_volume_source_from_the_sidecars_whole_mount() {
        let sidecar = format!(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             40 22 8:1 {} /.kube-prestop/bin ro - ext4 /dev/sda1 rw\n\
             41 22 8:1 {} /.kube-prestop/state/main rw - ext4 /dev/sda1 rw\n\
             42 22 8:1 {} /.kube-prestop/state/other ro - ext4 /dev/sda1 rw\n\
             43 22 8:1 {} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n",
            empty_dir("uid-a", "kube-prestop-bin"),
            empty_dir("uid-a", "kube-prestop-state-main"),
            empty_dir("uid-a", "kube-prestop-state-other"),
            empty_dir("uid-a", "kube-prestop"),
        );
        let src = id_volume_source(&sidecar, "/.kube-prestop").unwrap();
        assert_eq!(
            (src.dev.as_str(), src.root.as_str()),
            ("8:1", empty_dir("uid-a", "kube-prestop").as_str())
        );
        assert_eq!(
            id_volume_source(&sidecar, "/.kube-prestop/"),
            Some(src),
            "a trailing slash"
        );
        // The watched container has no `id/`: nothing (its own identifying
        // mount is the finder's business).
        let watched = format!(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             41 22 8:1 {} /.kube-prestop/state/main rw - ext4 /dev/sda1 rw\n\
             44 22 8:1 {} /.kube-prestop/state/main/created ro - ext4 /dev/sda1 rw\n",
            empty_dir("uid-a", "kube-prestop-state-main"),
            empty_dir("uid-a", "kube-prestop"),
        );
        assert_eq!(id_volume_source(&watched, "/.kube-prestop"), None);
        // A mount whose root is `/` names no directory of the node.
        let odd = "43 22 0:9 / /.kube-prestop/id ro - tmpfs tmpfs rw\n";
        assert_eq!(id_volume_source(odd, "/.kube-prestop"), None);
    }

    /// gVisor's rendering of bind mounts from the host, against Linux's.
    #[test]
    fn gvisor_bind_lines() {
        let gvisor = "9 8 0:14 / /.kube-prestop/state/main rw - 9p none rw,trans=fd\n";
        assert!(gvisor_bind(gvisor));
        let linux_state = format!(
            "42 41 8:1 {} /.kube-prestop/state/main rw - ext4 /dev/sda1 rw\n",
            empty_dir("a", "kube-prestop-state-main")
        );
        assert!(!gvisor_bind(&linux_state));
        let linux_id = format!(
            "43 41 8:1 {} /.kube-prestop/id ro - ext4 /dev/sda1 rw\n",
            empty_dir("a", "kube-prestop")
        );
        assert!(!gvisor_bind(&linux_id));
        assert!(!gvisor_bind("2 1 0:8 / /proc rw - proc none rw"));
        assert!(!gvisor_bind("3 1 0:9 / /tmp rw shared:1 - tmpfs none rw"));
        assert!(gvisor_bind("3 1 0:9 / /x rw shared:1 - 9p none rw"));
        assert!(!gvisor_bind("garbage"));
        // X's state volume (the sidecar and X), or the id volume (sidecars).
        assert!(volume_is_gvisor_bind(gvisor, "/.kube-prestop", "main"));
        assert!(!volume_is_gvisor_bind(gvisor, "/.kube-prestop", "other"));
        let gvisor_id = "10 1 0:15 / /.kube-prestop/id ro - 9p none ro,trans=fd\n";
        assert!(volume_is_gvisor_bind(gvisor_id, "/.kube-prestop", "other"));
        for linux in [&linux_state, &linux_id] {
            assert!(!volume_is_gvisor_bind(linux, "/.kube-prestop", "main"));
        }
        // The Linux source is still found from the Linux id mount, never from gVisor's.
        assert!(id_volume_source(&linux_id, "/.kube-prestop").is_some());
        assert_eq!(id_volume_source(gvisor_id, "/.kube-prestop"), None);
    }

    #[test]
    fn user_namespace_of_self() {
        let me = std::process::id() as i32;
        assert!(same_user_namespace(Path::new(PROC_ROOT), me));
        assert!(!same_user_namespace(Path::new(PROC_ROOT), i32::MAX));
        let here = std::env::temp_dir();
        assert!(same_host_dir(&here, &here));
        assert!(!same_host_dir(&here, Path::new("/nonexistent-kps")));
    }

    #[test]
    fn mountinfo_matching() {
        let mi = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                  30 22 8:1 /kube-prestop /.kube-prestop/state/main/created ro - ext4 /dev/sda1 rw\n\
                  31 22 8:1 /x /with\\040space rw - ext4 /dev/sda1 rw\n";
        assert!(mountinfo_has_mount_point(mi, POINT));
        assert!(mountinfo_has_mount_point(mi, &format!("{POINT}/")));
        assert!(!mountinfo_has_mount_point(
            mi,
            "/.kube-prestop/state/main/create"
        ));
        assert!(!mountinfo_has_mount_point(
            mi,
            "/.kube-prestop/state/main/created2"
        ));
        assert!(!mountinfo_has_mount_point(mi, "/.kube-prestop/state/main"));
        assert!(mountinfo_has_mount_point(mi, "/with space"));
        let pre_pivot = "40 22 0:5 /kube-prestop /run/containerd/t/abc/rootfs/.kube-prestop/state/main/created ro - ext4 x rw\n";
        assert!(mountinfo_has_mount_point(pre_pivot, POINT));
        assert!(!mountinfo_has_mount_point("garbage", "/x"));
        assert_eq!(mountinfo_find_mount_point(mi, POINT), Some(30));
        assert_eq!(mountinfo_find_mount_point(pre_pivot, POINT), Some(40));
        assert_eq!(unescape_mount_path("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape_mount_path("trail\\04"), "trail\\04");
    }

    #[test]
    fn first_mount_id_of_a_table() {
        assert_eq!(
            parse_first_mount_id(b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22"),
            Some(22)
        );
        assert_eq!(parse_first_mount_id(b"123456789012"), None, "cut short");
        assert_eq!(parse_first_mount_id(b""), None);
        assert_eq!(parse_first_mount_id(b"x 1 8:1"), None);
        let me = std::process::id() as i32;
        let own = current_first_mount_id(Path::new(PROC_ROOT), me).unwrap();
        let full = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert_eq!(own, full.split(' ').next().and_then(|v| v.parse().ok()));
        let held = File::open("/proc/self/mountinfo").unwrap();
        assert_eq!(first_mount_id(&held).unwrap(), own);
        assert!(matches!(
            current_first_mount_id(Path::new(PROC_ROOT), i32::MAX),
            Err(ProcError::Gone)
        ));
    }

    #[test]
    fn loadavg() {
        assert_eq!(
            parse_loadavg_last_pid(b"0.00 0.01 0.05 1/123 4567\n"),
            Some(4567)
        );
        assert_eq!(parse_loadavg_last_pid(b"0.00"), None);
        // gVisor's /proc/loadavg: no last PID, so no fast path.
        assert_eq!(parse_loadavg_last_pid(b"0.00 0.00 0.00 0/0 0\n"), None);
        assert_eq!(parse_loadavg_last_pid(b"0.00 0.01 0.05 1/123 0\n"), None);
        assert_eq!(parse_loadavg_last_pid(b"0.00 0.01 0.05 123 45\n"), None);
        let mut l = LastPid::open(Path::new(PROC_ROOT)).unwrap();
        let a = l.read().unwrap();
        std::process::Command::new("true").status().unwrap();
        assert_ne!(l.read().unwrap(), a);
    }
}
