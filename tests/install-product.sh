#!/usr/bin/env bash
# Installs kube-prestop on the running local cluster (make cluster-up):
# builds the two images without Docker (images/build.sh: multi-platform
# image indexes, linux/amd64 + linux/arm64), imports them into the node's
# containerd (ctr takes the index and the node's platform's content), and
# installs the chart with Helm into namespace kube-prestop (release
# kube-prestop), waiting for the rollout. The harness's install also runs the
# hook-outcome exporter (outcomes.enabled=true, off in the chart's defaults),
# which the e2e suite checks (tests/e2e/tests/outcomes.rs), and injects Argo
# Workflows' pods besides Jobs' (webhook.workloadKinds job,argo-workflows;
# tests/e2e/tests/argo.rs runs Workflows, tests/argo/install.sh installs
# Argo); IMAGE_PLATFORMS
# goes to images/build.sh (make demo: the node's platform only).
#
#   tests/install-product.sh            build, import, helm upgrade --install
#   SKIP_IMAGE_BUILD=1 tests/install-product.sh   reuse target/oci/*.tar
#   tests/install-product.sh --uninstall          helm uninstall --wait, delete
#                                                 the namespace (the chart install
#                                                 check needs no other release)
#
# Idempotent: a second run upgrades the release in place; the pods are
# restarted when the image content changed (the chart's podAnnotations get
# the archives' digest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/cluster/images.sh
source "${repo}/tests/cluster/images.sh"
# shellcheck source=tests/chart/tools.sh
source "${repo}/tests/chart/tools.sh" # LOCAL_IMAGE_VALUES

release="${KUBE_PRESTOP_RELEASE:-kube-prestop}"
namespace="${KUBE_PRESTOP_NAMESPACE:-kube-prestop}"
log() { printf '[install] %s\n' "$*" >&2; }

# Its KUBECONFIG, and ctr of the running cluster's runtime, whatever RUNTIME the caller has.
join_running_cluster "[install]"
# Only helm (the harness's cached build): the chart checks' other tools
# (kubeconform, its schemas, promtool) are not needed to install, and
# promtool is a build of minutes on a fresh machine (make demo).
HELM="$(bash "${repo}/tests/cluster/tools.sh" helm)"

if [[ "${1:-}" == --uninstall ]]; then
  log "helm uninstall ${release} in namespace ${namespace}"
  "${HELM}" uninstall "${release}" --namespace "${namespace}" --wait --ignore-not-found >&2
  kubectl delete namespace "${namespace}" --ignore-not-found --wait --timeout 120s >&2
  exit 0
fi

if [[ -z "${SKIP_IMAGE_BUILD:-}" ]]; then
  log "building images (images/build.sh)"
  "${repo}/images/build.sh" >&2
fi
digest=""
for image in webhook sidecar; do
  archive="${repo}/target/oci/kube-prestop-${image}.tar"
  log "importing ${archive}"
  import_oci_archive "${archive}"
  digest+="$(sha256sum "${archive}" | cut -c1-12)"
done

log "helm upgrade --install ${release} in namespace ${namespace}"
"${HELM}" upgrade --install "${release}" "${repo}/charts/kube-prestop" \
  --namespace "${namespace}" --create-namespace \
  "${LOCAL_IMAGE_VALUES[@]}" \
  --set-string "podAnnotations.kube-prestop\.io/images=${digest}" \
  --set outcomes.enabled=true \
  --set 'webhook.workloadKinds={job,argo-workflows}' \
  --wait --timeout 240s "$@" >&2
log "ready: $(kubectl -n "${namespace}" get deploy "${release}" -o jsonpath='{.status.readyReplicas}') webhook replicas"
