#!/usr/bin/env python3
"""Inputs and the report of `make bench` (bench/run.sh).

  report.py review POD_YAML OUT_JSON
      The AdmissionReview the webhook load runs POST: a CREATE of the pod in
      POD_YAML (engine/tests/golden/simple-job/input.yaml) by the Job
      controller, written as compact JSON to OUT_JSON.

  report.py table WORK REPEAT DURATION CONNECTIONS STARTED LOAD_START LOAD_END
      The results table (Markdown, on stdout) from the figures the bench's
      parts left in the directory WORK; it has the rows of the parts that ran:
      - webhook: webhook-proc.txt (key=value: peak/hwm/rss_after and the
        ceiling's ce_peak/ce_hwm in KiB, ticks and reqs at saturation,
        startup in ms, req_bytes/resp_bytes), oha's JSON of each load run
        (wh-sat-N, ce-sat-N, mu-sat-N for N in 1..REPEAT; wh-1000, ce-1000,
        wh-5000, ce-5000), floor.txt (webhook/server/benches/admission.rs) and, when
        the static musl binary ran, webhook-musl.txt (ticks, reqs);
      - sidecar: sidecar-paths.txt (bin, tar), sidecar-idle.txt and
        sidecar-lat.txt (bench/sidecar.py);
      - cluster: cluster-start.txt (per source: the start figures and the
        breakdown's step medians), cluster-burst.txt (kube-prestop-cluster-bench,
        bench/cluster) and cluster-install.txt (image, replicas);
      - init-start: cluster-init-start.txt (key=value lines, then the
        part's own Markdown table, copied as it is).
      REPEAT, DURATION (s) and CONNECTIONS describe the load runs; STARTED is
      the run's start time and LOAD_START/LOAD_END the 1/5/15-minute load
      averages at its start and end.
"""
import argparse
import json
import os
import statistics
import sys
import tarfile

HZ = os.sysconf("SC_CLK_TCK")


# --- review ---------------------------------------------------------------------

def write_review(pod_yaml, out_json):
    """Writes the AdmissionReview (CREATE of the pod by the Job controller)."""
    import yaml  # python3-yaml; bench/run.sh installs it when missing

    with open(pod_yaml) as f:
        pod = yaml.safe_load(f)
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
    with open(out_json, "w") as f:
        json.dump(review, f, separators=(",", ":"))


# --- table ----------------------------------------------------------------------

class Figures:
    """The files one bench run left in its work directory."""

    def __init__(self, work):
        self.work = work

    def path(self, name):
        return os.path.join(self.work, name)

    def have(self, name):
        return os.path.exists(self.path(name))

    def json(self, name):
        """NAME.json (oha's output of one load run)."""
        with open(self.path(name + ".json")) as f:
            return json.load(f)

    def kv(self, name):
        """The key=value lines of a file, as a dict of strings."""
        with open(self.path(name)) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def mib(kib):
    return f"{int(kib) / 1024:.1f} MiB"


def f1(v):
    """A number of milliseconds, to the unit, with thousands separators."""
    return f"{float(v):,.0f}"


def rps(run):
    return run["summary"]["requestsPerSec"]


def lat_pct(run):
    """p50 / p99 / p99.9 of an oha run, in ms."""
    ms = [run["latencyPercentiles"][q] * 1000 for q in ("p50", "p99", "p99.9")]
    return f"{ms[0]:.2f} / {ms[1]:.2f} / {ms[2]:.2f} ms"


