#!/usr/bin/env bash
# The chart on a real cluster, self-managed certificates (the default):
#   helm install into a fresh namespace that enforces Pod Security
#   "restricted" -> rollout succeeds (probes on the HTTPS health endpoints
#   pass, so the webhook made its certificate with only the chart's RBAC)
#   -> the Secret holds the CA and certificate, caBundle of the webhook
#   configuration equals the Secret's bundle -> an overwritten caBundle is
#   repaired -> helm upgrade keeps the same certificate -> with
#   sidecarBinary.createAhead and source configMap a namespace gets its sidecar-binary ConfigMap
#   as soon as it is labelled, before any pod -> `kube-prestop-webhook
#   check --run-job` there is all PASS (replicas reached by the API server,
#   the presented certificates trusted by the caBundle, a dry-run pod
#   injected with the binary from that ConfigMap, a test Job's preStop run),
#   and FAIL with exit status 1 for a webhook configuration that does not
#   exist and for a test Job in a namespace the webhook does not select ->
#   helm uninstall leaves no Secret, webhook configuration, ClusterRole or
#   binding behind; with webhook.clientCA (the CA of the local API server's
#   admission client certificate) a test Job is still injected and a review
#   without a client certificate is refused and counted. Refuses to start while another release of the chart is
#   installed (`tests/install-product.sh --uninstall` removes the local one):
#   its webhook would be called first and inject the check's namespaces.
#
#   KUBECONFIG=... tests/chart/install-check.sh
#
# Needs the images localhost/kube-prestop/{webhook,sidecar}:<appVersion> in
# the cluster's containerd (images/build.sh, then ctr images import; the
# chart is given these names by LOCAL_IMAGE_VALUES of tools.sh), and
# kubectl on PATH or in $KUBECTL. Uses release and namespace
# kube-prestop-chart-check (override with CHECK_NAMESPACE).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
chart="${here}/../../charts/kube-prestop"
# shellcheck source=tests/chart/tools.sh
source "${here}/tools.sh"
chart_tools_install
kubectl="${KUBECTL:-kubectl}"
ns="${CHECK_NAMESPACE:-kube-prestop-chart-check}"
release="${ns}"
name="${release}"
[[ "${release}" == *kube-prestop* ]] || name="${release}-kube-prestop"

passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'ok    %s\n' "$1"; }
fail() { failed=$((failed + 1)); printf 'FAIL  %s\n' "$1"; }
k() { "${kubectl}" "$@"; }

