#!/usr/bin/env bash
# Installs what a fresh machine of the project's kind lacks for `make test`:
# Debian packages, the Rust components, the musl targets and the engine's
# portability-check target (x86_64-apple-darwin), and the supply-chain tools
# (scripts/supply-chain-tools.sh: cargo-auditable, cargo-cyclonedx,
# rust-audit-info from crates.io, cosign from the Go module proxy; built once
# into /var/cache/kube-prestop/tools). Idempotent and quick when everything
# is present. Component builds (Kubernetes, etcd, helm, kubeconform) are
# cached by the scripts that use them.
set -euo pipefail

packages=(
  # sidecar tests: unshare/nsenter
  util-linux
  # static builds (images/build.sh): the C code of ring and mimalloc for the
  # musl targets: musl-gcc for x86_64, the cross gcc for aarch64
  musl-tools gcc-aarch64-linux-gnu
  # the cross gcc's C library headers: only a Recommends of
  # gcc-aarch64-linux-gnu, so --no-install-recommends leaves them out
  libc6-dev-arm64-cross
  # images without Docker: buildah (images/*.Dockerfile), skopeo (inspect,
  # push), umoci (the test cluster's pause and busybox images); jq for the checks
  buildah skopeo umoci jq
  # the arm64 binaries' smoke tests (images/test.sh) run under qemu-aarch64,
  # invoked directly; installed without recommends, so no qemu-user-binfmt
  # (which would register binfmt_misc handlers)
  qemu-user
  # local cluster: Debian's containerd 1.6 and runc 1.1 (RUNTIME=containerd1.6-runc1.1),
  # runc 1.5's seccomp build (cgo, libseccomp), network, pause and workload images
  containerd runc gcc libc6-dev pkg-config libseccomp-dev
  containernetworking-plugins iproute2 iptables conntrack
  catatonit busybox-static openssl socat curl
  # script lint
  shellcheck
  # chart checks: kubeconform's openapi2jsonschema.py for the CRD schemas
  python3-yaml
)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# Docker's containerd.io (GitHub's Ubuntu runners have it) ships containerd
# and runc itself and conflicts with Debian's and Ubuntu's packages of both:
# keep it. Only the containerd1.6-runc1.1 cluster cell needs those packages
# (the default cell builds containerd 2 and runc 1.5 from the Go module proxy).
if installed containerd.io; then
  echo "==> containerd.io is installed: not installing the containerd and runc packages (RUNTIME=containerd1.6-runc1.1 is then not available)"
  kept=()
  for p in "${packages[@]}"; do
    [[ "$p" == containerd || "$p" == runc ]] || kept+=("$p")
  done
  packages=("${kept[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

rustup component add rustfmt clippy >/dev/null
rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl >/dev/null
# make lint: the engine must type-check for a target with no Linux API
# (cargo check only, nothing is linked).
rustup target add x86_64-apple-darwin >/dev/null
# make images (cargo auditable, the SBOMs), make images-test (the embedded
# lists) and make release-test (cosign): built once, skipped when cached.
# COSIGN set (the release workflow's cosign-installer) skips cosign's build.
"$(dirname "$0")/../scripts/supply-chain-tools.sh" install
