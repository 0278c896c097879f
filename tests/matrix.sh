#!/usr/bin/env bash
# `make e2e-matrix`: the e2e suite over Kubernetes versions x container
# runtimes, one cell after another (one cluster per machine). Per cell:
# build what is missing (cached by version, so a re-run skips it), cluster up,
# install kube-prestop, the cell's tests, cluster down, check-clean. A failing
# cell does not stop the others. Each cell writes
#   target/matrix/<k8s>_<runtime>.json   result: cell, date, wall time, counts, failed tests/scenarios
#   target/matrix/<k8s>_<runtime>.log    everything the cell printed
#   target/matrix/<k8s>_<runtime>.step<N>.junit.xml   the JUnit report of test step N
# and the run ends with one table over all result files (`tests/matrix.sh table`
# prints it again). The tests run under cargo nextest (scripts/nextest.sh,
# installed into the tools cache when missing, before the cell takes the
# cluster), profile `matrix` of .config/nextest.toml: one test at a time, each
# test's output in the log and in the step's JUnit report.
# tests/matrix_results.py counts the log and the reports into the cell's
# result (tests and failures from the JUnit reports, scenario results and skip
# reasons from the tests' output stored in them, failed steps from the log)
# and makes the table; `tests/matrix.sh self-test` (run by `make lint`) checks
# that on the cells in tests/fixtures/matrix/.
#
# The default cell (v1.37.2, containerd2-runc) runs what `make e2e-all` runs; every other
# cell runs the concurrent scenario batch, the twenty-`true` burst and the
# kubelet restart scenarios (issue 14).
#
# Environment:
#   MATRIX_K8S       Kubernetes versions (default: all of versions.sh's K8S_VERSIONS, newest first)
#   MATRIX_RUNTIMES  runtimes (default: all of versions.sh's RUNTIMES)
#   MATRIX_CELLS     explicit cells "k8s/runtime ..." instead of the product of the two
#   MATRIX_RERUN=1   run cells again that already have a passing result (default: skip them)
#   MATRIX_LOCK      a file to flock(1) around each cell's cluster use (machines shared by several users)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cluster="$repo/tests/cluster"
out="$repo/target/matrix"
# shellcheck source=tests/cluster/versions.sh
source "$cluster/versions.sh"

DEFAULT_CELL="v1.37.2/containerd2-runc"

