# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Shared paths and helpers of the cluster harness. Sourced, never run.
#
# Layout of one running cluster (all under $STATE, removed by `make cluster-down`):
#   pids/       one pidfile per process the harness started
#   logs/       stdout+stderr of each of them
#   pki/        the cluster's own CA and certificates (openssl)
#   ns/mnt      the harness's mount namespace, kept by a bind mount
#   kubeconfig  admin kubeconfig for clients on the host (apiserver via 127.0.0.1)
# Every component runs inside the network namespace $NETNS and the mount namespace
# ns/mnt: their mounts (pod volumes, overlay snapshots, pod netns files) stay in
# that namespace and vanish with it, and no traffic can reach a real network.

_lib_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/versions.sh
source "$_lib_here/versions.sh"

STATE_ROOT="${KUBE_PRESTOP_STATE_ROOT:-/var/lib/kube-prestop}"
STATE="$STATE_ROOT/cluster"
# Left behind on purpose by cluster-down so that check-clean.sh can verify that
# the processes of the last run are gone; tiny, outside $STATE.
LAST_RUN="$STATE_ROOT/last-run"

NETNS="${KUBE_PRESTOP_NETNS:-kpt-node}"
NODE_NAME="kpt-node"
NODE_IP="10.200.0.2"
NODE_CIDR="10.200.0.0/24"
POD_CIDR="10.201.0.0/24"
POD_GATEWAY="10.201.0.1"
SERVICE_CIDR="10.202.0.0/24"
SERVICE_IP="10.202.0.1"
# The apiserver listens on $NODE_IP:6443 inside the netns; a forwarder makes it
# reachable from the host on this loopback port only.
HOST_API_PORT="${KUBE_PRESTOP_API_PORT:-36443}"
CGROUP_ROOT="/kube-prestop"

MNTNS="$STATE/ns/mnt"
# K8S_VERSION=... RUNTIME=... of the cluster that up.sh started (see use_running_platform).
PLATFORM_FILE="$STATE/platform"
CONTAINERD_SOCK="$STATE/containerd/containerd.sock"
KUBECONFIG_HOST="$STATE/kubeconfig"
KUBECTL="$K8S_BIN/kubectl"

log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# Runs a command inside the harness's network and mount namespaces.
# nsenter instead of `ip netns exec`: the latter remounts /sys, which would hide
# the cgroup hierarchies from containerd and the kubelet.
in_node() {
  nsenter --mount="$MNTNS" --net="/run/netns/$NETNS" -- "$@"
}

# Network namespace only (host file system view): for clients and probes.
in_netns() {
  nsenter --net="/run/netns/$NETNS" -- "$@"
}

# A zombie counts as gone: whoever inherited it may reap it late.
pid_alive() {
  local pid="$1" state
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z ]]
}

pidfile_pid() {
  local f="$STATE/pids/$1.pid"
  [[ -f "$f" ]] && cat "$f"
}

component_running() {
  local pid
  pid="$(pidfile_pid "$1" || true)"
  pid_alive "$pid"
}

# take_lock: one cluster per machine, shared by everyone working on it: up and down of
# concurrent callers take turns instead of tearing each other's work apart.
take_lock() {
  # up.sh runs down.sh on stale state while it holds the lock.
  [[ -n "${KUBE_PRESTOP_CLUSTER_LOCKED:-}" ]] && return 0
  export KUBE_PRESTOP_CLUSTER_LOCKED=1
  mkdir -p "$STATE_ROOT"
  exec 9>"$STATE_ROOT/lock"
  if ! flock -n 9; then
    log "another cluster-up/cluster-down is running: waiting for it"
    flock 9
  fi
}

# start_component NAME CMD...: starts CMD inside the node namespaces, detached in
# its own session (so that the shell or job that ran `make` can end without taking
# it along), and records its PID. setsid and nsenter both exec, so $! is the PID of
# CMD itself. Does nothing when NAME is already running.
start_component() {
  local name="$1"
  shift
  if component_running "$name"; then
    log "$name: already running (pid $(pidfile_pid "$name"))"
    return 0
  fi
  mkdir -p "$STATE/pids" "$STATE/logs"
  # 9>&-: the cluster lock (fd 9 of up.sh) must not outlive up.sh in the
  # daemons, or cluster-down would wait for it forever.
  setsid nsenter --mount="$MNTNS" --net="/run/netns/$NETNS" -- "$@" \
    </dev/null >>"$STATE/logs/$name.log" 2>&1 9>&- &
  echo $! >"$STATE/pids/$name.pid"
  record_started "$name" $!
  log "$name: started (pid $!, log $STATE/logs/$name.log)"
}

