#!/usr/bin/env bash
# `make images-test`: checks what `make images` built (images/build.sh),
# for every shipped architecture, without a cluster:
#
#   1. binaries (target/images/linux/<arch>/): static, of their
#      architecture; each sidecar binary at most 1 MiB; each carries the
#      dependency list cargo auditable embeds (.dep-v0), read back with
#      rust-audit-info: its root is the binary's crate at the workspace
#      version, and it lists exactly the crates (name and version) of the
#      image's SBOM for that platform
#      (target/oci/kube-prestop-NAME.linux-ARCH.cdx.json, images/build.sh),
#      among them one each binary must have (nix in the sidecar, rustls in
#      the webhook);
#   2. smoke tests of each architecture's binaries, the host's run directly
#      and the other under user-mode QEMU, invoked directly
#      (qemu-aarch64 / qemu-x86_64 from Debian's qemu-user: no binfmt_misc
#      handler is registered or needed): --version and --help of both;
#      `sidecar install` copies the binary byte for byte (mode 0755) and the
#      copy runs; `webhook inject` of examples/job-with-prestop.yaml injects
#      the sidecar, identically on both architectures; `webhook serve`
#      (TLS, --no-cluster) answers an AdmissionReview with a patch, the same
#      patch on both;
#   3. images (target/oci/*.tar): skopeo shows both platforms in each image
#      index and resolves each platform; images/oci_check.py checks the
#      index, configs, files (the sidecar image layout) and layer sizes;
#   4. reproducible: building the images again from the same tree gives the
#      same index digests, the same archive bytes and the same SBOMs;
#   5. images/check-import.sh: the archives import into containerd under
#      their names and the host platform's entrypoint runs there.
#
#   images/test.sh        needs target/images and target/oci (make images)
#
# Prints one line per check and "images: N passed, N failed"; exit 1 on any
# failure.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
context="${repo}/target/images"
oci_dir="${OCI_OUT_DIR:-${repo}/target/oci}"
archs=(amd64 arm64)
declare -A qemu_cpu=([amd64]=x86_64 [arm64]=aarch64)
sidecar_limit=$((1024 * 1024))

passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'ok    %s\n' "$1"; }
fail() { failed=$((failed + 1)); printf 'FAIL  %s\n' "$1"; }
check() { # check DESCRIPTION CMD...
    local what="$1"; shift
    if "$@"; then pass "${what}"; else fail "${what}"; fi
}
log() { printf '[images-test] %s\n' "$*" >&2; }

version="$(scripts/release.sh version)"
host_arch="$(dpkg --print-architecture)"
for arch in "${archs[@]}"; do
    if [[ "${arch}" != "${host_arch}" ]] && ! command -v "qemu-${qemu_cpu[${arch}]}" >/dev/null; then
        log "installing Debian's qemu-user (no recommends: no binfmt_misc handlers)"
        apt-get install -y -qq --no-install-recommends qemu-user >/dev/null 2>&1 || {
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
        }
    fi
done
for t in skopeo jq curl openssl; do
    command -v "${t}" >/dev/null || {
        log "installing ${t}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${t}" >/dev/null
    }
done
for name in webhook sidecar; do
    for f in "${oci_dir}/kube-prestop-${name}.tar" "${oci_dir}/kube-prestop-${name}".linux-{amd64,arm64}.cdx.json; do
        [[ -f "${f}" ]] || { log "no ${f}: run make images"; exit 1; }
    done
done

work="$(mktemp -d /tmp/kube-prestop-images-test.XXXXXX)"
server_pid=""
cleanup() {
    if [[ -n "${server_pid}" ]] && kill -0 "${server_pid}" 2>/dev/null; then
        kill "${server_pid}"
        wait "${server_pid}" 2>/dev/null || true
    fi
    rm -rf "${work}"
}
trap cleanup EXIT

