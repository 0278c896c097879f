#!/usr/bin/env bash
# Proves the running test cluster with plain workloads (`make cluster-smoke`):
#  1. a busybox Job runs to Complete and its log is readable (apiserver -> kubelet);
#  2. a pod reaches the apiserver through the `kubernetes` Service (kube-proxy);
#  3. the apiserver reaches a pod behind a Service (as it must reach the webhook);
#  4. a running `sleep` pod is deleted and its preStop hook and SIGTERM run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$here/lib.sh"

NS=kpt-smoke
IMAGE=localhost/kube-prestop/busybox:test
k() { kubectl_admin -n "$NS" "$@"; }

step() {
  local name="$1" start=$SECONDS
  shift
  log "smoke: $name"
  "$@"
  log "smoke: $name: ok in $((SECONDS - start))s"
}

job_completes() {
  k apply -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: hello}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: $IMAGE
        imagePullPolicy: Never
        command: [sh, -c, 'echo hello from a Job on kube-prestop-test; id']
EOF
  k wait --for=condition=Complete job/hello --timeout=120s
  local logs
  logs="$(k logs job/hello)"
  echo "$logs" >&2
  grep -q 'hello from a Job' <<<"$logs"
}

pod_reaches_apiserver() {
  # busybox's own TLS cannot talk to the apiserver, but Go's TLS server answers a
  # plain HTTP request with a recognisable 400: proof enough that the Service
  # address leads to the apiserver.
  # shellcheck disable=SC2016  # expanded by the pod's shell
  k run api-probe --image="$IMAGE" --image-pull-policy=Never --restart=Never \
    --command -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT"'
  k wait --for=jsonpath='{.status.phase}'=Succeeded pod/api-probe --timeout=120s
  grep -q 'Client sent an HTTP request to an HTTPS server' <<<"$(k logs api-probe)"
}

apiserver_reaches_service() {
  k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  # httpd runs as PID 1 without a SIGTERM handler: it would wait out the grace.
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: $IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /www && echo served-by-pod >/www/index.html && exec httpd -f -p 8080 -h /www']
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
  k wait --for=condition=Ready pod/web --timeout=120s
  grep -q served-by-pod <<<"$(kubectl_admin get --raw "/api/v1/namespaces/$NS/services/http:web:80/proxy/")"
}

pod_deletion_runs_prestop() {
  k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'trap "echo got-sigterm; exit 0" TERM; while true; do sleep 1; done']
    lifecycle:
      preStop:
        exec: {command: [sh, -c, 'echo prestop-ran >/proc/1/fd/1']}
EOF
  k wait --for=condition=Ready pod/sleeper --timeout=120s
  # Follow the log while the pod goes away: the log is gone with the pod.
  local out
  out="$(mktemp)"
  k logs -f sleeper >"$out" 2>&1 &
  local follower=$!
  k delete pod sleeper --wait=true --timeout=60s
  wait "$follower" || true
  cat "$out" >&2
  grep -q prestop-ran "$out" && grep -q got-sigterm "$out"
  rm -f "$out"
}

main() {
  local start=$SECONDS
  # A namespace of an earlier run may still be terminating.
  kubectl_admin delete namespace "$NS" --ignore-not-found --wait=true --timeout=120s >/dev/null
  kubectl_admin create namespace "$NS" >/dev/null
  step "busybox Job completes" job_completes
  step "pod reaches the apiserver via the kubernetes Service" pod_reaches_apiserver
  step "apiserver reaches a pod via a Service" apiserver_reaches_service
  step "running pod deleted" pod_deletion_runs_prestop
  # The namespace controller finishes the deletion in the background.
  kubectl_admin delete namespace "$NS" --wait=false >/dev/null
  log "smoke: all passed in $((SECONDS - start))s"
}

use_running_platform
main "$@"
