# shellcheck shell=bash
# Sourced by the scripts that run a tool from crates.io (scripts/nextest.sh):
#
#   cargo_tool CRATE VERSION BIN   prints the path of BIN, installed when missing
#
# with `cargo install --locked CRATE --version =VERSION` (the crate's own
# Cargo.lock) into ${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}/tools/cargo/CRATE-VERSION,
# once per version: later calls find it there (bench/run.sh installs oha
# the same way). The build's output goes to stderr.

cargo_tool() {
    local crate="$1" version="$2" bin="$3" cache root tmp
    cache="${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}"
    root="${cache}/tools/cargo/${crate}-${version}"
    if [[ ! -x "${root}/bin/${bin}" ]]; then
        command -v cargo >/dev/null || { echo "cargo is required to install ${crate}" >&2; return 1; }
        printf '[cargo-tool] installing %s %s (cargo install --locked, once; cached in %s)\n' \
            "${crate}" "${version}" "${root}" >&2
        mkdir -p "${cache}/tools/cargo"
        tmp="$(mktemp -d "${root}.build.XXXXXX")"
        if ! cargo install --locked "${crate}" --version "=${version}" --root "${tmp}" >&2; then
            rm -rf "${tmp}"
            return 1
        fi
        # Another run may have installed it meanwhile: keep the first.
        mv -T "${tmp}" "${root}" 2>/dev/null || rm -rf "${tmp}"
    fi
    printf '%s\n' "${root}/bin/${bin}"
}
