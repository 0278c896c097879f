#!/usr/bin/env bash
# Verifies that nothing of the test cluster is left after `make cluster-down`:
# no process it started (PID and start time recorded at start), no process in its
# cgroups or carrying its state path, no mount under its state dir, no network
# namespace, no cgroup, no host path it created, no loopback listener.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$here/lib.sh"

problems=0
problem() {
  echo "NOT CLEAN: $*" >&2
  problems=$((problems + 1))
}

check_recorded_pids() {
  [[ -f "$LAST_RUN" ]] || return 0
  local kind pid ticks name now
  while read -r kind pid ticks name; do
    [[ "$kind" == pid ]] || continue
    now="$(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null || true)"
    # Same PID and start time is the same process; a zombie holds nothing but
    # its PID until whoever inherited it reaps it, so it counts as gone.
    if [[ -n "$now" && "$now" == "$ticks" ]] && pid_alive "$pid"; then
      problem "process $name (pid $pid) still running"
    fi
  done <"$LAST_RUN"
  return 0
}

# Host paths that Kubernetes components and containerd hard-code; the harness
# covers them in its mount namespace, so none may appear on the host unless it
# was there before cluster-up.
WATCHED_PATHS=(/var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /etc/cni /etc/kubernetes)

# The harness's components keep these under the state dir (containerd's CNI
# conf_dir is $STATE/cni/net.d) or inside their own mount namespace, so one that
# appears on the host was made by another program on the host meanwhile; the
# message gives its time to find which. buildah makes
# /etc/cni/net.d (mode 0700) unless its network_config_dir points elsewhere, as
# images/build.sh and `images.sh buildah` do.
check_watched_paths() {
  local p made
  for p in "${WATCHED_PATHS[@]}"; do
    if [[ -e "$p" ]] && ! grep -qx "preexisting $p" "$LAST_RUN" 2>/dev/null; then
      made="$(stat -c '%y' "$p" 2>/dev/null | cut -d. -f1)"
      problem "host path $p exists (not there before cluster-up; last changed $made, by another program on the host: the cluster's components keep theirs under the state dir or in their mount namespace$([[ "$p" == /etc/cni ]] && echo '; buildah makes /etc/cni/net.d when its network_config_dir is not set elsewhere'))"
    fi
  done
  return 0
}

check_created_paths() {
  [[ -f "$LAST_RUN" ]] || return 0
  local kind path
  while read -r kind path; do
    [[ "$kind" == path && -e "$path" ]] && problem "path created by cluster-up still exists: $path"
  done <"$LAST_RUN"
  return 0
}

check_processes() {
  local p
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" == "$$" ]] && continue
    if grep -qs ":$CGROUP_ROOT/\|:$CGROUP_ROOT\$" "$p/cgroup"; then
      problem "process ${p#/proc/} in cgroup $CGROUP_ROOT: $(tr '\0' ' ' 2>/dev/null <"$p/cmdline")"
    fi
    if tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -q "^[^ ]*$STATE"; then
      problem "process ${p#/proc/} refers to $STATE: $(tr '\0' ' ' 2>/dev/null <"$p/cmdline")"
    fi
  done
}

check_mounts() {
  local m
  m="$(awk -v s="$STATE" 'index($2, s) == 1 || index($1, s) == 1' /proc/self/mountinfo /proc/mounts || true)"
  [[ -z "$m" ]] || problem "mounts under $STATE: $m"
}

check_namespaces_and_cgroups() {
  ip netns list | grep -qw "$NETNS" && problem "network namespace $NETNS exists"
  local h
  for h in /sys/fs/cgroup/*"$CGROUP_ROOT" /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"; do
    [[ -d "$h" ]] && problem "cgroup $h exists"
  done
  [[ -e "$STATE" ]] && problem "state dir $STATE exists"
  if ss -Hltn "sport = :$HOST_API_PORT" | grep -q .; then
    problem "something listens on port $HOST_API_PORT"
  fi
  return 0
}

check_recorded_pids
check_created_paths
check_watched_paths
check_processes
check_mounts
check_namespaces_and_cgroups
if ((problems > 0)); then
  echo "cluster-down left $problems thing(s) behind" >&2
  exit 1
fi
echo "clean: no process, mount, namespace, cgroup or state of the harness is left"
