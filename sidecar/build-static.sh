#!/usr/bin/env bash
# Builds the static x86_64 sidecar binary (musl, the Cargo profile the images
# ship: images/profile.sh, release unless OCI_CARGO_PROFILE says otherwise) and
# prints its path and size. Pure-Rust dependencies only, so no
# musl-tools/musl-gcc is needed; only the rustup target. `make binaries`
# builds the same binary for both architectures (images/build.sh).
# Usage: sidecar/build-static.sh [extra cargo args...]
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
# shellcheck source=images/profile.sh
source images/profile.sh
profile="${SHIPPED_CARGO_PROFILE}"
limit=$((2 * 1024 * 1024))

if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
cargo build -p kube-prestop-sidecar --bin kube-prestop-sidecar \
    --target "$target" --profile "$profile" "$@"

dir=${CARGO_TARGET_DIR:-target}
bin="$dir/$target/$SHIPPED_CARGO_PROFILE_DIR/kube-prestop-sidecar"
size=$(stat -c %s "$bin")
echo "binary: $bin"
echo "size:   $size bytes ($((size / 1024)) KiB; limit $((limit / 1024)) KiB)"
if command -v file >/dev/null; then file "$bin"; fi
if [ "$size" -gt "$limit" ]; then
    echo "error: larger than 2 MiB" >&2
    exit 1
fi
