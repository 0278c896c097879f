#!/usr/bin/env bash
# Argo Workflows on the running local cluster (make cluster-up), the batch
# system the e2e suite runs kube-prestop under (tests/e2e/tests/argo.rs):
#
#   tests/argo/install.sh              build (cached), import, install, wait
#   tests/argo/install.sh --uninstall  remove everything install created
#
# What it does, from Argo's own sources only (the Go module proxy's
# github.com/argoproj/argo-workflows/v4 at ARGO_WORKFLOWS_VERSION):
#   1. builds workflow-controller and argoexec as Argo's Makefile does
#      (CGO off, static, its -X version flags; in a copy of the module
#      with the one symbolic link module zips drop put back) into
#      $KUBE_PRESTOP_CACHE/argo-workflows-<version>/bin, once;
#   2. builds their two images with buildah as Argo's Dockerfile lays them out
#      (the binary in /bin, its ENTRYPOINT; the controller as user 8737) on an
#      empty base instead of distroless/static (no registry here), and imports
#      them into the node's containerd as localhost/kube-prestop/argo-*;
#   3. renders the module's own manifests with kubectl's kustomize: the
#      minimal CRDs, the workflow controller and its RBAC from
#      manifests/cluster-install-no-crds, in namespace argo, with the local
#      images (imagePullPolicy Never; the executor image by the controller's
#      --executor-image and --executor-image-pull-policy flags); argo-server
#      (UI and API) is left out;
#   4. waits for the controller's rollout.
# Workflows run in any namespace; each needs the emissary executor's Role
# (manifests/quick-start/base/executor/emissary), which the e2e test creates.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tests/cluster/images.sh
source "${repo}/tests/cluster/images.sh"

namespace=argo
module="github.com/argoproj/argo-workflows/v4"
controller_image="localhost/kube-prestop/argo-workflow-controller:${ARGO_WORKFLOWS_VERSION}"
executor_image="localhost/kube-prestop/argoexec:${ARGO_WORKFLOWS_VERSION}"
log() { printf '[argo] %s\n' "$*" >&2; }

join_running_cluster "[argo]"

# The cluster-scoped objects install creates (the namespace holds the rest).
cluster_objects=(
  priorityclass/workflow-controller
  clusterrole/argo-aggregate-to-admin clusterrole/argo-aggregate-to-edit
  clusterrole/argo-aggregate-to-view clusterrole/argo-cluster-role
  clusterrolebinding/argo-binding
)

if [[ "${1:-}" == --uninstall ]]; then
  log "deleting namespace ${namespace}, Argo's cluster roles and CRDs"
  kubectl delete namespace "${namespace}" --ignore-not-found --wait --timeout 120s >&2
  kubectl delete "${cluster_objects[@]}" --ignore-not-found >&2
  kubectl get crd -o name | grep '\.argoproj\.io$' | xargs -r kubectl delete --wait --timeout 120s >&2
  exit 0
