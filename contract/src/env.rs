//! Environment variables: the ones the webhook sets in the sidecar
//! container, the ones the sidecar gives the hook, and the one a user sets
//! for debugging.

/// Environment variable set in the sidecar container: the pod's
/// `terminationGracePeriodSeconds` (seconds, default 30), so the sidecar can
/// log how much grace is left when SIGTERM arrives during a hook.
pub const ENV_GRACE_PERIOD_SECONDS: &str = "KUBE_PRESTOP_GRACE_PERIOD_SECONDS";
/// Environment variable given to the hook: the name of the container that exited.
pub const ENV_HOOK_CONTAINER: &str = "KUBE_PRESTOP_CONTAINER";
/// Environment variable given to the hook: the instance id
/// ([`crate::instance_id`]) of the container run that exited.
pub const ENV_HOOK_INSTANCE: &str = "KUBE_PRESTOP_INSTANCE";
/// Environment variable given to the hook: `1` for the first attempt, `2`
/// when a run interrupted by a sidecar restart is retried.
pub const ENV_HOOK_ATTEMPT: &str = "KUBE_PRESTOP_ATTEMPT";

/// Environment variable given to the hook: the watched container's exit
/// code, `0`–`255`, when it exited (not killed) and the kernel could tell
/// (`PIDFD_INFO_EXIT`, Linux ≥ 6.15). Unset otherwise.
pub const ENV_HOOK_EXIT_CODE: &str = "KUBE_PRESTOP_EXIT_CODE";
/// Environment variable given to the hook: the signal that killed the
/// watched container (`9` for SIGKILL, the OOM killer's), when the kernel
/// could tell. Unset otherwise; never set together with
/// [`ENV_HOOK_EXIT_CODE`].
pub const ENV_HOOK_EXIT_SIGNAL: &str = "KUBE_PRESTOP_EXIT_SIGNAL";
/// Environment variable given to the hook: a directory that is the exited
/// container's root file system as it was, volumes included
/// (`/proc/<watcher pid>/fd/<n>`, a directory file descriptor the watcher
/// holds on the container's root, with its mount namespace held too). `/`
/// when the hook runs chrooted there ([`crate::HookRoot::Container`]). Unset
/// when the watcher could not hold it (the log says why).
pub const ENV_HOOK_ROOT: &str = "KUBE_PRESTOP_ROOT";
/// Environment variable given to the hook: `cut` when the kubelet had
/// started the container's preStop (pod deletion, eviction, a failed
/// liveness probe) and the container then exited before that preStop ended,
/// which cut it short (the runtime kills the container's processes with it);
/// the hook then runs for that exit. Unset otherwise.
pub const ENV_HOOK_KUBELET_PRESTOP: &str = "KUBE_PRESTOP_KUBELET_PRESTOP";
/// Environment variable given to the hook: `1` for a *late* run, one for a
/// run of the container the watcher never saw (it was created, ran and
/// exited while the sidecar was not scheduled): the runtime had created the
/// container ([`crate::created_dir`] exists), no run of it was
/// found, and the kubelet did not run its preStop. The hook then runs when
/// the sidecar is stopped, with [`ENV_HOOK_INSTANCE`]
/// [`crate::UNSEEN_INSTANCE_ID`], and without [`ENV_HOOK_EXIT_CODE`],
/// [`ENV_HOOK_EXIT_SIGNAL`] or [`ENV_HOOK_ROOT`]. Unset otherwise.
pub const ENV_HOOK_LATE: &str = "KUBE_PRESTOP_LATE";

/// Environment variable of the sidecar container: when set (to anything),
/// the watcher logs how it classifies every process it looks at
/// (troubleshooting a container that is not found). The webhook never sets
/// it; a user adds it to the watched container's `env`, which the sidecar
/// copies.
pub const ENV_DEBUG: &str = "KUBE_PRESTOP_DEBUG";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_pinned() {
        assert_eq!(
            [
                ENV_GRACE_PERIOD_SECONDS,
                ENV_HOOK_CONTAINER,
                ENV_HOOK_INSTANCE,
                ENV_HOOK_ATTEMPT,
                ENV_HOOK_EXIT_CODE,
                ENV_HOOK_EXIT_SIGNAL,
                ENV_HOOK_ROOT,
                ENV_HOOK_KUBELET_PRESTOP,
                ENV_HOOK_LATE,
                ENV_DEBUG,
            ],
            [
                "KUBE_PRESTOP_GRACE_PERIOD_SECONDS",
                "KUBE_PRESTOP_CONTAINER",
                "KUBE_PRESTOP_INSTANCE",
                "KUBE_PRESTOP_ATTEMPT",
                "KUBE_PRESTOP_EXIT_CODE",
                "KUBE_PRESTOP_EXIT_SIGNAL",
                "KUBE_PRESTOP_ROOT",
                "KUBE_PRESTOP_KUBELET_PRESTOP",
                "KUBE_PRESTOP_LATE",
                "KUBE_PRESTOP_DEBUG",
            ]
        );
    }
}
