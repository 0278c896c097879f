//! Shared set-up of the HTTP tests: a throw-away PKI, the real server
//! in-process on ephemeral ports, and HTTPS clients trusting the test CA.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_server::{Server, ServerConfig};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Install ring as rustls' process-wide provider (reqwest is built with
/// `rustls-no-provider`).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A test CA that issues serving certificates for localhost / 127.0.0.1.
pub struct Pki {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// One issued serving certificate.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Pki {
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-prestop test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let issuer = CertifiedIssuer::self_signed(params, key).unwrap();
        Self { issuer }
    }

    pub fn ca_pem(&self) -> String {
        self.issuer.as_ref().pem()
    }

    pub fn issue(&self, common_name: &str) -> Issued {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// The server under test.
pub struct TestServer {
    pub https: SocketAddr,
    pub metrics: SocketAddr,
    pub pki: Pki,
    pub first_cert: Issued,
    pub dir: tempfile::TempDir,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

pub fn write_pair(dir: &Path, issued: &Issued) -> (PathBuf, PathBuf) {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    (cert, key)
}

impl TestServer {
    /// Start with defaults adjusted by `configure`, and wait until ready.
    pub async fn start(configure: impl FnOnce(&mut ServerConfig)) -> Self {
        Self::start_with_files(write_pair, configure).await
    }

    /// Like [`Self::start`], but `layout` writes the certificate files into
    /// the directory (e.g. as a Kubernetes Secret volume) and returns their
    /// paths.
    pub async fn start_with_files(
        layout: impl FnOnce(&Path, &Issued) -> (PathBuf, PathBuf),
        configure: impl FnOnce(&mut ServerConfig),
    ) -> Self {
        Self::start_full(layout, configure, ClusterCache::disconnected()).await
    }

    /// Like [`Self::start`], answering from `cache` (cluster facts the test
    /// sets up) instead of a disconnected one.
    pub async fn start_with_cache(
        cache: ClusterCache,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> Self {
        Self::start_full(write_pair, configure, cache).await
    }

    async fn start_full(
        layout: impl FnOnce(&Path, &Issued) -> (PathBuf, PathBuf),
        configure: impl FnOnce(&mut ServerConfig),
        cache: ClusterCache,
    ) -> Self {
        install_crypto();
        let pki = Pki::new();
        let first_cert = pki.issue("first");
        let dir = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = layout(dir.path(), &first_cert);
        let mut config = ServerConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            cert_file.clone(),
            key_file.clone(),
        );
        config.cert_reload_interval = Duration::from_millis(100);
        config.drain_delay = Duration::from_millis(200);
        config.shutdown_grace = Duration::from_secs(5);
        configure(&mut config);
        let server = Server::bind(config, cache).await.expect("server binds");
        let https = server.https_addr();
        let metrics = server.metrics_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        let me = Self {
            https,
            metrics,
            pki,
            first_cert,
            dir,
            cert_file,
            key_file,
            stop: Some(tx),
            task: Some(task),
        };
        me.wait_ready().await;
        me
    }

    /// A fresh HTTPS client (new connections) trusting the test CA.
    pub fn client(&self) -> reqwest::Client {
        self.client_builder().build().unwrap()
    }

    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        let ca = reqwest::Certificate::from_pem(self.pki.ca_pem().as_bytes()).unwrap();
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .tls_info(true)
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(20))
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.https.port())
    }

    /// The metrics port's `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        reqwest::get(self.metrics_url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn metrics_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.metrics.port())
    }

    /// Poll `/readyz` on the HTTPS port until 200 (10 s at most).
    pub async fn wait_ready(&self) {
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(r) = client.get(self.url("/readyz")).send().await
                && r.status() == 200
            {
                return;
            }
            assert!(Instant::now() < deadline, "server not ready in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// POST a body to `/mutate`; returns (status, parsed JSON body).
    pub async fn mutate(&self, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r = self
            .client()
            .post(self.url("/mutate"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {text}"));
        (status, value)
    }

    /// Ask the server to stop (like SIGTERM) and return the join handle.
    pub fn shutdown(&mut self) -> JoinHandle<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.take().expect("server task")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A Job-owned pod with an exec preStop, as the Job controller creates it.
pub fn job_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "demo-",
            "namespace": "demo",
            "labels": {"batch.kubernetes.io/job-name": "demo", "example.com/team": "a"},
            "annotations": {"example.com/note": "x"},
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "demo",
                "uid": "5d3c1f7e-0000-4000-8000-000000000001",
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "work",
                "image": "busybox:1.36",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo hi"],
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo cleanup from preStop"]}}}
            }]
        }
    })
}

