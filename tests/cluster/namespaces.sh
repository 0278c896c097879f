# shellcheck shell=bash
# The node's network and mount namespaces. Sourced by up.sh and down.sh (needs lib.sh).

# Paths that containerd or its CNI library hard-code on the host file system.
# Each one is covered inside the harness's mount namespace by a directory of
# $STATE; a mount point that does not exist on the host is created first and
# recorded, so that cluster-down removes exactly what cluster-up created.
#   /var/lib/cni      libcni's result cache (host-local's data dir is configured)
#   /var/lib/kubelet  the kubelet's device plugin socket dir is fixed
#                     (/var/lib/kubelet/device-plugins), whatever its --root-dir
# /var/log gets a tmpfs of its own instead: the kubelet keeps its per-container log
# symlinks in /var/log/containers whatever its podLogsDir.
CREATED_PATHS="$STATE/ns/created-paths"
COVERED_DIRS=(/var/lib/cni /var/lib/kubelet)

# The kernel tunables the kubelet insists on (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go). These are global, not per network
# namespace, so the kubelet must not write them: it runs with
# protectKernelDefaults (it then only reads and fails on a mismatch), and in its
# mount namespace each of these files is covered by a read-only file with the value
# it expects. The host's own values are left exactly as they are.
KUBELET_TUNABLES=(
  vm/overcommit_memory=1
  vm/panic_on_oom=0
  kernel/panic=10
  kernel/panic_on_oops=1
  kernel/keys/root_maxkeys=1000000
  kernel/keys/root_maxbytes=25000000
)

setup_netns() {
  netns_exists || ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  # Both ends of the veth pair stay inside the namespace: the node address gets a
  # carrier and nothing is attached to any host interface.
  if ! ip -n "$NETNS" link show kpt0 >/dev/null 2>&1; then
    ip -n "$NETNS" link add kpt0 type veth peer name kpt1
  fi
  in_netns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$NETNS" addr replace "$NODE_IP/24" dev kpt0
  ip -n "$NETNS" link set kpt0 up
  ip -n "$NETNS" link set kpt1 up
  # No default route: only the node, pod and service ranges are routable. Service
  # addresses need a route for the kernel to send node-originated packets to
  # kube-proxy's DNAT rules.
  ip -n "$NETNS" route replace "$SERVICE_CIDR" dev kpt0 src "$NODE_IP"
  # Per network namespace since Linux 5.3; pod -> service -> pod on the same
  # bridge needs bridged traffic to pass iptables.
  in_netns sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1
}

# Commands run once inside the new mount namespace, before any component starts.
_mntns_init_script() {
  local d t
  echo "set -eu"
  # Private /run: containerd 1.6 puts shim sockets under /run/containerd/s, and
  # the CRI plugin pod network namespaces under /run/netns.
  echo "mount -t tmpfs -o mode=0755 kpt-run /run"
  echo "mount -t tmpfs -o mode=0755 kpt-varlog /var/log"
  for d in "${COVERED_DIRS[@]}"; do
    echo "mount --bind '$STATE/ns/cover$d' '$d'"
  done
  for t in "${KUBELET_TUNABLES[@]}"; do
    echo "mount --bind -o ro '$STATE/ns/sysctl/${t%%=*}' '/proc/sys/${t%%=*}'"
  done
}

setup_mntns() {
  mntns_exists && return 0
  local d t
  mkdir -p "$STATE/ns"
  # unshare --mount=FILE keeps the namespace by bind-mounting it on FILE, which
  # must not sit on a shared mount: give $STATE/ns a private mount of its own.
  findmnt -n --mountpoint "$STATE/ns" >/dev/null || mount --bind "$STATE/ns" "$STATE/ns"
  mount --make-private "$STATE/ns"
  for d in "${COVERED_DIRS[@]}"; do
    mkdir -p "$STATE/ns/cover$d"
    if [[ ! -d "$d" ]]; then
      mkdir -p "$d"
      echo "$d" >>"$CREATED_PATHS"
    fi
  done
  for t in "${KUBELET_TUNABLES[@]}"; do
    mkdir -p "$(dirname "$STATE/ns/sysctl/${t%%=*}")"
    echo "${t#*=}" >"$STATE/ns/sysctl/${t%%=*}"
  done
  touch "$MNTNS"
  # Slave propagation: the namespace sees the host's mounts, none of its own
  # mounts (kubelet volumes, overlay snapshots, netns files) reach the host.
  unshare --mount="$MNTNS" --propagation slave sh -c "$(_mntns_init_script)"
}

teardown_namespaces() {
  if findmnt -n --mountpoint "$MNTNS" >/dev/null 2>&1; then umount "$MNTNS"; fi
  if findmnt -n --mountpoint "$STATE/ns" >/dev/null 2>&1; then umount "$STATE/ns"; fi
  if netns_exists; then ip netns delete "$NETNS"; fi
  if [[ -f "$CREATED_PATHS" ]]; then
    local d
    while read -r d; do rmdir "$d" 2>/dev/null || log "left $d (not empty)"; done <"$CREATED_PATHS"
    rm -f "$CREATED_PATHS"
  fi
}
