#!/usr/bin/env bash
# `make bench`: what kube-prestop costs, as one table (printed and written to
# bench/out/results.md). Not part of the tests; nothing here asserts a time.
#
# Webhook: the release binary over TLS with HTTP/1.1 keep-alive, loaded by oha
# (crates.io; installed into $KUBE_PRESTOP_CACHE/tools/cargo) with an
# AdmissionReview built from the golden simple-job pod. References in the same
# run: the transport ceiling (bench/ceiling: the same tokio/rustls/hyper/axum
# stack answering a fixed response, the webhook's own answer, to the same
# body) and the compute floor (webhook/server/benches/admission.rs: review() alone).
# All three use the same global allocator (mimalloc, webhook/src/main.rs), so
# the ratio compares the same stack with and without the admission work. The
# saturation runs also load the image's static musl binary (BENCH_MUSL).
# Sidecar: the image's amd64 binary as images/build.sh builds it (the profile
# the images ship, images/profile.sh), its OCI image, and bench/sidecar.py (a
# pod stand-in made of namespaces, as in sidecar/tests/common; needs root).
# Cluster: kube-prestop-cluster-bench (bench/cluster) against the local cluster
# with the chart installed (pod start per sidecar-binary source, each phase
# with the release switched to that source by Helm and rolled back at the
# end, against plain pods and one-native-sidecar pods of the same phase, and
# where the time goes, from containerd's log on this machine; a burst of an
# Indexed Job: admission latency from the webhook's and the API server's
# histograms, pods injected, hooks run). When no cluster is reachable it
# brings one up (tests/cluster/up.sh), installs the product
# (tests/install-product.sh) and takes the cluster down at the end; a cluster
# that was already up is used as it is and left up.
# Init start (part init-start, not run unless named): kube-prestop-cluster-bench
# init-start on the same cluster: an init container's StartContainer (from
# containerd's log) per security context, busybox `true` plain, with the
# install container's restricted context, without its seccomp RuntimeDefault,
# seccomp alone, and the install container as injected with and without
# seccomp; one pod of each per round, one at a time; after the start and
# burst parts when those run too.
# Report: each part leaves its figures in a work directory (kept in
# bench/out/raw/); bench/report.py makes the table from them.
#
# Knobs (environment): BENCH_PARTS (comma-separated, any of webhook, sidecar,
# cluster, init-start; default webhook,sidecar,cluster), BENCH_DURATION (s per load run, 10),
# BENCH_CONNECTIONS (32), BENCH_REPEAT (saturation runs per server,
# alternating, 3), BENCH_IDLE (sidecar watch window, 60 s), BENCH_RUNS
# (exit->hook runs, 1000), BENCH_LATENCY_BUDGET (s; stop the runs early and
# say so, 300), BENCH_START_PODS (pods of each kind per source, 20),
# BENCH_START_SOURCES (comma-separated sidecarBinary.source values, one
# phase each; default imageVolume,configMap,installContainer; `current`:
# the release as installed, no Helm), BENCH_START_GATE (the injected pods'
# kube-prestop.io/gate, exec, http-get or none; default the webhook's: exec),
# BENCH_START_SECCOMP (RuntimeDefault: every pod of the start part sets that
# pod-level seccomp profile, as Pod Security restricted requires; default
# unset), BENCH_START_SIDECAR_CPU_LIMIT (the injected pods'
# kube-prestop.io/sidecar-cpu-limit; default the webhook's, 200m),
# BENCH_START_BUSY_PODS (pods spinning a CPU through the start part, 0) and
# BENCH_START_BUSY_CPU (each one's CPU request = limit, 400m),
# BENCH_BURST_COMPLETIONS (200), BENCH_BURST_PARALLELISM (20),
# BENCH_BURST_COMMAND (the burst's container command, sh; default an echo),
# BENCH_BURST_BUSY_PODS (pods spinning a CPU beside the burst, 0) and
# BENCH_BURST_BUSY_CPU (each one's CPU request = limit, 400m): a saturated node,
# BENCH_INIT_START_PODS (init-start: pods of each variant, 15),
# BENCH_FLOOD_BYTES (4194304), BENCH_FLOOD_CONNECTIONS (64), BENCH_FLOOD_RATE
# (ordinary reviews per second beside the flood, 50),
# BENCH_NICE (niceness of the whole run, 10), BENCH_MUSL (1: also load the
# static musl binary the images ship, built as images/build.sh does, in
# the saturation runs; 0: skip it; default 1).
set -euo pipefail

