#!/usr/bin/env bash
# The release path, against a registry of our own on loopback: push the
# images of `make images` (target/oci/*.tar) and the chart with
# scripts/release.sh, then read them back as a cluster and an operator
# would: the image indexes by tag (every platform of the archive), the
# chart with `helm pull oci://...` and rendered with `helm template`; each
# image resolves for linux/amd64 and linux/arm64. Then the signing steps of
# the release (scripts/release.sh sign) with cosign, offline: a key pair made
# here (no password) instead of keyless signing, nothing uploaded to Rekor;
# each image and the chart verify with the public key by the tag an operator
# uses, each image's CycloneDX attestations verify and carry the SBOMs of
# make images (naming the crates each binary must have: nix in the
# sidecar, rustls in the webhook; one per platform manifest, which is signed
# too); a tampered image pushed under the
# webhook's tag (one file added with buildah), and a signed image checked
# with another key, are refused.
#
#   tests/release/check.sh        needs target/oci/kube-prestop-{webhook,sidecar}.tar
#
# The registry is CNCF Distribution (github.com/distribution/distribution/v3,
# from the Go module proxy, cached like the chart tools), listening on
# 127.0.0.1 only, storage in a temporary folder, stopped by its PID at exit.
# cosign: scripts/supply-chain-tools.sh (the Go module proxy, cached).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
# shellcheck source=tests/chart/tools.sh
source "${repo}/tests/chart/tools.sh"
chart_tools_install

passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'ok    %s\n' "$1"; }
fail() { failed=$((failed + 1)); printf 'FAIL  %s\n' "$1"; }

regdir="${CHART_TOOLS_CACHE}/bin/registry-${REGISTRY_VERSION}"
go_install_cached "github.com/distribution/distribution/v3/cmd/registry@${REGISTRY_VERSION}" registry "${regdir}"

work="$(mktemp -d)"
registry_pid=""
cleanup() {
    if [[ -n "${registry_pid}" ]]; then
        kill "${registry_pid}" 2>/dev/null || true
        wait "${registry_pid}" 2>/dev/null || true
    fi
    rm -rf "${work}"
}
trap cleanup EXIT

port="${RELEASE_TEST_PORT:-5055}"
cat >"${work}/config.yml" <<CFG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${work}/storage
http:
  addr: 127.0.0.1:${port}
CFG
"${regdir}/registry" serve "${work}/config.yml" >"${work}/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:${port}/v2/" >/dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:${port}/v2/" >/dev/null || { cat "${work}/registry.log"; echo "registry did not start"; exit 1; }

version="$("${repo}/scripts/release.sh" version)"
registry="127.0.0.1:${port}/kube-prestop"
export RELEASE_PLAIN_HTTP=1 HELM

if "${repo}/scripts/release.sh" push-images "${registry}" >"${work}/push-images.log" 2>&1; then
    pass "scripts/release.sh push-images ${registry}"
else
    cat "${work}/push-images.log"
    fail "scripts/release.sh push-images"
fi
for name in webhook sidecar; do
    # What the archive holds (its index's one manifest or image index) must
    # be what the tag resolves to, digest for digest.
    want="$("${repo}/scripts/release.sh" digest "${name}")"
    got="$(skopeo inspect --raw --tls-verify=false "docker://${registry}/kube-prestop-${name}:${version}" | sha256sum | cut -d' ' -f1)"
    if [[ "sha256:${got}" == "${want}" ]]; then
        pass "kube-prestop-${name}:${version} in the registry is the archive's ${want}"
    else
        fail "kube-prestop-${name}:${version}: registry has sha256:${got}, archive ${want}"
    fi
    # Every platform of the index resolves from the registry, as a node of
    # that architecture pulls it.
    for arch in amd64 arm64; do
        resolved="$(skopeo --override-os linux --override-arch "${arch}" inspect --tls-verify=false \
            "docker://${registry}/kube-prestop-${name}:${version}" 2>&1 | jq -r '.Os + "/" + .Architecture' 2>/dev/null || true)"
        if [[ "${resolved}" == "linux/${arch}" ]]; then
            pass "kube-prestop-${name}:${version} resolves for linux/${arch}"
        else
            fail "kube-prestop-${name}:${version} for linux/${arch}: ${resolved}"
        fi
    done
done

if "${repo}/scripts/release.sh" push-chart "${registry}/charts" >"${work}/push-chart.log" 2>&1; then
    pass "scripts/release.sh push-chart ${registry}/charts"
else
    cat "${work}/push-chart.log"
    fail "scripts/release.sh push-chart"
