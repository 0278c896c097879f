#!/usr/bin/env bash
# The sidecar's namespace tests (marked #[ignore] with their reason: they
# need root and util-linux's unshare/nsenter to build a pod's PID and mount
# namespaces). `make unit` runs them here:
#   - as root, or under CI=true (where a missing privilege or tool fails the
#     run: tests/common/mod.rs `cannot_run`), with `-- --ignored`;
#   - otherwise it says that they were not run, and why, and exits 0: the
#     plain `cargo test` run before it listed each as ignored with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "$(id -u)" == 0 || "${CI:-}" == true ]]; then
    echo "==> sidecar namespace tests (uid $(id -u), CI=${CI:-unset})"
    # One at a time: they stop and starve sidecars on purpose, and two at
    # once on a 2-core machine starve them more than each test means to.
    exec cargo test -p kube-prestop-sidecar --tests -- --ignored --test-threads=1
fi
count=$(grep -rho '#\[ignore = "needs root' sidecar/tests | wc -l)
echo "==> sidecar namespace tests NOT run: $count tests need root and util-linux (run make unit as root; CI does)" >&2
