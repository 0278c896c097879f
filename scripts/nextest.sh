#!/usr/bin/env bash
# cargo nextest (crates.io's cargo-nextest, https://nexte.st), pinned and
# installed when missing into the tools cache (scripts/cargo-tool.sh):
#
#   scripts/nextest.sh ARGS...   cargo nextest ARGS... (e.g. run --profile matrix -p kube-prestop-e2e)
#   scripts/nextest.sh install   only installs it; prints the binary's path
#
# Its configuration is .config/nextest.toml: profile `matrix`, the e2e runs of
# tests/matrix.sh, writes a JUnit report that tests/matrix_results.py reads.
# `make unit` and `make e2e` keep plain cargo test.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nextest_version=0.9.151
# shellcheck source=scripts/cargo-tool.sh
source "${repo}/scripts/cargo-tool.sh"

bin="$(cargo_tool cargo-nextest "${nextest_version}" cargo-nextest)"
if [[ "${1:-}" == install ]]; then
    printf '%s\n' "${bin}"
    exit 0
fi
PATH="$(dirname "${bin}"):${PATH}" exec cargo nextest "$@"