if [[ -z "${BENCH_NICED:-}" ]]; then
    exec env BENCH_NICED=1 nice -n "${BENCH_NICE:-10}" "$0" "$@"
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
cache="${KUBE_PRESTOP_CACHE:-/var/cache/kube-prestop}"
dur="${BENCH_DURATION:-10}"
conns="${BENCH_CONNECTIONS:-32}"
repeat="${BENCH_REPEAT:-3}"
idle="${BENCH_IDLE:-60}"
runs="${BENCH_RUNS:-1000}"
budget="${BENCH_LATENCY_BUDGET:-300}"
start_pods="${BENCH_START_PODS:-20}"
start_sources="${BENCH_START_SOURCES:-imageVolume,configMap,installContainer}"
start_gate="${BENCH_START_GATE:-}"
start_seccomp="${BENCH_START_SECCOMP:-}"
start_sidecar_cpu_limit="${BENCH_START_SIDECAR_CPU_LIMIT:-}"
case "${start_seccomp}" in
    '' | RuntimeDefault) ;;
    *) echo "bench: BENCH_START_SECCOMP=${start_seccomp}: only RuntimeDefault (or unset) is measured" >&2; exit 2 ;;
esac
start_busy_pods="${BENCH_START_BUSY_PODS:-0}"
start_busy_cpu="${BENCH_START_BUSY_CPU:-400m}"
burst_completions="${BENCH_BURST_COMPLETIONS:-200}"
burst_parallelism="${BENCH_BURST_PARALLELISM:-20}"
burst_command="${BENCH_BURST_COMMAND:-echo index \$JOB_COMPLETION_INDEX}"
burst_busy_pods="${BENCH_BURST_BUSY_PODS:-0}"
burst_busy_cpu="${BENCH_BURST_BUSY_CPU:-400m}"
init_start_pods="${BENCH_INIT_START_PODS:-15}"
# The flood (webhook part): body size (the server's default cap), connections,
# and the ordinary reviews' rate beside it.
flood_bytes="${BENCH_FLOOD_BYTES:-4194304}"
flood_conns="${BENCH_FLOOD_CONNECTIONS:-64}"
flood_rate="${BENCH_FLOOD_RATE:-50}"
parts=",${BENCH_PARTS:-webhook,sidecar,cluster},"
want() { [[ "${parts}" == *",$1,"* ]]; }
cluster_env="/var/lib/kube-prestop/cluster/env.sh"
brought_up=""
out_dir="${repo}/bench/out"
mkdir -p "${out_dir}"
work="$(mktemp -d /tmp/kps-bench.XXXXXX)"
pids=()
cleanup() {
    # Only our own children still running (jobs -p), never a reused pid.
    local running; running=" $(jobs -p | tr '\n' ' ') "
    for p in "${pids[@]}"; do
        if [[ "${running}" == *" ${p} "* ]]; then kill "${p}" 2>/dev/null || true; fi
    done
    wait 2>/dev/null || true
    # Keep the raw outputs (oha JSON, key=value files) next to the table.
    rm -rf "${out_dir}/raw"; mkdir -p "${out_dir}/raw"
    cp "${work}"/*.json "${work}"/*.txt "${out_dir}/raw/" 2>/dev/null || true
    rm -rf "${work}"
    if [[ -n "${brought_up}" ]]; then
        log "taking down the cluster this run brought up"
        "${repo}/tests/cluster/down.sh" >&2 || true
        "${repo}/tests/cluster/check-clean.sh" >&2 || true
    fi
}
trap cleanup EXIT

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (the sidecar part uses PID and mount namespaces, the cluster part the local cluster)"
for p in ${parts//,/ }; do
    [[ "${p}" == webhook || "${p}" == sidecar || "${p}" == cluster || "${p}" == init-start ]] \
        || die "BENCH_PARTS: unknown part ${p} (webhook, sidecar, cluster, init-start)"
done
for t in python3 jq curl openssl unshare nsenter; do
    command -v "${t}" >/dev/null || die "${t} is required"
done
python3 -c 'import yaml' 2>/dev/null || {
    log "installing python3-yaml"; apt-get install -y -qq python3-yaml >/dev/null
}

started="$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- tools and builds ---------------------------------------------------------
# The Cargo profile the images ship (images/build.sh): the static musl binaries
# measured here are built with it.
# shellcheck source=images/profile.sh
source "${repo}/images/profile.sh"
webhook_bin="${CARGO_TARGET_DIR:-${repo}/target}/release/kube-prestop-webhook"
# The ceiling is its own Cargo project: built into bench/target, or under
# CARGO_TARGET_DIR when that is set (a private target dir per worktree).
ceiling_target="${CARGO_TARGET_DIR:+${CARGO_TARGET_DIR}/bench-ceiling}"
ceiling_target="${ceiling_target:-${repo}/bench/target}"
ceiling_bin="${ceiling_target}/release/kube-prestop-bench-ceiling"
musl_bin="${CARGO_TARGET_DIR:-${repo}/target}/x86_64-unknown-linux-musl/${SHIPPED_CARGO_PROFILE_DIR}/kube-prestop-webhook"
musl="${BENCH_MUSL:-1}"
# The sidecar is measured as it ships: the amd64 binary images/build.sh puts
# into the image.
sidecar_bin="${repo}/target/images/linux/amd64/kube-prestop-sidecar"
sidecar_tar="${OCI_OUT_DIR:-${repo}/target/oci}/kube-prestop-sidecar.tar"
cluster_bench_bin="${CARGO_TARGET_DIR:-${repo}/target}/debug/kube-prestop-cluster-bench"
if want webhook; then
    oha="${cache}/tools/cargo/bin/oha"
    if [[ ! -x "${oha}" ]]; then
        if command -v oha >/dev/null; then
            oha="$(command -v oha)"
        else
            log "installing oha (cargo install --locked) into ${cache}/tools/cargo"
            cargo install oha --locked --root "${cache}/tools/cargo" >&2
        fi
    fi
    log "building the webhook (release), the transport ceiling, the compute floor"
    cargo build --release -p kube-prestop-webhook >&2
    (cd bench/ceiling && CARGO_TARGET_DIR="${ceiling_target}" cargo build --release >&2)
    cargo bench -p kube-prestop-server --bench admission --no-run >&2
    if [[ "${musl}" == 1 ]]; then
        log "building the static musl webhook (the amd64 image's binary, as images/build.sh builds it)"
        command -v musl-gcc >/dev/null || die "musl-gcc is required for BENCH_MUSL=1 (Debian: musl-tools)"
        CC_x86_64_unknown_linux_musl=musl-gcc \
            cargo build --locked --profile "${SHIPPED_CARGO_PROFILE}" --target x86_64-unknown-linux-musl -p kube-prestop-webhook >&2
    fi
    # Run copies: CARGO_TARGET_DIR may be shared with other worktrees, whose
    # builds rewrite target/release/kube-prestop-webhook (a path without a
    # hash) under a run that execs it again later (start-up).
    mkdir -p "${work}/bin"
    cp "${webhook_bin}" "${ceiling_bin}" "${work}/bin/"
    webhook_bin="${work}/bin/kube-prestop-webhook"
    ceiling_bin="${work}/bin/kube-prestop-bench-ceiling"
    if [[ "${musl}" == 1 ]]; then
        cp "${musl_bin}" "${work}/bin/kube-prestop-webhook-musl"
        musl_bin="${work}/bin/kube-prestop-webhook-musl"
    fi
fi
if want sidecar; then
    log "building the sidecar image and its binaries (images/build.sh, profile ${SHIPPED_CARGO_PROFILE})"
    images/build.sh sidecar >&2
    [[ -x "${sidecar_bin}" ]] || die "images/build.sh left no ${sidecar_bin}"
    printf 'bin=%s\ntar=%s\nprofile=%s\n' "${sidecar_bin}" "${sidecar_tar}" "${SHIPPED_CARGO_PROFILE}" \
        > "${work}/sidecar-paths.txt"
fi
if want cluster || want init-start; then
    log "building the cluster bench client (bench/cluster)"
    cargo build -p kube-prestop-cluster-bench >&2
fi

# --- webhook (and the sidecar's watch window next to its load) -------------------
if want sidecar; then
    # Sidecar watch window in the background (its figures are per-process
    # counters, unaffected by the load next to it).
    log "sidecar: watching a running container for ${idle} s (background)"
    python3 bench/sidecar.py --bin "${sidecar_bin}" --idle "${idle}" --runs 0 > "${work}/sidecar-idle.txt" &
    idle_pid=$!; pids+=("${idle_pid}")
fi

if want webhook; then
    # --- inputs ---------------------------------------------------------------------
    certs/gen.sh -o "${work}/certs" >/dev/null 2>&1
    body="${work}/review.json"
    python3 bench/report.py review "${repo}/engine/tests/golden/simple-job/input.yaml" "${body}"

    # start NAME CMD...: runs it in the background, sets ADDR (https) and PID.
    start() {
        local name="$1"; shift
        "$@" > "${work}/${name}.out" 2> "${work}/${name}.err" &
        PID=$!
        pids+=("${PID}")
        local i
        for i in $(seq 1 500); do
            if grep -q '^listening' "${work}/${name}.out" 2>/dev/null; then break; fi
            sleep 0.02
        done
        ADDR="$(sed -n 's/^listening https=\([^ ]*\).*/\1/p' "${work}/${name}.out")"
        [[ -n "${ADDR}" ]] || die "${name} did not start: $(cat "${work}/${name}.err")"
    }

    # Server processes: the webhook logs one line per request (its default text format) to stderr (a file here).
    start webhook "${webhook_bin}" serve --no-cluster --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
        --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key"
    wh_addr="${ADDR}"; wh_pid="${PID}"
    curl -sS --fail --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
        --data-binary "@${body}" "https://${wh_addr}/mutate" > "${work}/response.json"
    jq -e '.response.allowed == true and (.response.patch | length) > 0' "${work}/response.json" >/dev/null \
        || die "the webhook did not inject: $(head -c 400 "${work}/response.json")"
    start ceiling "${ceiling_bin}" "${work}/certs/tls.crt" "${work}/certs/tls.key" "${work}/response.json"
    ce_addr="${ADDR}"; ce_pid="${PID}"
    if [[ "${musl}" == 1 ]]; then
        start webhook-musl "${musl_bin}" serve --no-cluster --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
            --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key"
        mu_addr="${ADDR}"; mu_pid="${PID}"
    fi
    req_bytes="$(stat -c %s "${body}")"; resp_bytes="$(stat -c %s "${work}/response.json")"

    cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
    status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

    # oha NAME ADDR [extra args]: one load run, JSON into $work/NAME.json.
    run_oha() {
        local name="$1" addr="$2"; shift 2
        "${oha}" --no-tui --output-format json --insecure -z "${dur}s" -c "${conns}" \
            -m POST -T application/json -D "${body}" "$@" "https://${addr}/mutate" > "${work}/${name}.json"
    }
    # Peak VmRSS of PID while a command runs.
    peak_rss_during() {
        local pid="$1"; shift
        local f="${work}/peak.$$"
        echo 0 > "${f}"
        ( peak=0; while kill -0 "${pid}" 2>/dev/null; do
            r="$(status_kib "${pid}" VmRSS)"; (( r > peak )) && peak="${r}" && echo "${peak}" > "${f}"
            sleep 0.2; done ) &
        local sampler=$!
        "$@"
        kill "${sampler}" 2>/dev/null || true; wait "${sampler}" 2>/dev/null || true
        cat "${f}"
    }

    log "webhook vs ceiling: saturation, ${repeat}x ${dur} s each, ${conns} connections, alternating"
    wh_peak=0; ce_peak=0; wh_ticks=0; wh_reqs=0; mu_ticks=0; mu_reqs=0
    for i in $(seq 1 "${repeat}"); do
        t0="$(cpu_ticks "${wh_pid}")"
        p="$(peak_rss_during "${wh_pid}" run_oha "wh-sat-${i}" "${wh_addr}")"
        t1="$(cpu_ticks "${wh_pid}")"
        (( p > wh_peak )) && wh_peak="${p}"
        wh_ticks=$(( wh_ticks + t1 - t0 ))
        wh_reqs=$(( wh_reqs + $(jq '[.statusCodeDistribution[]] | add' "${work}/wh-sat-${i}.json") ))
        p="$(peak_rss_during "${ce_pid}" run_oha "ce-sat-${i}" "${ce_addr}")"
        (( p > ce_peak )) && ce_peak="${p}"
        if [[ "${musl}" == 1 ]]; then
            t0="$(cpu_ticks "${mu_pid}")"
            run_oha "mu-sat-${i}" "${mu_addr}"
            t1="$(cpu_ticks "${mu_pid}")"
            mu_ticks=$(( mu_ticks + t1 - t0 ))
            mu_reqs=$(( mu_reqs + $(jq '[.statusCodeDistribution[]] | add' "${work}/mu-sat-${i}.json") ))
        fi
    done
    if [[ "${musl}" == 1 ]]; then
        kill "${mu_pid}" 2>/dev/null || true
        printf '%s\n' "ticks=${mu_ticks}" "reqs=${mu_reqs}" > "${work}/webhook-musl.txt"
    fi
    for rate in 1000 5000; do
        log "fixed rate ${rate} req/s, ${dur} s each (latency correction on)"
        run_oha "wh-${rate}" "${wh_addr}" -q "${rate}" --latency-correction
        run_oha "ce-${rate}" "${ce_addr}" -q "${rate}" --latency-correction
    done
    wh_hwm="$(status_kib "${wh_pid}" VmHWM)"; ce_hwm="$(status_kib "${ce_pid}" VmHWM)"
    wh_rss_after="$(status_kib "${wh_pid}" VmRSS)"

    log "compute floor (cargo bench --bench admission)"
    KPS_BENCH_BODY="${body}" cargo bench -q -p kube-prestop-server --bench admission 2> "${work}/floor.err" > "${work}/floor.txt" \
        || die "compute floor failed: $(tail -n 5 "${work}/floor.err")"

    # --- flood: maximum-size bodies from one load generator, ordinary reviews
    # from another at a fixed rate, against a fresh webhook (its VmHWM is the
    # flood's alone). Issue 25: the chart's memory limit is 128 MiB; the
    # ordinary reviews' p99 says whether they still get through.
    log "flood: ${flood_conns} connections of ${flood_bytes}-byte reviews for ${dur} s, ordinary reviews at ${flood_rate} req/s beside"
    flood_body="${work}/flood-review.json"
    python3 - "${flood_bytes}" "${flood_body}" <<'PY'
