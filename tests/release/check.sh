#!/usr/bin/env bash
# The release path, against a registry of our own on loopback: push the
# images of `make images` (target/oci/*.tar) and the chart with
# scripts/release.sh, then read them back as a cluster and an operator
# would: the image indexes by tag (every platform of the archive), the
# chart with `helm pull oci://...` and rendered with `helm template`; each
# image resolves for linux/amd64 and linux/arm64.
#
#   tests/release/check.sh        needs target/oci/kube-prestop-{webhook,sidecar}.tar
#
# The registry is CNCF Distribution (github.com/distribution/distribution/v3,
# from the Go module proxy, cached like the chart tools), listening on
# 127.0.0.1 only, storage in a temporary folder, stopped by its PID at exit.
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
    archive="${repo}/target/oci/kube-prestop-${name}.tar"
    # What the archive holds (its index's one manifest or image index) must
    # be what the tag resolves to, digest for digest.
    want="$(python3 - "${archive}" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    name = next(n for n in t.getnames() if n.lstrip("./") == "index.json")
    print(json.load(t.extractfile(name))["manifests"][0]["digest"])
PY
)"
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

printf '\nrelease: %d passed, %d failed\n' "${passed}" "${failed}"
[[ "${failed}" -eq 0 ]]