# on ARCH CMD...: runs an ARCH binary, under QEMU unless ARCH is the host's.
# on_argv ARCH CMD...: sets on_cmd to CMD as it runs for ARCH (natively, or
# under qemu-<cpu> invoked directly). For a background job, run
# "${on_cmd[@]}" itself with &, so that $! is that process: `on ... &` would
# give the subshell's PID, and killing it left the server running.
on_argv() {
    local arch="$1"; shift
    if [[ "${arch}" == "${host_arch}" ]]; then
        on_cmd=("$@")
    else
        on_cmd=("qemu-${qemu_cpu[${arch}]}" "$@")
    fi
}
on() {
    on_argv "$@"
    "${on_cmd[@]}"
}
how() { [[ "$1" == "${host_arch}" ]] && echo native || echo "qemu-${qemu_cpu[$1]}"; }
# contains_all TEXT PART...: TEXT contains every PART.
contains_all() {
    local text="$1" part; shift
    for part in "$@"; do [[ "${text}" == *"${part}"* ]] || return 1; done
}
# installs_itself ARCH BINARY DEST: `install --dest DEST` copies BINARY
# byte for byte, mode 0755, and the copy runs.
installs_itself() {
    on "$1" "$2" install --dest "$3" 2>/dev/null && cmp -s "$2" "$3" &&
        [[ "$(stat -c %a "$3")" == 755 ]] && [[ "$(on "$1" "$3" --version)" == "kube-prestop ${version}" ]]
}
# injected_watcher FILE: the Job's pod template (inject -o json) has the
# native sidecar kube-prestop-work running `watch --container work -- HOOK`
# with the example's preStop command, and the install init container.
injected_watcher() {
    jq -e '.spec.template.spec.initContainers as $c
           | ($c | map(select(.name == "kube-prestop-install")) | length) == 1
           and ($c | map(select(.name == "kube-prestop-work" and .restartPolicy == "Always"
                    and .command[1:4] == ["watch", "--container", "work"]
                    and .command[-3:] == ["sh", "-c", "echo cleanup from preStop"])) | length) == 1' \
        "$1" >/dev/null
}
same_patch() { [[ "$(jq -r .response.patch "$1")" == "$(jq -r .response.patch "$2")" ]]; }
index_has_both_platforms() {
    jq -e '.mediaType == "application/vnd.oci.image.index.v1+json" and
           ([.manifests[].platform | .os + "/" + .architecture] | sort) == ["linux/amd64", "linux/arm64"]' \
        <<<"$1" >/dev/null
}

# --- 1. binaries --------------------------------------------------------------
declare -A machine=([amd64]="Advanced Micro Devices X86-64" [arm64]="AArch64")
# is_static_of BINARY MACHINE: an ELF executable for MACHINE without an
# interpreter (what a scratch image can run).
is_static_of() {
    readelf -h "$1" | grep "Machine: *$2\$" >/dev/null && ! readelf -l "$1" | grep 'program interpreter' >/dev/null
}
for arch in "${archs[@]}"; do
    for name in webhook sidecar; do
        bin="${context}/linux/${arch}/kube-prestop-${name}"
        check "linux/${arch} kube-prestop-${name}: ${machine[${arch}]}, static ($(stat -c %s "${bin}") bytes)" \
            is_static_of "${bin}" "${machine[${arch}]}"
    done
    size="$(stat -c %s "${context}/linux/${arch}/kube-prestop-sidecar")"
    check "linux/${arch} kube-prestop-sidecar: ${size} bytes ($((size / 1024)) KiB) <= 1 MiB" \
        test "${size}" -le "${sidecar_limit}"
done

# The dependency list cargo auditable embedded in each binary (.dep-v0),
# read by cargo-auditable's own reader, against the image's SBOM.
audit_info="$(bash scripts/supply-chain-tools.sh rust-audit-info)"
declare -A must_have=([webhook]=rustls [sidecar]=nix)
# embeds_sbom_crates ARCH NAME: the root of NAME's embedded list is
# kube-prestop-NAME at the workspace version; the other packages (name
# version) are exactly the SBOM's components and include must_have[NAME].
embeds_sbom_crates() {
    local bin="${context}/linux/$1/kube-prestop-$2" sbom="${oci_dir}/kube-prestop-$2.linux-$1.cdx.json"
    "${audit_info}" "${bin}" >"${work}/audit-$1-$2.json" 2>"${work}/audit-$1-$2.err" || return 1
    jq -e --arg root "kube-prestop-$2" --arg v "${version}" --arg c "${must_have[$2]}" \
        '[.packages[] | select(.root == true) | {name, version}] == [{name: $root, version: $v}]
         and ([.packages[].name] | index($c) != null)' "${work}/audit-$1-$2.json" >/dev/null &&
        cmp -s <(jq -r '.packages[] | select(.root != true) | "\(.name) \(.version)"' "${work}/audit-$1-$2.json" | sort) \
            <(jq -r '.components[] | "\(.name) \(.version)"' "${sbom}" | sort)
}
for arch in "${archs[@]}"; do
    for name in webhook sidecar; do
        if embeds_sbom_crates "${arch}" "${name}"; then
            pass "linux/${arch} kube-prestop-${name}: embedded dependency list (.dep-v0) readable, $(jq '.packages | length' "${work}/audit-${arch}-${name}.json") crates, exactly the SBOM's, with ${must_have[${name}]}"
        else
            fail "linux/${arch} kube-prestop-${name}: embedded dependency list unreadable or not the SBOM's: $(head -c 300 "${work}/audit-${arch}-${name}.err")$(diff <(jq -r '.packages[]? | select(.root != true) | "\(.name) \(.version)"' "${work}/audit-${arch}-${name}.json" 2>/dev/null | sort) <(jq -r '.components[] | "\(.name) \(.version)"' "${oci_dir}/kube-prestop-${name}.linux-${arch}.cdx.json" | sort) | head -n 10 | tr '\n' ' ')"
        fi
    done