def webhook_rows(fig, repeat, dur, conns, rows, notes):
    p = fig.kv("webhook-proc.txt")
    wh_sat = [rps(fig.json(f"wh-sat-{i}")) for i in range(1, repeat + 1)]
    ce_sat = [rps(fig.json(f"ce-sat-{i}")) for i in range(1, repeat + 1)]
    whs, ces = statistics.median(wh_sat), statistics.median(ce_sat)
    floor = fig.kv("floor.txt")
    cpu_us = int(p["ticks"]) / HZ / max(1, int(p["reqs"])) * 1e6
    st = sorted(float(x) for x in p["startup"].split())
    rows.append((
        "webhook throughput at saturation (median of %d x %s s, %s conns)" % (repeat, dur, conns),
        f"{whs:,.0f} req/s", "≥ 70% of ceiling",
        f"ceiling {ces:,.0f} req/s → **{100 * whs / ces:.0f}%** (runs: webhook "
        f"{', '.join(f'{x:,.0f}' for x in wh_sat)}; ceiling {', '.join(f'{x:,.0f}' for x in ce_sat)})"))
    if fig.have("webhook-musl.txt"):
        m = fig.kv("webhook-musl.txt")
        mu_sat = [rps(fig.json(f"mu-sat-{i}")) for i in range(1, repeat + 1)]
        mus = statistics.median(mu_sat)
        mu_cpu = int(m["ticks"]) / HZ / max(1, int(m["reqs"])) * 1e6
        rows.append((
            "webhook, static musl binary (what the images ship), throughput at saturation (same runs, third in turn)",
            f"{mus:,.0f} req/s", "≥ 70% of ceiling",
            f"**{100 * mus / ces:.0f}%** of the ceiling; CPU {mu_cpu:.0f} µs/request "
            f"(runs: {', '.join(f'{x:,.0f}' for x in mu_sat)})"))
    for rate in (1000, 5000):
        w, c = fig.json(f"wh-{rate}"), fig.json(f"ce-{rate}")
        rows.append((
            f"webhook p50 / p99 / p99.9 at {rate:,} req/s ({dur} s)",
            lat_pct(w) + f" ({rps(w):,.0f} req/s achieved, {100 * w['summary']['successRate']:.1f}% ok)",
            "p99 ≤ 2 ms" if rate == 1000 else "—",
            f"ceiling {lat_pct(c)} ({rps(c):,.0f} req/s)"))
    rows.append((
        "webhook resident memory under load (peak VmRSS / VmHWM)", f"{mib(p['peak'])} / {mib(p['hwm'])}", "—",
        f"ceiling {mib(p['ce_peak'])} / {mib(p['ce_hwm'])}; webhook after load {mib(p['rss_after'])}"))
    # CPU time per review (the bench's floor_cpu_us) compares with the
    # server's CPU per request; wall time on a shared machine does not.
    floor_cpu = float(floor.get("floor_cpu_us", floor["floor_median_us"]))
    rows.append((
        "webhook CPU per request at saturation (server process)", f"{cpu_us:.0f} µs", "—",
        f"compute floor (CPU) {floor_cpu:.0f} µs = {100 * floor_cpu / cpu_us:.0f}% of it"))
    rows.append((
        "compute floor: review() alone (parse + engine + serialise; median of %s batches)" % floor["floor_batches"],
        f"{float(floor['floor_median_us']):.1f} µs/review", "—",
        f"min {float(floor['floor_min_us']):.1f} µs; CPU {floor_cpu:.1f} µs/review; "
        f"≈ {int(floor['floor_per_core_per_s']):,} reviews/s per core; "
        f"request {int(p['req_bytes']):,} B, response {int(p['resp_bytes']):,} B"))
    rows.append((
        "webhook start-up: exec → /readyz 200 (median of %d)" % len(st), f"{statistics.median(st):.1f} ms", "—",
        f"min {st[0]:.1f} ms, max {st[-1]:.1f} ms (--no-cluster: no API server sync)"))
    notes.append(
        "Webhook: oha over HTTPS (HTTP/1.1 keep-alive, --insecure: no certificate check on the client), "
        "POST of a %s-byte AdmissionReview built from engine/tests/golden/simple-job/input.yaml; "
        "fixed-rate runs use oha's latency correction (coordinated omission). The ceiling (bench/ceiling) "
        "is the same tokio/rustls(ring)/hyper-util/axum stack reading the body and answering the webhook's own "
        "%s-byte response, alternating with the webhook. The webhook logs one line per request (to a file here)."
        % (p["req_bytes"], p["resp_bytes"]))


def flood_rows(fig, dur, rows, notes):
    f = fig.kv("flood.txt")
    big, small = fig.json("flood-big"), fig.json("flood-small")
    codes = lambda run: ", ".join(f"{k}: {v:,}" for k, v in sorted(run.get("statusCodeDistribution", {}).items()))
    lp = small.get("latencyPercentiles", {})
    rows.append((
        f"flood: {int(f['conns'])} connections of {int(f['bytes']) / 1048576:.0f} MiB reviews for {dur} s; "
        f"ordinary reviews at {int(f['rate'])} req/s beside it, p50 / p99",
        f"{1000 * lp.get('p50', 0):.1f} / **{1000 * lp.get('p99', 0):.1f} ms**", "—",
        f"webhook VmHWM **{mib(f['hwm'])}** (chart limit 128 MiB), "
        f"{'still running' if f['alive'] == '1' else '**died**'}; ordinary answers {codes(small)}; "
        f"flood answers {codes(big)} (503: shed by --max-inflight-body-bytes)"))


