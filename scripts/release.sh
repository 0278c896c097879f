#!/usr/bin/env bash
# The release steps after `make images` (used by .github/workflows/release.yml,
# runnable by hand against any OCI registry):
#
#   scripts/release.sh version
#       prints the workspace version (Cargo.toml [workspace.package]), the
#       one every release artifact carries.
#   scripts/release.sh verify TAG
#       TAG (e.g. v0.2.0) is v<workspace version> (Cargo.toml), the chart's
#       version and appVersion, and has a CHANGELOG.md section.
#   scripts/release.sh push-images REGISTRY
#       copies target/oci/kube-prestop-{webhook,sidecar}.tar (every platform
#       of each image index, digests unchanged) to
#       REGISTRY/kube-prestop-{webhook,sidecar}:<version> with skopeo.
#   scripts/release.sh push-chart OCI_REPOSITORY
#       helm package charts/kube-prestop, then helm push to
#       oci://OCI_REPOSITORY (the chart is then
#       oci://OCI_REPOSITORY/kube-prestop, version <version>); the pushed
#       chart's manifest digest (helm push's "Digest:") goes to
#       target/oci/kube-prestop-chart.digest for `sign`.
#   scripts/release.sh digest NAME [ARCH]
#       prints the digest of the image index in
#       target/oci/kube-prestop-NAME.tar (NAME: webhook | sidecar), the digest
#       push-images keeps in the registry and `sign` signs; with ARCH (amd64 |
#       arm64), the digest of its linux/ARCH image manifest.
#   scripts/release.sh sign REGISTRY OCI_REPOSITORY
#       cosign: signs each image by the digest of its archive's image index
#       and of each platform's manifest in it (REGISTRY/kube-prestop-NAME@sha256:...,
#       never a tag: what was built, whatever a tag points to now), attaches
#       to each platform's manifest its SBOM
#       (target/oci/kube-prestop-NAME.linux-ARCH.cdx.json, images/build.sh) as
#       a signed CycloneDX attestation (`cosign attest --type cyclonedx`: an
#       in-toto statement whose subject is that digest, stored next to the
#       image as cosign's sha256-<hex>.att), and signs the chart by the
#       digest push-chart recorded. Keyless (Sigstore: an OIDC identity, the
#       workflow's, a Fulcio certificate, the Rekor transparency log) unless
#       COSIGN_KEY names a key pair's private key (COSIGN_PASSWORD its
#       password); RELEASE_NO_TLOG=1 uploads nothing to Rekor (offline, the
#       release test). cosign: COSIGN, else scripts/supply-chain-tools.sh's.
#
# REGISTRY is where the chart's default image names point
# (ghcr.io/kube-prestop for the published release). Log in first
# (`skopeo login`, `helm registry login`). RELEASE_PLAIN_HTTP=1 talks plain
# HTTP to the registry (a test registry on loopback; cosign then
# --allow-http-registry). helm is the one of the
# test harness (tests/cluster/tools.sh) unless HELM is set.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="${repo}/charts/kube-prestop"
oci_dir="${OCI_OUT_DIR:-${repo}/target/oci}"