done

# --- 2. smoke tests -------------------------------------------------------------
certs/gen.sh -o "${work}/certs" >/dev/null 2>&1
python3 bench/report.py review "${repo}/engine/tests/golden/simple-job/input.yaml" "${work}/review.json"

# answered_with_patch RESPONSE_JSON: an AdmissionReview response, allowed,
# with a non-empty JSON patch.
answered_with_patch() {
    jq -e '.response.allowed == true and .response.patchType == "JSONPatch" and (.response.patch | length) > 0' \
        "$1" >/dev/null
}
# serve ARCH: starts the webhook (TLS, no cluster) and sets SERVER_ADDR.
serve() {
    local arch="$1" out="${work}/serve-$1.out"
    on_argv "${arch}" "${context}/linux/${arch}/kube-prestop-webhook" serve --no-cluster \
        --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --drain-delay 0s --shutdown-grace 2s \
        --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key"
    "${on_cmd[@]}" >"${out}" 2>"${work}/serve-${arch}.err" &
    server_pid=$!
    SERVER_ADDR=""
    local deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)) && kill -0 "${server_pid}" 2>/dev/null; do
        SERVER_ADDR="$(sed -n 's/^listening https=\([^ ]*\).*/\1/p' "${out}")"
        [[ -n "${SERVER_ADDR}" ]] && return 0
        sleep 0.1
    done
    return 1
}
stop_server() {
    kill "${server_pid}" 2>/dev/null || true
    wait "${server_pid}" 2>/dev/null || true
    server_pid=""
}

for arch in "${archs[@]}"; do
    sidecar="${context}/linux/${arch}/kube-prestop-sidecar"
    webhook="${context}/linux/${arch}/kube-prestop-webhook"
    via="$(how "${arch}")"
    out="$(on "${arch}" "${sidecar}" --version 2>&1 || true)"
    check "linux/${arch} (${via}) kube-prestop-sidecar --version: ${out}" test "${out}" == "kube-prestop ${version}"
    out="$(on "${arch}" "${sidecar}" --help 2>&1 || true)"
    check "linux/${arch} (${via}) kube-prestop-sidecar --help lists install, watch, prestop" \
        contains_all "${out}" "kube-prestop install --dest PATH" "kube-prestop watch " "kube-prestop prestop "
    dest="${work}/install-${arch}/bin/kube-prestop-sidecar"
    check "linux/${arch} (${via}) kube-prestop-sidecar install --dest DIR/bin/kube-prestop-sidecar: the same bytes, mode 0755, and the copy runs" \
        installs_itself "${arch}" "${sidecar}" "${dest}"

    out="$(on "${arch}" "${webhook}" --version 2>&1 || true)"
    check "linux/${arch} (${via}) kube-prestop-webhook --version: ${out}" contains_all "${out}" "${version}"
    out="$(on "${arch}" "${webhook}" --help 2>&1 || true)"
    check "linux/${arch} (${via}) kube-prestop-webhook --help lists serve, inject, check" \
        contains_all "${out}" serve inject check
    on "${arch}" "${webhook}" inject -f examples/job-with-prestop.yaml -o json >"${work}/inject-${arch}.json" 2>"${work}/inject-${arch}.err" || true
    check "linux/${arch} (${via}) kube-prestop-webhook inject -f examples/job-with-prestop.yaml: native sidecar kube-prestop-work watching work" \
        injected_watcher "${work}/inject-${arch}.json"

    if serve "${arch}"; then
        curl -sS --fail --max-time 60 --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
            --data-binary "@${work}/review.json" "https://${SERVER_ADDR}/mutate" >"${work}/response-${arch}.json" 2>&1 || true
        # (The redirection belongs to jq: on the check call it also swallowed
        # the check's own ok/FAIL line.)
        check "linux/${arch} (${via}) kube-prestop-webhook serve: TLS AdmissionReview answered allowed with a JSON patch" \
            answered_with_patch "${work}/response-${arch}.json"
    else
        fail "linux/${arch} (${via}) kube-prestop-webhook serve did not start: $(tail -n3 "${work}/serve-${arch}.err")"
    fi
    stop_server
