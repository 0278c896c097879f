#!/usr/bin/env bash
# Installs the chart test tools when missing, cached outside the repository:
#   helm         from the Go module proxy (helm.sh/helm/v3), built by the
#                cluster harness's tests/cluster/tools.sh (one recipe: the
#                release ldflags, so that without --kube-version helm assumes
#                the Kubernetes version of its client-go, as official builds do)
#   kubeconform  from the Go module proxy (github.com/yannh/kubeconform)
#   Kubernetes JSON schemas for kubeconform, generated from the OpenAPI
#   document inside the k8s.io/kubernetes module (no schema download site is
#   reachable from here) by our tests/chart/openapi2jsonschema.py: kubeconform's
#   own script converts CRDs only, not the API server's swagger.json.
#   Prometheus Operator CRD schemas (ServiceMonitor, PrometheusRule) for
#   kubeconform, made by kubeconform's own scripts/openapi2jsonschema.py
#   (needs python3-yaml) from the CRDs in the
#   github.com/prometheus-operator/prometheus-operator module
#   (example/prometheus-operator-crd).
#   promtool     from the Go module proxy (github.com/prometheus/prometheus,
#                built with -tags remove_all_sd: no service-discovery plugins,
#                which promtool's rule checks do not use)
#
# Source it and call `chart_tools_install`; it sets HELM, KUBECONFORM,
# K8S_SCHEMA_ROOT (one directory per Kubernetes version under it),
# CRD_SCHEMA_DIR and PROMTOOL. Or run it directly: it installs and prints
# the paths.
#
# Cache: ${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}/tools/
set -euo pipefail

KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.7.0}"
# Prometheus 3.16.0 (the module's versions are v0.<major*100+minor>.<patch>).
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
# Kubernetes releases whose OpenAPI documents the schemas are made from: the
# oldest supported minor (1.29) and the one the test cluster runs.
K8S_SCHEMA_VERSIONS="${K8S_SCHEMA_VERSIONS:-v1.29.6 v1.34.4}"

CHART_TOOLS_CACHE="${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}/tools"

# Helm values for the images images/build.sh builds and the local
# cluster's scripts import (the chart defaults to the published names,
# ghcr.io/kube-prestop/kube-prestop-{webhook,sidecar}).
# shellcheck disable=SC2034  # used by the scripts that source this file
LOCAL_IMAGE_VALUES=(
    --set image.repository=localhost/kube-prestop/webhook
    --set installImage.repository=localhost/kube-prestop/sidecar
)
CHART_TOOLS_SELF_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

chart_tools_log() { printf '[chart-tools] %s\n' "$*" >&2; }

# go_install_cached MODULE_PATH@VERSION BIN_NAME DEST_DIR [BUILD_TAGS]
go_install_cached() {
    local pkg="$1" bin="$2" dest="$3" tags="${4:-}"
    if [[ -x "${dest}/${bin}" ]]; then
        return 0
    fi
    command -v go >/dev/null || { chart_tools_log "go is required to build ${bin}"; return 1; }
    chart_tools_log "building ${pkg} (once; cached in ${dest})"
    mkdir -p "${dest}"
    local tmp
    tmp="$(mktemp -d "${dest}/.build.XXXXXX")"
    # Build outside any module so the repository's files play no part.
    (cd "${tmp}" && GOBIN="${tmp}" GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install -trimpath -tags="${tags}" -ldflags='-s -w' "${pkg}")
    mv "${tmp}/${bin}" "${dest}/${bin}"
    rm -rf "${tmp}"
}

# Generates kubeconform's layout (<dir>/<kind>-<group>-<version>.json, and the
# "-standalone-strict" variant) from the Kubernetes OpenAPI v2 document.
k8s_schemas_install() {
    local dest="$1" k8s_version="$2"
    if [[ -f "${dest}/.complete" ]]; then
        return 0
    fi
    command -v go >/dev/null || { chart_tools_log "go is required to fetch k8s.io/kubernetes"; return 1; }
    chart_tools_log "generating Kubernetes ${k8s_version} JSON schemas (once; cached in ${dest})"
    local modjson dir scratch
    # Outside any module: only the module cache is involved.
    scratch="$(mktemp -d)"
    modjson="$(cd "${scratch}" && GOFLAGS='' go mod download -json "k8s.io/kubernetes@${k8s_version}")"
    rmdir "${scratch}"
    dir="$(printf '%s' "${modjson}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    local swagger="${dir}/api/openapi-spec/swagger.json"
    [[ -f "${swagger}" ]] || { chart_tools_log "no ${swagger}"; return 1; }
    rm -rf "${dest}.tmp"
    mkdir -p "${dest}.tmp"
    python3 "${CHART_TOOLS_SELF_DIR}/openapi2jsonschema.py" "${swagger}" "${dest}.tmp"
    rm -rf "${dest}"
    mv "${dest}.tmp" "${dest}"
    touch "${dest}/.complete"
}

