#!/usr/bin/env bash
# Checks that the OCI archives of images/build.sh import into containerd
# (as the test cluster imports them: a plain `ctr images import`, which
# takes the image index and the host platform's content) under the expected
# names, and that the host platform's static binary starts in its scratch
# root file system as user 65532. Run by images/test.sh.
#
#   images/check-import.sh [ARCHIVE...]   (default: target/oci/*.tar)
#
# Runs a private containerd (own root, state and socket in a temporary
# folder, CRI plugin off), stops it by PID and removes everything afterwards.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archives=("$@")
if ((${#archives[@]} == 0)); then
    archives=("${OCI_OUT_DIR:-${repo}/target/oci}"/*.tar)
fi
for a in "${archives[@]}"; do
    [[ -f "${a}" ]] || { echo "no archive ${a}; run make images first" >&2; exit 1; }
done
command -v containerd >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd >/dev/null
}

work="$(mktemp -d /var/tmp/kube-prestop-containerd.XXXXXX)"
pid=""
cleanup() {
    if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
        kill "${pid}"
        wait "${pid}" 2>/dev/null || true
    fi
    # Snapshots may still be mounted if a run was interrupted.
    grep -F " ${work}/" /proc/self/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount 2>/dev/null || true
    rm -rf "${work}"
}
trap cleanup EXIT
# containerd 1.6 keeps shim sockets and runc state under /run/containerd
# whatever its config says; remove that folder afterwards if we made it.
[[ -e /run/containerd ]] || trap 'cleanup; rm -rf /run/containerd' EXIT

sock="${work}/containerd.sock"
cat >"${work}/config.toml" <<TOML
version = 2
root = "${work}/root"
state = "${work}/state"
# No CRI, and no /opt/containerd (the opt plugin) on the host.
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]
[grpc]
  address = "${sock}"
[ttrpc]
  address = "${sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
TOML
containerd --config "${work}/config.toml" >"${work}/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
    [[ -S "${sock}" ]] && ctr --address "${sock}" version >/dev/null 2>&1 && break
    sleep 0.2
done
ctr --address "${sock}" version >/dev/null || { cat "${work}/containerd.log" >&2; exit 1; }

passed=0
failed=0
for archive in "${archives[@]}"; do
    ref="$(tar -xOf "${archive}" ./index.json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])')"
    # `grep -x >/dev/null`, not `grep -q`: ctr prints one line per image, and
    # grep -q exits at the first match, so a later line met a closed pipe
    # (SIGPIPE, exit 141, a failure under pipefail) whenever the wanted name
    # sorted before another image's (one CI run).
    if err="$(ctr --address "${sock}" -n k8s.io images import "${archive}" 2>&1 >/dev/null)" &&
        ctr --address "${sock}" -n k8s.io images ls -q | grep -x "${ref}" >/dev/null; then
        echo "ok    import ${archive##*/} as ${ref}"
        passed=$((passed + 1))
    else
        echo "FAIL  import ${archive##*/} as ${ref}: ${err:-imported, but not listed under that name}; images: $(ctr --address "${sock}" -n k8s.io images ls -q | tr '\n' ' ')"
        failed=$((failed + 1))
        continue
    fi
    # The harness's way, --base-name REPOSITORY, names it the same.
    if err="$(ctr --address "${sock}" -n k8s.io images rm "${ref}" 2>&1 >/dev/null &&
        ctr --address "${sock}" -n k8s.io images import --base-name "${ref%:*}" "${archive}" 2>&1 >/dev/null)" &&
        ctr --address "${sock}" -n k8s.io images ls -q | grep -x "${ref}" >/dev/null; then
        echo "ok    import --base-name ${ref%:*} names it ${ref}"
        passed=$((passed + 1))
    else
        echo "FAIL  import --base-name ${ref%:*}: ${err:-imported, but not listed as ${ref}}"
        failed=$((failed + 1))
    fi
    # The entrypoint runs (static binary, no libc in the image) as 65532.
    binary="/$(basename "${archive}" .tar)"
    if command -v runc >/dev/null &&
        out="$(timeout 60 ctr --address "${sock}" -n k8s.io run --rm "${ref}" "check-$$-${RANDOM}" \
            "${binary}" --help 2>&1)"; then
        echo "ok    ${binary} --help runs in the image ($(printf '%s' "${out}" | head -n1))"
        passed=$((passed + 1))
    else
        echo "FAIL  ${binary} --help in the image: ${out:-runc missing}"
        failed=$((failed + 1))
    fi
done
echo "images: ${passed} passed, ${failed} failed"
[[ "${failed}" -eq 0 ]]
