#!/usr/bin/env bash
# `make bench`: what kube-prestop costs, as one table (printed and written to
# bench/out/results.md). Not part of the tests; nothing here asserts a time.
#
# Webhook: the release binary over TLS with HTTP/1.1 keep-alive, loaded by oha
# (crates.io; installed into $KUBE_PRESTOP_CACHE/tools/cargo) with an
# AdmissionReview built from the golden simple-job pod. References in the same
# run: the transport ceiling (bench/ceiling: the same tokio/rustls/hyper/axum
# stack answering a fixed response, the webhook's own answer, to the same
# body) and the compute floor (webhook/benches/admission.rs: review() alone).
# All three use the same global allocator (mimalloc, webhook/src/main.rs), so
# the ratio compares the same stack with and without the admission work. The
# saturation runs also load the image's static musl binary (BENCH_MUSL).
# Sidecar: the static binary, its OCI image, and bench/sidecar.py (a pod
# stand-in made of namespaces, as in sidecar/tests/common; needs root).
# Cluster: tests/e2e's kube-prestop-cluster-bench against the local cluster
# with the chart installed (pod start overhead, injected vs not; a burst of an
# Indexed Job: admission latency from the webhook's and the API server's
# histograms, pods injected, hooks run). When no cluster is reachable it
# brings one up (tests/cluster/up.sh), installs the product
# (tests/install-product.sh) and takes the cluster down at the end; a cluster
# that was already up is used as it is and left up.
#
# Knobs (environment): BENCH_PARTS (comma-separated, any of webhook, sidecar,
# cluster; default all three), BENCH_DURATION (s per load run, 10),
# BENCH_CONNECTIONS (32), BENCH_REPEAT (saturation runs per server,
# alternating, 3), BENCH_IDLE (sidecar watch window, 60 s), BENCH_RUNS
# (exit->hook runs, 1000), BENCH_LATENCY_BUDGET (s; stop the runs early and
# say so, 300), BENCH_START_PODS (pods of each kind, 20),
# BENCH_BURST_COMPLETIONS (200), BENCH_BURST_PARALLELISM (20),
# BENCH_NICE (niceness of the whole run, 10), BENCH_MUSL (1: also load the
# static musl binary the images ship, built as images/build-oci.sh does, in
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
burst_completions="${BENCH_BURST_COMPLETIONS:-200}"
burst_parallelism="${BENCH_BURST_PARALLELISM:-20}"
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
    [[ "${p}" == webhook || "${p}" == sidecar || "${p}" == cluster ]] \
        || die "BENCH_PARTS: unknown part ${p} (webhook, sidecar, cluster)"
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
webhook_bin="${CARGO_TARGET_DIR:-${repo}/target}/release/kube-prestop-webhook"
# The ceiling is its own Cargo project: built into bench/target, or under
# CARGO_TARGET_DIR when that is set (a private target dir per worktree).
ceiling_target="${CARGO_TARGET_DIR:+${CARGO_TARGET_DIR}/bench-ceiling}"
ceiling_target="${ceiling_target:-${repo}/bench/target}"
ceiling_bin="${ceiling_target}/release/kube-prestop-bench-ceiling"
musl_bin="${CARGO_TARGET_DIR:-${repo}/target}/x86_64-unknown-linux-musl/release/kube-prestop-webhook"
musl="${BENCH_MUSL:-1}"
sidecar_bin="${CARGO_TARGET_DIR:-${repo}/target}/x86_64-unknown-linux-musl/release-small/kube-prestop-sidecar"
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
    cargo bench -p kube-prestop-webhook --bench admission --no-run >&2
    if [[ "${musl}" == 1 ]]; then
        log "building the static musl webhook (the images' binary, as images/build-oci.sh builds it)"
        command -v musl-gcc >/dev/null || die "musl-gcc is required for BENCH_MUSL=1 (Debian: musl-tools)"
        CC_x86_64_unknown_linux_musl=musl-gcc \
            cargo build --locked --release --target x86_64-unknown-linux-musl -p kube-prestop-webhook >&2
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
    log "building the static sidecar and the sidecar image"
    sidecar/build-static.sh > "${work}/sidecar-build.txt"
    images/build-oci.sh sidecar >&2
    printf 'bin=%s\ntar=%s\n' "${sidecar_bin}" "${sidecar_tar}" > "${work}/sidecar-paths.txt"