/// Lay `issued` out like a Kubernetes Secret volume under `dir/secret`:
/// `tls.crt -> ..data/tls.crt`, `..data -> ..<generation>`; a later call
/// swaps the `..data` symlink atomically, as the kubelet does.
pub fn secret_volume(dir: &Path, issued: &Issued, generation: u32) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::symlink;
    let root = dir.join("secret");
    let versioned = root.join(format!("..gen_{generation}"));
    std::fs::create_dir_all(&versioned).unwrap();
    std::fs::write(versioned.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(versioned.join("tls.key"), &issued.key_pem).unwrap();
    let tmp = root.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(format!("..gen_{generation}"), &tmp).unwrap();
    std::fs::rename(&tmp, root.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key"] {
        let link = root.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
    (root.join("tls.crt"), root.join("tls.key"))
}

/// An `admission.k8s.io/v1` AdmissionReview.
pub fn review(uid: &str, resource: &str, operation: &str, object: Value) -> Value {
    let (group, kind) = match resource {
        "pods" => ("", "Pod"),
        "configmaps" => ("", "ConfigMap"),
        "jobs" => ("batch", "Job"),
        other => panic!("unknown resource {other}"),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "requestKind": {"group": group, "version": "v1", "kind": kind},
            "requestResource": {"group": group, "version": "v1", "resource": resource},
            "namespace": "demo",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// Assert the response is an `admission.k8s.io/v1` AdmissionReview echoing
/// `uid`; returns its `response`.
pub fn assert_review_echo(body: &Value, uid: &str) -> Value {
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{body}");
    assert_eq!(body["kind"], "AdmissionReview", "{body}");
    assert_eq!(body["response"]["uid"], uid, "{body}");
    body["response"].clone()
}

/// The decoded JSON Patch of a response (base64 string), if any.
pub fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    use base64::Engine as _;
    let b64 = response
        .get("patch")?
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// The `kube-prestop.io/skipped` value the response's patch writes on
/// `pod`, asserting that the patch writes nothing else; `None` without a
/// patch.
pub fn skipped_of(pod: &Value, response: &Value) -> Option<String> {
    let patch = patch_of(response)?;
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    let note = out["metadata"]["annotations"]["kube-prestop.io/skipped"]
        .as_str()
        .unwrap_or_else(|| panic!("a patch without kube-prestop.io/skipped: {response}"))
        .to_owned();
    let mut expected = pod.clone();
    expected["metadata"]["annotations"]["kube-prestop.io/skipped"] = json!(note);
    assert_eq!(out, expected, "the patch does more than annotate");
    Some(note)
}

/// The admission warnings of a response: `None` when it has no `warnings`
/// field; panics when the field is not a list of strings.
pub fn warnings_of(response: &Value) -> Option<Vec<String>> {
    let list = response
        .get("warnings")?
        .as_array()
        .expect("warnings is a list");
    Some(
        list.iter()
            .map(|w| w.as_str().expect("a warning is a string").to_owned())
            .collect(),
    )
}

/// Poll `check` every 20 ms until it returns true (`timeout` at most).
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads one HTTP/1.1 response head (up to the blank line) from `stream`:
/// its status code and lower-cased head, or `None` at the end of the
/// stream.
pub async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<(u16, String)> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head))
}

/// Reads one whole HTTP/1.1 response from `stream` (past any `100
/// Continue`; body by `content-length`): its status, lower-cased head and
/// body, or `None` at the end of the stream.
pub async fn read_response<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> Option<(u16, String, String)> {
    use tokio::io::AsyncReadExt;
    let (status, head) = loop {
        let (status, head) = read_head(stream).await?;
        if status != 100 {
            break (status, head);
        }
    };
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.ok()?;
    Some((status, head, String::from_utf8(body).unwrap()))
}