cleanup() {
    "${HELM}" uninstall "${release}" -n "${ns}" --wait >/dev/null 2>&1 || true
    k delete mutatingwebhookconfiguration "${name%?}" --ignore-not-found >/dev/null 2>&1 || true
    k delete namespace "${ns}" "${ns}-ahead" "${ns}-mtls" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Another release of the chart (e.g. tests/install-product.sh's) would
# select this check's namespaces too, and the API server calls mutating
# webhook configurations in name order: kube-prestop's runs before
# kube-prestop-chart-check's and injects first, so this release would never
# be the one tested. Refuse, naming it.
others="$(k get mutatingwebhookconfigurations -o json | python3 -c '
import json, sys
own = sys.argv[1]
for c in json.load(sys.stdin)["items"]:
    if c["metadata"]["name"] != own and any(w["name"] == "inject.kube-prestop.io" for w in c.get("webhooks") or []):
        print(c["metadata"]["name"])
' "${name}")"
if [[ -n "${others}" ]]; then
    printf 'FAIL  another kube-prestop release is installed (MutatingWebhookConfiguration %s): its webhook would inject this check'"'"'s namespaces first; uninstall it first (tests/install-product.sh --uninstall for the local one)\n' "${others//$'\n'/, }"
    exit 1
fi

# kube-prestop-webhook check against this release: all PASS with a test Job
# in labelled namespace $1, whose pods get the sidecar binary from $2 (as the
# check words it); FAIL for a configuration
# that does not exist and for a Job in a namespace not selected.
check_command() {
    local labelled="$1" delivery="$2" bin out rc
    cargo build -q -p kube-prestop-webhook --manifest-path "${here}/../../Cargo.toml" || { fail "cargo build (check)"; return; }
    bin="${here}/../../target/debug/kube-prestop-webhook"
    rc=0
    # The local cluster pulls nothing: the test Job runs the harness's busybox.
    out="$("${bin}" check --webhook-config "${name}" --run-job "${labelled}" --timeout 150s \
        --image "${KUBE_PRESTOP_E2E_IMAGE:-busybox:1.36}" 2>/dev/null)" || rc=$?
    printf '%s\n' "${out}" | sed 's/^/      /'
    if [[ "${rc}" == 0 ]] && grep -q '^RESULT: PASS' <<<"${out}" && ! grep -q '^FAIL' <<<"${out}"; then
        pass "check --run-job ${labelled}: RESULT: PASS, exit 0"
    else
        fail "check --run-job ${labelled}: exit ${rc}"
    fi
    for want in "the API server reaches" "that the caBundle trusts" \
        "namespace ${labelled}: a dry-run test pod comes back injected; sidecar binary from ${delivery}" \
        "test Job ${labelled}/"; do
        if grep -q "^PASS .*${want}" <<<"${out}"; then pass "check: PASS ... ${want}"; else fail "check: no PASS line with '${want}'"; fi
    done
    if [[ -z "$(k get jobs -n "${labelled}" -l kube-prestop.io/check=true -o name)" ]]; then
        pass "check: the test Job is deleted"
    else
        fail "check: test Job left in ${labelled}"
    fi
    rc=0
    out="$("${bin}" check --webhook-config "${name}-absent" 2>/dev/null)" || rc=$?
    if [[ "${rc}" == 1 ]] && grep -q "^FAIL  no MutatingWebhookConfiguration ${name}-absent" <<<"${out}"; then
        pass "check: a missing webhook configuration is FAIL, exit 1"
    else
        fail "check --webhook-config ${name}-absent: exit ${rc}: ${out}"
    fi
    rc=0
    out="$("${bin}" check --webhook-config "${name}" --run-job "${ns}" 2>/dev/null)" || rc=$?
    if [[ "${rc}" == 1 ]] && grep -q "^FAIL  --run-job ${ns}: the webhook configuration does not select that namespace" <<<"${out}"; then
        pass "check: --run-job in a namespace the webhook does not select is FAIL, exit 1"
    else
        fail "check --run-job ${ns}: exit ${rc}"
    fi
    # A second release's configuration that the API server calls first (its
    # name sorts before ours) and that selects the namespace: it injects
    # there, so the check says so and fails. A copy of ours, renamed to our
    # name less its last character (a prefix sorts first).
    local rival="${name%?}"
    k get mutatingwebhookconfiguration "${name}" -o json | python3 -c '
import json, sys
c = json.load(sys.stdin)
c["metadata"] = {"name": sys.argv[1]}
print(json.dumps(c))
' "${rival}" | k create -f - >/dev/null
    rc=0
    out="$("${bin}" check --webhook-config "${name}" --run-job "${labelled}" 2>/dev/null)" || rc=$?
    k delete mutatingwebhookconfiguration "${rival}" --ignore-not-found >/dev/null
    if [[ "${rc}" == 1 ]] &&
        grep -q "^FAIL  namespace ${labelled}: MutatingWebhookConfiguration ${rival} (another kube-prestop release) selects it too and the API server calls it first" <<<"${out}" &&
        grep -q "^FAIL  --run-job ${labelled}: not run: pods there are injected by MutatingWebhookConfiguration ${rival}" <<<"${out}"; then
        pass "check: a second release called first is FAIL for the namespace and the test Job, exit 1"
    else
        fail "check with a second release ${rival}: exit ${rc}: ${out}"
    fi
    # A test image the node cannot pull (a registry on the node's own
    # loopback, where nothing listens): FAIL naming it, long before the timeout.
    local absent="localhost/kube-prestop/absent:1"
    rc=0
    out="$("${bin}" check --webhook-config "${name}" --run-job "${labelled}" --timeout 150s --image "${absent}" 2>/dev/null)" || rc=$?
    if [[ "${rc}" == 1 ]] &&
        grep -Eq "^FAIL  test Job ${labelled}/[^:]+: pod [^ ]+ cannot start: container [^ ]+ \(image ${absent}\): (ErrImagePull|ImagePullBackOff): " <<<"${out}"; then
        pass "check: a test image that cannot be pulled is FAIL naming the container, image and reason, exit 1"
    else
        fail "check --image ${absent}: exit ${rc}: ${out}"
    fi
    if [[ -z "$(k get jobs -n "${labelled}" -l kube-prestop.io/check=true -o name)" ]]; then
        pass "check: the test Job of the failed pull is deleted"
    else
        fail "check: test Job of the failed pull left in ${labelled}"
    fi
}

k create namespace "${ns}" >/dev/null
k label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null

if "${HELM}" install "${release}" "${chart}" -n "${ns}" "${LOCAL_IMAGE_VALUES[@]}" --wait --timeout 180s >/dev/null; then
    pass "helm install --wait (rollout under Pod Security restricted)"
else
    k -n "${ns}" get pods,events 2>&1 | tail -20
    k -n "${ns}" logs -l app.kubernetes.io/instance="${release}" --tail=30 2>&1 | tail -30
    fail "helm install --wait"
fi

secret_key() { k -n "${ns}" get secret "${name}-tls" -o "jsonpath={.data.$1}"; }
bundle="$(secret_key 'ca-bundle\.crt')"
crt="$(secret_key 'tls\.crt')"
if [[ -n "${bundle}" && -n "${crt}" ]]; then
    pass "Secret ${name}-tls holds the CA bundle and serving certificate"
else
    fail "Secret ${name}-tls is empty"
fi
live="$(k get mutatingwebhookconfiguration "${name}" -o 'jsonpath={.webhooks[*].clientConfig.caBundle}')"
if [[ -n "${bundle}" && "${live}" == "${bundle}" ]]; then
    pass "caBundle equals the Secret's bundle"
else
    fail "caBundle differs from the Secret's bundle"
fi

# Overwrite caBundle; the webhook repairs it within its check interval.
k patch mutatingwebhookconfiguration "${name}" --type=json \
    -p '[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"Zm9v"}]' >/dev/null
repaired=""
for _ in $(seq 1 45); do
    sleep 2
    live="$(k get mutatingwebhookconfiguration "${name}" -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')"
    if [[ "${live}" == "${bundle}" ]]; then
        repaired=yes
        break
    fi
done
if [[ -n "${repaired}" ]]; then pass "overwritten caBundle repaired"; else fail "caBundle not repaired in 90 s"; fi

if "${HELM}" upgrade "${release}" "${chart}" -n "${ns}" "${LOCAL_IMAGE_VALUES[@]}" --wait --timeout 180s --set server.logLevel=debug >/dev/null &&
    [[ "$(secret_key 'tls\.crt')" == "${crt}" ]] &&
    [[ "$(k get mutatingwebhookconfiguration "${name}" -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')" == "${bundle}" ]]; then
    pass "helm upgrade keeps the certificate and caBundle"
else
    fail "helm upgrade changed the certificate or caBundle"
fi

# createAhead: a labelled namespace gets the ConfigMap without any pod, and
# with source configMap the check's pods mount it (the default, auto, gives
# the image volume on this cluster: the e2e suite covers that).
ahead="${ns}-ahead"
if "${HELM}" upgrade "${release}" "${chart}" -n "${ns}" "${LOCAL_IMAGE_VALUES[@]}" --wait --timeout 180s \
    --set sidecarBinary.source=configMap --set sidecarBinary.createAhead=true >/dev/null; then
    k create namespace "${ahead}" >/dev/null
    k label namespace "${ahead}" kube-prestop.io/inject=enabled >/dev/null
    made=""
    for _ in $(seq 1 120); do
        made="$(k get configmap -n "${ahead}" -o name \
            -l app.kubernetes.io/managed-by=kube-prestop,app.kubernetes.io/component=sidecar-binary)"
        [[ -n "${made}" ]] && break
        sleep 0.5
    done
    if [[ -n "${made}" ]]; then
        pass "createAhead: a labelled namespace gets ${made#configmap/} before any pod"
    else
        fail "createAhead: no sidecar-binary ConfigMap in a labelled namespace within 60 s"
    fi
    check_command "${ahead}" "ConfigMap ${made#configmap/}"
    k delete namespace "${ahead}" --wait=false >/dev/null
else
    fail "helm upgrade --set sidecarBinary.source=configMap --set sidecarBinary.createAhead=true"
fi

# webhook.clientCA: the local API server presents the client certificate of
# its AdmissionConfiguration (tests/cluster/pki.sh). With its CA set, the
# check's dry-run pod is still injected and its test Job run (the API server
# passed the webhook's check), while a review posted through the API
# server's pod proxy, which presents no client certificate, is refused with
# 401 and counted as unauthenticated.
if [[ -z "${KUBE_PRESTOP_WEBHOOK_CLIENT_CA:-}" || ! -f "${KUBE_PRESTOP_WEBHOOK_CLIENT_CA}" ]]; then
    fail "webhook.clientCA: KUBE_PRESTOP_WEBHOOK_CLIENT_CA names no file (source the cluster's env.sh)"
elif "${HELM}" upgrade "${release}" "${chart}" -n "${ns}" "${LOCAL_IMAGE_VALUES[@]}" --wait --timeout 180s \
    --set-file webhook.clientCA="${KUBE_PRESTOP_WEBHOOK_CLIENT_CA}" >/dev/null; then
    mtls="${ns}-mtls"
    k create namespace "${mtls}" >/dev/null
    k label namespace "${mtls}" kube-prestop.io/inject=enabled >/dev/null
    image="$(k get deployment "${name}" -n "${ns}" -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
args = d["spec"]["template"]["spec"]["containers"][0]["args"]
print(next(a.split("=", 1)[1] for a in args if a.startswith("--install-image=")))
')"
    check_command "${mtls}" "the image volume ${image}"
    pod="$(k get pods -n "${ns}" -l kube-prestop.io/component=webhook -o jsonpath='{.items[0].metadata.name}')"
    review='{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"no-client-cert","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"namespace":"'"${mtls}"'","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"x"}]}}}}'
    rc=0
    out="$(printf '%s' "${review}" | k create --raw "/api/v1/namespaces/${ns}/pods/https:${pod}:8443/proxy/mutate" -f - 2>&1)" || rc=$?
    # kubectl words a 401 as "You must be logged in to the server (the
    # server has asked for the client to provide credentials)".
    if [[ "${rc}" != 0 ]] && grep -Eqi "unauthorized|provide credentials" <<<"${out}"; then
        pass "webhook.clientCA: a review without a client certificate is refused (401)"
    else
        fail "webhook.clientCA: a review without a client certificate got exit ${rc}: ${out}"
    fi
    metrics="$(k get --raw "/api/v1/namespaces/${ns}/pods/http:${pod}:9090/proxy/metrics" 2>&1 || true)"
    if grep -Eq '^kube_prestop_admissions_total\{decision="invalid",reason="unauthenticated"\} [1-9]' <<<"${metrics}"; then
        pass "webhook.clientCA: the refusal is counted (reason unauthenticated)"
    else
        fail "webhook.clientCA: no unauthenticated refusal counted: $(grep unauthenticated <<<"${metrics}")"
    fi
    k delete namespace "${mtls}" --wait=false >/dev/null
else
    fail "helm upgrade --set-file webhook.clientCA=${KUBE_PRESTOP_WEBHOOK_CLIENT_CA}"
fi

if "${HELM}" uninstall "${release}" -n "${ns}" --wait >/dev/null; then
    left="$(k get secret "${name}-tls" -n "${ns}" --ignore-not-found -o name
        k get mutatingwebhookconfiguration "${name}" --ignore-not-found -o name
        k get clusterrole,clusterrolebinding "${name}" --ignore-not-found -o name)"
    if [[ -z "${left}" ]]; then pass "helm uninstall leaves nothing behind"; else fail "left behind: ${left}"; fi
else
    fail "helm uninstall"
fi

printf '\nchart install: %d passed, %d failed\n' "${passed}" "${failed}"
[[ "${failed}" -eq 0 ]]
