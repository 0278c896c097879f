# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Pinned component versions and cache locations for the cluster harness.
# Sourced by the other scripts; nothing here has side effects except
# check_platform, which the scripts that build or start something call first.
#
# The platform is chosen by two variables:
#   K8S_VERSION  one of K8S_VERSIONS (default v1.37.2, the newest of them; the
#                Go module proxy lists what it serves: `go list -m -versions k8s.io/kubernetes`)
#   RUNTIME      one of RUNTIMES (default containerd2-runc):
#                  containerd2-runc       containerd 2.x + runc 1.5.x, built from the Go module proxy
#                  containerd2-youki      containerd 2.x + youki (Rust, crates.io, cgroup v1 feature)
#                  containerd1.6-runc1.1  Debian's containerd 1.6 and runc 1.1 (the oldest combination)
#                  containerd2-gvisor     containerd 2.x + gVisor (runsc, platform systrap, and its
#                                         containerd shim with one error tolerated, see tools.sh)

K8S_VERSIONS=(v1.29.6 v1.35.4 v1.36.3 v1.37.2)
RUNTIMES=(containerd2-runc containerd2-youki containerd1.6-runc1.1 containerd2-gvisor)

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
RUNTIME="${RUNTIME:-containerd2-runc}"
# The staging modules (k8s.io/api, k8s.io/client-go, ...) are released as v0.<minor>.<patch>.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
# containerd 2.x: the newest the Go module proxy serves
# (`go list -m -versions github.com/containerd/containerd/v2`); image volumes need >= 2.1.
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
# runc 1.5.x: `go list -m -versions github.com/opencontainers/runc`.
RUNC_VERSION="${RUNC_VERSION:-v1.5.3}"
# youki: `cargo info youki` (crates.io).
YOUKI_VERSION="${YOUKI_VERSION:-0.7.0}"
# gVisor (runsc and containerd-shim-runsc-v1): gVisor tags no Go module
# versions (`go list -m -versions gvisor.dev/gvisor` lists none), so this is
# a pseudo-version the Go module proxy serves.
GVISOR_VERSION="${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}"
# Argo Workflows (tests/argo/install.sh, the e2e suite's batch system): the
# newest v4 the Go module proxy serves (`go list -m -versions
# github.com/argoproj/argo-workflows/v4`). Security flaws are reported
# against v4.0.5: it is a test fixture on the local cluster only, without
# argo-server (the UI and API) and without a port reachable from outside.
ARGO_WORKFLOWS_VERSION="${ARGO_WORKFLOWS_VERSION:-v4.0.5}"

# Everything built or downloaded lives here, keyed by version, never in the repo.
KUBE_PRESTOP_CACHE="${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}"
K8S_DIR="$KUBE_PRESTOP_CACHE/k8s-$K8S_VERSION"
K8S_BIN="$K8S_DIR/bin"
ETCD_DIR="$KUBE_PRESTOP_CACHE/etcd-$ETCD_VERSION"
ETCD_BIN="$ETCD_DIR/bin"
# Bumped when tools.sh builds helm differently, so an older cached build is
# not reused (2: the release ldflags, see ensure_helm).
HELM_BUILD=2
HELM_DIR="$KUBE_PRESTOP_CACHE/helm-$HELM_VERSION-build$HELM_BUILD"
CONTAINERD_DIR="$KUBE_PRESTOP_CACHE/containerd-$CONTAINERD_VERSION"
RUNC_DIR="$KUBE_PRESTOP_CACHE/runc-$RUNC_VERSION"
# -seccomp: built with the features v1 and seccomp (the default features have no seccomp).
YOUKI_DIR="$KUBE_PRESTOP_CACHE/youki-$YOUKI_VERSION-seccomp"
# -h2: the harness's shim patch, second revision (no log line on stdout).
GVISOR_DIR="$KUBE_PRESTOP_CACHE/gvisor-$GVISOR_VERSION-h2"
ARGO_WORKFLOWS_DIR="$KUBE_PRESTOP_CACHE/argo-workflows-$ARGO_WORKFLOWS_VERSION"

# The runtime's binaries: RUNTIME_BIN goes first on the PATH of containerd (so it
# finds its own containerd-shim-runc-v2, not Debian's) and of the clients (ctr);
# OCI_RUNTIME_BINARY is what the runc shim executes for every container.
case "$RUNTIME" in
  containerd2-runc)
    RUNTIME_BIN="$CONTAINERD_DIR/bin"
    OCI_RUNTIME_BINARY="$RUNC_DIR/bin/runc"
    CONTAINERD_MAJOR=2
    ;;
  containerd2-youki)
    RUNTIME_BIN="$CONTAINERD_DIR/bin"
    OCI_RUNTIME_BINARY="$YOUKI_DIR/bin/youki"
    CONTAINERD_MAJOR=2
    ;;
  containerd2-gvisor)
    # Not an OCI runtime under the runc shim: containerd runs gVisor's own
    # shim (runtime_path in configs.sh), which runs runsc (binary_name in the
    # shim's runsc.toml).
    RUNTIME_BIN="$CONTAINERD_DIR/bin"
    OCI_RUNTIME_BINARY="$GVISOR_DIR/bin/runsc"
    CONTAINERD_MAJOR=2
    ;;
  *)
    # containerd1.6-runc1.1 (and, until check_platform refuses it, anything else).
    RUNTIME_BIN="/usr/bin"
    OCI_RUNTIME_BINARY="/usr/sbin/runc"
    CONTAINERD_MAJOR=1
    ;;
esac
# For debugging a runtime: another OCI runtime binary (e.g. a wrapper that adds
# --debug and keeps its stderr), used in place of the runtime's own.
OCI_RUNTIME_BINARY="${KUBE_PRESTOP_OCI_RUNTIME:-$OCI_RUNTIME_BINARY}"
CTR="$RUNTIME_BIN/ctr"
CONTAINERD="$RUNTIME_BIN/containerd"

# The Kubernetes binaries the harness needs, built in one `go build` so they share work.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

_in_list() {
  local want="$1" v
  shift
  for v in "$@"; do [[ "$v" == "$want" ]] && return 0; done
  return 1
}

# check_platform: fails with the supported values when K8S_VERSION or RUNTIME is
# one the harness does not know. Called before anything is built or started.
check_platform() {
  local ok=0
  if ! _in_list "$K8S_VERSION" "${K8S_VERSIONS[@]}"; then
    echo "unsupported K8S_VERSION='$K8S_VERSION': supported are ${K8S_VERSIONS[*]}" >&2
    ok=1
  fi
  if ! _in_list "$RUNTIME" "${RUNTIMES[@]}"; then
    echo "unsupported RUNTIME='$RUNTIME': supported are ${RUNTIMES[*]}" >&2
    ok=1
  fi
  return "$ok"
}

# ensure_apt_packages PKG...: installs the Debian packages that are missing.
ensure_apt_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  echo "installing Debian packages: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
