#!/usr/bin/env bash
# The supply-chain tools, their versions pinned here once, each installed
# when missing and cached outside the repository (built once per version,
# later calls only find it):
#
#   cargo-auditable   crates.io (scripts/cargo-tool.sh): `cargo auditable
#                     build` embeds the binary's crate list (the .dep-v0
#                     section, zlib-compressed JSON) (images/build.sh)
#   rust-audit-info   crates.io, cargo-auditable's own reader of that section
#                     (images/test.sh)
#   cargo-cyclonedx   crates.io, CycloneDX's SBOM from `cargo metadata`
#                     (images/build.sh)
#   cosign            the Go module proxy (github.com/sigstore/cosign/v2),
#                     like the chart tools (tests/chart/tools.sh); COSIGN set
#                     to a cosign binary (the release workflow's, from
#                     sigstore/cosign-installer) is used instead
#                     (scripts/release.sh, tests/release/check.sh)
#
# Source it and call `supply_chain_tool NAME` (prints the binary's path), or
# run it: `scripts/supply-chain-tools.sh install` installs all four (what
# .ci/install-deps.sh does), `scripts/supply-chain-tools.sh NAME` prints one
# path.
#
# Cache: ${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}/tools/
set -euo pipefail

CARGO_AUDITABLE_VERSION="${CARGO_AUDITABLE_VERSION:-0.7.7}"
RUST_AUDIT_INFO_VERSION="${RUST_AUDIT_INFO_VERSION:-0.5.4}"
CARGO_CYCLONEDX_VERSION="${CARGO_CYCLONEDX_VERSION:-0.5.9}"
COSIGN_VERSION="${COSIGN_VERSION:-v2.6.5}"

SUPPLY_CHAIN_TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/cargo-tool.sh
source "${SUPPLY_CHAIN_TOOLS_DIR}/cargo-tool.sh"
# shellcheck source=tests/chart/tools.sh
source "${SUPPLY_CHAIN_TOOLS_DIR}/../tests/chart/tools.sh"

# supply_chain_tool NAME -> the path of NAME's binary, installed when missing.
supply_chain_tool() {
    local dest
    case "$1" in
        cargo-auditable) cargo_tool cargo-auditable "${CARGO_AUDITABLE_VERSION}" cargo-auditable ;;
        rust-audit-info) cargo_tool rust-audit-info "${RUST_AUDIT_INFO_VERSION}" rust-audit-info ;;
        cargo-cyclonedx) cargo_tool cargo-cyclonedx "${CARGO_CYCLONEDX_VERSION}" cargo-cyclonedx ;;
        cosign)
            if [[ -n "${COSIGN:-}" ]]; then
                command -v "${COSIGN}" || { chart_tools_log "COSIGN=${COSIGN} is not a command"; return 1; }
                return 0
            fi
            dest="${CHART_TOOLS_CACHE}/bin/cosign-${COSIGN_VERSION}"
            go_install_cached "github.com/sigstore/cosign/v2/cmd/cosign@${COSIGN_VERSION}" cosign "${dest}" >&2
            printf '%s\n' "${dest}/cosign"
            ;;
        *) chart_tools_log "unknown tool: $1 (cargo-auditable | rust-audit-info | cargo-cyclonedx | cosign)"; return 1 ;;
    esac
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    case "${1:-}" in
        install)
            for tool in cargo-auditable rust-audit-info cargo-cyclonedx cosign; do
                printf '%-16s %s\n' "${tool}" "$(supply_chain_tool "${tool}")"
            done
            ;;
        cargo-auditable | rust-audit-info | cargo-cyclonedx | cosign) supply_chain_tool "$1" ;;
        *) echo "usage: $0 install | cargo-auditable | rust-audit-info | cargo-cyclonedx | cosign" >&2; exit 2 ;;
    esac
fi
