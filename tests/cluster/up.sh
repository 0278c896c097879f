#!/usr/bin/env bash
# Brings up the single-node test cluster (`make cluster-up`). Idempotent: parts
# that are already running are left alone; stale state of an earlier run that did
# not end with cluster-down is cleaned away first.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$here/lib.sh"
# shellcheck source=tests/cluster/namespaces.sh
source "$here/namespaces.sh"
# shellcheck source=tests/cluster/pki.sh
source "$here/pki.sh"
# shellcheck source=tests/cluster/images.sh
source "$here/images.sh"
# shellcheck source=tests/cluster/tools.sh
source "$here/tools.sh"
# shellcheck source=tests/cluster/configs.sh
source "$here/configs.sh"

ETCD=""

preflight() {
  check_platform || die "no such platform (K8S_VERSION, RUNTIME): nothing was built or started"
  [[ $EUID -eq 0 ]] || die "must run as root (namespaces, mounts, cgroups)"
  check_running_platform
  log "platform: Kubernetes $K8S_VERSION, runtime $RUNTIME"
  ensure_apt_packages containernetworking-plugins iptables conntrack \
    socat umoci catatonit busybox-static openssl iproute2 util-linux curl
  ensure_runtime >/dev/null
  "$here/build-k8s.sh" >&2
  ETCD="$(ensure_etcd)"
}

# A running cluster of another platform is not changed under its users.
check_running_platform() {
  [[ -f "$PLATFORM_FILE" ]] || return 0
  local running
  running="$(cat "$PLATFORM_FILE")"
  if [[ "$running" != "K8S_VERSION=$K8S_VERSION RUNTIME=$RUNTIME" ]] &&
    mntns_exists && component_running containerd; then
    die "a cluster of another platform is up ($running): make cluster-down first"
  fi
}

