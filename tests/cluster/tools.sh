#!/usr/bin/env bash
# Installs the harness's Go-built tools into the version-keyed cache and prints
# their paths. Others may source this file and call the functions, or run it:
#   tests/cluster/tools.sh helm    -> prints the path of a cached helm binary
#   tests/cluster/tools.sh etcd    -> prints the path of a cached etcd binary
#   tests/cluster/tools.sh gvisor  -> builds runsc and the patched containerd-shim-runsc-v1
#   tests/cluster/tools.sh runtime -> builds $RUNTIME's containerd and OCI runtime,
#                                     prints the OCI runtime's path
# Build output goes to stderr so that stdout is only the path.
set -euo pipefail

_tools_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/versions.sh
source "$_tools_here/versions.sh"

# helm: `go install` works (helm's go.mod has no replace directives), with
# the -X ldflags of helm's own Makefile (`make build`), which `go install`
# alone does not set:
#   - internal/version.version: `helm version` reports the release, not "v3.19";
#   - pkg/chartutil and pkg/lint/rules k8sVersionMajor/Minor: the Kubernetes
#     version `helm template` and `helm lint` assume without --kube-version
#     (.Capabilities.KubeVersion, checked against a chart's kubeVersion) is
#     the one of the client-go helm is built with (v0.34.x -> 1.34), as in the
#     official binaries, instead of the source default 1.20.
ensure_helm() {
  local bin="$HELM_DIR/bin/helm"
  if [[ ! -x "$bin" ]]; then
    echo "helm $HELM_VERSION: building into $HELM_DIR/bin" >&2
    local scratch modjson gomod client_go major minor pkg ldflags
    # Outside any module: only the module cache is involved.
    scratch="$(mktemp -d)"
    modjson="$(cd "$scratch" && GOFLAGS='' go mod download -json "helm.sh/helm/v3@$HELM_VERSION")"
    rmdir "$scratch"
    gomod="$(printf '%s' "$modjson" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
    # As the Makefile's `go list -m k8s.io/client-go`: v0.<minor>.<patch>.
    client_go="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")"
    if [[ ! "$client_go" =~ ^v0\.([0-9]+)\.[0-9]+ ]]; then
      echo "helm $HELM_VERSION: no k8s.io/client-go v0.x.y in $gomod (found '$client_go')" >&2
      return 1
    fi
    major=1
    minor="${BASH_REMATCH[1]}"
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    for pkg in pkg/chartutil pkg/lint/rules; do
      ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$major"
      ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
    done
    mkdir -p "$HELM_DIR/bin"
    CGO_ENABLED=0 GOBIN="$HELM_DIR/bin" go install -trimpath -ldflags="$ldflags" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  fi
  echo "$bin"
}