log() { printf '[release] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

workspace_version() {
    awk '
        /^\[/ { section = $0 }
        section == "[workspace.package]" && $1 == "version" {
            gsub(/[" ]/, "", $3); print $3; exit
        }' "${repo}/Cargo.toml"
}

chart_field() {
    awk -v key="$1:" '$1 == key { gsub(/"/, "", $2); print $2; exit }' "${chart}/Chart.yaml"
}

helm_bin() {
    if [[ -n "${HELM:-}" ]]; then
        printf '%s' "${HELM}"
    else
        bash "${repo}/tests/cluster/tools.sh" helm
    fi
}

verify() {
    local tag="$1" version
    version="$(workspace_version)"
    [[ "${tag}" == "v${version}" ]] || die "tag ${tag} is not v${version} (Cargo.toml [workspace.package] version)"
    [[ "$(chart_field version)" == "${version}" ]] || die "Chart.yaml version $(chart_field version) is not ${version}"
    [[ "$(chart_field appVersion)" == "${version}" ]] || die "Chart.yaml appVersion $(chart_field appVersion) is not ${version}"
    grep -q -E "^## \[${version//./\\.}\]" "${repo}/CHANGELOG.md" || die "CHANGELOG.md has no '## [${version}]' section"
    log "tag ${tag}: Cargo.toml, Chart.yaml and CHANGELOG.md agree on ${version}"
}

push_images() {
    local registry="${1%/}" version name archive
    version="$(workspace_version)"
    command -v skopeo >/dev/null || die "skopeo is required (apt-get install skopeo)"
    local tls=()
    [[ "${RELEASE_PLAIN_HTTP:-}" == 1 ]] && tls=(--dest-tls-verify=false)
    for name in webhook sidecar; do
        archive="${oci_dir}/kube-prestop-${name}.tar"
        [[ -f "${archive}" ]] || die "no ${archive}: run make images first"
        log "pushing ${archive} -> ${registry}/kube-prestop-${name}:${version}"
        # --all: the whole image index (every platform), not only the host's.
        skopeo copy --all --preserve-digests "${tls[@]}" \
            "oci-archive:${archive}" "docker://${registry}/kube-prestop-${name}:${version}"
    done
}

push_chart() {
    local repository="${1%/}" helm tmp
    repository="${repository#oci://}"
    helm="$(helm_bin)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "${tmp}"' RETURN
    "${helm}" package "${chart}" --destination "${tmp}" >&2
    local flags=()
    [[ "${RELEASE_PLAIN_HTTP:-}" == 1 ]] && flags=(--plain-http)
    log "pushing the chart to oci://${repository}"
    "${helm}" push "${tmp}"/kube-prestop-*.tgz "oci://${repository}" "${flags[@]}" >"${tmp}/push.log" 2>&1 ||
        { cat "${tmp}/push.log" >&2; die "helm push failed"; }
    cat "${tmp}/push.log" >&2
    local digest
    digest="$(sed -n 's/^Digest: \(sha256:[0-9a-f]\{64\}\)$/\1/p' "${tmp}/push.log")"
    [[ -n "${digest}" ]] || die "helm push printed no 'Digest: sha256:...'"
    mkdir -p "${oci_dir}"
    printf '%s\n' "${digest}" >"${oci_dir}/kube-prestop-chart.digest"
    log "chart oci://${repository}/kube-prestop@${digest}"
}

# archive_digest ARCHIVE [ARCH] -> the digest of the one image index an
# archive of images/build.sh holds (its index.json), which push-images keeps
# in the registry (--preserve-digests); with ARCH (amd64 | arm64), the digest
# of that index's linux/ARCH image manifest.
archive_digest() {
    python3 - "$@" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    names = {n.removeprefix("./"): n for n in t.getnames()}
    digest = json.load(t.extractfile(names["index.json"]))["manifests"][0]["digest"]
    if len(sys.argv) > 2:
        index = json.load(t.extractfile(names["blobs/" + digest.replace(":", "/")]))
        digest = next(m["digest"] for m in index["manifests"]
                      if m["platform"] == {"architecture": sys.argv[2], "os": "linux"})
    print(digest)
PY
}

sign() {
    local registry="${1%/}" repository="${2%/}" cosign name archive sbom digest ref
    repository="${repository#oci://}"
    cosign="$(bash "${repo}/scripts/supply-chain-tools.sh" cosign)"
    # --yes: no prompt (keyless signing asks to confirm the upload of the
    # identity to the public log).
    local flags=(--yes)
    if [[ -n "${COSIGN_KEY:-}" ]]; then
        flags+=(--key "${COSIGN_KEY}")
    fi
    [[ "${RELEASE_NO_TLOG:-}" == 1 ]] && flags+=(--tlog-upload=false)
    [[ "${RELEASE_PLAIN_HTTP:-}" == 1 ]] && flags+=(--allow-http-registry --allow-insecure-registry)
    local arch
    for name in webhook sidecar; do
        archive="${oci_dir}/kube-prestop-${name}.tar"
        [[ -f "${archive}" ]] || die "no ${archive}: run make images first"
        digest="$(archive_digest "${archive}")"
        ref="${registry}/kube-prestop-${name}@${digest}"
        # --recursive: the index and each platform's manifest, the digest
        # a node of that platform pulls.
        log "cosign sign --recursive ${ref}"
        "${cosign}" sign "${flags[@]}" --recursive "${ref}" >&2
        for arch in amd64 arm64; do
            sbom="${oci_dir}/kube-prestop-${name}.linux-${arch}.cdx.json"
            [[ -f "${sbom}" ]] || die "no ${sbom}: run make images first"
            ref="${registry}/kube-prestop-${name}@$(archive_digest "${archive}" "${arch}")"
            log "cosign attest --type cyclonedx --predicate ${sbom##*/} ${ref} (linux/${arch})"
            "${cosign}" attest "${flags[@]}" --type cyclonedx --predicate "${sbom}" "${ref}" >&2
        done
    done
    [[ -f "${oci_dir}/kube-prestop-chart.digest" ]] || die "no ${oci_dir}/kube-prestop-chart.digest: run push-chart first"
    digest="$(cat "${oci_dir}/kube-prestop-chart.digest")"
    ref="${repository}/kube-prestop@${digest}"
    log "cosign sign ${ref}"
    "${cosign}" sign "${flags[@]}" "${ref}" >&2
}

case "${1:-}" in
    version) [[ $# -eq 1 ]] || die "usage: $0 version"; workspace_version ;;
    verify) [[ $# -eq 2 ]] || die "usage: $0 verify TAG"; verify "$2" ;;
    push-images) [[ $# -eq 2 ]] || die "usage: $0 push-images REGISTRY"; push_images "$2" ;;
    push-chart) [[ $# -eq 2 ]] || die "usage: $0 push-chart OCI_REPOSITORY"; push_chart "$2" ;;
    digest) [[ $# -eq 2 || $# -eq 3 ]] || die "usage: $0 digest webhook|sidecar [amd64|arm64]"; archive_digest "${oci_dir}/kube-prestop-$2.tar" "${@:3}" ;;
    sign) [[ $# -eq 3 ]] || die "usage: $0 sign REGISTRY OCI_REPOSITORY"; sign "$2" "$3" ;;
    *) die "usage: $0 version | verify TAG | push-images REGISTRY | push-chart OCI_REPOSITORY | digest NAME | sign REGISTRY OCI_REPOSITORY" ;;
esac
