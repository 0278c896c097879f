//! `kube-prestop-webhook serve` as a real process: flags, the printed bound
//! addresses, JSON logs with one line per decision, and SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../server/tests/http_common/mod.rs"]
mod http_common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_common::{Pki, assert_review_echo, install_crypto, job_pod, review, write_pair};

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

/// A `serve --no-cluster` process and what a test needs of it.
struct Served {
    child: std::process::Child,
    /// Its HTTPS and metrics addresses, as its first stdout line gave them.
    https: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    /// A client that trusts the certificate it serves.
    client: reqwest::Client,
    /// Holds its certificate files.
    _dir: tempfile::TempDir,
    /// Its stdout, kept open as long as it runs.
    _stdout: BufReader<std::process::ChildStdout>,
}

/// Starts `serve --no-cluster` on loopback (any free ports) with
/// `--log-format format` and `--drain-delay drain_delay`, its stdout and
/// stderr piped, and reads the addresses from its first stdout line
/// (`listening https=127.0.0.1:PORT metrics=127.0.0.1:PORT`).
fn serve(format: &str, drain_delay: &str) -> Served {
    install_crypto();
    let pki = Pki::new();
    let issued = pki.issue("serve");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_pair(dir.path(), &issued);
    let mut child = Command::new(BIN)
        .args(["--log-format", format, "--log-level", "info", "serve"])
        .args([
            "--listen-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .args(["--no-cluster", "--drain-delay", drain_delay])
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .expect(&line)
    };
    let (https, metrics) = (address("https="), address("metrics="));
    let ca = reqwest::Certificate::from_pem(pki.ca_pem().as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    Served {
        child,
        https,
        metrics,
        client,
        _dir: dir,
        _stdout: stdout,
    }
}

#[tokio::test]
async fn serve_prints_addresses_logs_json_and_stops_on_sigterm() {
    let Served {
        mut child,
        https,
        metrics,
        client,
        _dir,
        _stdout,
    } = serve("json", "200ms");
    let base = format!("https://localhost:{}", https.port());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.get(format!("{base}/readyz")).send().await {
            Ok(r) if r.status() == 200 => break,
            _ => {
                assert!(Instant::now() < deadline, "not ready");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let r = client
        .post(format!("{base}/mutate"))
        .body(review("uid-cli", "pods", "CREATE", job_pod()).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_review_echo(&body, "uid-cli");
    // A misspelt annotation: logged with the decision (issue #8).
    let mut misspelt = job_pod();
    misspelt["metadata"]["annotations"]["kube-prestop.io/contianers"] = "work".into();
    let r = client
        .post(format!("{base}/mutate"))
        .body(review("uid-misspelt", "pods", "CREATE", misspelt).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Skipped pods (no exec preStop): one that asked for injection with
    // `kube-prestop.io/inject: "true"`, one that did not. Only the first
    // gets an admission warning, which a Job's pod never shows (the Job
    // controller drops it), so its decision line is at warn level too.
    for (uid, opt_in) in [("uid-opted-in", true), ("uid-plain-skip", false)] {
        let mut pod = job_pod();
        pod["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("lifecycle");
        if opt_in {
            pod["metadata"]["annotations"]["kube-prestop.io/inject"] = "true".into();
        }
        let r = client
            .post(format!("{base}/mutate"))
            .body(review(uid, "pods", "CREATE", pod).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            body["response"]["warnings"].is_array(),
            opt_in,
            "{uid}: {body}"
        );
    }
    let metrics_text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics_text.contains("kube_prestop_admissions_total"));

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not stop after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "{exit:?}");

    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    let decision = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["uid"] == "uid-cli")
        .unwrap_or_else(|| panic!("no JSON decision line in:\n{logs}"));
    assert_eq!(decision["namespace"], "demo");
    assert_eq!(decision["owner"], "Job/demo");
    assert_eq!(decision["pod"], "demo-");
    assert_eq!(decision["decision"], "inject");
    assert_eq!(decision["reason"], "injected");
    let misspelt = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["uid"] == "uid-misspelt")
        .unwrap_or_else(|| panic!("no decision line for uid-misspelt in:\n{logs}"));
    assert_eq!(misspelt["level"], "WARN", "{misspelt}");
    assert_eq!(misspelt["decision"], "inject", "{misspelt}");
    assert_eq!(
        misspelt["unknown_annotations"], "kube-prestop.io/contianers",
        "{misspelt}"
    );
    let line_of = |uid: &str| {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["uid"] == uid)
            .unwrap_or_else(|| panic!("no decision line for {uid} in:\n{logs}"))
    };
    let (opted_in, plain) = (line_of("uid-opted-in"), line_of("uid-plain-skip"));
    assert_eq!(opted_in["level"], "WARN", "{opted_in}");
    assert_eq!(plain["level"], "INFO", "{plain}");
    for line in [&opted_in, &plain] {
        assert_eq!(line["decision"], "skip", "{line}");
        assert_eq!(line["reason"], "no_exec_prestop", "{line}");
    }
    // The same fields at either level.
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.retain(|k| k != "timestamp" && k != "level");
        k.sort();
        k
    };
    assert_eq!(keys(&opted_in), keys(&plain));
    assert!(logs.contains("SIGTERM received"), "{logs}");
}

/// `serve --no-cluster --log-format FORMAT` posted `reviews` (bodies), then
/// stopped with SIGTERM: its stderr, the log.
async fn logs_of(format: &str, reviews: &[String]) -> String {
    let Served {
        mut child,
        https,
        client,
        _dir,
        _stdout,
        ..
    } = serve(format, "0s");
    let base = format!("https://localhost:{}", https.port());
    for body in reviews {
        let r = client
            .post(format!("{base}/mutate"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(child.wait().unwrap().success());
    logs
}

/// The newcomer's reproductions (t10, t13): a review whose uid,
/// namespace and pod `generateName` carry line feeds, carriage returns and
/// ESC forged a log line of their own with `--log-format text`; an
/// invalid `gate` of 3 MB and a `containers` of 4 MB made a log line of as
/// many megabytes. In both formats the decision line now shows each of
/// them escaped and cut: no line is forged and none is over a few
/// kilobytes.
#[tokio::test]
async fn decision_lines_escape_and_cut_the_requests_strings() {
    let mut forged = review(
        "u\nFAKE-LINE uid=evil\u{1b}[2J",
        "pods",
        "CREATE",
        job_pod(),
    );
    forged["request"]["object"]["metadata"]["annotations"]["kube-prestop.io/gate"] =
        "x\nFAKE 2026-12-07T00:00:00Z INFO admission decision=injected\u{1b}[31m".into();
    forged["request"]["object"]["metadata"]["generateName"] = "p\nFAKE pod line\r".into();
    forged["request"]["namespace"] = "ns\nFAKE ns".into();
    let mut reviews = vec![forged.to_string()];
    for (uid, key, value) in [
        ("uid-gate", "kube-prestop.io/gate", "g".repeat(3_000_000)),
        (
            "uid-containers",
            "kube-prestop.io/containers",
            "a".repeat(4 * 1024 * 1024 - 3000),
        ),
    ] {
        let mut pod = job_pod();
        pod["metadata"]["annotations"][key] = value.into();
        reviews.push(review(uid, "pods", "CREATE", pod).to_string());
    }
    for format in ["text", "json"] {
        let logs = logs_of(format, &reviews).await;
        for line in logs.lines() {
            assert!(
                line.len() < 8 * 1024,
                "{format}: a line of {} bytes",
                line.len()
            );
            assert!(
                !line.contains("FAKE") || line.contains("\\nFAKE"),
                "{format}: {line}"
            );
        }
        assert!(!logs.contains(['\r', '\u{1b}']), "{format}: {logs}");
        let decisions: Vec<&str> = logs.lines().filter(|l| l.contains("admission")).collect();
        assert_eq!(decisions.len(), 3, "{format}: {logs}");
        let line = decisions[0];
        for field in [
            "u\\nFAKE-LINE uid=evil\\u{1b}[2J",
            "ns\\nFAKE ns",
            "p\\nFAKE pod line\\r",
        ] {
            // JSON writes the backslash of the escape as `\\`.
            let shown = match format {
                "json" => field.replace('\\', "\\\\"),
                _ => field.to_owned(),
            };
            assert!(line.contains(&shown), "{format}: {shown} not in {line}");
        }
        for (line, needle) in decisions[1..]
            .iter()
            .zip(["...(3000000 bytes)", "...(4191304 bytes)"])
        {
            assert!(line.contains("invalid annotation"), "{format}: {line}");
            assert!(line.contains(needle), "{format}: {needle} not in {line}");
        }
        if format == "json" {
            let uid = serde_json::from_str::<serde_json::Value>(line).unwrap()["uid"].clone();
            assert_eq!(uid, "u\\nFAKE-LINE uid=evil\\u{1b}[2J");
        }
    }
}

/// `serve` with `args` (and `env`) besides a certificate that exists and
/// `--no-cluster`; it must exit at once with an error: its stderr.
fn serve_refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_pair(dir.path(), &pki.issue("serve"));
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .arg("--no-cluster")
        .args(args)
        .env_remove("KUBECONFIG");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.stdout(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "serve {args:?} {env:?} started");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn zero_timeouts_and_zero_connections_are_refused_at_start_naming_the_flag() {
    // Before: `--read-timeout 0s` started and dropped every HTTPS request
    // (while /livez said ok); `--max-connections 0` served as 1.
    let cases = [
        (
            "--read-timeout",
            "KUBE_PRESTOP_READ_TIMEOUT",
            "0s",
            "more than 0",
        ),
        (
            "--write-timeout",
            "KUBE_PRESTOP_WRITE_TIMEOUT",
            "0",
            "more than 0",
        ),
        (
            "--idle-timeout",
            "KUBE_PRESTOP_IDLE_TIMEOUT",
            "0ms",
            "more than 0",
        ),
        (
            "--max-connections",
            "KUBE_PRESTOP_MAX_CONNECTIONS",
            "0",
            "at least 1",
        ),
    ];
    for (flag, env, zero, why) in cases {
        for stderr in [
            serve_refused(&[flag, zero], &[]),
            serve_refused(&[], &[(env, zero)]),
        ] {
            assert!(stderr.contains(flag), "{flag}: {stderr}");
            assert!(stderr.contains(why), "{flag}: {stderr}");
        }
    }
}

/// A listener on 127.0.0.1 at a free port between 21900 and 21999.
fn taken_port() -> std::net::TcpListener {
    (21900..22000)
        .find_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
        .expect("a free port in 21900..22000")
}

#[test]
fn a_port_in_use_is_reported_once_naming_the_listener() {
    // Before: "cannot listen on 127.0.0.1:P: Address already in use (os
    // error 98): Address already in use (os error 98)".
    for https in [true, false] {
        let taken = taken_port();
        let in_use = taken.local_addr().unwrap().to_string();
        let other = taken_port();
        let free = other.local_addr().unwrap().to_string();
        drop(other);
        let (listen, metrics) = if https {
            (in_use.as_str(), free.as_str())
        } else {
            (free.as_str(), in_use.as_str())
        };
        let stderr = serve_refused(&["--listen-addr", listen, "--metrics-addr", metrics], &[]);
        assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
        assert!(stderr.contains(&in_use), "{stderr}");
        let listener = if https { "HTTPS port" } else { "metrics port" };
        assert!(stderr.contains(listener), "{stderr}");
    }
}
