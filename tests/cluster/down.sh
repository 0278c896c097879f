#!/usr/bin/env bash
# Tears the test cluster down (`make cluster-down`). Idempotent. Stops exactly the
# processes cluster-up started (by their recorded PIDs) and the ones those started
# in turn (container shims and container processes: found by the harness's mount
# namespace, network namespace and cgroup root, which nothing else uses), then
# unmounts what is mounted under the state dir, removes the namespaces, the
# harness's cgroups and the state.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$here/lib.sh"
# shellcheck source=tests/cluster/namespaces.sh
source "$here/namespaces.sh"

# Let the kubelet stop the pods itself (preStop hooks, grace periods, CNI
# teardown): with the controllers stopped first, nothing recreates them.
drain_pods() {
  component_running kube-apiserver && component_running kubelet || return 0
  # An apiserver without etcd (crashed run) would only time out.
  if ! curl -fsS --max-time 5 --cacert "$STATE/pki/ca.crt" \
    "https://127.0.0.1:$HOST_API_PORT/readyz" >/dev/null 2>&1; then
    log "apiserver not ready: skipping the pod drain"
    return 0
  fi
  stop_component kube-controller-manager
  stop_component kube-scheduler
  log "deleting all pods"
  kubectl_admin delete pods --all --all-namespaces --wait=true --timeout=90s >&2 ||
    log "pods not all deleted in time; their containers are killed below"
}

# Kills every container task left in containerd's k8s.io namespace.
kill_tasks() {
  component_running containerd || return 0
  local c=("$CTR" --address "$CONTAINERD_SOCK" -n k8s.io) id
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
    "${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
    "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
  done
}

# PIDs of processes that belong to this harness without a pidfile: anything in
# its mount namespace or network namespace, or in a cgroup under its root.
harness_pids() {
  local mnt_ino="" net_ino="" p pid self=" "
  # Never this script or its callers, even when run from inside the namespace.
  pid=$$
  while ((pid > 1)); do
    self+="$pid "
    pid="$(awk '{print $4}' "/proc/$pid/stat")"
  done
  [[ -e "$MNTNS" ]] && mnt_ino="$(stat -L -c %i "$MNTNS" 2>/dev/null || true)"
  netns_exists && net_ino="$(stat -L -c %i "/run/netns/$NETNS" 2>/dev/null || true)"
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [[ "$self" == *" $pid "* ]] && continue
    if { [[ -n "$mnt_ino" && "$(stat -L -c %i "$p/ns/mnt" 2>/dev/null)" == "$mnt_ino" ]]; } ||
      { [[ -n "$net_ino" && "$(stat -L -c %i "$p/ns/net" 2>/dev/null)" == "$net_ino" ]]; } ||
      grep -qs ":$CGROUP_ROOT/\|:$CGROUP_ROOT\$" "$p/cgroup"; then
      echo "$pid"
    fi
  done
}

sweep_leftovers() {
  local pids pid
  mapfile -t pids < <(harness_pids)
  ((${#pids[@]} == 0)) && return 0
  log "stopping ${#pids[@]} leftover harness process(es): ${pids[*]}"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do stop_pid "$pid" 10; done
}

# Host mounts under the state dir, deepest first (the namespace keepers).
unmount_state() {
  local m
  findmnt -rn -o TARGET | awk -v s="$STATE" 'index($0, s) == 1' | sort -r |
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m"
    done
}

remove_cgroups() {
  local h
  for h in /sys/fs/cgroup/*"$CGROUP_ROOT" /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"; do
    [[ -d "$h" ]] || continue
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d "$h" ]] && log "could not remove cgroup $h"
  done
  return 0
}

record_last_run() {
  mkdir -p "$STATE_ROOT"
  {
    echo "state $STATE"
    echo "netns $NETNS"
    echo "cgroup $CGROUP_ROOT"
    [[ -f "$STATE/pids/started" ]] && sed 's/^/pid /' "$STATE/pids/started"
    [[ -f "$CREATED_PATHS" ]] && sed 's/^/path /' "$CREATED_PATHS"
    [[ -f "$STATE/preexisting-paths" ]] && sed 's/^/preexisting /' "$STATE/preexisting-paths"
  } >"$LAST_RUN"
}

main() {
  local start=$SECONDS
  if [[ ! -d "$STATE" ]] && ! netns_exists; then
    log "no cluster state: nothing to do"
    return 0
  fi
  record_last_run
  drain_pods
  stop_component kube-proxy
  stop_component kubelet 30
  kill_tasks
  stop_component containerd 30
  local c
  for c in kube-controller-manager kube-scheduler api-forward-host api-forward-node kube-apiserver etcd; do
    stop_component "$c" 30
  done
  # Container shims and processes outlive containerd by design.
  sweep_leftovers
  unmount_state
  teardown_namespaces
  remove_cgroups
  rm -rf --one-file-system "$STATE"
  log "cluster down in $((SECONDS - start))s"
}

use_running_platform
take_lock
main "$@"
