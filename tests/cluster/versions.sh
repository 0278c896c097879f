# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Pinned component versions and cache locations for the cluster harness.
# Sourced by the other scripts; nothing here has side effects.

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
# The staging modules (k8s.io/api, k8s.io/client-go, ...) are released as v0.<minor>.<patch>.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"

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

# The Kubernetes binaries the harness needs, built in one `go build` so they share work.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
