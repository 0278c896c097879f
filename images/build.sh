#!/usr/bin/env bash
# Builds kube-prestop's static binaries for every shipped architecture, then
# the two container images from images/*.Dockerfile with buildah (no daemon,
# no registry, no base image: both are FROM scratch), each as a
# multi-platform OCI image index (linux/amd64 + linux/arm64) in an OCI
# archive that `ctr images import`, skopeo and the registries accept.
#
#   images/build.sh                binaries, then both images (`make images`)
#   images/build.sh binaries       only the binaries (`make binaries`)
#   images/build.sh sidecar        binaries, then one image (webhook | sidecar)
#                                  (the SBOMs of both are made every time)
#
# Binaries (cargo, --locked, the profile of images/profile.sh: release unless
# OCI_CARGO_PROFILE says otherwise; the bench measures the sidecar built so),
# copied into the images' build context:
#   target/images/linux/amd64/kube-prestop-{webhook,sidecar}   x86_64-unknown-linux-musl
#   target/images/linux/arm64/kube-prestop-{webhook,sidecar}   aarch64-unknown-linux-musl
# built with `cargo auditable build` (each binary carries its crate list in
# a .dep-v0 section; cargo-auditable from scripts/supply-chain-tools.sh).
# Images (override the folder with OCI_OUT_DIR):
#   target/oci/kube-prestop-webhook.tar   localhost/kube-prestop/webhook:<version>
#   target/oci/kube-prestop-sidecar.tar   localhost/kube-prestop/sidecar:<version>
# and each image's SBOMs, CycloneDX JSON from the Cargo graph, one per
# platform (build_sboms):
#   target/oci/kube-prestop-{webhook,sidecar}.linux-{amd64,arm64}.cdx.json
# <version> is the workspace version (Cargo.toml). Each archive's index.json
# names the image index by its full reference (org.opencontainers.image.ref.name),
# so a plain `ctr -n k8s.io images import FILE` names it correctly.
#
# Reproducible: every time stamp (files in the layers, config, history) is
# the last commit's time, or SOURCE_DATE_EPOCH (buildah --timestamp), and the
# archive is written with sorted names and fixed owners, so the same tree
# gives the same index digest and the same archive bytes (images/test.sh
# checks it by building twice).
#
# Knobs: IMAGES_SKIP_CARGO=1 takes the binaries already in target/images
# (no cargo); IMAGE_PLATFORMS (default linux/amd64,linux/arm64) the
# platforms of the image index and the architectures built: the binaries,
# the SBOMs and every platform's sidecar /architectures/ hold exactly these.
# One platform (`make demo` builds only its node's, half the cargo time) is a
# development image, not what a release ships: its index has one platform and
# its ConfigMap delivery can serve only that architecture (docs/install.md).
#
# Toolchain (installed by .ci/install-deps.sh; missing parts are installed
# here too): the rustup targets, Debian's musl-tools (musl-gcc compiles the
# C code of ring and mimalloc for x86_64), gcc-aarch64-linux-gnu (the same
# for aarch64), buildah. Both targets link with Rust's self-contained musl
# (static, no ELF interpreter); aarch64 links with rust-lld.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-${repo}/target}"
context="${repo}/target/images"
out_dir="${OCI_OUT_DIR:-${repo}/target/oci}"
# Cargo profile of the binaries, shared with the bench (images/profile.sh).
# shellcheck source=images/profile.sh
source "${repo}/images/profile.sh"
# cargo-auditable and cargo-cyclonedx, pinned and cached.
# shellcheck source=scripts/supply-chain-tools.sh
source "${repo}/scripts/supply-chain-tools.sh"
profile="${SHIPPED_CARGO_PROFILE}"
platforms="${IMAGE_PLATFORMS:-linux/amd64,linux/arm64}"
# The architectures kube-prestop ships (Kubernetes' names, as in the node
# label kubernetes.io/arch and the OCI platform) and their Rust targets;
# archs: those of IMAGE_PLATFORMS, in its order.
shipped_archs=(amd64 arm64)
archs=()
declare -A rust_target=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
# ELF e_machine of each, as readelf -h prints it.
declare -A elf_machine=([amd64]="Advanced Micro Devices X86-64" [arm64]="AArch64")

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for platform in ${platforms//,/ }; do
    arch="${platform#linux/}"
    [[ "${platform}" == linux/* && " ${shipped_archs[*]} " == *" ${arch} "* ]] ||
        die "IMAGE_PLATFORMS: ${platform} is not one of linux/${shipped_archs[*]// /, linux/}"
    [[ " ${archs[*]} " == *" ${arch} "* ]] || archs+=("${arch}")
done
((${#archs[@]})) || die "IMAGE_PLATFORMS is empty"

apt_install() {
    log "installing Debian packages: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    }
}

ensure_tools() {
    local pkgs=() arch
    if [[ -z "${IMAGES_SKIP_CARGO:-}" ]]; then
        command -v musl-gcc >/dev/null || pkgs+=(musl-tools)
        command -v aarch64-linux-gnu-gcc >/dev/null || pkgs+=(gcc-aarch64-linux-gnu)
        # The cross gcc's C headers (stdint.h and the rest ring includes) are
        # only a Recommends of gcc-aarch64-linux-gnu, which --no-install-recommends
        # leaves out: without them it falls back to the host's /usr/include and
        # fails on bits/libc-header-start.h (a fresh machine's CI run).
        [[ -f /usr/aarch64-linux-gnu/include/stdint.h ]] || pkgs+=(libc6-dev-arm64-cross)
    fi
    if [[ "${1:-}" != binaries ]]; then
        command -v buildah >/dev/null || pkgs+=(buildah)
    fi
    if ((${#pkgs[@]})); then
        apt_install "${pkgs[@]}"
    fi
    [[ -n "${IMAGES_SKIP_CARGO:-}" ]] && return 0
    for arch in "${archs[@]}"; do
        if ! rustup target list --installed 2>/dev/null | grep -qx "${rust_target[${arch}]}"; then
            log "adding Rust target ${rust_target[${arch}]}"
            rustup target add "${rust_target[${arch}]}" >&2
        fi
    done
}

# build_binaries: both binaries for every architecture, copied into the
# build context.
build_binaries() {
    local arch triple profile_dir="${SHIPPED_CARGO_PROFILE_DIR}" name bin
    local auditable
    auditable="$(supply_chain_tool cargo-auditable)"
    for arch in "${archs[@]}"; do
        triple="${rust_target[${arch}]}"
        log "cargo auditable build --profile ${profile} --target ${triple} (linux/${arch})"
        (
            cd "${repo}"
            case "${arch}" in
                amd64)
                    # musl-gcc compiles the C code; linking stays with Rust's
                    # default (self-contained musl crt, static). musl-gcc as
                    # the linker would produce a dynamically linked PIE.
                    export CC_x86_64_unknown_linux_musl=musl-gcc
                    ;;
                arm64)
                    # Debian has no aarch64 musl C compiler; the cross gcc
                    # compiles ring's and mimalloc's C code (freestanding
                    # enough: only string, memory, thread and mmap calls, all
                    # in musl under the same names; a symbol musl lacks fails
                    # the link). rust-lld links with Rust's self-contained
                    # musl crt and libc, so nothing of glibc is linked in.
                    export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
                    export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
                    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld
                    ;;
            esac
            # cargo auditable: the same build, plus each binary's crate list
            # (name, version, source, dependency edges of the resolved graph
            # for this target and features) as zlib-compressed JSON in the
            # .dep-v0 section, which survives the profile's strip; images/test.sh
            # reads it back. cargo finds `cargo-auditable` on PATH.
            PATH="$(dirname "${auditable}"):${PATH}" \
                cargo auditable build --locked --profile "${profile}" --target "${triple}" \
                -p kube-prestop-webhook -p kube-prestop-sidecar >&2
        )
        mkdir -p "${context}/linux/${arch}"
        for name in webhook sidecar; do
            bin="${target_dir}/${triple}/${profile_dir}/kube-prestop-${name}"
            [[ -x "${bin}" ]] || die "no binary at ${bin}"
            install -m 0755 "${bin}" "${context}/linux/${arch}/kube-prestop-${name}.tmp"
            mv "${context}/linux/${arch}/kube-prestop-${name}.tmp" "${context}/linux/${arch}/kube-prestop-${name}"
        done
    done
}

# stage_architectures: the sidecar image's /architectures/ in the build
# context (context/architectures/<arch>/kube-prestop-sidecar), exactly the
# architectures built now: a binary left by an earlier build of another set
# never reaches an image.
stage_architectures() {
    local arch
    rm -rf "${context}/architectures"
    for arch in "${archs[@]}"; do
        install -D -m 0755 "${context}/linux/${arch}/kube-prestop-sidecar" \
            "${context}/architectures/${arch}/kube-prestop-sidecar"
    done
}

# check_binaries: what a scratch image needs: static, of its architecture.
check_binaries() {
    local arch name bin
    for arch in "${archs[@]}"; do
        for name in webhook sidecar; do
            bin="${context}/linux/${arch}/kube-prestop-${name}"
            [[ -f "${bin}" ]] || die "no ${bin}: run images/build.sh binaries"
            readelf -h "${bin}" | grep "Machine: *${elf_machine[${arch}]}\$" >/dev/null ||
                die "${bin} is not a ${elf_machine[${arch}]} binary"
            if readelf -l "${bin}" | grep 'Requesting program interpreter' >/dev/null; then
                die "${bin} is dynamically linked"
            fi
        done
    done
}

# build_sboms: one CycloneDX SBOM (JSON, spec 1.5) per image and platform,
# of the crate its binary is built from (kube-prestop-NAME) and every crate
# that crate depends on for the platform's Rust target, from the Cargo
# dependency graph (cargo metadata, Cargo.lock's checksums) by
# cargo-cyclonedx --target:
#   OUT_DIR/kube-prestop-{webhook,sidecar}.linux-{amd64,arm64}.cdx.json
# (the webhook's differ: core_detect is x86_64 only; the sidecar's must not,
# as each platform's sidecar image carries both binaries). images/test.sh
# checks that each lists exactly the crates cargo auditable embedded in that
# architecture's binary; scripts/release.sh attaches each to its platform's
# image manifest as a signed attestation. Not in the image: see
# docs/supply-chain.md. SOURCE_DATE_EPOCH makes them reproducible (no random
# serial number, the commit's time). cargo-cyclonedx writes next to each
# workspace member's Cargo.toml; those files are moved out or removed at once.
build_sboms() {
    local cyclonedx name arch triple sboms members=() member package dir
    cyclonedx="$(supply_chain_tool cargo-cyclonedx)"
    sboms="$(mktemp -d /var/tmp/kube-prestop-sbom.XXXXXX)"
    # "package-name directory" of every workspace member.
    mapfile -t members < <(cd "${repo}" && cargo metadata --locked --no-deps --format-version 1 |
        jq -r '.packages[] | .name + " " + (.manifest_path | rtrimstr("/Cargo.toml"))')
    for arch in "${archs[@]}"; do
        triple="${rust_target[${arch}]}"
        log "cargo cyclonedx --target ${triple}"
        (cd "${repo}" && SOURCE_DATE_EPOCH="${epoch}" "${cyclonedx}" cyclonedx --quiet --format json \
            --spec-version 1.5 --all --target "${triple}" --override-filename .kube-prestop-sbom)
        for member in "${members[@]}"; do
            package="${member%% *}"
            dir="${member#* }"
            case "${package}" in
                kube-prestop-webhook | kube-prestop-sidecar)
                    cp "${dir}/.kube-prestop-sbom.json" "${sboms}/${package#kube-prestop-}-${arch}.json" ;;
            esac
            rm -f "${dir}/.kube-prestop-sbom.json"
        done
    done
    mkdir -p "${out_dir}"
    for name in webhook sidecar; do
        for arch in "${archs[@]}"; do
            [[ -f "${sboms}/${name}-${arch}.json" ]] || die "cargo-cyclonedx wrote no SBOM for kube-prestop-${name} (${arch})"
            install -m 0644 "${sboms}/${name}-${arch}.json" "${out_dir}/kube-prestop-${name}.linux-${arch}.cdx.json"
            printf '%-40s CycloneDX 1.5, %s components\n' "kube-prestop-${name}.linux-${arch}.cdx.json" \
                "$(jq '.components | length' "${sboms}/${name}-${arch}.json")"
        done
    done
    # Every platform of the sidecar image holds every architecture's sidecar
    # binary, so its SBOMs must agree.
    if ((${#archs[@]} == 2)); then
        cmp -s <(jq -S '[.components[] | .purl]' "${sboms}/sidecar-amd64.json") \
            <(jq -S '[.components[] | .purl]' "${sboms}/sidecar-arm64.json") ||
            die "kube-prestop-sidecar: the SBOMs of ${archs[*]} list different crates, but each platform's image holds both binaries"
    fi
    rm -rf "${sboms}"
}

# build_image NAME: the multi-platform image of images/NAME.Dockerfile,
# written to OUT_DIR/kube-prestop-NAME.tar.
build_image() {
    local name="$1"
    local ref="localhost/kube-prestop/${name}:${version}"
    local archive="${out_dir}/kube-prestop-${name}.tar"
    local work
    work="$(mktemp -d /var/tmp/kube-prestop-images.XXXXXX)"
    # shellcheck disable=SC2064 # expand now: work is local
    trap "rm -rf '${work}'" RETURN
    # A private image store (vfs: no mounts), removed afterwards: nothing of
    # a build stays in the machine's container storage, and parallel builds
    # do not meet.
    local store=(--root "${work}/storage" --runroot "${work}/run" --storage-driver vfs)
    # buildah creates its network configuration directory when it sets up
    # (even with --network none, and though these builds have no RUN): the
    # CNI backend's default is /etc/cni/net.d (containers.conf(5),
    # network_config_dir), made mode 0700 on the host, where check-clean.sh
    # then finds an /etc/cni that was not there before cluster-up. A
    # containers.conf of our own (CONTAINERS_CONF: "just this path will be
    # used", containers.conf(5)) puts it in the work directory instead.
    printf '[network]\nnetwork_config_dir = "%s"\n' "${work}/cni" >"${work}/containers.conf"
    local -x CONTAINERS_CONF="${work}/containers.conf"
    log "buildah build ${ref} (${platforms}) from images/${name}.Dockerfile"
    # One platform at a time, in the order given: buildah builds the
    # platforms of one `--platform A,B` in parallel and lists them in the
    # index in the order they finish, which would change the index digest.
    local platform
    for platform in ${platforms//,/ }; do
        buildah "${store[@]}" build --quiet \
            --platform "${platform}" \
            --manifest "${ref}" \
            --timestamp "${epoch}" \
            --build-arg "VERSION=${version}" \
            --build-arg "REVISION=${revision}" \
            --build-arg "CREATED=${created}" \
            -f "${repo}/images/${name}.Dockerfile" "${context}" >/dev/null
    done
    buildah "${store[@]}" manifest push --quiet --all --format oci \
        "${ref}" "oci:${work}/layout:${ref}" >&2
    mkdir -p "${out_dir}"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="${created}" \
        -C "${work}/layout" -cf "${archive}.tmp" .
    mv "${archive}.tmp" "${archive}"
    printf '%-28s %-45s %s, archive %s KiB\n' "kube-prestop-${name}.tar" "${ref}" \
        "${platforms}" "$(($(stat -c %s "${archive}") / 1024))"
}

main() {
    local which=("$@") name
    ((${#which[@]})) || which=(webhook sidecar)
    for name in "${which[@]}"; do
        [[ "${name}" == webhook || "${name}" == sidecar || "${name}" == binaries ]] ||
            die "unknown argument: ${name} (binaries | webhook | sidecar)"
    done
    version="$("${repo}/scripts/release.sh" version)"
    [[ -n "${version}" ]] || die "no [workspace.package] version in Cargo.toml"
    ensure_tools "${which[0]}"
    [[ -n "${IMAGES_SKIP_CARGO:-}" ]] || build_binaries
    check_binaries
    stage_architectures
    [[ "${which[*]}" == binaries ]] && {
        ls -l "${context}"/linux/*/kube-prestop-* >&2
        return 0
    }
    epoch="${SOURCE_DATE_EPOCH:-$(git -C "${repo}" log -1 --format=%ct 2>/dev/null || date +%s)}"
    created="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"
    revision="$(git -C "${repo}" rev-parse HEAD 2>/dev/null || echo unknown)"
    for name in "${which[@]}"; do
        [[ "${name}" == binaries ]] || build_image "${name}"
    done
    build_sboms
}

main "$@"
