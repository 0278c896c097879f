#!/usr/bin/env bash
# Supply-chain checks with cargo-deny (configuration: deny.toml).
#
#   scripts/deny.sh [CHECK...]     default: licenses bans sources
#
# Advisories are not in the default set: the RustSec database is fetched
# from GitHub, which this project's machines cannot reach. On a machine that
# can, run `scripts/deny.sh advisories` (or all four checks by name).
#
# cargo-deny is installed once (compiled, a few minutes) into
# ${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}/tools/cargo and reused.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}
tools="$cache/tools/cargo"
version=0.20.2
deny="$tools/bin/cargo-deny"

if ! "$deny" --version 2>/dev/null | grep -qF "$version"; then
    echo "deny.sh: installing cargo-deny $version into $tools (once)" >&2
    mkdir -p "$tools"
    nice -n 10 cargo install cargo-deny --version "$version" --locked --root "$tools"
fi

checks=("$@")
[[ ${#checks[@]} -gt 0 ]] || checks=(licenses bans sources)
cd "$root"
exec "$deny" --manifest-path "$root/Cargo.toml" --config "$root/deny.toml" \
    --workspace --locked check --show-stats "${checks[@]}"