# go_module_dir MODULE@VERSION -> the module's directory in the module cache
# (downloaded once).
go_module_dir() {
    local scratch modjson
    command -v go >/dev/null || { chart_tools_log "go is required to fetch $1"; return 1; }
    # Outside any module: only the module cache is involved.
    scratch="$(mktemp -d)"
    modjson="$(cd "${scratch}" && GOFLAGS='' go mod download -json "$1")"
    rmdir "${scratch}"
    printf '%s' "${modjson}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

# JSON schemas of the Prometheus Operator kinds the chart renders, in
# kubeconform's "<kind>-<group>-<version>.json" layout, from the operator's
# CRDs by kubeconform's openapi2jsonschema.py (nested objects get
# additionalProperties: false, as -strict expects).
crd_schemas_install() {
    local dest="$1"
    if [[ -f "${dest}/.complete" ]]; then
        return 0
    fi
    python3 -c 'import yaml' 2>/dev/null || { chart_tools_log "python3-yaml is required (.ci/install-deps.sh)"; return 1; }
    chart_tools_log "generating Prometheus Operator ${PROMETHEUS_OPERATOR_VERSION} CRD schemas (once; cached in ${dest})"
    local operator kubeconform crd
    operator="$(go_module_dir "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}")"
    kubeconform="$(go_module_dir "github.com/yannh/kubeconform@${KUBECONFORM_VERSION}")"
    rm -rf "${dest}.tmp"
    mkdir -p "${dest}.tmp"
    for crd in servicemonitors prometheusrules; do
        (cd "${dest}.tmp" && FILENAME_FORMAT='{kind}-{fullgroup}-{version}' \
            python3 "${kubeconform}/scripts/openapi2jsonschema.py" \
            "${operator}/example/prometheus-operator-crd/monitoring.coreos.com_${crd}.yaml" >/dev/null)
    done
    rm -rf "${dest}"
    mv "${dest}.tmp" "${dest}"
    touch "${dest}/.complete"
}

chart_tools_install() {
    local bindir="${CHART_TOOLS_CACHE}/bin"
    # The cluster harness's helm: its version pin (HELM_VERSION in
    # tests/cluster/versions.sh) and its one cached build.
    HELM="$(bash "${CHART_TOOLS_SELF_DIR}/../cluster/tools.sh" helm)"
    go_install_cached "github.com/yannh/kubeconform/cmd/kubeconform@${KUBECONFORM_VERSION}" kubeconform \
        "${bindir}/kubeconform-${KUBECONFORM_VERSION}"
    local version
    for version in ${K8S_SCHEMA_VERSIONS}; do
        k8s_schemas_install "${CHART_TOOLS_CACHE}/k8s-schemas/${version}" "${version}"
    done
    go_install_cached "github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_VERSION}" promtool \
        "${bindir}/promtool-${PROMTOOL_VERSION}" remove_all_sd
    CRD_SCHEMA_DIR="${CHART_TOOLS_CACHE}/crd-schemas/prometheus-operator-${PROMETHEUS_OPERATOR_VERSION}"
    crd_schemas_install "${CRD_SCHEMA_DIR}"
    KUBECONFORM="${bindir}/kubeconform-${KUBECONFORM_VERSION}/kubeconform"
    K8S_SCHEMA_ROOT="${CHART_TOOLS_CACHE}/k8s-schemas"
    PROMTOOL="${bindir}/promtool-${PROMTOOL_VERSION}/promtool"
    export HELM KUBECONFORM K8S_SCHEMA_ROOT CRD_SCHEMA_DIR PROMTOOL
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    chart_tools_install
    printf 'HELM=%s\nKUBECONFORM=%s\nK8S_SCHEMA_ROOT=%s\nCRD_SCHEMA_DIR=%s\nPROMTOOL=%s\n' \
        "${HELM}" "${KUBECONFORM}" "${K8S_SCHEMA_ROOT}" "${CRD_SCHEMA_DIR}" "${PROMTOOL}"
fi
