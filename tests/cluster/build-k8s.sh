#!/usr/bin/env bash
# Build the pinned Kubernetes control plane, kubelet, kube-proxy and kubectl from the
# Go module proxy, in a throwaway module outside the repository.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io/*
# staging module with a path inside its own tree. A module that requires it must
# repeat that replace list, pointing each staging module at its v0.x release.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/versions.sh
source "$here/versions.sh"

all_built() {
  local c
  for c in "${K8S_COMMANDS[@]}"; do
    [[ -x "$K8S_BIN/$c" ]] || return 1
  done
}

# Writes go.mod: require k8s.io/kubernetes and replace each staging module that its
# own go.mod replaces with a local path.
write_module() {
  local src="$K8S_DIR/src" upstream_mod
  mkdir -p "$src"
  upstream_mod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module kube-prestop.local/k8sbuild"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$upstream_mod" |
      while read -r m; do echo "	$m => $m $K8S_STAGING_VERSION"; done
    echo ")"
  } >"$src/go.mod"
  # Blank imports keep `go mod tidy` from dropping the requirement.
  {
    echo "//go:build tools"
    echo
    echo "package k8sbuild"
    echo
    local c
    for c in "${K8S_COMMANDS[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$c\""; done
  } >"$src/tools.go"
}

build() {
  local src="$K8S_DIR/src" pkgs=() c minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  for c in "${K8S_COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  # Fills go.sum; errors surface in the build below.
  (cd "$src" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1) || true
  mkdir -p "$K8S_BIN.tmp"
  # CGO off: static binaries, no dependence on the host's libc headers.
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION" \
    -o "$K8S_BIN.tmp/" "${pkgs[@]}")
  rm -rf "$K8S_BIN"
  mv "$K8S_BIN.tmp" "$K8S_BIN"
}

main() {
  check_platform || exit 2
  if all_built; then
    echo "kubernetes $K8S_VERSION: cached in $K8S_BIN"
    return 0
  fi
  echo "kubernetes $K8S_VERSION: building into $K8S_BIN (takes a while on 2 cores)"
  local start=$SECONDS
  write_module
  build
  echo "kubernetes $K8S_VERSION: built in $((SECONDS - start))s"
}

main "$@"
