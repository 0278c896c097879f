#!/usr/bin/env bash
# `make demo`: the whole product on a real single-node Kubernetes.
#   1. cluster up (tests/cluster/up.sh; builds and caches what is missing)
#   2. build and import the images, helm install the chart (tests/install-product.sh);
#      only for the node's architecture (IMAGE_PLATFORMS=linux/<arch>, half
#      the cargo time of `make images`, which builds amd64 and arm64), with
#      the shipped Cargo profile (images/profile.sh)
#   3. label a namespace kube-prestop.io/inject=enabled
#   4. run examples/job-with-prestop.yaml there: its container exits by
#      itself, so without kube-prestop its preStop would never run
#   5. print the job's logs and the sidecar's logs, which show the preStop
#      command's output, and end with a one-line verdict
# The cluster stays up afterwards (make cluster-down stops it).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ns="prestop-demo"
job="prestop-demo"
container="work"
sidecar="kube-prestop-${container}"
expected="cleanup from preStop"
step() { printf '\n==> %s\n' "$*"; }

step "cluster up"
"${repo}/tests/cluster/up.sh"
# shellcheck source=/dev/null
source /var/lib/kube-prestop/cluster/env.sh

# The one node's architecture: the demo's images are built for it alone (a
# one-platform index whose /architectures/ holds only this binary); a release
# image (make images) holds amd64 and arm64.
node_arch="$(kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.architecture}')"
step "install kube-prestop (images for linux/${node_arch} + helm chart)"
IMAGE_PLATFORMS="${IMAGE_PLATFORMS:-linux/${node_arch}}" "${repo}/tests/install-product.sh"

# The example names a public busybox image; this cluster has no registry, so
# the harness's busybox image is tagged with that name.
example_image="$(awk '/image:/ {print $2; exit}' "${repo}/examples/job-with-prestop.yaml")"
ctr --address "${CONTAINERD_SOCK:-/var/lib/kube-prestop/cluster/containerd/containerd.sock}" -n k8s.io \
  images tag --force localhost/kube-prestop/busybox:test "docker.io/library/${example_image}" >/dev/null

step "namespace ${ns} with kube-prestop.io/inject=enabled"
kubectl delete namespace "${ns}" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "${ns}" >/dev/null
kubectl label namespace "${ns}" kube-prestop.io/inject=enabled >/dev/null
kubectl get namespace "${ns}" --show-labels

step "kubectl apply -f examples/job-with-prestop.yaml"
kubectl -n "${ns}" apply -f "${repo}/examples/job-with-prestop.yaml"
kubectl -n "${ns}" wait --for=condition=Complete "job/${job}" --timeout=180s
pod="$(kubectl -n "${ns}" get pods -l "job-name=${job}" -o jsonpath='{.items[0].metadata.name}')"
kubectl -n "${ns}" get pod "${pod}" \
  -o custom-columns='POD:.metadata.name,PHASE:.status.phase,INIT:.spec.initContainers[*].name,CONTAINERS:.spec.containers[*].name'

step "kubectl logs ${pod}   (the job's own output)"
kubectl -n "${ns}" logs "${pod}"

step "kubectl logs ${pod} -c ${sidecar}   (the preStop hook, run by kube-prestop)"
# The sidecar logs the hook's exit status after the hook's own output; wait for it.
deadline=$((SECONDS + 60))
until logs="$(kubectl -n "${ns}" logs "${pod}" -c "${sidecar}" 2>/dev/null)" &&
  grep -q "hook finished\|hook exited\|exit status" <<<"${logs}"; do
  ((SECONDS < deadline)) || break
  sleep 1
done
printf '%s\n' "${logs}"

echo
echo "make demo took $((SECONDS / 60)) min $((SECONDS % 60)) s"
runs="$(grep -cx "${expected}" <<<"${logs}" || true)"
if [[ "${runs}" == 1 ]]; then
  echo "VERDICT: PASS - the Job's container exited on its own and its preStop ran once (\"${expected}\" once in the sidecar's logs)"
else
  echo "VERDICT: FAIL - \"${expected}\" appears ${runs} times in the logs of ${pod} -c ${sidecar} (expected once)"
  kubectl -n "${ns}" get events --sort-by=.lastTimestamp | tail -20
  exit 1
fi
