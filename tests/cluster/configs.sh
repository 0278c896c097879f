# shellcheck shell=bash
# Configuration files of containerd, CNI, the kubelet and kube-proxy.
# Sourced by up.sh (needs lib.sh, pki.sh and images.sh).

CONF="$STATE/config"

# Replaces FILE with FILE.new only when the content differs: a second cluster-up
# must not touch the files of running components (kube-proxy exits when its
# configuration file changes).
commit_file() {
  local file="$1"
  if cmp -s "$file.new" "$file"; then rm -f "$file.new"; else mv "$file.new" "$file"; fi
}

write_containerd_config() {
  mkdir -p "$CONF" "$STATE/containerd" "$STATE/cni/net.d"
  if ((CONTAINERD_MAJOR >= 2)); then
    _containerd_config_v3 >"$CONF/containerd.toml.new"
    if [[ "$RUNTIME" == containerd2-gvisor ]]; then
      _runsc_config >"$CONF/runsc.toml.new"
      commit_file "$CONF/runsc.toml"
    fi
  else
    _containerd_config_v2 >"$CONF/containerd.toml.new"
  fi
  # bridge + host-local IPAM inside the node's network namespace; no masquerade,
  # as nothing may leave the namespace anyway. Pods get a default route to the
  # bridge; the node's namespace itself has none, so anything beyond the node,
  # pod and service ranges is unreachable.
  cat >"$STATE/cni/net.d/10-kpt.conflist.new" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kpt-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kpt-cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  commit_file "$CONF/containerd.toml"
  commit_file "$STATE/cni/net.d/10-kpt.conflist"
}

# containerd 1.x: configuration version 2 (the CRI plugin in one section).
_containerd_config_v2() {
  cat <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
# Plugins that would touch host paths (/opt/containerd) or need absent kernel
# features are off.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No AppArmor in this kernel; never load profiles into the host kernel.
  disable_apparmor = true
  enable_selinux = false
  # This machine withholds CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj: clamp the kubelet's -998 for sandboxes to containerd's own.
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$OCI_RUNTIME_BINARY"
        Root = "$STATE/runc"
        # cgroup v1 via cgroupfs, matching the kubelet; no systemd involvement.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
}

# containerd 2.x: configuration version 3, where the CRI plugin is split into
# io.containerd.cri.v1.images (snapshotter, pinned sandbox image) and
# io.containerd.cri.v1.runtime (runtimes, CNI, security settings); field names
# from internal/cri/config/config.go of containerd v2.4 (which migrates it to
# its version 4 at start, with a warning in its log; 2.0-2.3 read it as is).
# Same settings as version 2 above; NRI is off too (nothing here uses it).
_containerd_config_v3() {
  cat <<EOF
version = 3
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  enable_selinux = false
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
EOF
  if [[ "$RUNTIME" == containerd2-gvisor ]]; then
    # gVisor's shim (io.containerd.runsc.v1), the cluster's default runtime
    # in this cell: every pod, the webhook's included, is a gVisor sandbox.
    # The shim reads its options (runsc's path, root and flags) from the
    # file ConfigPath names (pkg/shim/v1/runsc/container.go, NewContainer).
    cat <<EOF
    default_runtime_name = "runsc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      runtime_path = "$GVISOR_DIR/bin/containerd-shim-runsc-v1"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$CONF/runsc.toml"
EOF
  else
    cat <<EOF
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$OCI_RUNTIME_BINARY"
        Root = "$STATE/runc"
        SystemdCgroup = false
EOF
  fi
  cat <<EOF
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
}

# The options of gVisor's shim (pkg/shim/v1/runsc/options.go, Options):
# runsc's binary and state root, and runsc's flags (runsc_config). Platform
# systrap: kvm needs VT-x, which this VM lacks (runsc hangs); ptrace works
# too but is slower. runsc writes its log per command under runsc-log/, the
# shim its own per container under runsc-shim/ (for a failing cell).
_runsc_config() {
  cat <<EOF
binary_name = "$OCI_RUNTIME_BINARY"
root = "$STATE/runsc"
log_path = "$STATE/runsc-shim/%ID%.log"
log_level = "info"

[runsc_config]
  platform = "systrap"
  debug-log = "$STATE/runsc-log/"
EOF
}

write_kubelet_config() {
  mkdir -p "$CONF" "$STATE/kubelet" "$STATE/pod-logs"
  : >"$CONF/resolv.conf"
  cat >"$CONF/kubelet.yaml.new" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# cgroup v1 (hybrid host): cgroupfs driver, every cgroup of the kubelet and its
# pods under a root of its own; only the pods' cgroup is enforced, no system or
# kube reserved cgroups are touched.
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
# Not enforced on any system cgroup; only lowers the pods' total memory limit
# (the kubepods cgroup), so that tests cannot starve the machine's other work.
systemReserved:
  memory: 12Gi
failCgroupV1: false
failSwapOn: false
# Read the kernel tunables, never write them (see namespaces.sh).
protectKernelDefaults: true
# The iptables chains go to the node's own network namespace.
makeIPTablesUtilChains: true
resolvConf: $CONF/resolv.conf
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/kubelet/volume-plugins
staticPodPath: ""
# Imported images cannot be pulled again: never garbage-collect them, and evict
# only when the disk is really full (the disk is shared with other work).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Absolute sizes, not percentages: on a large disk shared with builds, 2% is
# gigabytes, and a node under DiskPressure evicts and refuses every pod (seen:
# 3 GB free of 252 GB made the webhook's rollout time out).
evictionHard:
  memory.available: 200Mi
  nodefs.available: 512Mi
  nodefs.inodesFree: 2%
  imagefs.available: 512Mi
serializeImagePulls: false
maxPods: 110
EOF
  commit_file "$CONF/kubelet.yaml"
}

write_kube_proxy_config() {
  mkdir -p "$CONF"
  cat >"$CONF/kube-proxy.yaml.new" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $PKI/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
# Zero means "leave as is": the conntrack table size is global, and none of the
# timeouts are needed for tests.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
iptables:
  # Would set net.ipv4.conf.all.route_localnet.
  localhostNodePorts: false
EOF
  commit_file "$CONF/kube-proxy.yaml"
}
