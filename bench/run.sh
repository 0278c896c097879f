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
# Sidecar: the static binary, its OCI image, and bench/sidecar.py (a pod
# stand-in made of namespaces, as in sidecar/tests/common; needs root).
#
# Knobs (environment): BENCH_DURATION (s per load run, 10), BENCH_CONNECTIONS
# (32), BENCH_REPEAT (saturation runs per server, alternating, 3),
# BENCH_IDLE (sidecar watch window, 60 s), BENCH_RUNS (exit->hook runs, 1000),
# BENCH_LATENCY_BUDGET (s; stop the runs early and say so, 300),
# BENCH_NICE (niceness of the whole run, 10).
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
}
trap cleanup EXIT

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (the sidecar part uses PID and mount namespaces)"
for t in python3 jq curl openssl unshare nsenter; do
    command -v "${t}" >/dev/null || die "${t} is required"
done
python3 -c 'import yaml' 2>/dev/null || {
    log "installing python3-yaml"; apt-get install -y -qq python3-yaml >/dev/null
}

started="$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- tools and builds ---------------------------------------------------------
oha="${cache}/tools/cargo/bin/oha"
if [[ ! -x "${oha}" ]]; then
    if command -v oha >/dev/null; then
        oha="$(command -v oha)"
    else
        log "installing oha (cargo install --locked) into ${cache}/tools/cargo"
        cargo install oha --locked --root "${cache}/tools/cargo" >&2
    fi
fi
log "building the webhook (release), the transport ceiling, the compute floor, the static sidecar, the sidecar image"
cargo build --release -p kube-prestop-webhook >&2
(cd bench/ceiling && CARGO_TARGET_DIR="${repo}/bench/target" cargo build --release >&2)
cargo bench -p kube-prestop-webhook --bench admission --no-run >&2
sidecar/build-static.sh > "${work}/sidecar-build.txt"
images/build-oci.sh sidecar >&2
webhook_bin="${CARGO_TARGET_DIR:-${repo}/target}/release/kube-prestop-webhook"
ceiling_bin="${repo}/bench/target/release/kube-prestop-bench-ceiling"
sidecar_bin="${CARGO_TARGET_DIR:-${repo}/target}/x86_64-unknown-linux-musl/release-small/kube-prestop-sidecar"
sidecar_tar="${OCI_OUT_DIR:-${repo}/target/oci}/kube-prestop-sidecar.tar"

# --- inputs ---------------------------------------------------------------------
certs/gen.sh -o "${work}/certs" >/dev/null 2>&1
body="${work}/review.json"
python3 - "${repo}/webhook/tests/golden/simple-job/input.yaml" "${body}" <<'PY'
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

# Server processes: the webhook logs one JSON line per request to stderr (a file here).
start webhook "${webhook_bin}" serve --no-cluster --listen-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
    --tls-cert-file "${work}/certs/tls.crt" --tls-key-file "${work}/certs/tls.key"
wh_addr="${ADDR}"; wh_pid="${PID}"
curl -sS --fail --cacert "${work}/certs/ca.crt" -H 'Content-Type: application/json' \
    --data-binary "@${body}" "https://${wh_addr}/mutate" > "${work}/response.json"
jq -e '.response.allowed == true and (.response.patch | length) > 0' "${work}/response.json" >/dev/null \
    || die "the webhook did not inject: $(head -c 400 "${work}/response.json")"
start ceiling "${ceiling_bin}" "${work}/certs/tls.crt" "${work}/certs/tls.key" "${work}/response.json"
ce_addr="${ADDR}"; ce_pid="${PID}"
req_bytes="$(stat -c %s "${body}")"; resp_bytes="$(stat -c %s "${work}/response.json")"

# Sidecar watch window in the background (its figures are per-process
# counters, unaffected by the load next to it).
log "sidecar: watching a running container for ${idle} s (background)"
python3 bench/sidecar.py --bin "${sidecar_bin}" --idle "${idle}" --runs 0 > "${work}/sidecar-idle.txt" &
idle_pid=$!; pids+=("${idle_pid}")

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
wh_peak=0; ce_peak=0; wh_ticks=0; wh_reqs=0
for i in $(seq 1 "${repeat}"); do
    t0="$(cpu_ticks "${wh_pid}")"
    p="$(peak_rss_during "${wh_pid}" run_oha "wh-sat-${i}" "${wh_addr}")"
    t1="$(cpu_ticks "${wh_pid}")"
    (( p > wh_peak )) && wh_peak="${p}"
    wh_ticks=$(( wh_ticks + t1 - t0 ))
    wh_reqs=$(( wh_reqs + $(jq '[.statusCodeDistribution[]] | add' "${work}/wh-sat-${i}.json") ))
    p="$(peak_rss_during "${ce_pid}" run_oha "ce-sat-${i}" "${ce_addr}")"
    (( p > ce_peak )) && ce_peak="${p}"
done
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
log "waiting for the sidecar watch window"
wait "${idle_pid}" || die "sidecar idle measurement failed"
log "sidecar: exit -> hook latency, ${runs} runs (budget ${budget} s)"
python3 bench/sidecar.py --bin "${sidecar_bin}" --idle 0 --runs "${runs}" --budget "${budget}" > "${work}/sidecar-lat.txt"
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- table ----------------------------------------------------------------------
python3 - "${work}" "${repeat}" "${dur}" "${conns}" "${sidecar_bin}" "${sidecar_tar}" \
    "${wh_peak}" "${wh_hwm}" "${wh_rss_after}" "${ce_peak}" "${ce_hwm}" "${wh_ticks}" "${wh_reqs}" \
    "${startup}" "${started}" "${load_start}" "${load_end}" "${req_bytes}" "${resp_bytes}" \
    > "${out_dir}/results.md" <<'PY'
