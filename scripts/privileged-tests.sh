#!/usr/bin/env bash
# The sidecar's namespace tests (marked #[ignore] with their reason: they
# need root and util-linux's unshare/nsenter to build a pod's PID and mount
# namespaces). `make unit` runs them here:
#   - as root, or under CI=true, with `-- --ignored`: a test that cannot
#     run then fails (tests/common/mod.rs `cannot_run`), never passes; outside
#     CI the three that need Linux 6.15 are left out by name on older kernels;
#   - otherwise it says that they were not run, and why, and exits 0: the
#     plain `cargo test` run before it listed each as ignored with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "$(id -u)" == 0 || "${CI:-}" == true ]]; then
    echo "==> sidecar namespace tests (uid $(id -u), CI=${CI:-unset})"
    skip=()
    # A test asked to run that cannot fails (tests/common `cannot_run`).
    # Outside CI, the ones this kernel cannot run are left out by name
    # instead, and said so; under CI=true every one runs.
    kernel="$(uname -r)"
    if [[ "${CI:-}" != true && "$(printf '%s\n' 6.15 "${kernel%%-*}" | sort -V | head -1)" != 6.15 ]]; then
        for t in exit_code_and_signal_reach_the_hook run_on_failure_skips_a_success_and_runs_on_a_failure \
            run_on_success_runs_on_a_success_and_skips_a_failure; do
            skip+=(--skip "${t}")
        done
        echo "==> not run: 3 tests need Linux 6.15 (PIDFD_INFO_EXIT); this kernel is ${kernel}" >&2
    fi
    # One at a time: they stop and starve sidecars on purpose, and two at
    # once on a 2-core machine starve them more than each test means to.
    exec cargo test -p kube-prestop-sidecar --tests -- --ignored --test-threads=1 "${skip[@]}"
fi
count=$(grep -rho '#\[ignore = "needs root' sidecar/tests | wc -l)
echo "==> sidecar namespace tests NOT run: $count tests need root and util-linux (run make unit as root; CI does)" >&2
