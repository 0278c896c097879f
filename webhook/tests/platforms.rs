//! `inject` on pods and Jobs as batch systems render them
//! (`tests/fixtures/platforms/`, each file naming its source; see
//! docs/platforms.md): which container the sidecar watches, which are left
//! alone, and which systems' pods are skipped. Run as the real binary, like
//! a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/platforms")
        .join(name)
}

/// `inject -f <file> -o json` with these extra arguments, as a user runs it
/// (no kube-prestop variable of the environment).
fn run_inject(file: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("inject")
        .arg("-f")
        .arg(file)
        .args(["-o", "json"])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("KUBE_PRESTOP_WORKLOAD_KINDS")
        .output()
        .unwrap()
}

fn inject(name: &str) -> (Value, String) {
    let out = run_inject(&fixture(name), &[]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "inject {name} failed: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("inject {name}: stdout is not one JSON document: {e}"));
    (doc, stderr)
}

/// The pod spec of a Pod, or of a Job's template.
fn pod_spec(doc: &Value) -> &Value {
    match doc["kind"].as_str() {
        Some("Pod") => &doc["spec"],
        Some("Job") => &doc["spec"]["template"]["spec"],
        other => panic!("unexpected kind {other:?}"),
    }
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The containers the injected native sidecars watch: the value after
/// `--container` in each `watch` command.
fn watched(spec: &Value) -> Vec<String> {
    spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .filter_map(|c| {
            let cmd: Vec<&str> = c["command"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let watch = cmd.iter().position(|a| *a == "watch")?;
            let flag = cmd[watch..].iter().position(|a| *a == "--container")?;
            Some(cmd[watch + flag + 1].to_owned())
        })
        .collect()
}

/// The regular containers whose preStop the webhook wrapped.
fn wrapped(spec: &Value) -> Vec<String> {
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["lifecycle"]["preStop"]["exec"]["command"][0] == "/.kube-prestop/bin/kube-prestop"
        })
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn argo_workflows_main_is_watched_not_wait() {
    let (doc, _) = inject("argo-workflows.yaml");
    let spec = pod_spec(&doc);
    assert_eq!(watched(spec), ["main"]);
    assert_eq!(wrapped(spec), ["main"]);
    // Argo's own init container stays first: it copies argoexec, which
    // main's command needs, before anything else starts.
    let inits = names(&spec["initContainers"]);
    assert_eq!(inits.first().map(String::as_str), Some("init"));
    assert!(inits.contains(&"kube-prestop-main".to_owned()), "{inits:?}");
    // wait and main keep their names and order; wait is untouched.
    assert_eq!(names(&spec["containers"]), ["wait", "main"]);
    assert!(spec["containers"][0]["lifecycle"].is_null());
    assert_eq!(spec["shareProcessNamespace"], true);
    // main's command is still Argo's emissary wrapper around the user's.
    assert_eq!(
        spec["containers"][1]["command"][0],
        "/var/run/argo/argoexec"
    );
}

#[test]
fn jobset_child_job_is_injected_without_an_opt_in() {
    let (doc, _) = inject("jobset.yaml");
    let spec = pod_spec(&doc);
    assert_eq!(watched(spec), ["worker"]);
    assert_eq!(wrapped(spec), ["worker"]);
    assert_eq!(
        doc["spec"]["template"]["metadata"]["annotations"]["kube-prestop.io/status"],
        "injected"
    );
}

#[test]
fn spark_driver_opted_in_is_watched() {
    let (doc, _) = inject("spark-driver.yaml");
    let spec = pod_spec(&doc);
    assert_eq!(watched(spec), ["spark-kubernetes-driver"]);
    assert!(
        names(&spec["initContainers"]).contains(&"kube-prestop-spark-kubernetes-driver".to_owned())
    );
}

#[test]
fn kuberay_submitter_job_is_injected_without_an_opt_in() {
    let (doc, _) = inject("ray-rayjob-submitter.yaml");
    let spec = pod_spec(&doc);
    assert_eq!(watched(spec), ["ray-job-submitter"]);
    assert_eq!(wrapped(spec), ["ray-job-submitter"]);
}

#[test]
fn tekton_steps_cannot_have_a_prestop_so_the_pod_is_skipped() {
    let (doc, stderr) = inject("tekton-taskrun.yaml");
    let spec = pod_spec(&doc);
    assert!(watched(spec).is_empty());
    assert!(doc["metadata"]["annotations"]["kube-prestop.io/status"].is_null());
    assert_eq!(names(&spec["initContainers"]), ["prepare"]);
    assert!(stderr.contains("not injected"), "{stderr}");
}

/// The Argo fixture without its opt-in annotation (what Argo renders for a
/// Workflow that names no kube-prestop annotation), as a file of its own
/// for each `test` (tests run at once).
fn argo_without_annotation(test: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture("argo-workflows.yaml")).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| l.trim() != "kube-prestop.io/inject: \"true\"")
        .collect();
    assert_eq!(kept.len() + 1, text.lines().count(), "one annotation line");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("argo-workflows-no-annotation-{test}.yaml"));
    std::fs::write(&path, kept.join("\n")).unwrap();
    path
}

#[test]
fn argo_workflows_by_kind_needs_no_annotation() {
    let manifest = argo_without_annotation("by-kind");
    // Default kinds (job): left alone, as before.
    let out = run_inject(&manifest, &[]);
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(watched(pod_spec(&doc)).is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("not of an enabled workload kind"),
        "{stderr}"
    );
    // With the kind: main watched, wait not.
    let out = run_inject(&manifest, &["--workload-kinds", "job,argo-workflows"]);
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(watched(pod_spec(&doc)), ["main"]);
    assert_eq!(wrapped(pod_spec(&doc)), ["main"]);
}

#[test]
fn an_unknown_workload_kind_names_the_value_and_the_accepted_ones() {
    let out = run_inject(
        &argo_without_annotation("unknown-kind"),
        &["--workload-kinds", "job,argo"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("invalid value 'argo'"), "{stderr}");
    assert!(
        stderr
            .contains("[possible values: job, argo-workflows, volcano, spark, armada, kueue-pod]"),
        "{stderr}"
    );
}
