#!/usr/bin/env bash
# Installs the harness's Go-built tools into the version-keyed cache and prints
# their paths. Others may source this file and call the functions, or run it:
#   tests/cluster/tools.sh helm    -> prints the path of a cached helm binary
#   tests/cluster/tools.sh etcd    -> prints the path of a cached etcd binary
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

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    helm) ensure_helm ;;
    etcd) ensure_etcd ;;
    *) echo "usage: $0 helm|etcd" >&2; exit 2 ;;
  esac
fi