import json, sys
size, out = int(sys.argv[1]), sys.argv[2]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"generateName": "flood-", "namespace": "flood",
                    "annotations": {"flood": ""}},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "flood", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                      "resource": {"group": "", "version": "v1", "resource": "pods"},
                      "namespace": "flood", "operation": "CREATE", "userInfo": {}, "object": pod}}
# Pad the annotation so the whole body is exactly the cap: parsed in full.
pod["metadata"]["annotations"]["flood"] = "x" * (size - len(json.dumps(review)))
open(out, "w").write(json.dumps(review))
PY
    start webhook-flood "${webhook_bin}" serve --no-cluster --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
        --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key"
    fl_addr="${ADDR}"; fl_pid="${PID}"
    "${oha}" --no-tui --output-format json --insecure -z "${dur}s" -c "${flood_conns}" \
        -m POST -T application/json -D "${flood_body}" "https://${fl_addr}/mutate" > "${work}/flood-big.json" &
    flood_gen=$!
    "${oha}" --no-tui --output-format json --insecure -z "${dur}s" -c 4 -q "${flood_rate}" --latency-correction \
        -m POST -T application/json -D "${body}" "https://${fl_addr}/mutate" > "${work}/flood-small.json"
    wait "${flood_gen}" || true
    fl_alive=0; kill -0 "${fl_pid}" 2>/dev/null && fl_alive=1
    fl_hwm="$(status_kib "${fl_pid}" VmHWM 2>/dev/null || echo 0)"
    kill "${fl_pid}" 2>/dev/null || true
    printf '%s\n' "bytes=${flood_bytes}" "conns=${flood_conns}" "rate=${flood_rate}" "hwm=${fl_hwm}" \
        "alive=${fl_alive}" > "${work}/flood.txt"

    log "start-up: exec -> /readyz 200, 10 times"
    startup="$(python3 bench/startup.py 10 "${webhook_bin}" serve --no-cluster --listen-addr 127.0.0.1:0 \
        --metrics-addr 127.0.0.1:0 --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key")"
    kill "${wh_pid}" "${ce_pid}" 2>/dev/null || true
    printf '%s\n' "peak=${wh_peak}" "hwm=${wh_hwm}" "rss_after=${wh_rss_after}" "ce_peak=${ce_peak}" \
        "ce_hwm=${ce_hwm}" "ticks=${wh_ticks}" "reqs=${wh_reqs}" "startup=$(tr '\n' ' ' <<<"${startup}")" \
        "req_bytes=${req_bytes}" "resp_bytes=${resp_bytes}" > "${work}/webhook-proc.txt"