done
check "inject: the same output on ${archs[*]}" cmp -s "${work}/inject-amd64.json" "${work}/inject-arm64.json"
check "serve: the same patch on ${archs[*]}" same_patch "${work}/response-amd64.json" "${work}/response-arm64.json"

# --- 3. images -------------------------------------------------------------------
declare -A index_digest archive_sum
for name in webhook sidecar; do
    archive="${oci_dir}/kube-prestop-${name}.tar"
    ref="localhost/kube-prestop/${name}:${version}"
    raw="$(skopeo inspect --raw "oci-archive:${archive}:${ref}" 2>&1 || true)"
    check "skopeo inspect --raw oci-archive:${archive##*/}: an image index with linux/amd64 and linux/arm64" \
        index_has_both_platforms "${raw}"
    for arch in "${archs[@]}"; do
        got="$(skopeo --override-os linux --override-arch "${arch}" inspect "oci-archive:${archive}:${ref}" 2>&1 | jq -r .Architecture 2>/dev/null || true)"
        check "skopeo --override-arch ${arch} inspect oci-archive:${archive##*/}: resolves to ${got}" test "${got}" == "${arch}"
    done
    while IFS= read -r line; do
        case "${line}" in
            "ok    "*) pass "${line#ok    }" ;;
            *) fail "${line#FAIL  }" ;;
        esac
    done < <(python3 images/oci_check.py "${archive}" "${name}" "${context}" "${ref}" || true)
    index_digest[${name}]="$(tar -xOf "${archive}" ./index.json | jq -r '.manifests[0].digest')"
    archive_sum[${name}]="$(sha256sum "${archive}" | cut -d' ' -f1)"
done

# --- 4. reproducible -------------------------------------------------------------
log "building the images again into ${work}/again (same binaries, same tree)"
if IMAGES_SKIP_CARGO=1 OCI_OUT_DIR="${work}/again" images/build.sh >"${work}/again.log" 2>&1; then
    for name in webhook sidecar; do
        again="${work}/again/kube-prestop-${name}.tar"
        d="$(tar -xOf "${again}" ./index.json | jq -r '.manifests[0].digest')"
        check "reproducible: kube-prestop-${name} built twice, index digest ${index_digest[${name}]}, then ${d}" \
            test "${d}" == "${index_digest[${name}]}"
        check "reproducible: kube-prestop-${name}.tar built twice, the same bytes" \
            test "$(sha256sum "${again}" | cut -d' ' -f1)" == "${archive_sum[${name}]}"
        for arch in "${archs[@]}"; do
            check "reproducible: kube-prestop-${name}.linux-${arch}.cdx.json made twice, the same bytes" \
                cmp -s "${work}/again/kube-prestop-${name}.linux-${arch}.cdx.json" "${oci_dir}/kube-prestop-${name}.linux-${arch}.cdx.json"
        done
    done
else
    fail "reproducible: the second build failed: $(tail -n5 "${work}/again.log")"
fi

# --- 5. containerd import ----------------------------------------------------------
while IFS= read -r line; do
    case "${line}" in
        "ok    "*) pass "containerd: ${line#ok    }" ;;
        "FAIL  "*) fail "containerd: ${line#FAIL  }" ;;
    esac
done < <(images/check-import.sh "${oci_dir}/kube-prestop-webhook.tar" "${oci_dir}/kube-prestop-sidecar.tar" 2>&1 || true)

printf '\nimages: %d passed, %d failed\n' "${passed}" "${failed}"
[[ "${failed}" -eq 0 ]]
