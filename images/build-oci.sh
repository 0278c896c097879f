#!/usr/bin/env bash
# Builds the kube-prestop container images without Docker or a registry:
# static musl binaries (cargo), then a one-layer OCI image per binary (umoci),
# written as OCI archives that `ctr images import` accepts.
#
#   images/build-oci.sh            build both images
#   images/build-oci.sh sidecar    build one (webhook | sidecar)
#
# Output (override the folder with OCI_OUT_DIR):
#   target/oci/kube-prestop-webhook.tar   localhost/kube-prestop/webhook:<version>
#   target/oci/kube-prestop-sidecar.tar   localhost/kube-prestop/sidecar:<version>
# <version> is the workspace version (Cargo.toml). Each archive's index names
# the image by its full reference (annotation org.opencontainers.image.ref.name),
# so a plain `ctr -n k8s.io images import FILE` names it correctly, and so does
# `--base-name localhost/kube-prestop/<name>`.
#
# The images match images/*.Dockerfile: scratch base, the static binary at
# /kube-prestop-webhook or /kube-prestop-sidecar, user 65532:65532, OCI labels.
# Missing tools are installed: the musl Rust target (rustup), Debian's
# musl-tools (ring's C code needs a musl C compiler) and umoci.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_triple="x86_64-unknown-linux-musl"
target_dir="${CARGO_TARGET_DIR:-${repo}/target}"
out_dir="${OCI_OUT_DIR:-${repo}/target/oci}"
# Cargo profile of the binaries (release: LTO, one codegen unit, stripped).
profile="${OCI_CARGO_PROFILE:-release}"

