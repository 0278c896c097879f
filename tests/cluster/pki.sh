# shellcheck shell=bash
# The cluster's own PKI, made with openssl: one CA, serving certificates for the
# apiserver and the kubelet, a client certificate per component, the service
# account signing key, and kubeconfigs. Test-only material, kept in $STATE/pki and
# removed with the cluster. Sourced by up.sh (needs lib.sh).

PKI="$STATE/pki"

_new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

make_ca() {
  [[ -f "$PKI/ca.crt" ]] && return 0
  mkdir -p "$PKI"
  _new_key "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=kube-prestop-test-ca" \
    -days 30 -out "$PKI/ca.crt" 2>/dev/null
}

# make_cert NAME SUBJECT EXT_USAGE [SANS]: a leaf certificate signed by the CA.
make_cert() {
  local name="$1" subj="$2" usage="$3" sans="${4:-}" ext
  [[ -f "$PKI/$name.crt" ]] && return 0
  _new_key "$PKI/$name.key"
  ext="$PKI/$name.ext"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$sans" ]] && echo "subjectAltName=$sans"
  } >"$ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 30 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

# make_kubeconfig NAME SERVER CERT: a kubeconfig using client certificate CERT.
make_kubeconfig() {
  local file="$1" server="$2" cert="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kube-prestop
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: kube-prestop
  context: {cluster: kube-prestop, user: $cert}
current-context: kube-prestop
EOF
  chmod 600 "$file"
}

# make_admission_config: the apiserver's --admission-control-config-file,
# whose webhook plugins present apiserver-webhook-client to every
# in-cluster webhook Service (`*.svc`, the kubeconfig's user name matching
# the webhook's host).
make_admission_config() {
  cat >"$PKI/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: '*.svc'
  user:
    client-certificate: $PKI/apiserver-webhook-client.crt
    client-key: $PKI/apiserver-webhook-client.key
EOF
  chmod 600 "$PKI/webhook-client.kubeconfig"
  cat >"$PKI/admission.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $PKI/webhook-client.kubeconfig
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $PKI/webhook-client.kubeconfig
EOF
}

make_pki() {
  make_ca
  local api_sans="IP:$NODE_IP,IP:$SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes"
  api_sans+=",DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  make_cert apiserver "/CN=kube-apiserver" serverAuth "$api_sans"
  make_cert kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
  # The apiserver's identity towards the kubelet (logs, exec): authorised by the
  # kubelet's webhook authorizer through RBAC, so give it system:masters.
  make_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  make_cert admin "/O=system:masters/CN=kube-prestop-admin" clientAuth
  make_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  make_cert scheduler "/CN=system:kube-scheduler" clientAuth
  make_cert kube-proxy "/CN=system:kube-proxy" clientAuth
  make_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  # The apiserver's client certificate towards admission webhooks (its
  # AdmissionConfiguration's kubeConfigFile): a webhook installed with
  # webhook.clientCA = this CA accepts reviews only from the apiserver.
  make_cert apiserver-webhook-client "/CN=kube-apiserver-webhook-client" clientAuth
  make_admission_config
  if [[ ! -f "$PKI/sa.key" ]]; then
    _new_key "$PKI/sa.key"
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  local in_ns="https://$NODE_IP:6443" c
  for c in controller-manager scheduler kube-proxy kubelet admin; do
    make_kubeconfig "$PKI/$c.kubeconfig" "$in_ns" "$c"
  done
  # Clients on the host reach the apiserver through the loopback forwarder.
  make_kubeconfig "$KUBECONFIG_HOST" "https://127.0.0.1:$HOST_API_PORT" admin
}