fi
[[ $# -eq 0 ]] || { log "usage: $0 [--uninstall]"; exit 2; }

# The module's source tree (manifests, nsswitch.conf), from the module cache.
src="$(cd /tmp && GOFLAGS='' go mod download -json "${module}@${ARGO_WORKFLOWS_VERSION}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
[[ -d "${src}/manifests" ]] || { log "no manifests in ${src}"; exit 1; }

work="$(mktemp -d /var/tmp/kube-prestop-argo.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

# 1. The binaries (cached by version), built in a copy of the module: Argo's
#    workflow/executor/osspecific/signal_linux.go is a symbolic link to
#    signal_darwin.go in its repository, and module zips leave symbolic links
#    out (golang.org/x/mod/zip), so `go install ...@version` fails with
#    "undefined: Setpgid" (argoproj/argo-workflows#9590 shows the link). The
#    link is put back before building.
bin="${ARGO_WORKFLOWS_DIR}/bin"
if [[ ! -x "${bin}/workflow-controller" || ! -x "${bin}/argoexec" ]]; then
  log "building workflow-controller and argoexec ${ARGO_WORKFLOWS_VERSION} into ${bin} (once; about 10 min on 2 cores)"
  start=${SECONDS}
  cp -r "${src}" "${work}/argo-src"
  chmod -R u+w "${work}/argo-src"
  osspecific="${work}/argo-src/workflow/executor/osspecific"
  [[ -e "${osspecific}/signal_linux.go" ]] || ln -s signal_darwin.go "${osspecific}/signal_linux.go"
  mkdir -p "${bin}.tmp"
  # Argo's Makefile: CGO_ENABLED=0, static, and these -X flags.
  ldflags="-s -w -X ${module}.version=${ARGO_WORKFLOWS_VERSION} -X ${module}.gitTag=${ARGO_WORKFLOWS_VERSION}"
  ldflags+=" -X ${module}.gitTreeState=clean -X ${module}.buildDate=1970-01-01T00:00:00Z"
  for cmd in workflow-controller argoexec; do
    (cd "${work}/argo-src" && CGO_ENABLED=0 GOFLAGS='' go build -trimpath -ldflags="${ldflags}" \
      -o "${bin}.tmp/${cmd}" "./cmd/${cmd}") >&2
  done
  rm -rf "${bin}" "${work}/argo-src"
  mv "${bin}.tmp" "${bin}"
  log "built in $((SECONDS - start)) s"
fi

# 2. The images, laid out as Argo's Dockerfile does (targets
#    workflow-controller and argoexec).
for image in controller executor; do
  ctx="${work}/${image}"
  mkdir -p "${ctx}/etc"
  cp "${src}/hack/nsswitch.conf" "${ctx}/etc/nsswitch.conf"
  case "${image}" in
    controller)
      cp "${bin}/workflow-controller" "${ctx}/"
      cat >"${ctx}/Containerfile" <<'EOF'
FROM scratch
COPY etc/nsswitch.conf /etc/nsswitch.conf
COPY --chown=8737 workflow-controller /bin/workflow-controller
ENV PATH=/bin
USER 8737
ENTRYPOINT ["workflow-controller"]
EOF
      buildah_import "${ctx}" "${controller_image}"
      ;;
    executor)
      cp "${bin}/argoexec" "${ctx}/"
      cat >"${ctx}/Containerfile" <<'EOF'
FROM scratch
COPY etc/nsswitch.conf /etc/nsswitch.conf
COPY argoexec /bin/argoexec
ENV PATH=/bin
ENTRYPOINT ["argoexec"]
EOF
      buildah_import "${ctx}" "${executor_image}"
      ;;
  esac
done

# 3. The manifests: Argo's kustomizations, copied (kustomize loads nothing
#    outside its root), with the local images.
cp -r "${src}/manifests/base" "${src}/manifests/cluster-install-no-crds" "${work}/"
chmod -R u+w "${work}/base" "${work}/cluster-install-no-crds"
mkdir -p "${work}/install"
cat >"${work}/install/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ${namespace}
resources:
  - ../base/crds/minimal
  - ../base/workflow-controller
  - ../cluster-install-no-crds/workflow-controller-rbac
images:
  - name: quay.io/argoproj/workflow-controller
    newName: ${controller_image%:*}
    newTag: ${ARGO_WORKFLOWS_VERSION}
patches:
  - target: {kind: Deployment, name: workflow-controller}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: add
        path: /spec/template/spec/containers/0/args
        value: [--executor-image, ${executor_image}, --executor-image-pull-policy, Never]
      - op: add
        path: /spec/template/spec/containers/0/resources
        value: {requests: {cpu: 50m, memory: 64Mi}}
EOF
kubectl create namespace "${namespace}" --dry-run=client -o yaml | kubectl apply -f - >&2
kubectl kustomize "${work}/install" >"${work}/argo.yaml"
log "applying Argo's CRDs, workflow controller and RBAC (namespace ${namespace})"
kubectl apply --server-side --force-conflicts -f "${work}/argo.yaml" >&2
kubectl wait --for condition=established --timeout 60s crd/workflows.argoproj.io >&2

# 4. Ready.
kubectl -n "${namespace}" rollout status deployment/workflow-controller --timeout 180s >&2
log "ready: workflow-controller ${ARGO_WORKFLOWS_VERSION}, executor ${executor_image}"