fi

if want sidecar; then
    log "waiting for the sidecar watch window"
    wait "${idle_pid}" || die "sidecar idle measurement failed"
    log "sidecar: exit -> hook latency, ${runs} runs (budget ${budget} s)"
    python3 bench/sidecar.py --bin "${sidecar_bin}" --idle 0 --runs "${runs}" --budget "${budget}" > "${work}/sidecar-lat.txt"
fi

# --- cluster ----------------------------------------------------------------------
cluster_reachable() {
    [[ -f "${cluster_env}" ]] || return 1
    # shellcheck source=/dev/null
    ( source "${cluster_env}" && kubectl get --raw /readyz >/dev/null 2>&1 )
}
if want cluster || want init-start; then
    if ! cluster_reachable; then
        log "no cluster reachable: bringing one up and installing kube-prestop (taken down at the end)"
        brought_up=1
        tests/cluster/up.sh >&2
        tests/install-product.sh >&2
    fi
    # shellcheck source=/dev/null
    source "${cluster_env}"
    kubectl -n kube-prestop rollout status deployment/kube-prestop --timeout=180s >&2 \
        || die "kube-prestop is not installed and ready on the cluster (make install)"
    kubectl -n kube-prestop get deployment kube-prestop \
        -o jsonpath='image={.spec.template.spec.containers[0].image}{"\n"}replicas={.spec.replicas}{"\n"}' \
        > "${work}/cluster-install.txt"
    runtime_log="${KUBE_PRESTOP_STATE_ROOT:-/var/lib/kube-prestop}/cluster/logs/containerd.log"
