#!/usr/bin/env bash
# Development certificates for the webhook: a CA and a serving certificate
# signed by it, made with openssl (ECDSA P-256). For running the webhook
# outside a cluster and for tests; never for production (the chart's
# certificate modes handle that).
#
#   certs/gen.sh                                  localhost, 127.0.0.1, ::1
#   certs/gen.sh kube-prestop.kube-prestop.svc  for an in-cluster Service name
#   certs/gen.sh -o DIR -d DAYS NAME...           other folder / lifetime
#
# Writes into certs/out/ (git-ignored): ca.crt, ca.key, tls.crt, tls.key and
# ca-bundle.b64 (base64 of ca.crt, as a webhook configuration's caBundle
# wants it). An existing CA in the folder is reused, so certificates made
# one after another chain to the same CA; delete the folder to start over.
set -euo pipefail

out="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/out"
days=30
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts 'o:d:h' opt; do
    case "${opt}" in
        o) out="${OPTARG}" ;;
        d) days="${OPTARG}" ;;
        h) usage 0 ;;
        *) usage 2 ;;
    esac
done
shift $((OPTIND - 1))
names=("$@")
((${#names[@]})) || names=(localhost 127.0.0.1 ::1)
[[ "${days}" =~ ^[0-9]+$ ]] || { echo "days must be a number" >&2; exit 2; }
command -v openssl >/dev/null || { echo "openssl is required (apt-get install openssl)" >&2; exit 1; }

mkdir -p "${out}"
chmod 0700 "${out}"
umask 077

if [[ ! -s "${out}/ca.crt" || ! -s "${out}/ca.key" ]]; then
    openssl req -x509 -new -newkey EC -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "${out}/ca.key" -out "${out}/ca.crt" -days $((days * 4)) \
        -subj "/O=kube-prestop development/CN=kube-prestop development CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    echo "new CA: ${out}/ca.crt" >&2
fi

san=()
for name in "${names[@]}"; do
    if [[ "${name}" =~ ^[0-9.]+$ || "${name}" == *:* ]]; then
        san+=("IP:${name}")
    else
        san+=("DNS:${name}")
    fi
done
san_list="$(IFS=,; echo "${san[*]}")"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
openssl req -new -newkey EC -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "${tmp}/tls.key" -out "${tmp}/tls.csr" \
    -subj "/O=kube-prestop development/CN=${names[0]}" 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    "${san_list}" >"${tmp}/ext.cnf"
openssl x509 -req -in "${tmp}/tls.csr" -CA "${out}/ca.crt" -CAkey "${out}/ca.key" \
    -CAcreateserial -CAserial "${tmp}/ca.srl" -days "${days}" -sha256 \
    -extfile "${tmp}/ext.cnf" -out "${tmp}/tls.crt" 2>/dev/null
openssl verify -CAfile "${out}/ca.crt" "${tmp}/tls.crt" >/dev/null
# Replace the pair together.
mv "${tmp}/tls.key" "${out}/tls.key"
mv "${tmp}/tls.crt" "${out}/tls.crt"
chmod 0644 "${out}/ca.crt" "${out}/tls.crt"
base64 -w0 "${out}/ca.crt" >"${out}/ca-bundle.b64"
echo "serving certificate for ${san_list}, ${days} days: ${out}/tls.crt ${out}/tls.key" >&2