# A state dir whose namespaces are gone (reboot, crash, manual kill) is stale.
clean_stale_state() {
  [[ -d "$STATE" ]] || return 0
  if ! mntns_exists || ! netns_exists || ! component_running containerd; then
    if [[ -d "$STATE/pids" ]] && ls "$STATE"/pids/*.pid >/dev/null 2>&1 || [[ -e "$MNTNS" ]]; then
      log "found state of an earlier run that is not fully up: cleaning it first"
      "$here/down.sh"
    fi
  fi
}

start_etcd() {
  start_component etcd "$ETCD" --name kpt --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster kpt=http://127.0.0.1:2380 --log-level warn
  wait_component etcd "etcd healthy" 60 in_netns curl -fsS http://127.0.0.1:2379/health
}

start_apiserver() {
  start_component kube-apiserver "$K8S_BIN/kube-apiserver" \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --etcd-servers=http://127.0.0.1:2379 \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --admission-control-config-file="$PKI/admission.yaml" \
    --allow-privileged=true \
    --enable-aggregator-routing=true \
    --cert-dir="$STATE/apiserver" \
    --profiling=false
  wait_component kube-apiserver "kube-apiserver /readyz" 180 \
    in_netns curl -fsS --cacert "$PKI/ca.crt" "https://$NODE_IP:6443/readyz"
}

# The apiserver listens only inside the node's network namespace. Clients on the
# host (kubectl, helm, the e2e tests) reach it on 127.0.0.1:$HOST_API_PORT: one
# socat in the namespace serves a unix socket in $STATE (file systems are not
# network-namespaced), another on the host's loopback connects to that socket.
start_api_forwarder() {
  start_component api-forward-node socat \
    "UNIX-LISTEN:$STATE/apiserver.sock,fork,unlink-early,mode=600" "TCP:$NODE_IP:6443"
  wait_for "forwarder socket" 20 test -S "$STATE/apiserver.sock"
  start_host_component api-forward-host socat \
    "TCP-LISTEN:$HOST_API_PORT,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$STATE/apiserver.sock"
  wait_for "apiserver on 127.0.0.1:$HOST_API_PORT" 30 \
    curl -fsS --cacert "$PKI/ca.crt" "https://127.0.0.1:$HOST_API_PORT/readyz"
}

start_controllers() {
  local kcm="$PKI/controller-manager.kubeconfig" sch="$PKI/scheduler.kubeconfig"
  start_component kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig="$kcm" --authentication-kubeconfig="$kcm" --authorization-kubeconfig="$kcm" \
    --bind-address=127.0.0.1 --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --cluster-name=kube-prestop --profiling=false
  start_component kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig="$sch" --authentication-kubeconfig="$sch" --authorization-kubeconfig="$sch" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
}

start_containerd() {
  write_containerd_config
  # RUNTIME_BIN first: containerd 2 looks its shim up on PATH (then next to itself),
  # which must be the one built with it, not Debian's.
  start_component containerd env PATH="$RUNTIME_BIN:$PATH" "$CONTAINERD" --config "$CONF/containerd.toml"
  wait_component containerd "containerd" 60 "$CTR" --address "$CONTAINERD_SOCK" version
}

# The kubelet requires its cgroupRoot to exist in every v1 hierarchy. These are
# the harness's own cgroups, removed again by cluster-down; nothing else is touched.
make_cgroup_root() {
  local h
  for h in /sys/fs/cgroup/*/; do
    h="${h%/}"
    [[ "$h" == */unified ]] && continue
    [[ -f "$h/cgroup.procs" ]] || continue
    mkdir -p "$h$CGROUP_ROOT"
    # A new v1 cpuset starts with no CPUs and memory nodes; give it the parent's.
    if [[ -f "$h/cpuset.cpus" && -z "$(cat "$h$CGROUP_ROOT/cpuset.cpus")" ]]; then
      cat "$h/cpuset.cpus" >"$h$CGROUP_ROOT/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

start_node() {
  make_cgroup_root
  write_kubelet_config
  write_kube_proxy_config
  start_component kubelet "$K8S_BIN/kubelet" --config="$CONF/kubelet.yaml" \
    --kubeconfig="$PKI/kubelet.kubeconfig" --root-dir="$STATE/kubelet" \
    --cert-dir="$STATE/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
  start_component kube-proxy "$K8S_BIN/kube-proxy" --config="$CONF/kube-proxy.yaml"
}

wait_node() {
  wait_component kubelet "node $NODE_NAME Ready" 180 node_ready
  wait_component kube-proxy "kube-proxy healthy" 60 \
    in_netns curl -fsS http://127.0.0.1:10256/healthz
}

node_ready() {
  [[ "$(kubectl_admin get node "$NODE_NAME" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# For scripts and tests: `source /var/lib/kube-prestop/cluster/env.sh`.
write_env() {
  mkdir -p "$STATE/hostpath"
  cat >"$STATE/env.sh" <<EOF
export KUBECONFIG=$KUBECONFIG_HOST
export PATH=$K8S_BIN:$HELM_DIR/bin:$RUNTIME_BIN:\$PATH
export K8S_VERSION=$K8S_VERSION
export RUNTIME=$RUNTIME
# A directory on the node for hostPath volumes that tests read from the host.
export KUBE_PRESTOP_NODE_HOSTPATH=$STATE/hostpath
export KUBE_PRESTOP_E2E_IMAGE=$BUSYBOX_IMAGE
# The CA of the client certificate the apiserver presents to webhooks.
export KUBE_PRESTOP_WEBHOOK_CLIENT_CA=$PKI/ca.crt
EOF
}

# check-clean.sh flags these paths on the host unless they were there first.
record_preexisting_paths() {
  [[ -f "$STATE/preexisting-paths" ]] && return 0
  local p
  for p in /var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /etc/cni /etc/kubernetes; do
    if [[ -e "$p" ]]; then echo "$p"; fi
  done >"$STATE/preexisting-paths"
}

main() {
  local start=$SECONDS
  preflight
  clean_stale_state
  mkdir -p "$STATE"
  echo "K8S_VERSION=$K8S_VERSION RUNTIME=$RUNTIME" >"$PLATFORM_FILE"
  record_preexisting_paths
  setup_netns
  setup_mntns
  make_pki
  start_containerd
  import_base_images
  start_etcd
  start_apiserver
  start_api_forwarder
  start_controllers
  start_node
  wait_node
  wait_for "default ServiceAccount" 120 kubectl_admin -n default get serviceaccount default
  write_env
  log "cluster ready in $((SECONDS - start))s"
  echo "export KUBECONFIG=$KUBECONFIG_HOST"
  echo "export PATH=$K8S_BIN:$HELM_DIR/bin:\$PATH"
}

take_lock
main "$@"