# Keeps PID and start time (clock ticks since boot) of every process started, so
# that check-clean.sh can tell after cluster-down that none of them survives,
# without mistaking a later process that reuses a PID for one of them.
record_started() {
  local name="$1" pid="$2" ticks
  ticks="$(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null || echo 0)"
  echo "$pid $ticks $name" >>"$STATE/pids/started"
}

# Same, for a process that must stay in the host network namespace (the loopback
# side of the apiserver forwarder).
start_host_component() {
  local name="$1"
  shift
  if component_running "$name"; then
    return 0
  fi
  mkdir -p "$STATE/pids" "$STATE/logs"
  setsid "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1 9>&- &
  echo $! >"$STATE/pids/$name.pid"
  record_started "$name" $!
  log "$name: started (pid $!)"
}

# stop_pid PID [TIMEOUT]: TERM, wait up to TIMEOUT seconds, then KILL.
stop_pid() {
  local pid="$1" timeout="${2:-20}" deadline
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + timeout))
  while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  if pid_alive "$pid"; then
    log "pid $pid did not stop within ${timeout}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while pid_alive "$pid"; do sleep 0.1; done
  fi
}

stop_component() {
  local name="$1" timeout="${2:-20}" pid
  pid="$(pidfile_pid "$name" || true)"
  if pid_alive "$pid"; then
    log "$name: stopping pid $pid"
    stop_pid "$pid" "$timeout"
  fi
  rm -f "$STATE/pids/$name.pid"
}

# wait_for DESCRIPTION TIMEOUT CMD...: polls CMD until it succeeds or the deadline
# passes. Polling with a deadline, never a fixed sleep.
wait_for() {
  local what="$1" timeout="$2" deadline start=$SECONDS
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
  log "$what: ok after $((SECONDS - start))s"
}

# wait_component NAME DESCRIPTION TIMEOUT CMD...: like wait_for, but gives up at
# once, showing the end of its log, when component NAME has died.
wait_component() {
  local name="$1" what="$2" timeout="$3" deadline start=$SECONDS
  shift 3
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! component_running "$name"; then
      log "$name died while waiting for $what; end of $STATE/logs/$name.log:"
      tail -n 15 "$STATE/logs/$name.log" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
  log "$what: ok after $((SECONDS - start))s"
}

kubectl_admin() {
  "$KUBECTL" --kubeconfig "$KUBECONFIG_HOST" "$@"
}

# True when the harness's mount namespace exists (its bind mount is in place).
mntns_exists() {
  [[ -e "$MNTNS" ]] && findmnt -n --mountpoint "$MNTNS" >/dev/null 2>&1
}

netns_exists() {
  [[ -e "/run/netns/$NETNS" ]]
}

# join_running_cluster PREFIX: for scripts that install into the running
# cluster (tests/install-product.sh, tests/argo/install.sh): its env.sh
# (KUBECONFIG, kubectl and helm on the PATH) and its platform
# (use_running_platform); without a running cluster, exits 1 saying
# "PREFIX no cluster: run 'make cluster-up' first".
join_running_cluster() {
  [[ -f "$STATE/env.sh" ]] || { printf "%s no cluster: run 'make cluster-up' first\n" "$1" >&2; exit 1; }
  # shellcheck source=/dev/null
  source "$STATE/env.sh"
  use_running_platform
}

# use_running_platform: for scripts that act on the running cluster (down, status):
# its K8S_VERSION and RUNTIME (kubectl, ctr), whatever the caller's environment says.
use_running_platform() {
  [[ -f "$PLATFORM_FILE" ]] || return 0
  local kv kvs
  read -r -a kvs <"$PLATFORM_FILE"
  for kv in "${kvs[@]}"; do
    case "$kv" in
      K8S_VERSION=*) K8S_VERSION="${kv#*=}" ;;
      RUNTIME=*) RUNTIME="${kv#*=}" ;;
    esac
  done
  # shellcheck source=tests/cluster/versions.sh
  source "$_lib_here/versions.sh"
  KUBECTL="$K8S_BIN/kubectl"
}