import json, os, statistics, sys, tarfile
(work, repeat, dur, conns, sc_bin, sc_tar, wh_peak, wh_hwm, wh_rss_after, ce_peak, ce_hwm,
 wh_ticks, wh_reqs, startup, started, load_start, load_end, req_b, resp_b) = sys.argv[1:]
repeat = int(repeat)
J = lambda n: json.load(open(os.path.join(work, n + ".json")))
kv = lambda n: dict(l.strip().split("=", 1) for l in open(os.path.join(work, n)) if "=" in l)
rps = lambda j: j["summary"]["requestsPerSec"]
ok = lambda j: j["summary"]["successRate"]
ms = lambda j, p: j["latencyPercentiles"][p] * 1000
wh_sat = [rps(J(f"wh-sat-{i}")) for i in range(1, repeat + 1)]
ce_sat = [rps(J(f"ce-sat-{i}")) for i in range(1, repeat + 1)]
whs, ces = statistics.median(wh_sat), statistics.median(ce_sat)
floor, idle, lat = kv("floor.txt"), kv("sidecar-idle.txt"), kv("sidecar-lat.txt")
hz = os.sysconf("SC_CLK_TCK")
cpu_us = int(wh_ticks) / hz / max(1, int(wh_reqs)) * 1e6
st = sorted(float(x) for x in startup.split())
layer = None
with tarfile.open(sc_tar) as t:
    members = {m.name.removeprefix("./"): m for m in t.getmembers()}
    read = lambda name: json.load(t.extractfile(members[name]))
    blob = lambda d: read("blobs/" + d.replace(":", "/"))
    index = read("index.json")
    manifest = blob(index["manifests"][0]["digest"])
    layer = sum(l["size"] for l in manifest["layers"])
    layer_type = manifest["layers"][0]["mediaType"].rsplit(".", 1)[-1]
tar_size = os.path.getsize(sc_tar)
bin_size = os.path.getsize(sc_bin)
mib = lambda kib: f"{int(kib) / 1024:.1f} MiB"
lat_pct = lambda j: f"{ms(j, 'p50'):.2f} / {ms(j, 'p99'):.2f} / {ms(j, 'p99.9'):.2f} ms"
rows = []
R = lambda *c: rows.append(c)
R("webhook throughput at saturation (median of %d x %s s, %s conns)" % (repeat, dur, conns),
  f"{whs:,.0f} req/s", "≥ 70% of ceiling",
  f"ceiling {ces:,.0f} req/s → **{100 * whs / ces:.0f}%** (runs: webhook {', '.join(f'{x:,.0f}' for x in wh_sat)}; ceiling {', '.join(f'{x:,.0f}' for x in ce_sat)})")
for rate in (1000, 5000):
    w, c = J(f"wh-{rate}"), J(f"ce-{rate}")
    R(f"webhook p50 / p99 / p99.9 at {rate:,} req/s ({dur} s)", lat_pct(w) + f" ({rps(w):,.0f} req/s achieved, {100 * ok(w):.1f}% ok)",
      "p99 ≤ 2 ms" if rate == 1000 else "—",
      f"ceiling {lat_pct(c)} ({rps(c):,.0f} req/s)")
R("webhook resident memory under load (peak VmRSS / VmHWM)", f"{mib(wh_peak)} / {mib(wh_hwm)}", "—",
  f"ceiling {mib(ce_peak)} / {mib(ce_hwm)}; webhook after load {mib(wh_rss_after)}")
R("webhook CPU per request at saturation (server process)", f"{cpu_us:.0f} µs", "—",
  f"compute floor {float(floor['floor_median_us']):.0f} µs = {100 * float(floor['floor_median_us']) / cpu_us:.0f}% of it")
R("compute floor: review() alone (parse + engine + serialise; median of %s batches)" % floor["floor_batches"],
  f"{float(floor['floor_median_us']):.1f} µs/review", "—",
  f"min {float(floor['floor_min_us']):.1f} µs; ≈ {int(floor['floor_per_core_per_s']):,} reviews/s per core; request {int(req_b):,} B, response {int(resp_b):,} B")
R("webhook start-up: exec → /readyz 200 (median of %d)" % len(st), f"{statistics.median(st):.1f} ms", "—",
  f"min {st[0]:.1f} ms, max {st[-1]:.1f} ms (--no-cluster: no API server sync)")
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
print(f"# kube-prestop bench ({started})\n")
print(f"Machine: {os.cpu_count()} CPUs (nproc), load average (1/5/15 min) at start {load_start}, at end {load_end}. "
      "The machine was shared with other work (end-to-end tests); absolute figures are noisy, "
      "the ratios come from the same run, alternating webhook and ceiling. Everything ran under nice.\n")
print("| what | value | goal | reference / ratio |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
print("\nNotes: oha over HTTPS (HTTP/1.1 keep-alive, --insecure: no certificate check on the client), "
      "POST of a %s-byte AdmissionReview built from webhook/tests/golden/simple-job/input.yaml; "
      "fixed-rate runs use oha's latency correction (coordinated omission). The ceiling (bench/ceiling) "
      "is the same tokio/rustls(ring)/hyper-util/axum stack reading the body and answering the webhook's own "
      "%s-byte response. The webhook logs one line per request (to a file here). The image's binary is built by images/build-oci.sh (profile release), the binary row by sidecar/build-static.sh (release-small). The exit → hook latency "
      "includes the sidecar's fork+exec of `date` and date's dynamic loading (the hook is `date +%%s%%N`, the "
      "container's payload is `date +%%s%%N` too), measured on a pod stand-in made of namespaces "
      "(bench/sidecar.py)." % (req_b, resp_b))
PY
cat "${out_dir}/results.md"