# etcd: the server module's go.mod replaces its sibling modules with local paths,
# so `go install` refuses it; build it from a throwaway module instead, where those
# replace directives (of a dependency) are ignored and the released siblings are used.
ensure_etcd() {
  local bin="$ETCD_BIN/etcd" src="$ETCD_DIR/src"
  if [[ ! -x "$bin" ]]; then
    echo "etcd $ETCD_VERSION: building into $ETCD_BIN" >&2
    mkdir -p "$src" "$ETCD_BIN"
    cat >"$src/go.mod" <<MOD
module kube-prestop.local/etcdbuild

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    printf '//go:build tools\n\npackage etcdbuild\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy >&2 &&
      CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w" \
        -o "$bin.tmp" go.etcd.io/etcd/server/v3 >&2)
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# containerd 2.x: containerd, its runc shim and ctr, static (CGO off: the
# btrfs snapshotter, the only cgo part, is left out by its build tag; the
# harness disables it anyway). containerd's go.mod has no replace directives,
# so `go install` builds the released module as is; the -X flags are those of
# its Makefile, so `containerd --version` names the release.
ensure_containerd() {
  local c absent=0
  for c in containerd containerd-shim-runc-v2 ctr; do
    [[ -x "$CONTAINERD_DIR/bin/$c" ]] || absent=1
  done
  if ((absent)); then
    echo "containerd $CONTAINERD_VERSION: building into $CONTAINERD_DIR/bin" >&2
    local pkg=github.com/containerd/containerd/v2 start=$SECONDS
    mkdir -p "$CONTAINERD_DIR/bin.tmp"
    CGO_ENABLED=0 GOBIN="$CONTAINERD_DIR/bin.tmp" go install -trimpath \
      -ldflags="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Package=$pkg" \
      "$pkg/cmd/containerd@$CONTAINERD_VERSION" "$pkg/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
      "$pkg/cmd/ctr@$CONTAINERD_VERSION" >&2
    rm -rf "${CONTAINERD_DIR:?}/bin"
    mv "$CONTAINERD_DIR/bin.tmp" "$CONTAINERD_DIR/bin"
    echo "containerd $CONTAINERD_VERSION: built in $((SECONDS - start))s" >&2
  fi
  echo "$CONTAINERD_DIR/bin/containerd"
}

# runc 1.5.x with seccomp: cgo against Debian's libseccomp (the `seccomp` build
# tag of runc's Makefile); the -X flag is its Makefile's, for `runc --version`.
ensure_runc() {
  local bin="$RUNC_DIR/bin/runc"
  if [[ ! -x "$bin" ]]; then
    ensure_apt_packages gcc libc6-dev pkg-config libseccomp-dev
    echo "runc $RUNC_VERSION: building into $RUNC_DIR/bin" >&2
    local start=$SECONDS
    mkdir -p "$RUNC_DIR/bin.tmp"
    CGO_ENABLED=1 GOBIN="$RUNC_DIR/bin.tmp" go install -trimpath -tags seccomp \
      -ldflags="-X main.version=${RUNC_VERSION#v}" \
      "github.com/opencontainers/runc@$RUNC_VERSION" >&2
    rm -rf "${RUNC_DIR:?}/bin"
    mv "$RUNC_DIR/bin.tmp" "$RUNC_DIR/bin"
    echo "runc $RUNC_VERSION: built in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}

# youki (Rust, crates.io) with its cgroup v1 support (cargo feature `v1`; the
# default build only has cgroup v2 and systemd) and seccomp (feature `seccomp`,
# against Debian's libseccomp; without it youki warns "seccomp not available"
# and runs containers without their seccomp profile).
ensure_youki() {
  local bin="$YOUKI_DIR/bin/youki"
  if [[ ! -x "$bin" ]]; then
    ensure_apt_packages gcc libc6-dev pkg-config libseccomp-dev
    echo "youki $YOUKI_VERSION: building into $YOUKI_DIR/bin" >&2
    local start=$SECONDS
    cargo install --locked --root "$YOUKI_DIR" --version "$YOUKI_VERSION" --features v1,seccomp youki >&2
    echo "youki $YOUKI_VERSION: built in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}

# gVisor: runsc and its containerd shim (containerd-shim-runsc-v1), both
# static. CGO_ENABLED=0 is needed, not only tidy: runsc re-executes itself in
# an empty chroot to unmount there (`runsc/cmd/sandboxsetup/process.go`,
# ExecProcUmounter), and a cgo build fails there with "error executing
# umounter: fork/exec /proc/self/exe".
#
# The shim is patched, at build time, in one place: after starting its
# service it sets that process's oom_score_adj to -999 and treats a refusal
# as fatal (`pkg/shim/v1/manager.go`, `SetOOMScore(cmd.Process.Pid,
# oomScoreMax)`). Lowering oom_score_adj needs CAP_SYS_RESOURCE, which this
# machine's capability bounding set withholds from every process (CapBnd
# 000001fffeffffff; containerd's own restrict_oom_score_adj in configs.sh is
# for the same reason), so every sandbox would fail with "failed to set OOM
# Score on shim: ... permission denied". The patched shim logs that error and
# goes on. The patch is made on a vendored copy in the cache
# ($GVISOR_DIR/shim-src/vendor, from a throwaway module; `go build -overlay`
# may not replace files of the module cache): no gVisor source is copied into
# the repo, and the module cache is not touched. When the code is not found
# as expected (another gVisor version), the build stops and says so.
ensure_gvisor() {
  local c absent=0
  for c in runsc containerd-shim-runsc-v1; do
    [[ -x "$GVISOR_DIR/bin/$c" ]] || absent=1
  done
  if ((absent)); then
    echo "gVisor $GVISOR_VERSION: building into $GVISOR_DIR/bin" >&2
    local start=$SECONDS src="$GVISOR_DIR/shim-src"
    rm -rf "$src" "$GVISOR_DIR/bin.tmp"
    mkdir -p "$src" "$GVISOR_DIR/bin.tmp"
    CGO_ENABLED=0 GOBIN="$GVISOR_DIR/bin.tmp" go install -trimpath -ldflags="-s -w" \
      "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" >&2
    cat >"$src/go.mod" <<MOD
module kube-prestop.local/gvisorshim

go 1.26

require gvisor.dev/gvisor $GVISOR_VERSION
MOD
    printf '//go:build tools\n\npackage gvisorshim\n\nimport _ "gvisor.dev/gvisor/shim"\n' >"$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy >&2 && go mod vendor >&2)
    if ! python3 - "$src/vendor/gvisor.dev/gvisor/pkg/shim/v1/manager.go" <<'PY'; then
import sys
path = sys.argv[1]
text = open(path).read()
old = (
    "\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {\n"
    "\t\treturn shim.BootstrapParams{}, fmt.Errorf(\"failed to set OOM Score on shim: %w\", err)\n"
    "\t}\n"
)
new = (
    "\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {\n"
    "\t\t// kube-prestop harness: the machine withholds CAP_SYS_RESOURCE. Not\n"
    "\t\t// logged: the shim's log goes to its stdout here, which containerd\n"
    "\t\t// reads for the bootstrap address (\"unsupported protocol\").\n"
    "\t\t_ = err\n"
    "\t}\n"
)
if text.count(old) != 1:
    sys.exit(f"{path}: the SetOOMScore error return to tolerate is not there as expected "
             "(another gVisor version?): update the patch in tests/cluster/tools.sh (ensure_gvisor)")
open(path, "w").write(text.replace(old, new))
PY
      rm -rf "$GVISOR_DIR/bin.tmp"
      return 1
    fi
    (cd "$src" && CGO_ENABLED=0 go build -mod=vendor -trimpath -ldflags="-s -w" \
      -o "$GVISOR_DIR/bin.tmp/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim >&2)
    rm -rf "${GVISOR_DIR:?}/bin"
    mv "$GVISOR_DIR/bin.tmp" "$GVISOR_DIR/bin"
    echo "gVisor $GVISOR_VERSION: built in $((SECONDS - start))s" >&2
  fi
  echo "$GVISOR_DIR/bin/runsc"
}

# The container runtime of $RUNTIME: builds what is missing, prints the OCI
# runtime binary's path.
ensure_runtime() {
  case "$RUNTIME" in
    containerd2-runc)
      ensure_containerd >/dev/null
      ensure_runc
      ;;
    containerd2-youki)
      ensure_containerd >/dev/null
      ensure_youki
      ;;
    containerd2-gvisor)
      ensure_containerd >/dev/null
      ensure_gvisor
      ;;
    containerd1.6-runc1.1)
      ensure_apt_packages containerd runc
      echo "$OCI_RUNTIME_BINARY"
      ;;
    *)
      check_platform
      ;;
  esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    helm) ensure_helm ;;
    etcd) ensure_etcd ;;
    containerd) ensure_containerd ;;
    runc) ensure_runc ;;
    youki) ensure_youki ;;
    gvisor) ensure_gvisor ;;
    runtime) check_platform && ensure_runtime ;;
    *) echo "usage: $0 helm|etcd|containerd|runc|youki|gvisor|runtime" >&2; exit 2 ;;
  esac
fi
