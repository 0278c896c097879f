//! Who sent a stop signal: the kubelet (through the runtime, from outside
//! the pod's PID namespace) or a process of the pod.
//!
//! The kubelet stops a container through the runtime (CRI `StopContainer`:
//! containerd's shim runs `runc kill`, which calls `kill(2)` on the host).
//! A signal from an ancestor PID namespace reaches the receiver with
//! `si_pid` 0 (Linux `kernel/signal.c`, `__send_signal_locked`: "From an
//! ancestor pid namespace?" sets `info->si_pid = 0`; v6.18; `docs/facts.md`
//! L9), so a SIGTERM
//! whose `ssi_pid` is not 0 came from a process the sidecar can see: one of
//! the pod's own. Argo Workflows' emissary executor is one such sender: on
//! SIGTERM it signals its command with `kill(-1, SIGTERM)` once Go has set
//! the released process's PID to -1 (argo-workflows v4.0.5
//! `workflow/executor/osspecific/signal_darwin.go` `Kill`, also built for
//! Linux, after `osspecific.Wait` called `Process.Release`; seen with
//! strace on the local cluster; `docs/facts.md` R6), which in a shared PID
//! namespace reaches
//! every process of the pod, the sidecar included. Such a SIGTERM is not
//! the kubelet stopping the pod, and the watched container still gets its
//! hook when it then exits.
//!
//! In the host's PID namespace (a `hostPID` pod) the runtime is visible
//! too, so there every stop signal counts.

use std::path::Path;

/// The initial PID namespace's inode number, which the kernel fixes
/// (`PROC_PID_INIT_INO`, `include/linux/proc_ns.h`).
pub const INITIAL_PID_NAMESPACE_INODE: u64 = 0xEFFF_FFFC;

/// Whether the caller is in the host's (initial) PID namespace: its
/// `<proc>/self/ns/pid` link reads `pid:[4026531836]`. `false` when the
/// link cannot be read.
pub fn in_initial_pid_namespace(proc_root: &Path) -> bool {
    std::fs::read_link(proc_root.join("self/ns/pid"))
        .ok()
        .and_then(|l| l.to_str().map(str::to_owned))
        .is_some_and(|l| l == format!("pid:[{INITIAL_PID_NAMESPACE_INODE}]"))
}

/// Whether a stop signal with sender `ssi_pid` (from the signalfd) came
/// from a process of the pod rather than from the runtime: a non-zero
/// sender, outside the host's PID namespace.
pub fn from_inside_the_pod(ssi_pid: u32, initial_pid_namespace: bool) -> bool {
    ssi_pid != 0 && !initial_pid_namespace
}

/// `<proc>/PID/comm` without its newline, `?` when unreadable, for the log.
pub fn comm(proc_root: &Path, pid: u32) -> String {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
        .map_or_else(|_| "?".to_owned(), |c| c.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn only_a_visible_sender_outside_the_host_namespace_is_the_pods() {
        assert!(!from_inside_the_pod(0, false), "the runtime, from the host");
        assert!(from_inside_the_pod(47, false), "emissary's kill(-1)");
        assert!(!from_inside_the_pod(0, true));
        assert!(!from_inside_the_pod(4711, true), "hostPID: runc is visible");
    }

    #[test]
    fn the_initial_namespace_is_recognised_by_its_fixed_inode() {
        let dir = std::env::temp_dir().join(format!("kp-sender-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("self/ns")).unwrap();
        std::os::unix::fs::symlink("pid:[4026531836]", dir.join("self/ns/pid")).unwrap();
        assert!(in_initial_pid_namespace(&dir));
        std::fs::remove_file(dir.join("self/ns/pid")).unwrap();
        std::os::unix::fs::symlink("pid:[4026532411]", dir.join("self/ns/pid")).unwrap();
        assert!(!in_initial_pid_namespace(&dir));
        std::fs::remove_file(dir.join("self/ns/pid")).unwrap();
        assert!(!in_initial_pid_namespace(&dir), "unreadable");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