def oci_layer(tar_path):
    """Compressed size of the image's layers and the first layer's compression."""
    with tarfile.open(tar_path) as t:
        members = {m.name.removeprefix("./"): m for m in t.getmembers()}

        def read(name):
            return json.load(t.extractfile(members[name]))

        def blob(digest):
            return read("blobs/" + digest.replace(":", "/"))

        manifest = blob(read("index.json")["manifests"][0]["digest"])
        layer = sum(lay["size"] for lay in manifest["layers"])
        layer_type = manifest["layers"][0]["mediaType"].rsplit(".", 1)[-1]
    return layer, layer_type


def sidecar_rows(fig, rows, notes):
    sp, idle, lat = fig.kv("sidecar-paths.txt"), fig.kv("sidecar-idle.txt"), fig.kv("sidecar-lat.txt")
    layer, layer_type = oci_layer(sp["tar"])
    tar_size, bin_size = os.path.getsize(sp["tar"]), os.path.getsize(sp["bin"])
    rows.append((f"sidecar binary (static musl, the image's amd64 binary, profile {sp.get('profile', 'release')})", f"{bin_size / 1024:.0f} KiB ({bin_size:,} B)",
                 "≤ 2 MiB", f"{100 * bin_size / 2097152:.0f}% of the goal"))
    rows.append(("sidecar install image: compressed layer", f"{layer / 1024:.0f} KiB ({layer_type})", "≤ 2 MiB",
                 f"OCI archive {tar_size / 1024:.0f} KiB"))
    rows.append((f"sidecar resident memory while watching ({idle['idle_seconds']} s)",
                 f"{int(idle['idle_rss_kib'])} KiB", "—", f"VmHWM {int(idle['idle_hwm_kib'])} KiB"))
    rows.append((f"sidecar CPU while watching ({idle['idle_seconds']} s)", f"{float(idle['idle_cpu_percent']):.3f}%",
                 "—", f"{idle['idle_cpu_ticks']} clock ticks (1 tick = {1000 // HZ} ms)"))
    rows.append(("sidecar wake-ups while the container runs (ctxt switches)",
                 f"{float(idle['idle_wakeups_per_s']):.3f} /s", "0",
                 f"{idle['idle_ctxt_switches']} switches in {idle['idle_seconds']} s"))
    n_runs, n_req = int(lat.get("latency_runs", 0)), int(lat.get("latency_requested", 0))
    runs_note = f"{n_runs} runs" + ("" if n_runs == n_req else f" of {n_req} asked (time budget hit)")
    rows.append((
        f"sidecar exit → hook first output, p50 / p99 ({runs_note})",
        f"{float(lat['latency_p50_ms']):.2f} / {float(lat['latency_p99_ms']):.2f} ms", "p99 ≤ 10 ms",
        f"kubelet relist 1,000 ms → p99 is {100 * float(lat['latency_p99_ms']) / 1000:.1f}% of it; "
        f"min {float(lat['latency_min_ms']):.2f}, max {float(lat['latency_max_ms']):.2f} ms"))
    notes.append(
        "Sidecar: every figure is taken on the image's amd64 binary, built by images/build.sh with the profile "
        "the images ship (images/profile.sh). The exit → hook latency includes the sidecar's fork+exec of "
        "`date` and date's dynamic loading (the hook is `date +%s%N`, the container's payload is `date +%s%N` "
        "too), measured on a pod stand-in made of namespaces (bench/sidecar.py).")


GOAL_OVER_PLAIN_MS = 100  # issue 14: injected <= +100 ms median over plain