log() { printf '[matrix %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

cells() {
  if [[ -n "${MATRIX_CELLS:-}" ]]; then
    local c
    read -r -a c <<<"$MATRIX_CELLS"
    printf '%s\n' "${c[@]}"
    return
  fi
  local k r ks rs
  read -r -a ks <<<"${MATRIX_K8S:-$(printf '%s\n' "${K8S_VERSIONS[@]}" | sort -rV | tr '\n' ' ')}"
  read -r -a rs <<<"${MATRIX_RUNTIMES:-${RUNTIMES[*]}}"
  # The default cell first: it is the one everybody else relies on.
  for k in "${ks[@]}"; do
    for r in "${rs[@]}"; do
      [[ "$k/$r" == "$DEFAULT_CELL" ]] && echo "$k/$r"
    done
  done
  for k in "${ks[@]}"; do
    for r in "${rs[@]}"; do
      [[ "$k/$r" == "$DEFAULT_CELL" ]] || echo "$k/$r"
    done
  done
}

# Every cell is checked before anything is built or started.
check_cells() {
  local cell bad=0
  while read -r cell; do
    K8S_VERSION="${cell%%/*}" RUNTIME="${cell#*/}" bash -c \
      "source '$cluster/versions.sh' && check_platform" || bad=1
  done < <(cells)
  ((bad == 0)) || {
    log "unknown cell(s): nothing was run"
    exit 2
  }
}

# The steps of a cell, one command a line (split into words, no quoting);
# the tests as cargo nextest runs with the profile `matrix` (a JUnit report).
cell_tests() {
  local nextest="scripts/nextest.sh run --profile matrix --no-tests=fail"
  if [[ "$1" == "$DEFAULT_CELL" ]]; then
    # What `make e2e-all` runs.
    echo "tests/argo/install.sh"
    echo "$nextest -p kube-prestop-e2e"
    echo "tests/install-product.sh --uninstall"
    echo "tests/chart/install-check.sh"
    echo "env KUBE_PRESTOP_TEST_KUBECONFIG=/var/lib/kube-prestop/cluster/kubeconfig $nextest -p kube-prestop-cluster --lib --run-ignored only self_managed_certs::cluster_tests"
  else
    echo "$nextest -p kube-prestop-e2e --test scenarios -- --exact concurrent_scenarios indexed_twenty_true_runs_twenty_hooks"
    echo "$nextest -p kube-prestop-e2e --test kubelet_restarts"
  fi
}

run_cell() {
  local cell="$1" k8s="${1%%/*}" runtime="${1#*/}" name logf res status=pass
  name="${k8s}_${runtime}"
  logf="$out/$name.log"
  res="$out/$name.json"
  if [[ -z "${MATRIX_RERUN:-}" && -f "$res" ]] &&
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["status"] != "pass")' "$res"; then
    log "$cell: passed before ($res), skipped (MATRIX_RERUN=1 runs it again)"
    return 0
  fi
  log "$cell: log $logf"
  : >"$logf"
  rm -f "$out/$name".step*.junit.xml
  local cell_start=$SECONDS
  export K8S_VERSION="$k8s" RUNTIME="$runtime"
  {
    echo "==> cell $cell: $(date -u +%FT%TZ)"
    local start=$SECONDS
    # Builds outside the cluster lock: they take long and touch no cluster.
    if ! "$cluster/build-k8s.sh" || ! "$cluster/tools.sh" runtime ||
      ! "$repo/scripts/nextest.sh" install; then
      status=build-failed
    fi
    echo "==> build step: $((SECONDS - start))s"
  } >>"$logf" 2>&1
  if [[ "$status" == pass ]]; then
    local lock_cmd=()
    # -o: the lock is held by flock alone, not by the daemons the cell starts.
    [[ -n "${MATRIX_LOCK:-}" ]] && lock_cmd=(flock -o "$MATRIX_LOCK")
    # shellcheck disable=SC2016  # expanded by the inner bash
    if ! "${lock_cmd[@]}" bash -c '
      set -uo pipefail
      repo="$1" cell="$2" out="$3" name="$4" status=pass n=0
      shift 4
      # Where nextest writes the profile `matrix` report (.config/nextest.toml):
      # its store is target/nextest under the workspace, whatever CARGO_TARGET_DIR.
      junit="$repo/target/nextest/matrix/junit.xml"
      echo "==> cluster turn start: $(date -u +%FT%TZ)"
      if ! "$repo/tests/cluster/up.sh"; then
        echo "==> cluster-up failed"; status=cluster-failed
      elif ! SKIP_IMAGE_BUILD="${MATRIX_SKIP_IMAGE_BUILD:-}" "$repo/tests/install-product.sh"; then
        echo "==> install failed"; status=install-failed
      else
        source /var/lib/kube-prestop/cluster/env.sh
        for t in "$@"; do
          n=$((n + 1))
          echo "==> step: $t"
          rm -f "$junit"
          (cd "$repo" && $t)
          rc=$?
          if [[ -f "$junit" ]]; then
            mv "$junit" "$out/$name.step$n.junit.xml"
            echo "==> step junit: $name.step$n.junit.xml"
          fi
          echo "==> step exit $rc: $t"
          ((rc == 0)) || status=fail
        done
      fi
      "$repo/tests/cluster/down.sh" || status=down-failed
      "$repo/tests/cluster/check-clean.sh" || status=not-clean
      echo "==> cluster time: $SECONDS s (up to check-clean)"
      echo "==> cell status: $status"
      [[ "$status" == pass ]]
    ' matrix-cell "$repo" "$cell" "$out" "$name" "${tests[@]}" >>"$logf" 2>&1; then
      status="$(sed -n 's/^==> cell status: //p' "$logf" | tail -n 1)"
      [[ -n "$status" ]] || status=fail
    fi
  fi
  echo "==> cell end: $(date -u +%FT%TZ), $((SECONDS - cell_start)) s" >>"$logf"
  python3 "$repo/tests/matrix_results.py" result "$res" "$cell" "$status" "$logf" "$((SECONDS - cell_start))"
  log "$cell: $status"
}

table() {
  python3 "$repo/tests/matrix_results.py" table "$out"
}

main() {
  case "${1:-}" in
    table)
      table
      return
      ;;
    self-test)
      python3 "$repo/tests/matrix_results.py" self-test
      return
      ;;
  esac
  [[ $EUID -eq 0 ]] || {
    log "must run as root (the cluster harness)"
    exit 1
  }
  check_cells
  mkdir -p "$out"
  local cell
  mapfile -t all < <(cells)
  # The images are the same for every cell: built once, by the first install.
  for cell in "${all[@]}"; do
    mapfile -t tests < <(cell_tests "$cell")
    run_cell "$cell"
    [[ -f "$repo/target/oci/kube-prestop-sidecar.tar" ]] && export MATRIX_SKIP_IMAGE_BUILD=1
  done
  echo
  table
}

main "$@"