fi
if want cluster; then
    log "building the cluster bench client (tests/e2e)"
    cargo build -p kube-prestop-e2e --bin kube-prestop-cluster-bench >&2
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
    python3 - "${repo}/engine/tests/golden/simple-job/input.yaml" "${body}" <<'PY'
import json, sys, yaml
pod = yaml.safe_load(open(sys.argv[1]))
gvk = {"group": "", "version": "v1", "kind": "Pod"}
gvr = {"group": "", "version": "v1", "resource": "pods"}
review = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {
        "uid": "0b4bd6a4-9d0c-4a4e-8f1e-6f1b2a3c4d5e",
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "namespace": pod["metadata"].get("namespace", "default"),
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    },
}
json.dump(review, open(sys.argv[2], "w"), separators=(",", ":"))
PY

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
    KPS_BENCH_BODY="${body}" cargo bench -q -p kube-prestop-webhook --bench admission 2> "${work}/floor.err" > "${work}/floor.txt" \
        || die "compute floor failed: $(tail -n 5 "${work}/floor.err")"

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
if want cluster; then
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
    log "cluster: pod start overhead, ${start_pods} pods injected and ${start_pods} not, interleaved"
    "${cluster_bench_bin}" start --pods "${start_pods}" --raw "${work}/cluster-start.json" \
        > "${work}/cluster-start.txt"
    log "cluster: burst, Indexed Job of ${burst_completions} completions, parallelism ${burst_parallelism}"
    "${cluster_bench_bin}" burst --completions "${burst_completions}" --parallelism "${burst_parallelism}" \
        --raw "${work}/cluster-burst.json" > "${work}/cluster-burst.txt"
fi
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- table ----------------------------------------------------------------------
# Each part left its figures in ${work}; the table has the rows of the parts that ran.
python3 - "${work}" "${repeat}" "${dur}" "${conns}" "${started}" "${load_start}" "${load_end}" \
    > "${out_dir}/results.md" <<'PY'
import json, os, statistics, sys, tarfile
work, repeat, dur, conns, started, load_start, load_end = sys.argv[1:]
repeat = int(repeat)
path = lambda n: os.path.join(work, n)
have = lambda n: os.path.exists(path(n))
J = lambda n: json.load(open(path(n + ".json")))
kv = lambda n: dict(l.rstrip("\n").split("=", 1) for l in open(path(n)) if "=" in l)
hz = os.sysconf("SC_CLK_TCK")
mib = lambda kib: f"{int(kib) / 1024:.1f} MiB"
rows, notes = [], []
R = lambda *c: rows.append(c)