def start_rows(fig, rows):
    """One row per sidecar-binary source (each phase has its own plain and
    reference pods) and one for the admission of each phase."""
    s = fig.kv("cluster-start.txt")
    n = s["start_pods_each"]
    if s.get("start_gate") or int(s.get("start_busy_pods", "0")):
        seccomp = s.get("start_pod_seccomp", "unset")
        limit = s.get("start_sidecar_cpu_limit", "default")
        rows.append(("pod start conditions", f"kube-prestop.io/gate: {s.get('start_gate', 'default')}", "—",
                     f"{s.get('start_busy_pods', '0')} busy pods of {s.get('start_busy_cpu', '?')} CPU "
                     f"spinning through the run; every pod's seccomp profile: {seccomp}; sidecar CPU limit: {limit}"))
    if "load_after_start" in s:
        rows.append(("machine load average (1/5/15 min) right after the pod start phases", s["load_after_start"],
                     "—", f"release's sidecarBinary.source before the phases (restored after): "
                     f"{s.get('start_source_before', '?')}"))
    for src in s["start_phases"].split(","):
        def q(kind, qn, m="start"):
            return float(s[f"{m}_{src}_{kind}_{qn}_ms"])

        d_plain, d_ref = q("inj", "p50") - q("plain", "p50"), q("inj", "p50") - q("ref", "p50")
        met = "met" if d_plain <= GOAL_OVER_PLAIN_MS else "**missed**"
        # Issue 28: the bench's percentile bootstrap interval of the median
        # difference against the reference (bench/cluster/src/stats.rs).
        ci = f"start_{src}_inj_minus_ref_ci95"
        vs_ref = f"{d_ref:+,.0f} ms over the one-native-sidecar reference"
        if ci + "_hi_ms" in s:
            vs_ref += (f" (95% bootstrap interval {float(s[ci + '_lo_ms']):+,.0f} .. "
                       f"**{float(s[ci + '_hi_ms']):+,.0f} ms**, {s['start_boot_resamples']} resamples, "
                       f"seed {s['start_boot_seed']})")
        refused = {k: int(s.get(f"start_{src}_{k}_refused", "0")) for k in ("inj", "plain", "ref")}
        if any(refused.values()):
            vs_ref += ("; **refused** (main-started time impossible, not samples): "
                       + ", ".join(f"{k} {n}" for k, n in refused.items()))
        rows.append((
            f"pod start, sidecarBinary.source={src}: pod added → main container's first instruction, p50 / p90 "
            f"({n} pods of each kind, interleaved, same phase)",
            f"{f1(q('inj', 'p50'))} / {f1(q('inj', 'p90'))} ms; plain {f1(q('plain', 'p50'))} / "
            f"{f1(q('plain', 'p90'))} ms; one native sidecar {f1(q('ref', 'p50'))} / {f1(q('ref', 'p90'))} ms",
            f"≤ +{GOAL_OVER_PLAIN_MS} ms median over plain",
            f"**{d_plain:+,.0f} ms** over plain ({q('inj', 'p90') - q('plain', 'p90'):+,.0f} ms p90): goal {met}; "
            + vs_ref))
        compared = int(s.get(f"start_{src}_armed_compared", "0"))
        if compared:
            rows.append((
                f"watcher armed before main's CreateContainer was called, sidecarBinary.source={src}",
                f"{s[f'start_{src}_armed_first']} of {compared} injected pods", "—",
                "without a gate nothing else orders them; with one it holds by construction"))
        a = f"adm_{src}"
        rows.append((
            f"admission, sidecarBinary.source={src}: the phase's reviews inside the webhook (log lines), p50 / p90 / max",
            f"{float(s[a + '_log_p50_ms']):.2f} / {float(s[a + '_log_p90_ms']):.2f} / "
            f"{float(s[a + '_log_max_ms']):.2f} ms", "—",
            f"{s[a + '_log_count']} reviews; as the API server saw the calls (its histogram, interpolated): "
            f"p50 {float(s[a + '_api_p50_ms']):.1f} ms, mean {float(s[a + '_api_mean_ms']):.1f} ms "
            f"over {float(s[a + '_api_count']):.0f} calls"))