log() { printf '[build-oci] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

workspace_version() {
    # The [workspace.package] version of the root Cargo.toml.
    awk '
        /^\[/ { section = $0 }
        section == "[workspace.package]" && $1 == "version" {
            gsub(/[" ]/, "", $3); print $3; exit
        }' "${repo}/Cargo.toml"
}

apt_install() {
    local missing=("$@")
    log "installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    }
}

ensure_tools() {
    local pkgs=()
    command -v umoci >/dev/null || pkgs+=(umoci)
    command -v musl-gcc >/dev/null || pkgs+=(musl-tools)
    if ((${#pkgs[@]})); then
        apt_install "${pkgs[@]}"
    fi
    if ! rustup target list --installed 2>/dev/null | grep -qx "${target_triple}"; then
        log "adding Rust target ${target_triple}"
        rustup target add "${target_triple}" >&2
    fi
}

build_binaries() {
    local pkgs=() name
    for name in "$@"; do
        pkgs+=(-p "kube-prestop-${name}")
    done
    log "cargo build --profile ${profile} --target ${target_triple} ${pkgs[*]}"
    (cd "${repo}" &&
        # musl-gcc compiles ring's C code; linking stays with Rust's default
        # (self-contained musl crt, static). musl-gcc as the linker would
        # produce a dynamically linked PIE.
        CC_x86_64_unknown_linux_musl=musl-gcc \
            cargo build --locked --profile "${profile}" --target "${target_triple}" "${pkgs[@]}" >&2)
}

# build_image NAME DESCRIPTION
build_image() {
    local name="$1" description="$2"
    local binary="kube-prestop-${name}"
    local profile_dir="${profile}"
    [[ "${profile}" == dev ]] && profile_dir=debug
    local bin="${target_dir}/${target_triple}/${profile_dir}/${binary}"
    local ref="localhost/kube-prestop/${name}:${version}"
    local archive="${out_dir}/${binary}.tar"
    [[ -x "${bin}" ]] || die "no binary at ${bin}"
    # A scratch image needs a static binary: no ELF interpreter.
    if readelf -l "${bin}" 2>/dev/null | grep -q 'Requesting program interpreter'; then
        die "${bin} is dynamically linked"
    fi

    local work
    work="$(mktemp -d)"
    # shellcheck disable=SC2064 # expand now: work is local
    trap "rm -rf '${work}'" RETURN
    # Reproducible: every time stamp (file, layer history, config) is the
    # last commit's time (or SOURCE_DATE_EPOCH), so the same tree gives the
    # same image digest and `make install` does not roll the webhook for
    # nothing.
    local epoch created
    epoch="${SOURCE_DATE_EPOCH:-$(git -C "${repo}" log -1 --format=%ct 2>/dev/null || date +%s)}"
    created="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"
    umoci init --layout "${work}/oci"
    umoci new --image "${work}/oci:${version}"
    umoci unpack --image "${work}/oci:${version}" "${work}/bundle" >/dev/null
    install -D -m 0755 -o 0 -g 0 "${bin}" "${work}/bundle/rootfs/${binary}"
    touch -h -d "@${epoch}" "${work}/bundle/rootfs/${binary}" "${work}/bundle/rootfs"
    umoci repack --image "${work}/oci:${version}" --history.created_by "images/build-oci.sh" \
        --history.created "${created}" --history.comment "static ${binary}" "${work}/bundle"
    local revision
    revision="$(git -C "${repo}" rev-parse HEAD 2>/dev/null || echo unknown)"
    umoci config --image "${work}/oci:${version}" \
        --history.created "${created}" \
        --author "kube-prestop" \
        --created "${created}" \
        --architecture amd64 --os linux \
        --clear config.env \
        --config.env "PATH=/" \
        --config.user "65532:65532" \
        --config.workingdir "/" \
        --config.entrypoint "/${binary}" \
        --config.label "org.opencontainers.image.title=${binary}" \
        --config.label "org.opencontainers.image.description=${description}" \
        --config.label "org.opencontainers.image.version=${version}" \
        --config.label "org.opencontainers.image.revision=${revision}" \
        --config.label "org.opencontainers.image.created=${created}" \
        --config.label "org.opencontainers.image.licenses=Apache-2.0" \
        --config.label "org.opencontainers.image.source=https://github.com/kube-prestop/kube-prestop" \
        --manifest.annotation "org.opencontainers.image.title=${binary}" \
        --manifest.annotation "org.opencontainers.image.version=${version}" \
        --manifest.annotation "org.opencontainers.image.created=${created}"
    if [[ "${name}" == webhook ]]; then
        umoci config --image "${work}/oci:${version}" --history.created "${created}" --config.cmd serve
    fi
    umoci gc --layout "${work}/oci"
    # Name the image by its full reference in the index (umoci only accepts
    # a bare tag there), so ctr names it without --base-name.
    python3 - "${work}/oci/index.json" "${ref}" <<'PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
with open(path) as f:
    index = json.load(f)
for m in index["manifests"]:
    m.setdefault("annotations", {})["org.opencontainers.image.ref.name"] = ref
with open(path, "w") as f:
    json.dump(index, f, separators=(",", ":"))
PY
    mkdir -p "${out_dir}"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="${created}" \
        -C "${work}/oci" -cf "${archive}.tmp" .
    mv "${archive}.tmp" "${archive}"
    printf '%-28s %-45s binary %7s KiB, archive %7s KiB\n' "${binary}.tar" "${ref}" \
        "$(($(stat -c %s "${bin}") / 1024))" "$(($(stat -c %s "${archive}") / 1024))"
}

main() {
    local which=("$@")
    ((${#which[@]})) || which=(webhook sidecar)
    local name
    for name in "${which[@]}"; do
        [[ "${name}" == webhook || "${name}" == sidecar ]] || die "unknown image: ${name} (webhook | sidecar)"
    done
    version="$(workspace_version)"
    [[ -n "${version}" ]] || die "no [workspace.package] version in Cargo.toml"
    ensure_tools
    build_binaries "${which[@]}"
    for name in "${which[@]}"; do
        case "${name}" in
            webhook) build_image webhook "kube-prestop admission webhook: injects the preStop sidecar into Job pods" ;;
            sidecar) build_image sidecar "kube-prestop install image: the static sidecar binary at /kube-prestop-sidecar" ;;
        esac
    done
}

main "$@"