if have("webhook-proc.txt"):
    p = kv("webhook-proc.txt")
    rps = lambda j: j["summary"]["requestsPerSec"]
    ok = lambda j: j["summary"]["successRate"]
    ms = lambda j, q: j["latencyPercentiles"][q] * 1000
    lat_pct = lambda j: f"{ms(j, 'p50'):.2f} / {ms(j, 'p99'):.2f} / {ms(j, 'p99.9'):.2f} ms"
    wh_sat = [rps(J(f"wh-sat-{i}")) for i in range(1, repeat + 1)]
    ce_sat = [rps(J(f"ce-sat-{i}")) for i in range(1, repeat + 1)]
    whs, ces = statistics.median(wh_sat), statistics.median(ce_sat)
    floor = kv("floor.txt")
    cpu_us = int(p["ticks"]) / hz / max(1, int(p["reqs"])) * 1e6
    st = sorted(float(x) for x in p["startup"].split())
    R("webhook throughput at saturation (median of %d x %s s, %s conns)" % (repeat, dur, conns),
      f"{whs:,.0f} req/s", "≥ 70% of ceiling",
      f"ceiling {ces:,.0f} req/s → **{100 * whs / ces:.0f}%** (runs: webhook {', '.join(f'{x:,.0f}' for x in wh_sat)}; ceiling {', '.join(f'{x:,.0f}' for x in ce_sat)})")
    if have("webhook-musl.txt"):
        m = kv("webhook-musl.txt")
        mu_sat = [rps(J(f"mu-sat-{i}")) for i in range(1, repeat + 1)]
        mus = statistics.median(mu_sat)
        mu_cpu = int(m["ticks"]) / hz / max(1, int(m["reqs"])) * 1e6
        R("webhook, static musl binary (what the images ship), throughput at saturation (same runs, third in turn)",
          f"{mus:,.0f} req/s", "≥ 70% of ceiling",
          f"**{100 * mus / ces:.0f}%** of the ceiling; CPU {mu_cpu:.0f} µs/request (runs: {', '.join(f'{x:,.0f}' for x in mu_sat)})")
    for rate in (1000, 5000):
        w, c = J(f"wh-{rate}"), J(f"ce-{rate}")
        R(f"webhook p50 / p99 / p99.9 at {rate:,} req/s ({dur} s)", lat_pct(w) + f" ({rps(w):,.0f} req/s achieved, {100 * ok(w):.1f}% ok)",
          "p99 ≤ 2 ms" if rate == 1000 else "—",
          f"ceiling {lat_pct(c)} ({rps(c):,.0f} req/s)")
    R("webhook resident memory under load (peak VmRSS / VmHWM)", f"{mib(p['peak'])} / {mib(p['hwm'])}", "—",
      f"ceiling {mib(p['ce_peak'])} / {mib(p['ce_hwm'])}; webhook after load {mib(p['rss_after'])}")
    # CPU time per review (the bench's floor_cpu_us) compares with the
    # server's CPU per request; wall time on a shared machine does not.
    floor_cpu = float(floor.get("floor_cpu_us", floor["floor_median_us"]))
    R("webhook CPU per request at saturation (server process)", f"{cpu_us:.0f} µs", "—",
      f"compute floor (CPU) {floor_cpu:.0f} µs = {100 * floor_cpu / cpu_us:.0f}% of it")
    R("compute floor: review() alone (parse + engine + serialise; median of %s batches)" % floor["floor_batches"],
      f"{float(floor['floor_median_us']):.1f} µs/review", "—",
      f"min {float(floor['floor_min_us']):.1f} µs; CPU {floor_cpu:.1f} µs/review; ≈ {int(floor['floor_per_core_per_s']):,} reviews/s per core; request {int(p['req_bytes']):,} B, response {int(p['resp_bytes']):,} B")
    R("webhook start-up: exec → /readyz 200 (median of %d)" % len(st), f"{statistics.median(st):.1f} ms", "—",
      f"min {st[0]:.1f} ms, max {st[-1]:.1f} ms (--no-cluster: no API server sync)")
    notes.append("Webhook: oha over HTTPS (HTTP/1.1 keep-alive, --insecure: no certificate check on the client), "
        "POST of a %s-byte AdmissionReview built from engine/tests/golden/simple-job/input.yaml; "
        "fixed-rate runs use oha's latency correction (coordinated omission). The ceiling (bench/ceiling) "
        "is the same tokio/rustls(ring)/hyper-util/axum stack reading the body and answering the webhook's own "
        "%s-byte response, alternating with the webhook. The webhook logs one line per request (to a file here)."
        % (p["req_bytes"], p["resp_bytes"]))

if have("sidecar-idle.txt"):
    sp, idle, lat = kv("sidecar-paths.txt"), kv("sidecar-idle.txt"), kv("sidecar-lat.txt")
    with tarfile.open(sp["tar"]) as t:
        members = {m.name.removeprefix("./"): m for m in t.getmembers()}
        read = lambda name: json.load(t.extractfile(members[name]))
        blob = lambda d: read("blobs/" + d.replace(":", "/"))
        manifest = blob(read("index.json")["manifests"][0]["digest"])
        layer = sum(l["size"] for l in manifest["layers"])
        layer_type = manifest["layers"][0]["mediaType"].rsplit(".", 1)[-1]
    tar_size, bin_size = os.path.getsize(sp["tar"]), os.path.getsize(sp["bin"])
    R("sidecar binary (static musl, release-small)", f"{bin_size / 1024:.0f} KiB ({bin_size:,} B)", "≤ 2 MiB",
      f"{100 * bin_size / 2097152:.0f}% of the goal")
    R("sidecar install image: compressed layer", f"{layer / 1024:.0f} KiB ({layer_type})", "≤ 2 MiB",
      f"OCI archive {tar_size / 1024:.0f} KiB")
    R(f"sidecar resident memory while watching ({idle['idle_seconds']} s)", f"{int(idle['idle_rss_kib'])} KiB", "—",
      f"VmHWM {int(idle['idle_hwm_kib'])} KiB")
    R(f"sidecar CPU while watching ({idle['idle_seconds']} s)", f"{float(idle['idle_cpu_percent']):.3f}%", "—",
      f"{idle['idle_cpu_ticks']} clock ticks (1 tick = {1000 // hz} ms)")
    R("sidecar wake-ups while the container runs (ctxt switches)", f"{float(idle['idle_wakeups_per_s']):.3f} /s", "0",
      f"{idle['idle_ctxt_switches']} switches in {idle['idle_seconds']} s")
    n_runs, n_req = int(lat.get("latency_runs", 0)), int(lat.get("latency_requested", 0))
    runs_note = f"{n_runs} runs" + ("" if n_runs == n_req else f" of {n_req} asked (time budget hit)")
    R(f"sidecar exit → hook first output, p50 / p99 ({runs_note})",
      f"{float(lat['latency_p50_ms']):.2f} / {float(lat['latency_p99_ms']):.2f} ms", "p99 ≤ 10 ms",
      f"kubelet relist 1,000 ms → p99 is {100 * float(lat['latency_p99_ms']) / 1000:.1f}% of it; min {float(lat['latency_min_ms']):.2f}, max {float(lat['latency_max_ms']):.2f} ms")
    notes.append("Sidecar: the image's binary is built by images/build-oci.sh (profile release), the binary row by "
        "sidecar/build-static.sh (release-small). The exit → hook latency includes the sidecar's fork+exec of "
        "`date` and date's dynamic loading (the hook is `date +%s%N`, the container's payload is `date +%s%N` "
        "too), measured on a pod stand-in made of namespaces (bench/sidecar.py).")

