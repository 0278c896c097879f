//! Certificate rotation under load: the real server in-process on
//! 127.0.0.1, a bounded load generator (concurrent clients, a fresh TLS
//! connection per request, HTTP/2 and HTTP/1.1) posting AdmissionReviews,
//! while the serving certificate and key change on disk several times,
//! alternately overwritten in place and swapped as a Kubernetes Secret
//! volume does (`..data` symlink). Every request must succeed, and the last
//! certificate must be the one served at the end.
//!
//! Bounded: each worker stops when the rotations are done or after
//! `MAX_PER_WORKER` requests; the whole test has a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_common::{Issued, TestServer, assert_review_echo, job_pod, review, secret_volume};
use tokio::sync::Mutex;

const WORKERS: usize = 8;
const ROTATIONS: u32 = 10;
/// Each worker sends at least this many requests (the load outlasts the
/// rotations) and at most `MAX_PER_WORKER`.
const MIN_PER_WORKER: usize = 20;
const MAX_PER_WORKER: usize = 5_000;
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    failed: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// DER of the certificate each successful request saw, deduplicated in
    /// order of first sight.
    seen: Mutex<Vec<Vec<u8>>>,
}

/// The certificate served to a new connection (a new client: an HTTP/2
/// connection would otherwise be reused across requests).
async fn served_cert(server: &TestServer, url: &str) -> Option<Vec<u8>> {
    let r = server.client().get(url).send().await.ok()?;
    let info = r.extensions().get::<reqwest::tls::TlsInfo>()?;
    info.peer_certificate().map(<[u8]>::to_vec)
}

/// One load worker: `/mutate` POSTs, each on a new client (so a new TCP
/// and TLS connection: HTTP/2 connections are otherwise shared), each
/// answer checked.
async fn worker(
    id: usize,
    builder: impl Fn() -> reqwest::Client,
    url: String,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> usize {
    let mut sent = 0;
    while sent < MAX_PER_WORKER && (sent < MIN_PER_WORKER || !stop.load(Ordering::Relaxed)) {
        sent += 1;
        let uid = format!("load-{id}-{sent}");
        let body = review(&uid, "pods", "CREATE", job_pod()).to_string();
        let client = builder();
        let result = async {
            let r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| format!("send: {e:?}"))?;
            let cert = r
                .extensions()
                .get::<reqwest::tls::TlsInfo>()
                .and_then(|i| i.peer_certificate().map(<[u8]>::to_vec));
            let status = r.status().as_u16();
            let text = r.text().await.map_err(|e| format!("body: {e:?}"))?;
            if status != 200 {
                return Err(format!("HTTP {status}: {text}"));
            }
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("json: {e}: {text}"))?;
            let response = assert_review_echo(&value, &uid);
            if response["allowed"] != true || response.get("patch").is_none() {
                return Err(format!("not injected: {value}"));
            }
            Ok(cert)
        }
        .await;
        match result {
            Ok(cert) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
                if let Some(der) = cert {
                    let mut seen = tally.seen.lock().await;
                    if !seen.contains(&der) {
                        seen.push(der);
                    }
                }
            }
            Err(e) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                tally.errors.lock().await.push(format!("{uid}: {e}"));
            }
        }
    }
    sent
}

/// Overwrites the files the server reads, in place (through the
/// `tls.crt`/`tls.key` symlinks into the current `..data` generation):
/// key first, so for a moment the pair does not match and the server must
/// keep the old certificate.
fn overwrite_in_place(server: &TestServer, cert: &Issued) {
    std::fs::write(&server.key_file, &cert.key_pem).unwrap();
    std::fs::write(&server.cert_file, &cert.cert_pem).unwrap();
}

async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificate_rotation_under_load_fails_no_request() {
    tokio::time::timeout(DEADLINE, run())
        .await
        .expect("rotation under load finished within the deadline");
}

async fn run() {
    let server =
        TestServer::start_with_files(|dir, issued| secret_volume(dir, issued, 0), |_| {}).await;
    let url = server.url("/mutate");
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let mut workers = Vec::new();
    for id in 0..WORKERS {
        // Half the workers speak HTTP/2 (ALPN h2), half HTTP/1.1.
        let ca = reqwest::Certificate::from_pem(server.pki.ca_pem().as_bytes()).unwrap();
        let builder = move || {
            let b = reqwest::Client::builder()
                .tls_certs_only([ca.clone()])
                .tls_info(true)
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(20));
            let b = if id % 2 == 0 { b } else { b.http1_only() };
            b.build().unwrap()
        };
        workers.push(tokio::spawn(worker(
            id,
            builder,
            url.clone(),
            stop.clone(),
            tally.clone(),
        )));
    }

    let readyz = server.url("/readyz");
    let dir = server.dir.path().to_owned();
    let mut last = server.first_cert.der.clone();
    for generation in 1..=ROTATIONS {
        // Let the load run between rotations: a few requests must complete
        // under the current certificate first.
        let mark = tally.ok.load(Ordering::Relaxed) + tally.failed.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(30), "load progress", || {
            let done = tally.ok.load(Ordering::Relaxed) + tally.failed.load(Ordering::Relaxed);
            async move { done >= mark + 2 * WORKERS }
        })
        .await;

        let next = server.pki.issue(&format!("rotation-{generation}"));
        if generation % 2 == 1 {
            overwrite_in_place(&server, &next);
        } else {
            secret_volume(&dir, &next, generation);
        }
        let want = next.der.clone();
        wait_until(
            Duration::from_secs(10),
            &format!("rotation {generation} served"),
            || {
                let server = &server;
                let readyz = &readyz;
                let want = &want;
                async move { served_cert(server, readyz).await.as_deref() == Some(want.as_slice()) }
            },
        )
        .await;
        last = want;
    }
    stop.store(true, Ordering::Relaxed);

    let mut sent = 0;
    for w in workers {
        sent += w.await.unwrap();
    }
    let elapsed = started.elapsed();
    let ok = tally.ok.load(Ordering::Relaxed);
    let failed = tally.failed.load(Ordering::Relaxed);
    let seen = tally.seen.lock().await.len();
    eprintln!(
        "rotation under load: {sent} requests ({ok} ok, {failed} failed) from {WORKERS} workers \
         in {elapsed:?}, {ROTATIONS} rotations, {seen} distinct certificates seen by the load"
    );
    let errors = tally.errors.lock().await;
    assert_eq!(
        failed,
        0,
        "failed requests: {:#?}",
        &errors[..errors.len().min(20)]
    );
    assert_eq!(ok, sent);
    assert!(sent >= WORKERS * MIN_PER_WORKER);
    // The load itself saw certificates change, and the last one is served.
    assert!(seen >= 2, "the load saw only {seen} certificate(s)");
    assert_eq!(served_cert(&server, &readyz).await, Some(last));
}