fi
if (cd "${work}" && "${HELM}" pull "oci://${registry}/charts/kube-prestop" --version "${version}" --plain-http >"${work}/pull.log" 2>&1) &&
    "${HELM}" template kube-prestop "${work}/kube-prestop-${version}.tgz" -n kube-prestop \
        --set "image.repository=${registry}/kube-prestop-webhook" \
        --set "installImage.repository=${registry}/kube-prestop-sidecar" >"${work}/render.yaml" &&
    grep -q "image: \"${registry}/kube-prestop-webhook:${version}\"" "${work}/render.yaml"; then
    pass "helm pull oci://${registry}/charts/kube-prestop --version ${version}, rendered with the pushed images"
else
    cat "${work}/pull.log"
    fail "helm pull and template of the pushed chart"
fi

# --- signatures and SBOMs (cosign, offline) ---------------------------------
cosign="$(bash "${repo}/scripts/supply-chain-tools.sh" cosign)"
(cd "${work}" && COSIGN_PASSWORD='' "${cosign}" generate-key-pair >/dev/null 2>&1 &&
    mkdir other && cd other && COSIGN_PASSWORD='' "${cosign}" generate-key-pair >/dev/null 2>&1)
# What an operator runs, with the test's key instead of the release
# workflow's identity, and no Rekor entry to look up. The empty trusted root
# (no Fulcio, Rekor or CT authority: none is needed to check a key's
# signature) keeps cosign from fetching Sigstore's from its TUF repository,
# which it otherwise tries first (a DNS lookup, then a warning).
printf '{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}\n' >"${work}/trusted-root.json"
offline_flags=(--insecure-ignore-tlog=true --allow-http-registry --allow-insecure-registry --trusted-root "${work}/trusted-root.json")
verify_flags=(--key "${work}/cosign.pub" "${offline_flags[@]}")
if COSIGN_KEY="${work}/cosign.key" COSIGN_PASSWORD='' RELEASE_NO_TLOG=1 \
    "${repo}/scripts/release.sh" sign "${registry}" "${registry}/charts" >"${work}/sign.log" 2>&1; then
    pass "scripts/release.sh sign ${registry} ${registry}/charts (a key pair of this test, no Rekor upload)"
else
    cat "${work}/sign.log"
    fail "scripts/release.sh sign"
fi
# verified REF: cosign verify REF with the test's public key succeeds and
# the signed payload names REF's digest.
verified() {
    local digest
    digest="$(skopeo inspect --raw --tls-verify=false "docker://$1" | sha256sum | cut -d' ' -f1)"
    "${cosign}" verify "${verify_flags[@]}" "$1" >"${work}/verify.json" 2>"${work}/verify.err" &&
        jq -e --arg d "sha256:${digest}" 'all(.[]; .critical.image["docker-manifest-digest"] == $d)' \
            "${work}/verify.json" >/dev/null
}
# sbom_attested NAME ARCH CRATE: the CycloneDX attestation of the image's
# linux/ARCH manifest verifies, its in-toto subject is that manifest's
# digest, its predicate is make images' SBOM
# (target/oci/kube-prestop-NAME.linux-ARCH.cdx.json) and lists CRATE.
sbom_attested() {
    local name="$1" arch="$2" crate="$3" digest out="${work}/attestation-$1-$2"
    digest="$("${repo}/scripts/release.sh" digest "${name}" "${arch}")"
    "${cosign}" verify-attestation "${verify_flags[@]}" --type cyclonedx \
        "${registry}/kube-prestop-${name}@${digest}" >"${out}.json" 2>"${out}.err" || return 1
    jq -r .payload "${out}.json" | head -n1 | base64 -d >"${out}.statement.json"
    jq -e --arg d "${digest#sha256:}" '.predicateType == "https://cyclonedx.org/bom" and .subject[0].digest.sha256 == $d' \
        "${out}.statement.json" >/dev/null &&
        cmp -s <(jq -S .predicate "${out}.statement.json") <(jq -S . "${repo}/target/oci/kube-prestop-${name}.linux-${arch}.cdx.json") &&
        jq -e --arg c "${crate}" '[.predicate.components[].name] | index($c) != null' "${out}.statement.json" >/dev/null
}
for name in webhook sidecar; do
    check_ref="${registry}/kube-prestop-${name}:${version}"
    if verified "${check_ref}"; then
        pass "cosign verify ${check_ref}: signed by the release key, digest $("${repo}/scripts/release.sh" digest "${name}")"
    else
        cat "${work}/verify.err"
        fail "cosign verify ${check_ref}"
    fi
done
check_ref="${registry}/charts/kube-prestop:${version}"
if verified "${check_ref}" && [[ "$(jq -r '.[0].critical.image["docker-manifest-digest"]' "${work}/verify.json")" == "$(cat "${repo}/target/oci/kube-prestop-chart.digest")" ]]; then
    pass "cosign verify ${check_ref}: the chart helm pushed, signed by the release key"
else
    cat "${work}/verify.err"
    fail "cosign verify ${check_ref}"