f1 = lambda v: f"{float(v):,.0f}"
if have("cluster-start.txt"):
    s = kv("cluster-start.txt")
    n = s["start_pods_each"]
    pair = lambda m: (f"injected {f1(s[f'{m}_inj_p50_ms'])} / {f1(s[f'{m}_inj_p90_ms'])} ms; "
                      f"not injected {f1(s[f'{m}_plain_p50_ms'])} / {f1(s[f'{m}_plain_p90_ms'])} ms")
    diff = lambda m, q, k="inj": float(s[f"{m}_{k}_{q}_ms"]) - float(s[f"{m}_plain_{q}_ms"])
    d50 = diff("start", "p50")
    R(f"pod start: pod added (watch) → main container's first instruction, p50 / p90 ({n} pods injected, {n} not, interleaved)",
      pair("start"), "≤ +300 ms (median)",
      f"**{d50:+,.0f} ms** median ({diff('start', 'p90'):+,.0f} ms p90): goal {'met' if d50 <= 300 else '**missed**'}; "
      f"sidecar binary from the namespace's ConfigMap in {s.get('start_inj_from_config_map', '0')} of {n} injected pods "
      f"(the rest: install init container); "
      f"injected, as the API reported it (p50 from pod added): install container done {f1(s['start_inj_install_done_p50_ms'])} ms, "
      f"sidecar started (running, postStart done) {f1(s['start_inj_sidecar_started_p50_ms'])} ms")
    R(f"reference, same run: the not-injected Job plus one do-nothing native sidecar (no probe, no install step; {n} pods)",
      f"{f1(s['start_ref_p50_ms'])} / {f1(s['start_ref_p90_ms'])} ms", "—",
      f"{diff('start', 'p50', 'ref'):+,.0f} ms median: what the kubelet charges any native sidecar "
      f"(one more pod sync, after a 1 s relist); kube-prestop's overhead beyond it: {float(s['start_inj_p50_ms']) - float(s['start_ref_p50_ms']):+,.0f} ms")
    R("pod start as the API reports it: pod added → main container Running (watch), p50 / p90",
      pair("start_api"), "—", f"{diff('start_api', 'p50'):+,.0f} ms median ({diff('start_api', 'p90'):+,.0f} ms p90)")
    R("pod start from the Job: Job create call → main container's first instruction, p50 / p90",
      pair("start_job"), "—", f"{diff('start_job', 'p50'):+,.0f} ms median (includes the Job controller and the admission call)")