fi
if want cluster; then
    helm_args=()
    if [[ "${start_sources}" != current ]]; then
        # shellcheck source=tests/chart/tools.sh
        source "${repo}/tests/chart/tools.sh"
        chart_tools_install >/dev/null
        helm_args=(--helm "${HELM}" --chart "${repo}/charts/kube-prestop")
    fi
    log "cluster: pod start per source (${start_sources}), ${start_pods} pods of each kind per source, interleaved, ${start_busy_pods} busy pods of ${start_busy_cpu} CPU beside"
    gate_args=()
    [[ -z "${start_gate}" ]] || gate_args=(--gate "${start_gate}")
    [[ -z "${start_seccomp}" ]] || gate_args+=(--runtime-default-seccomp)
    [[ -z "${start_sidecar_cpu_limit}" ]] || gate_args+=(--sidecar-cpu-limit "${start_sidecar_cpu_limit}")
    "${cluster_bench_bin}" start --pods "${start_pods}" --sources "${start_sources}" "${helm_args[@]}" \
        "${gate_args[@]}" --busy-pods "${start_busy_pods}" --busy-cpu "${start_busy_cpu}" \
        --runtime-log "${runtime_log}" --raw "${work}/cluster-start.json" > "${work}/cluster-start.txt"
    # The machine's load right after the start part (before the burst's pods).
    printf 'load_after_start=%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >> "${work}/cluster-start.txt"
    log "cluster: burst, Indexed Job of ${burst_completions} completions, parallelism ${burst_parallelism}, ${burst_busy_pods} busy pods of ${burst_busy_cpu} CPU beside"
    "${cluster_bench_bin}" burst --completions "${burst_completions}" --parallelism "${burst_parallelism}" \
        --command "${burst_command}" --busy-pods "${burst_busy_pods}" --busy-cpu "${burst_busy_cpu}" \
        --raw "${work}/cluster-burst.json" > "${work}/cluster-burst.txt"
fi
if want init-start; then
    log "init start: StartContainer per security context, ${init_start_pods} pods of each variant, interleaved"
    "${cluster_bench_bin}" init-start --pods "${init_start_pods}" --runtime-log "${runtime_log}" \
        --raw "${work}/cluster-init-start.json" > "${work}/cluster-init-start.txt"
fi
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- table ----------------------------------------------------------------------
# Each part left its figures in ${work}; the table has the rows of the parts that ran.
python3 bench/report.py table "${work}" "${repeat}" "${dur}" "${conns}" "${started}" "${load_start}" "${load_end}" \
    > "${out_dir}/results.md"
cat "${out_dir}/results.md"
