//! Compute floor for `make bench`: the bare cost of one admission decision
//! (parse the AdmissionReview, run the engine, serialise the answer with its
//! JSON Patch), with no HTTP, TLS, logging or metrics. A plain timing loop
//! (no criterion, to add no dependencies): batches of calls to
//! [`kube_prestop_server::admission::review`], median and minimum
//! of the per-call times over the batches.
//!
//! The body is the file named by `KPS_BENCH_BODY` (bench/run.sh passes the
//! same AdmissionReview it sends over HTTPS), else one built from the golden
//! `engine/tests/golden/simple-job/input.yaml` pod.
//!
//! Besides wall time per call (median and minimum over the batches), it
//! prints the process CPU time per call over all batches (`floor_cpu_us`,
//! from `/proc/self/stat`), which a busy shared machine disturbs much less.
//! With `KPS_BENCH_CALLS=N` it makes exactly one warm-up call and then N
//! calls, and prints only the counts: for `perf stat -e instructions`
//! (instructions per call = counted / (N + 1), start-up aside).
//!
//! It also times the parse-cost estimate alone (`floor_estimate_median_us`,
//! [`kube_prestop_server::admission::estimate_review`]), which every call
//! makes first.
//!
//! Run: `cargo bench -p kube-prestop-server --bench admission`. Prints
//! `key=value` lines. Never part of the tests; no timed assertions.

use std::error::Error;
use std::hint::black_box;
use std::time::Instant;

use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::EngineConfig;
use kube_prestop_metrics::labels::DecisionLabel;
use kube_prestop_server::FailureMode;
use kube_prestop_server::admission::{ParseBudget, estimate_review, review};
use serde_json::{Value, json};

/// The server binary's allocator (src/main.rs), so the floor is measured
/// with what the server runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn golden_body() -> Result<Vec<u8>, Box<dyn Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../engine/tests/golden/simple-job/input.yaml"
    );
    let pod: Value = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    let namespace = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let gvk = json!({"group": "", "version": "v1", "kind": "Pod"});
    let gvr = json!({"group": "", "version": "v1", "resource": "pods"});
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b4bd6a4-9d0c-4a4e-8f1e-6f1b2a3c4d5e",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    });
    Ok(serde_json::to_vec(&review)?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let body = match std::env::var_os("KPS_BENCH_BODY") {
        Some(path) => std::fs::read(path)?,
        None => golden_body()?,
    };
    let cache = ClusterCache::disconnected();
    let config = EngineConfig::default();
    let mode = FailureMode::Allow;
    // One budget for every call, as the server holds one.
    let budget = ParseBudget::default();

    let first = review(&body, &cache, &config, mode, &budget);
    if first.decision != DecisionLabel::Inject {
        return Err(format!(
            "expected an injection, got {} ({})",
            first.decision, first.reason
        )
        .into());
    }

    if let Some(calls) = std::env::var("KPS_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        for _ in 0..calls {
            black_box(review(black_box(&body), &cache, &config, mode, &budget));
        }
        println!("floor_request_bytes={}", body.len());
        println!("floor_calls={}", calls + 1);
        return Ok(());
    }

    // Warm up for ~0.5 s, then size batches to ~50 ms each.
    let warm = Instant::now();
    let mut calls: u64 = 0;
    while warm.elapsed().as_millis() < 500 {
        black_box(review(black_box(&body), &cache, &config, mode, &budget));
        calls += 1;
    }
    let per_call = warm.elapsed().as_secs_f64() / calls.max(1) as f64;
    let batch = ((0.05 / per_call) as u64).max(10);
    let batches: usize = std::env::var("KPS_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut ns: Vec<f64> = Vec::with_capacity(batches);
    let cpu_before = process_cpu_seconds();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            black_box(review(black_box(&body), &cache, &config, mode, &budget));
        }
        ns.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    let cpu = process_cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    ns.sort_by(f64::total_cmp);
    let median = ns[ns.len() / 2];
    let min = ns[0];
    println!("floor_request_bytes={}", body.len());
    println!("floor_response_bytes={}", first.body().len());
    println!("floor_batches={batches}");
    println!("floor_calls_per_batch={batch}");
    println!("floor_median_us={:.2}", median / 1000.0);
    println!("floor_min_us={:.2}", min / 1000.0);
    println!("floor_per_core_per_s={:.0}", 1e9 / median);
    if let Some(cpu) = cpu {
        let calls = batch as f64 * batches as f64;
        println!("floor_cpu_us={:.2}", cpu * 1e6 / calls);
    }
    // The share of it that is the parse-cost estimate (one pass over the
    // body, nothing built: `admission::estimate_review`), timed alone the
    // same way.
    let mut est: Vec<f64> = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            let _ = black_box(estimate_review(black_box(&body)));
        }
        est.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    est.sort_by(f64::total_cmp);
    println!(
        "floor_estimate_median_us={:.2}",
        est[est.len() / 2] / 1000.0
    );
    Ok(())
}

/// User + system CPU time of this process so far, in seconds (Linux
/// `/proc/self/stat`, clock ticks of 1/100 s: precise enough over the
/// seconds the batches take).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}
