//! `serve` refuses to start when ConfigMaps may be used but no namespace
//! selector says where they may be created (issue 25: the namespace of a
//! review is the caller's word, so it never decides a write alone).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

fn serve(extra: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("kube-prestop-sidecar");
    std::fs::write(&binary, b"not read: the check comes first").unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--tls-cert-file", "/nonexistent/tls.crt"])
        .args(["--tls-key-file", "/nonexistent/tls.key"])
        .arg("--sidecar-binary")
        .arg(&binary)
        .args(extra)
        .env_remove("KUBE_PRESTOP_NAMESPACE_SELECTOR")
        .env_remove("KUBE_PRESTOP_SIDECAR_BINARY_SOURCE")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_maps_without_a_namespace_selector_refuse_to_start() {
    for source in ["auto", "configMap"] {
        let (ok, stderr) = serve(&["--sidecar-binary-source", source]);
        assert!(!ok, "{source}: started");
        assert!(
            stderr.contains("needs --namespace-selector"),
            "{source}: {stderr}"
        );
    }
    // A source without ConfigMaps needs no selector: it fails later, for
    // another reason (here: no cluster).
    let (ok, stderr) = serve(&["--sidecar-binary-source", "installContainer"]);
    assert!(!ok);
    assert!(!stderr.contains("needs --namespace-selector"), "{stderr}");
}

#[test]
fn create_ahead_needs_a_namespace_selector() {
    let (ok, stderr) = serve(&["--create-ahead"]);
    assert!(!ok);
    assert!(stderr.contains("--namespace-selector"), "{stderr}");
}