if have("cluster-burst.txt"):
    b = kv("cluster-burst.txt")
    pods, comp = int(b["burst_pods"]), int(b["burst_completions"])
    secs = float(b["burst_seconds"])
    ms3 = lambda k: " / ".join(f"{float(b[f'burst_{k}_{q}_ms']):.1f}" for q in ("p50", "p90", "p99")) + " ms"
    R(f"burst: Indexed Job of {comp} completions, parallelism {b['burst_parallelism']}: Job created → Complete",
      f"{secs:.1f} s ({comp / secs:.1f} completions/s)", "—",
      f"Job {b['burst_outcome']}; {pods} pods, {b['burst_succeeded']} Succeeded")
    same = b["burst_wh_replicas_same"] == "1"
    lg = lambda q: f"{float(b[f'burst_log_{q}_ms']):.2f}"
    R("burst: admission latency p50 / p90 / p99 / max, this namespace's reviews (webhook's log lines, exact)",
      f"{lg('p50')} / {lg('p90')} / {lg('p99')} / {lg('max')} ms", "—",
      f"{b['burst_log_count']} reviews for {pods} pods ({b['burst_log_reasons']}); "
      f"webhook histogram, all replicas, everyone's reviews meanwhile ({f1(b['burst_wh_count'])}): {ms3('wh')}"
      + ("" if same else " (**the replicas changed during the burst: partial**)"))
    R("burst: the same calls as the API server saw them (network, TLS, queueing), p50 / p90 / p99",
      ms3("api"), "—",
      f"its histogram for our webhook, everyone's calls meanwhile ({f1(b['burst_api_count'])}); "
      f"means: webhook {float(b['burst_wh_mean_ms']):.1f} ms, API server {float(b['burst_api_mean_ms']):.1f} ms")
    R("burst: pods injected (sidecar + status annotation)", f"{b['burst_injected']} / {pods}", f"{pods} / {pods}",
      f"API server for our webhook: {f1(b['burst_api_fail_open'])} fail-open, {f1(b['burst_api_rejections'])} rejections, "
      f"{f1(b['burst_api_not_200'])} answers other than 200")
    R("burst: hooks run (record lines by completion index; sidecars logging one `hook finished`)",
      f"{b['burst_hook_record_indexes']} / {comp} indexes; {b['burst_sidecar_one_hook']} / {pods} sidecars",
      f"{comp} / {comp}",
      f"{b['burst_hook_record_lines']} record lines; sidecars with no hook {b['burst_sidecar_no_hook']}, "
      f"more than one {b['burst_sidecar_more_hooks']}, logs unreadable {b['burst_sidecar_no_logs']}")
    inst = kv("cluster-install.txt") if have("cluster-install.txt") else {}
    notes.append("Cluster: the local single-node cluster (tests/cluster; 2 cores shared with whatever else runs "
        f"on it) with kube-prestop installed ({inst.get('image', '?')}, {inst.get('replicas', '?')} replicas), "
        "driven by tests/e2e's kube-prestop-cluster-bench. Pod start: the same Job (busybox; `adjtimex` prints the "
        "clock in µs as the container's first instruction, then `sleep 1.5`; an exec preStop) in a labelled and "
        "an unlabelled namespace, and as the reference the unlabelled Job plus one do-nothing native sidecar "
        "(busybox, no probe, no lifecycle handler), A B C C B A, one pod at a time, each to its end; all times from the host's clock "
        "(pod added and Running: when a watch delivered them; the API's own timestamps have 1 s resolution). "
        "Pod added is after admission; the webhook's own time is in the burst rows. Burst: the main container "
        "runs `echo` and exits at once; its preStop appends the completion index to a hostPath record. "
        "Admission latency: exact from the webhook's own log line per review of the burst's namespace "
        "(time from the request to the answer inside the webhook); histogram quantiles are interpolated inside "
        "buckets (webhook: 0.5, 1, 2.5, 5, 10, 25, 50 ms...; API server: 5, 25, 100, 500 ms...) from before/after "
        "scrapes, so other users' pods admitted meanwhile are in them. The API server calls the webhook twice "
        "per pod (reinvocationPolicy IfNeeded: the pod still changed after our patch, e.g. by the API server's "
        "own admission plugins run again; the second review finds it injected). Raw samples in "
        "bench/out/raw/cluster-*.json.")

print(f"# kube-prestop bench ({started})\n")
print(f"Machine: {os.cpu_count()} CPUs (nproc), load average (1/5/15 min) at start {load_start}, at end {load_end}. "
      "The load average includes the bench's own work (load generator, the burst's pods on the local "
      "cluster) and anything else running on the machine; absolute figures are noisy, "
      "the ratios come from the same run. Everything on the bench's side ran under nice.\n")
print("| what | value | goal | reference / ratio |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
print("\nNotes:\n")
for n in notes:
    print(f"- {n}")
PY
cat "${out_dir}/results.md"
