#!/usr/bin/env bash
# Whether the shipped Cargo profile earns its build time (issue 27): for each
# candidate profile, a cold build of the two static binaries for this
# machine's architecture (x86_64-unknown-linux-musl, as images/build.sh
# builds them, in a private empty target directory), the binaries' sizes,
# and the webhook's cost per admission review under saturation (the same
# oha load and review body as `make bench`'s webhook part: CPU time per
# review and reviews per second, the candidates alternating, BENCH_REPEAT
# rounds). Not part of the tests; one table on stdout and in
# bench/out/profiles.md.
#
#   bench/profiles.sh                      the candidates below
#   BENCH_PROFILES="fat:1 thin:16" bench/profiles.sh
#
# A candidate is LTO:CODEGEN_UNITS (LTO: fat | thin | off), applied to
# Cargo's release profile through CARGO_PROFILE_RELEASE_LTO and
# CARGO_PROFILE_RELEASE_CODEGEN_UNITS (Cargo reference, "Profiles":
# environment variables override Cargo.toml); the rest of the profile
# (opt-level 3, strip) stays. fat:1 is what Cargo.toml ships.
# Knobs: BENCH_PROFILES ("fat:1 thin:16 fat:16"), BENCH_DURATION (s per
# load run, 10), BENCH_CONNECTIONS (32), BENCH_REPEAT (3),
# BENCH_PROFILES_DIR (work directory, /var/tmp/kube-prestop-profiles; the
# target directories stay there for a second look, and are removed first).
# Needs: musl-tools, jq, python3 with yaml, oha (installed as make bench does).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
cache="${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}"
candidates="${BENCH_PROFILES:-fat:1 thin:16 fat:16}"
dur="${BENCH_DURATION:-10}"
conns="${BENCH_CONNECTIONS:-32}"
repeat="${BENCH_REPEAT:-3}"
dir="${BENCH_PROFILES_DIR:-/var/tmp/kube-prestop-profiles}"
triple=x86_64-unknown-linux-musl
log() { printf '[profiles] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$(uname -m)" == x86_64 ]] || die "builds and runs the x86_64 binaries: run it on an amd64 machine"
command -v musl-gcc >/dev/null || die "musl-gcc is required (Debian: musl-tools)"
oha="${cache}/tools/cargo/bin/oha"
if [[ ! -x "${oha}" ]]; then
    log "installing oha (cargo install --locked) into ${cache}/tools/cargo"
    cargo install oha --locked --root "${cache}/tools/cargo" >&2
fi

rm -rf "${dir}"
mkdir -p "${dir}"
pids=()
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; true; }
trap cleanup EXIT

declare -A build_s webhook_kib sidecar_kib addr pid ticks reqs
for c in ${candidates}; do
    lto="${c%%:*}" cgu="${c#*:}"
    case "${lto}" in fat | thin | off) ;; *) die "${c}: LTO is fat, thin or off" ;; esac
    [[ "${cgu}" =~ ^[0-9]+$ ]] || die "${c}: codegen units is a number"
    [[ "${lto}" == fat ]] && lto=true
    [[ "${lto}" == off ]] && lto=false
    log "cold build ${c} (lto=${lto}, codegen-units=${cgu})"
    t0="$(date +%s)"
    CARGO_TARGET_DIR="${dir}/${c/:/-}" CARGO_PROFILE_RELEASE_LTO="${lto}" \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${cgu}" CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --quiet --locked --release --target "${triple}" \
        -p kube-prestop-webhook -p kube-prestop-sidecar >&2
    build_s[${c}]=$(($(date +%s) - t0))
    out="${dir}/${c/:/-}/${triple}/release"
    webhook_kib[${c}]=$(($(stat -c %s "${out}/kube-prestop-webhook") / 1024))
    sidecar_kib[${c}]=$(($(stat -c %s "${out}/kube-prestop-sidecar") / 1024))
done

certs/gen.sh -o "${dir}/certs" >/dev/null 2>&1
body="${dir}/review.json"
python3 bench/report.py review "${repo}/engine/tests/golden/simple-job/input.yaml" "${body}"
for c in ${candidates}; do
    name="${c/:/-}"
    "${dir}/${name}/${triple}/release/kube-prestop-webhook" serve --no-cluster \
        --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
        --tls-cert-file "${dir}/certs/tls.crt" --tls-key-file "${dir}/certs/tls.key" \
        >"${dir}/${name}.out" 2>/dev/null &
    pid[${c}]=$!
    pids+=("$!")
    for _ in $(seq 1 500); do
        grep -q '^listening' "${dir}/${name}.out" 2>/dev/null && break
        sleep 0.02
    done
    addr[${c}]="$(sed -n 's/^listening https=\([^ ]*\).*/\1/p' "${dir}/${name}.out")"
    [[ -n "${addr[${c}]}" ]] || die "${c}: the webhook did not start"
    ticks[${c}]=0
    reqs[${c}]=0
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
log "saturation: ${repeat} rounds of ${dur} s per candidate, ${conns} connections, alternating"
for _ in $(seq 1 "${repeat}"); do
    for c in ${candidates}; do
        t0="$(cpu_ticks "${pid[${c}]}")"
        "${oha}" --no-tui --output-format json --insecure -z "${dur}s" -c "${conns}" \
            -m POST -T application/json -D "${body}" "https://${addr[${c}]}/mutate" >"${dir}/oha.json"
        t1="$(cpu_ticks "${pid[${c}]}")"
        ticks[${c}]=$((ticks[${c}] + t1 - t0))
        reqs[${c}]=$((reqs[${c}] + $(jq '[.statusCodeDistribution[]] | add' "${dir}/oha.json")))
    done
done

hz="$(getconf CLK_TCK)"
mkdir -p bench/out
{
    echo "| profile (lto:codegen-units) | cold build, both binaries, ${triple} | webhook | sidecar | reviews/s (saturated, ${conns} conn.) | webhook CPU per review |"
    echo "|---|---|---|---|---|---|"
    for c in ${candidates}; do
        rps=$((reqs[${c}] / (repeat * dur)))
        us="$(awk -v t="${ticks[${c}]}" -v hz="${hz}" -v r="${reqs[${c}]}" 'BEGIN { printf "%.1f", t * 1e6 / hz / r }')"
        echo "| ${c} | ${build_s[${c}]} s | ${webhook_kib[${c}]} KiB | ${sidecar_kib[${c}]} KiB | ${rps} | ${us} µs |"
    done
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load at end $(cut -d' ' -f1-3 /proc/loadavg); rustc $(rustc --version | cut -d' ' -f2)"
} | tee bench/out/profiles.md