fi
declare -A expected_crate=([webhook]=rustls [sidecar]=nix)
for name in webhook sidecar; do
    for arch in amd64 arm64; do
        check_ref="${registry}/kube-prestop-${name}@$("${repo}/scripts/release.sh" digest "${name}" "${arch}")"
        # The platform's manifest, as a node pulls it, is signed too.
        if verified "${check_ref}"; then
            pass "cosign verify kube-prestop-${name} linux/${arch} (${check_ref##*@}): signed by the release key"
        else
            cat "${work}/verify.err"
            fail "cosign verify ${check_ref} (linux/${arch})"
        fi
        if sbom_attested "${name}" "${arch}" "${expected_crate[${name}]}"; then
            pass "cosign verify-attestation --type cyclonedx kube-prestop-${name} linux/${arch}: the SBOM of make images, for its digest, lists ${expected_crate[${name}]} ($(jq '.predicate.components | length' "${work}/attestation-${name}-${arch}.statement.json") components)"
        else
            cat "${work}/attestation-${name}-${arch}.err"
            fail "cosign verify-attestation --type cyclonedx kube-prestop-${name} linux/${arch}"
        fi
    done
done

# refused CMD...: CMD fails and says that no signature matched.
refused() {
    if "$@" >"${work}/refused.out" 2>"${work}/refused.err"; then
        return 1
    fi
    grep -E -q 'no signatures found|no matching signatures|no matching attestations' "${work}/refused.err"
}
# A signature does not carry over to another key.
if refused "${cosign}" verify --key "${work}/other/cosign.pub" "${offline_flags[@]}" \
    "${registry}/kube-prestop-sidecar:${version}"; then
    pass "cosign verify with another key: refused ($(tail -n1 "${work}/refused.err"))"
else
    cat "${work}/refused.err"
    fail "cosign verify with another key was not refused"
fi
# A tampered image under the released tag: the linux/amd64 webhook image
# with one file added (buildah, a private store as images/build.sh uses).
tamper() {
    local b="${work}/buildah" ctr
    mkdir -p "${b}"
    printf '[network]\nnetwork_config_dir = "%s"\n' "${b}/cni" >"${b}/containers.conf"
    local -x CONTAINERS_CONF="${b}/containers.conf"
    local store=(--root "${b}/storage" --runroot "${b}/run" --storage-driver vfs)
    printf 'not part of the release\n' >"${b}/extra"
    ctr="$(buildah "${store[@]}" from --quiet --tls-verify=false --platform linux/amd64 \
        "docker://${registry}/kube-prestop-webhook:${version}")" &&
        buildah "${store[@]}" copy --quiet "${ctr}" "${b}/extra" /extra >/dev/null &&
        buildah "${store[@]}" commit --quiet "${ctr}" "localhost/tampered:${version}" >/dev/null &&
        buildah "${store[@]}" push --quiet --tls-verify=false "localhost/tampered:${version}" \
            "docker://${registry}/kube-prestop-webhook:${version}"
}
if tamper >"${work}/tamper.log" 2>&1; then
    tampered="$(skopeo inspect --raw --tls-verify=false "docker://${registry}/kube-prestop-webhook:${version}" | sha256sum | cut -d' ' -f1)"
    if [[ "sha256:${tampered}" != "$("${repo}/scripts/release.sh" digest webhook)" ]] &&
        refused "${cosign}" verify "${verify_flags[@]}" "${registry}/kube-prestop-webhook:${version}"; then
        pass "a tampered image under kube-prestop-webhook:${version} (sha256:${tampered}): cosign verify refuses it ($(tail -n1 "${work}/refused.err"))"
    else
        cat "${work}/refused.out" "${work}/refused.err"
        fail "a tampered image under kube-prestop-webhook:${version} was not refused"
    fi
    if refused "${cosign}" verify-attestation "${verify_flags[@]}" --type cyclonedx "${registry}/kube-prestop-webhook:${version}"; then
        pass "the tampered image has no SBOM attestation: cosign verify-attestation refuses it ($(tail -n1 "${work}/refused.err"))"
    else
        cat "${work}/refused.err"
        fail "the tampered image's attestation was not refused"
    fi
    # The signed digest itself still verifies: pin images by digest.
    signed_ref="${registry}/kube-prestop-webhook@$("${repo}/scripts/release.sh" digest webhook)"
    if verified "${signed_ref}"; then
        pass "cosign verify ${signed_ref}: the signed digest still verifies"
    else
        cat "${work}/verify.err"
        fail "cosign verify ${signed_ref} after the tag moved"
    fi
else
    cat "${work}/tamper.log"
    fail "could not push a tampered image with buildah"
fi

printf '\nrelease: %d passed, %d failed\n' "${passed}" "${failed}"
[[ "${failed}" -eq 0 ]]