def breakdown(fig):
    """Where the time goes: the median of each step, per kind of pod (the
    plain and reference pods of every phase together), as Markdown lines."""
    s = fig.kv("cluster-start.txt")
    cols = ["plain", "ref"] + s["start_phases"].split(",")
    names = {"plain": "plain", "ref": "one native sidecar"}
    out = ["\n## Where pod start goes (median of each step, ms; n samples)\n",
           "| step | " + " | ".join(names.get(c, f"injected, {c}") for c in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for step in s["bd_steps"].split(","):
        cells = []
        for c in cols:
            k = f"bd_{c}_{step}"
            cnt = int(s.get(k + "_n", "0"))
            v = s.get(k + "_p50_ms", "nan")
            cells.append("—" if cnt == 0 or v == "nan" else f"{float(v):,.1f} ({cnt})")
        if all(c == "—" for c in cells):
            continue
        out.append(f"| {s['bd_label_' + step]} | " + " | ".join(cells) + " |")
    if s.get("start_runtime_log") != "1":
        out.append("\nNo CRI times: containerd's log of the local cluster was not readable.")
    out.append(
        "\nSteps are medians of each interval on its own (they do not add up to the total's median). "
        "CRI calls: containerd's own log lines (called, returned; exit from the shim's `exited_at`); "
        "sidecar lines: the container log's timestamps; main's first instruction: its own `adjtimex` print; "
        "pod added: the bench's pod watch. All from the host's clock.")
    return out


def init_start(fig):
    """The init-start part's own Markdown (its lines without `=`), as lines."""
    with open(fig.path("cluster-init-start.txt")) as f:
        lines = [line.rstrip("\n") for line in f if "=" not in line]
    return lines


def burst_rows(fig, rows, notes):
    b = fig.kv("cluster-burst.txt")
    pods, comp = int(b["burst_pods"]), int(b["burst_completions"])
    secs = float(b["burst_seconds"])

    def ms3(k):
        return " / ".join(f"{float(b[f'burst_{k}_{q}_ms']):.1f}" for q in ("p50", "p90", "p99")) + " ms"

    def lg(q):
        return f"{float(b[f'burst_log_{q}_ms']):.2f}"

    rows.append((
        f"burst: Indexed Job of {comp} completions, parallelism {b['burst_parallelism']}"
        + (f", beside {b['burst_busy_pods']} busy pods of {b['burst_busy_cpu']} CPU" if int(b.get('burst_busy_pods', '0')) else "")
        + ": Job created → Complete",
        f"{secs:.1f} s ({comp / secs:.1f} completions/s)", "—",
        f"Job {b['burst_outcome']}; {pods} pods finished, {b['burst_succeeded']} Succeeded"
        + (f", **{b['burst_unfinished']} not finished at the deadline (not counted)**"
           if int(b.get("burst_unfinished", "0")) else "")))
    same = b["burst_wh_replicas_same"] == "1"
    rows.append((
        "burst: admission latency p50 / p90 / p99 / max, this namespace's reviews (webhook's log lines, exact)",
        f"{lg('p50')} / {lg('p90')} / {lg('p99')} / {lg('max')} ms", "—",
        f"{b['burst_log_count']} reviews for {pods} pods ({b['burst_log_reasons']}); "
        f"webhook histogram, all replicas, everyone's reviews meanwhile ({f1(b['burst_wh_count'])}): {ms3('wh')}"
        + ("" if same else " (**the replicas changed during the burst: partial**)")))
    rows.append((
        "burst: the same calls as the API server saw them (network, TLS, queueing), p50 / p90 / p99",
        ms3("api"), "—",
        f"its histogram for our webhook, everyone's calls meanwhile ({f1(b['burst_api_count'])}); "
        f"means: webhook {float(b['burst_wh_mean_ms']):.1f} ms, API server {float(b['burst_api_mean_ms']):.1f} ms"))
    rows.append((
        "burst: pods injected (sidecar + status annotation)", f"{b['burst_injected']} / {pods}", f"{pods} / {pods}",
        f"API server for our webhook: {f1(b['burst_api_fail_open'])} fail-open, "
        f"{f1(b['burst_api_rejections'])} rejections, {f1(b['burst_api_not_200'])} answers other than 200"))
    rows.append((
        "burst: hooks run (record lines by completion index; sidecars logging one `hook finished`)",
        f"{b['burst_hook_record_indexes']} / {comp} indexes; {b['burst_sidecar_one_hook']} / {pods} sidecars",
        f"{comp} / {comp}",
        f"{b['burst_hook_record_lines']} record lines; sidecars with no hook {b['burst_sidecar_no_hook']}"
        + (f" ({b['burst_sidecar_no_hook_reported']} of them logged `was never seen running`; "
           "their logs in raw/cluster-burst.json)"
           if int(b['burst_sidecar_no_hook']) and 'burst_sidecar_no_hook_reported' in b else "")
        + ", "
        f"more than one {b['burst_sidecar_more_hooks']}, logs unreadable {b['burst_sidecar_no_logs']}"
        + (f"; late hooks (the container never seen running) {b['burst_sidecar_late_hooks']}"
           if 'burst_sidecar_late_hooks' in b else "")))
    for key, what, count_note in (
        ("exit_hook",
         "burst: exit -> hook started (main's last log line -> the sidecar's `hook started`, runtime timestamps), p50 / p99 / max",
         "pods whose main printed a line"),
        ("pause",
         "burst: each sidecar's longest pause between two looks (`longest_pause=`), p50 / p99 / max over sidecars",
         f"sidecars; sidecar CPU request {b.get('burst_sidecar_cpu_request', 'default')}"),
    ):
        if int(b.get(f"burst_{key}_count", "0")):
            rows.append((
                what,
                " / ".join(f"{float(b[f'burst_{key}_{q}_ms']):.1f}" for q in ("p50", "p99", "max")) + " ms",
                "",
                f"{b[f'burst_{key}_count']} {count_note}"))
    inst = fig.kv("cluster-install.txt") if fig.have("cluster-install.txt") else {}
    notes.append(
        "Cluster: the local single-node cluster (tests/cluster; 2 cores shared with whatever else runs "
        f"on it) with kube-prestop installed ({inst.get('image', '?')}, {inst.get('replicas', '?')} replicas), "
        "driven by kube-prestop-cluster-bench (bench/cluster). Pod start: one phase per sidecar-binary source "
        "(the release switched with `helm upgrade --reuse-values --set sidecarBinary.source=...`, then until no "
        "webhook replica of the old configuration is left and dry runs get that delivery, one warm-up Job; "
        "every injected pod checked to have got it; the release rolled back to its revision at the end); in each, "
        "the same Job (busybox; `adjtimex` prints the kernel's clock and status as the container's first "
        "instruction, its sub-second field read in ns when the status has STA_NANO, else in µs, and a time "
        "before the Job create call or after the pod can have slept is refused and counted; then `sleep 1.5`; "
        "an exec preStop) in a labelled and "
        "an unlabelled namespace, and as the reference the unlabelled Job plus one do-nothing native sidecar "
        "(busybox, no probe, no lifecycle handler), A B C C B A, one pod at a time, each to its end; "
        "all times from the host's clock "
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


def table(work, repeat, dur, conns, started, load_start, load_end):
    """The whole report, as Markdown."""
    fig = Figures(work)
    rows, notes = [], []
    if fig.have("webhook-proc.txt"):
        webhook_rows(fig, repeat, dur, conns, rows, notes)
    if fig.have("flood.txt"):
        flood_rows(fig, dur, rows, notes)
    if fig.have("sidecar-idle.txt"):
        sidecar_rows(fig, rows, notes)
    if fig.have("cluster-start.txt"):
        start_rows(fig, rows)
    if fig.have("cluster-burst.txt"):
        burst_rows(fig, rows, notes)
    out = [
        f"# kube-prestop bench ({started})\n",
        f"Machine: {os.cpu_count()} CPUs (nproc), load average (1/5/15 min) at start {load_start}, "
        f"at end {load_end}. "
        "The load average includes the bench's own work (load generator, the burst's pods on the local "
        "cluster) and anything else running on the machine; absolute figures are noisy, "
        "the ratios come from the same run. Everything on the bench's side ran under nice.\n",
        "| what | value | goal | reference / ratio |",
        "|---|---|---|---|",
    ]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    if fig.have("cluster-start.txt"):
        out += breakdown(fig)
    if fig.have("cluster-init-start.txt"):
        out += init_start(fig)
    out.append("\nNotes:\n")
    out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("review", help="write the AdmissionReview the load runs POST")
    r.add_argument("pod_yaml")
    r.add_argument("out_json")
    t = sub.add_parser("table", help="print the results table from a work directory")
    t.add_argument("work")
    t.add_argument("repeat", type=int)
    t.add_argument("duration")
    t.add_argument("connections")
    t.add_argument("started")
    t.add_argument("load_start")
    t.add_argument("load_end")
    a = ap.parse_args()
    if a.cmd == "review":
        write_review(a.pod_yaml, a.out_json)
    else:
        sys.stdout.write(table(a.work, a.repeat, a.duration, a.connections, a.started, a.load_start, a.load_end))


if __name__ == "__main__":
    main()
