#!/usr/bin/env bash
# The outcome exporter's memory at 10,000 injected pods (issue 27 item 3),
# on the running local cluster (`make cluster-up`; this script never brings
# one up or down). kube-prestop-cluster-bench outcomes-memory creates
# API-only Nodes (no kubelet, cordoned and tainted, as the e2e suite's
# nodes.rs), binds the pods to them through the API, labels them as the
# webhook labels injected pods, runs the exporter (`kube-prestop-webhook
# outcomes`) on this host with the same kubeconfig, and prints its VmRSS and
# VmHWM when idle, with the pods created, with every pod's runs counted and
# after a restart that counts them again; then deletes everything it made.
#
#   bench/outcomes-memory.sh                       10,000 pods on 100 nodes, 2 runs each
#   BENCH_OUTCOMES_PODS=1000 bench/outcomes-memory.sh
#
# Knobs: BENCH_OUTCOMES_PODS (10000), BENCH_OUTCOMES_NODES (100),
# BENCH_OUTCOMES_RUNS (runs per pod's message, 2), BENCH_OUTCOMES_CONCURRENCY
# (API requests in flight, 32), BENCH_OUTCOMES_EXPORTER (the binary; default
# the image's amd64 binary from `make images`, target/images/linux/amd64/,
# when it has the outcomes subcommand, else a release build of this tree),
# BENCH_OUTCOMES_RAW (a JSON file for the figures).
# The cluster lock (tests/cluster/lib.sh's) is held for the run, so a
# cluster-down by someone else waits for the clean-up.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
state_root="${KUBE_PRESTOP_STATE_ROOT:-/var/lib/kube-prestop}"
if [[ -z "${KUBECONFIG:-}" ]]; then
    if [[ -f "${state_root}/cluster/env.sh" ]]; then
        # shellcheck source=/dev/null
        source "${state_root}/cluster/env.sh"
    else
        echo "outcomes-memory: no cluster (no KUBECONFIG, no ${state_root}/cluster/env.sh): make cluster-up first" >&2
        exit 1
    fi
fi
target="${CARGO_TARGET_DIR:-${repo}/target}"

exporter="${BENCH_OUTCOMES_EXPORTER:-}"
if [[ -z "${exporter}" ]]; then
    image_bin="${target}/images/linux/amd64/kube-prestop-webhook"
    if [[ -x "${image_bin}" ]] && "${image_bin}" outcomes --help >/dev/null 2>&1; then
        exporter="${image_bin}"
    else
        echo "outcomes-memory: building the release exporter (cargo build --release -p kube-prestop-webhook)" >&2
        cargo build --release --locked -p kube-prestop-webhook >&2
        exporter="${target}/release/kube-prestop-webhook"
    fi
fi
echo "outcomes-memory: exporter ${exporter}" >&2
cargo build --locked -p kube-prestop-cluster-bench >&2

args=(outcomes-memory
    --pods "${BENCH_OUTCOMES_PODS:-10000}"
    --nodes "${BENCH_OUTCOMES_NODES:-100}"
    --runs "${BENCH_OUTCOMES_RUNS:-2}"
    --concurrency "${BENCH_OUTCOMES_CONCURRENCY:-32}"
    --exporter "${exporter}")
[[ -n "${BENCH_OUTCOMES_RAW:-}" ]] && args+=(--raw "${BENCH_OUTCOMES_RAW}")

mkdir -p "${state_root}"
exec 9>"${state_root}/lock"
if ! flock -n 9; then
    echo "outcomes-memory: a cluster-up/cluster-down is running: waiting for it" >&2
    flock 9
fi
# The lock stays with this shell: the bench and its exporter do not inherit it.
"${target}/debug/kube-prestop-cluster-bench" "${args[@]}" 9>&-
