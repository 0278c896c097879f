//! `kube-prestop-webhook outcomes` as a real process against a fake API
//! server: it lists and watches the pods with the injected label selector
//! (and only those), counts the runs of a pod's sidecar messages once across
//! the list and a watch event repeating them, and serves the counters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../server/tests/http_common/mod.rs"]
mod http_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::Uri;
use axum::routing::get;
use futures_util::StreamExt;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

const HEADER: &str = "kube-prestop hook runs, oldest first:\n";

fn line(container: &str, instance: &str, hook: &str) -> String {
    format!(
        "container={container} instance={instance} container_exit=exit:0 hook={hook} duration_ms=- grace_cut=false\n"
    )
}

/// A Job's injected pod whose sidecar `kube-prestop-main` terminated with
/// `message`, plus a user's native sidecar with garbage (never read).
fn pod(message: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-1-abcde",
            "namespace": "batch",
            "uid": "8d0c6e0e-0000-4000-8000-000000000001",
            "resourceVersion": "2",
            "labels": {"kube-prestop.io/injected": "true"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-1", "uid": "u", "controller": true}]
        },
        "spec": {
            "initContainers": [
                {"name": "kube-prestop-main", "image": "x", "restartPolicy": "Always"},
                {"name": "proxy", "image": "x", "restartPolicy": "Always"}
            ],
            "containers": [{"name": "main", "image": "x"}]
        },
        "status": {
            "initContainerStatuses": [
                {"name": "kube-prestop-main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "containerID": "containerd://aa", "message": message}}},
                {"name": "proxy", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "containerID": "containerd://bb", "message": "not ours"}}}
            ]
        }
    })
}

#[derive(Clone, Default)]
struct Seen {
    selectors: Arc<Mutex<Vec<(bool, String)>>>,
}

/// The query's parameters, percent-decoded.
fn query(uri: &Uri) -> HashMap<String, String> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'%' if i + 2 < b.len() => {
                    out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                c => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).unwrap()
    }
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

async fn pods(State(seen): State<Seen>, uri: Uri) -> Body {
    let q = query(&uri);
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    seen.selectors
        .lock()
        .unwrap()
        .push((watch, q.get("labelSelector").cloned().unwrap_or_default()));
    let first = format!(
        "{HEADER}{}{}",
        line("main", "1-1", "exit:0"),
        line("main", "-", "missed")
    );
    if !watch {
        return Body::from(
            json!({
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": "2"},
                "items": [pod(&first)]
            })
            .to_string(),
        );
    }
    // The same pod again: its sidecar restarted and its new message repeats
    // the two runs and adds one, and the late run of a run it never saw
    // (instance 0-0). Then the watch stays open.
    let mut later = pod(&format!(
        "{first}{}{}",
        line("main", "2-2", "exit:3"),
        "container=main instance=0-0 container_exit=unknown hook=exit:0 duration_ms=0 grace_cut=false\n"
    ));
    later["metadata"]["resourceVersion"] = json!("3");
    later["status"]["initContainerStatuses"][0]["state"]["terminated"]["containerID"] =
        json!("containerd://cc");
    let event = format!("{}\n", json!({"type": "MODIFIED", "object": later}));
    let stream =
        futures_util::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(event)) })
            .chain(futures_util::stream::pending());
    Body::from_stream(stream)
}

#[tokio::test]
async fn outcomes_watches_injected_pods_and_counts_each_run_once() {
    http_common::install_crypto();
    let seen = Seen::default();
    let app = Router::new()
        .route("/api/v1/pods", get(pods))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{api}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "--log-format",
            "json",
            "outcomes",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("KUBE_PRESTOP_METRICS_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening metrics=")
        .expect(&first)
        .to_owned();

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let want = [
        "kube_prestop_hook_outcomes_total{outcome=\"ran\",late=\"false\",namespace=\"batch\",owner_kind=\"Job\"} 1",
        "kube_prestop_hook_outcomes_total{outcome=\"missed\",late=\"false\",namespace=\"batch\",owner_kind=\"Job\"} 1",
        "kube_prestop_hook_outcomes_total{outcome=\"failed\",late=\"false\",namespace=\"batch\",owner_kind=\"Job\"} 1",
        "kube_prestop_hook_outcomes_total{outcome=\"ran\",late=\"true\",namespace=\"batch\",owner_kind=\"Job\"} 1",
        "kube_prestop_outcomes_tracked_pods 1",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = match client.get(format!("http://{addr}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if want.iter().all(|w| text.contains(w)) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "metrics never showed {want:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ready = client
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    // The port is served with the webhook metrics port's limits: a request
    // head past the 16 KiB read buffer gets 431 (axum's own server would
    // buffer about 400 KiB of it per connection).
    let head = oversized_head_status(&addr).await;
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    // Nothing else counted: no other outcome, nothing unreadable (the
    // user's sidecar's message is not read).
    assert_eq!(
        text.matches("kube_prestop_hook_outcomes_total{").count(),
        4,
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.starts_with("kube_prestop_hook_outcome_messages_unreadable_total{"))
            .all(|l| l.ends_with(" 0")),
        "{text}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let selectors = seen.selectors.lock().unwrap().clone();
    assert!(selectors.iter().any(|(watch, _)| !watch), "{selectors:?}");
    assert!(selectors.iter().any(|(watch, _)| *watch), "{selectors:?}");
    for (_, selector) in &selectors {
        assert_eq!(selector, "kube-prestop.io/injected=true");
    }
}

/// The status line the server at `addr` answers to a `GET /livez` whose
/// one header line is longer than the HTTP/1.1 read buffer.
async fn oversized_head_status(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let pad = "a".repeat(kube_prestop_server::HTTP1_MAX_BUF_BYTES);
    let request = format!("GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Pad: {pad}\r\n\r\n");
    // The server may answer and close before it has read all of it.
    let _ = tcp.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}
