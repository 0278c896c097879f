#!/usr/bin/env bash
# The injection engine is pure and portable (docs/ARCHITECTURE.md): it
# type-checks for a non-Linux target (no Linux API reaches it), and its
# normal dependencies include nothing that does I/O or talks to the kernel:
# no nix, libc, kube, tokio, hyper, axum, and never the sidecar crate.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-apple-darwin
rustup target list --installed | grep -qx "${target}" || rustup target add "${target}" >/dev/null
cargo check -q -p kube-prestop-engine --target "${target}"

banned='^(nix|libc|kube|kube-client|kube-runtime|tokio|hyper|axum|kube-prestop-sidecar) '
if found="$(cargo tree -q -p kube-prestop-engine -e normal --prefix none | grep -E "${banned}")"; then
    echo "engine-pure: the engine depends on:" >&2
    sort -u <<<"${found}" >&2
    exit 1
fi
echo "engine-pure: ok (checks for ${target}; no nix, libc, kube, tokio, hyper, axum or sidecar in its dependencies)"
