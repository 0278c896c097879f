//! The offline `inject` command, run as the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube_prestop_engine::{self as engine, ClusterContext, Decision, EngineConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kube-prestop-webhook");
const TEST_IMAGE: &str = "registry.example.com/kube-prestop-sidecar:test";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_inject")
}

/// Run `inject` with `args`, feeding `stdin` when given.
fn inject(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .arg("inject")
        .args(["--install-image", TEST_IMAGE])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// Parse a YAML stream into JSON values, one per document.
fn docs(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml).unwrap()
}

fn assert_injected_template(template: &PodTemplateSpec) {
    let spec = template.spec.as_ref().unwrap();
    assert_eq!(spec.share_process_namespace, Some(true));
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    assert!(inits.iter().any(|c| c.image.as_deref() == Some(TEST_IMAGE)));
    assert!(
        inits
            .iter()
            .any(|c| c.restart_policy.as_deref() == Some("Always"))
    );
    let annotations = template.metadata.as_ref().unwrap().annotations.as_ref();
    assert_eq!(
        annotations
            .unwrap()
            .get("kube-prestop.io/status")
            .map(String::as_str),
        Some("injected")
    );
}

#[test]
fn example_job_comes_out_injected() {
    let file = repo_root().join("examples/job-with-prestop.yaml");
    let out = inject(&["-f", file.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let values = docs(&stdout(&out));
    assert_eq!(values.len(), 1);
    let job: Job = serde_json::from_value(values[0].clone()).unwrap();
    assert_injected_template(&job.spec.unwrap().template);
}

#[test]
fn example_cronjob_comes_out_injected() {
    let file = repo_root().join("examples/cronjob-with-prestop.yaml");
    let out = inject(&["-f", file.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let cron: CronJob = serde_json::from_value(docs(&stdout(&out))[0].clone()).unwrap();
    assert_injected_template(&cron.spec.unwrap().job_template.spec.unwrap().template);
}

/// The version annotation as `inject` prints it with `version`.
fn version_line(version: &str) -> String {
    format!("kube-prestop.io/version: \"{version}\"")
}

/// The CronJob golden case: a ConfigMap passes through, the CronJob's pod
/// template is injected. `UPDATE_GOLDEN=1` rewrites the expected file. The
/// file holds `<version>` where the output has this build's version, so
/// that a version bump changes no fixture.
#[test]
fn golden_cronjob_stream() {
    let input = golden_dir().join("cronjob.input.yaml");
    let expected_path = golden_dir().join("cronjob.expected.yaml");
    let out = inject(&["-f", input.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = stdout(&out);
    let (ours, placeholder) = (
        version_line(env!("CARGO_PKG_VERSION")),
        version_line("<version>"),
    );
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&expected_path, got.replace(&ours, &placeholder)).unwrap();
    }
    let fixture = std::fs::read_to_string(&expected_path).unwrap();
    assert!(
        !fixture.contains(&ours) && fixture.contains(&placeholder),
        "{} must name the version as <version>",
        expected_path.display()
    );
    let expected = fixture.replace(&placeholder, &ours);
    assert_eq!(
        got,
        expected,
        "output differs from {}",
        expected_path.display()
    );

    // The ConfigMap is unchanged.
    let input_docs = docs(&std::fs::read_to_string(&input).unwrap());
    let output_docs = docs(&got);
    assert_eq!(output_docs.len(), 2);
    assert_eq!(output_docs[0], input_docs[0]);

    // The template is injected exactly as the webhook injects the Job
    // controller's pods made from it.
    let cron_in: CronJob = serde_json::from_value(input_docs[1].clone()).unwrap();
    let template = cron_in.spec.unwrap().job_template.spec.unwrap().template;
    let mut pod_meta = template.metadata.clone().unwrap_or_default();
    pod_meta.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "nightly-report-29000000".into(),
            uid: "00000000-0000-4000-8000-000000000001".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    let pod = Pod {
        metadata: pod_meta,
        spec: template.spec.clone(),
        status: None,
    };
    let config = EngineConfig {
        install_image: TEST_IMAGE.into(),
        ..EngineConfig::default()
    };
    let context = ClusterContext {
        namespace: "reports".into(),
        ..ClusterContext::default()
    };
    let Decision::Inject(webhook_pod) = engine::inject(&pod, &context, &config).unwrap() else {
        panic!("the webhook would not inject this pod");
    };
    let cron_out: CronJob = serde_json::from_value(output_docs[1].clone()).unwrap();
    let injected = cron_out.spec.unwrap().job_template.spec.unwrap().template;
    assert_eq!(injected.spec, webhook_pod.spec);
    let mut webhook_meta = webhook_pod.metadata;
    webhook_meta.owner_references = None;
    assert_eq!(injected.metadata.unwrap_or_default(), webhook_meta);
}

#[test]
fn multi_document_stream_from_stdin_passes_other_kinds_through() {
    let input = "\
# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  key: value
---
apiVersion: v1
kind: Service
metadata:
  name: svc
spec:
  ports:
    - port: 80
---
";
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let input = format!("{input}{job}");
    let out = inject(&["-f", "-"], Some(&input));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let values = docs(&text);
    assert_eq!(values.len(), 3, "{text}");
    let input_values = docs(&input);
    assert_eq!(values[0], input_values[0]);
    assert_eq!(values[1], input_values[1]);
    let job: Job = serde_json::from_value(values[2].clone()).unwrap();
    assert_injected_template(&job.spec.unwrap().template);
    assert_eq!(text.matches("\n---\n").count(), 2, "{text}");
}

#[test]
fn json_in_json_out_and_pods_as_is() {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"kube-prestop.io/inject": "true"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
            "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}]}
    });
    let out = inject(&["-f", "-", "-o", "json"], Some(&pod.to_string()));
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let injected: Pod = serde_json::from_value(value).unwrap();
    assert_eq!(injected.spec.unwrap().share_process_namespace, Some(true));
}

#[test]
fn not_injected_documents_are_unchanged() {
    // restartPolicy Always (Deployment-style): not injected.
    let input = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
    - name: web
      image: nginx
      lifecycle:
        preStop:
          exec:
            command: [\"sleep\", \"5\"]
";
    let out = inject(&["-f", "-"], Some(input));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(docs(&stdout(&out)), docs(input));
    assert!(stderr(&out).contains("not injected"), "{}", stderr(&out));
}

#[test]
fn broken_yaml_names_document_and_line_and_prints_nothing() {
    let input = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: fine
---
apiVersion: batch/v1
kind: Job
metadata:
  name: [broken
spec: {}
";
    let out = inject(&["-f", "-"], Some(input));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "partial output: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("document 2"), "{err}");
    assert!(err.contains("line "), "{err}");
}

#[test]
fn broken_json_names_the_line() {
    let input = "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  oops\n}\n";
    let out = inject(&["-f", "-"], Some(input));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(err.contains("document 1, line 4"), "{err}");
}

#[test]
fn unknown_field_is_an_error_with_its_path_and_line() {
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let misspelt = job.replace("imagePullPolicy", "imagePullPolcy");
    let line = misspelt
        .lines()
        .position(|l| l.contains("imagePullPolcy"))
        .unwrap()
        + 1;
    let input = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n{misspelt}");
    let out = inject(&["-f", "-"], Some(&input));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "partial output: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("document 2"), "{err}");
    assert!(err.contains(&format!("line {}", line + 5)), "{err}");
    assert!(
        err.contains("unknown field `spec.template.spec.containers[0].imagePullPolcy`"),
        "{err}"
    );
}

/// Regression: a value of the wrong type was reported at the document's
/// first line, without saying which field.
#[test]
fn wrong_value_type_names_the_field_and_its_line() {
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let typed = job.replacen("imagePullPolicy: IfNotPresent", "imagePullPolicy: 5", 1);
    assert_ne!(
        typed, job,
        "the example has no imagePullPolicy: IfNotPresent"
    );
    let out = inject(&["-f", "-"], Some(&typed));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "partial output: {}", stdout(&out));
    let err = stderr(&out);
    let want = format!(
        "document 1, line {}:",
        line_of(&typed, "imagePullPolicy: 5")
    );
    assert!(err.contains(&want), "want {want:?}: {err}");
    assert!(
        err.contains("spec.template.spec.containers[0].imagePullPolicy: invalid type"),
        "{err}"
    );
}

#[test]
fn engine_error_fails_the_whole_stream() {
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let bad = job.replace(
        "      labels:\n        app: prestop-demo\n    spec:",
        "      labels:\n        app: prestop-demo\n      annotations:\n        kube-prestop.io/sidecar-cpu-limit: lots\n    spec:",
    );
    assert_ne!(bad, job);
    let input = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n{bad}");
    let out = inject(&["-f", "-"], Some(&input));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(err.contains("document 2"), "{err}");
    assert!(err.contains("kube-prestop.io/sidecar-cpu-limit"), "{err}");
}

/// Resource annotations below what the sidecar can start with (or below
/// the kubelet's 1m CPU granularity) fail the document, naming the
/// annotation, the value and the floor.
#[test]
fn resource_annotations_below_the_floors_are_errors() {
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    for (key, value, floor) in [
        ("kube-prestop.io/sidecar-memory-limit", "0.5", "4Mi"),
        ("kube-prestop.io/sidecar-memory-limit", "1e3", "4Mi"),
        ("kube-prestop.io/sidecar-memory-limit", "1Mi", "4Mi"),
        ("kube-prestop.io/sidecar-cpu-limit", "0.0000000001", "1m"),
    ] {
        let bad = job.replace(
            "      labels:\n        app: prestop-demo\n    spec:",
            &format!("      labels:\n        app: prestop-demo\n      annotations:\n        {key}: \"{value}\"\n    spec:"),
        );
        assert_ne!(bad, job);
        let out = inject(&["-f", "-"], Some(&bad));
        assert!(!out.status.success(), "{key}: {value} accepted");
        assert!(out.stdout.is_empty());
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "invalid annotation {key}: {value:?}: is below the floor {floor}"
            )),
            "{err}"
        );
    }
}

/// 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn annotation_errors_point_at_the_annotation_line() {
    // Regression (issue #8): they named the document's first line, "line 1"
    // for a single-document file.
    let annotation = "kube-prestop.io/sidecar-cpu-limit";
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let bad_job = job.replace(
        "      labels:\n        app: prestop-demo\n    spec:",
        &format!("      labels:\n        app: prestop-demo\n      annotations:\n        example.com/other: x\n        {annotation}: lots\n    spec:"),
    );
    assert_ne!(bad_job, job);
    let cron =
        std::fs::read_to_string(repo_root().join("examples/cronjob-with-prestop.yaml")).unwrap();
    let bad_cron = cron.replace(
        "      template:\n        spec:",
        &format!("      template:\n        metadata:\n          annotations:\n            {annotation}: \"0\"\n        spec:"),
    );
    assert_ne!(bad_cron, cron);
    let stream = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n{bad_job}");
    for (what, input, document) in [
        ("a single Job", bad_job.clone(), 1),
        ("a Job after a ConfigMap", stream, 2),
        ("a CronJob", bad_cron, 1),
    ] {
        let out = inject(&["-f", "-"], Some(&input));
        assert!(!out.status.success(), "{what}");
        assert!(out.stdout.is_empty(), "{what}");
        let err = stderr(&out);
        let want = format!("document {document}, line {}:", line_of(&input, annotation));
        assert!(err.contains(&want), "{what}: want {want:?} in {err}");
        assert!(err.contains(annotation), "{what}: {err}");
    }

    // JSON, inside a List: the annotation's line in the pretty-printed text.
    let pod = |name: &str, inject: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"kube-prestop.io/inject": inject}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}]}
        })
    };
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "List",
        "items": [pod("good", "true"), pod("bad", "maybe")]
    });
    let text = serde_json::to_string_pretty(&list).unwrap();
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("kube-prestop.io/inject"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    let out = inject(&["-f", "-", "-o", "json"], Some(&text));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("document 1, line {line}:")),
        "line {line}: {err}"
    );
    assert!(err.contains("Pod/bad"), "{err}");
}

#[test]
fn misspelt_annotation_is_a_warning_on_stderr_and_the_job_is_still_injected() {
    // Regression (issue #8): unknown kube-prestop.io/ keys were silently
    // ignored.
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let typo = job.replace(
        "      labels:\n        app: prestop-demo\n    spec:",
        "      labels:\n        app: prestop-demo\n      annotations:\n        kube-prestop.io/contianers: work\n    spec:",
    );
    assert_ne!(typo, job);
    let out = inject(&["-f", "-"], Some(&typo));
    assert!(out.status.success(), "{}", stderr(&out));
    let injected: Job = serde_json::from_value(docs(&stdout(&out)).remove(0)).unwrap();
    assert_injected_template(&injected.spec.unwrap().template);
    let err = stderr(&out);
    let line = line_of(&typo, "contianers");
    let warning = err
        .lines()
        .find(|l| l.contains("WARN") && l.contains("kube-prestop.io/contianers"))
        .unwrap_or_else(|| panic!("no warning in {err}"));
    for needle in [
        format!("document 1, line {line}: Job/prestop-demo"),
        "did you mean kube-prestop.io/containers?".to_owned(),
        "known annotations: kube-prestop.io/inject".to_owned(),
    ] {
        assert!(warning.contains(&needle), "{needle} not in {warning}");
    }
    // Without the typo: no warning.
    let out = inject(&["-f", "-"], Some(&job));
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
}

#[test]
fn unknown_field_in_a_list_item_points_at_that_item() {
    // `hostname` is a pod spec field of the first item and an unknown
    // metadata field of the second: the second one's line is reported
    // (a text search from the document's top found the first one).
    let text = "\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    name: a
  spec:
    hostname: a
    containers: []
- apiVersion: v1
  kind: Pod
  metadata:
    name: b
    hostname: typo
  spec:
    containers: []
";
    let out = inject(&["-f", "-"], Some(text));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("line 15:"), "{err}");
    assert!(err.contains("unknown field `metadata.hostname`"), "{err}");
}

#[test]
fn pods_opted_out_by_label_are_not_injected_as_the_object_selector_says() {
    // Regression (issue #8): the chart's objectSelector keeps pods labelled
    // kube-prestop.io/inject=false (or kube-prestop.io/component=webhook)
    // from ever reaching the webhook, but `inject` injected them.
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    let template_label = |label: &str| {
        let out = job.replace(
            "      labels:\n        app: prestop-demo\n    spec:",
            &format!("      labels:\n        app: prestop-demo\n        {label}\n    spec:"),
        );
        assert_ne!(out, job);
        out
    };
    let cron =
        std::fs::read_to_string(repo_root().join("examples/cronjob-with-prestop.yaml")).unwrap();
    let cron_opted_out = cron.replace(
        "      template:\n        spec:",
        "      template:\n        metadata:\n          labels:\n            kube-prestop.io/inject: \"false\"\n        spec:",
    );
    assert_ne!(cron_opted_out, cron);
    let pod = "\
apiVersion: v1
kind: Pod
metadata:
  name: opted-out
  labels:
    kube-prestop.io/inject: \"false\"
  annotations:
    kube-prestop.io/inject: \"true\"
spec:
  restartPolicy: Never
  containers:
    - name: c
      image: busybox
      lifecycle:
        preStop:
          exec:
            command: [\"true\"]
";
    for (what, input, label) in [
        (
            "Job, template label inject=false",
            template_label("kube-prestop.io/inject: \"false\""),
            "kube-prestop.io/inject=false",
        ),
        (
            "Job, template label component=webhook",
            template_label("kube-prestop.io/component: webhook"),
            "kube-prestop.io/component=webhook",
        ),
        (
            "CronJob, template label inject=false",
            cron_opted_out,
            "kube-prestop.io/inject=false",
        ),
        (
            "Pod, label inject=false",
            pod.to_owned(),
            "kube-prestop.io/inject=false",
        ),
    ] {
        let out = inject(&["-f", "-"], Some(&input));
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert_eq!(docs(&stdout(&out)), docs(&input), "{what}: changed");
        let err = stderr(&out);
        assert!(err.contains("not injected"), "{what}: {err}");
        assert!(err.contains(label), "{what}: {err}");
        assert!(err.contains("objectSelector"), "{what}: {err}");
    }
    // The Job's own labels do not reach its pods: still injected; so are
    // other values of the label.
    let on_the_job = job.replace(
        "  labels:\n    app: prestop-demo\nspec:",
        "  labels:\n    app: prestop-demo\n    kube-prestop.io/inject: \"false\"\nspec:",
    );
    assert_ne!(on_the_job, job);
    for input in [
        on_the_job,
        template_label("kube-prestop.io/inject: \"true\""),
    ] {
        let out = inject(&["-f", "-"], Some(&input));
        assert!(out.status.success(), "{}", stderr(&out));
        let injected: Job = serde_json::from_value(docs(&stdout(&out)).remove(0)).unwrap();
        assert_injected_template(&injected.spec.unwrap().template);
    }
}

#[test]
fn missing_file_is_an_error() {
    let out = inject(&["-f", "/nonexistent/manifest.yaml"], None);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("/nonexistent/manifest.yaml"));
}

/// Engine flags are checked at start-up: the error names the flag, the
/// value and what is allowed, and nothing is printed on stdout.
#[test]
fn loose_engine_flags_are_refused_naming_flag_value_and_what_is_allowed() {
    let job = repo_root().join("examples/job-with-prestop.yaml");
    let job = job.to_str().unwrap();
    for (args, expected) in [
        (
            &["--architectures", "AMD64"][..],
            "--architectures \"AMD64\" names \"AMD64\", an architecture the images ship no sidecar binary for; allowed: a comma-separated list of amd64, arm64",
        ),
        (
            &["--architectures", "s390x"],
            "--architectures \"s390x\" names \"s390x\"",
        ),
        (
            &["--architectures", "amd64,,arm64"],
            "--architectures \"amd64,,arm64\" has an empty entry",
        ),
        (
            &["--architectures", "amd64,amd64"],
            "--architectures \"amd64,amd64\" names \"amd64\" twice",
        ),
        (
            &["--install-image", "a b"],
            "--install-image \"a b\" is not an image reference",
        ),
        (
            &["--webhook-namespace", "UPPER"],
            "--webhook-namespace \"UPPER\" is not a namespace name: a DNS-1123 label",
        ),
        (
            &["-n", "UPPER"],
            "--namespace \"UPPER\" is not a namespace name: a DNS-1123 label",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["inject", "-f", job])
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stdout(&out).is_empty(), "{args:?}");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = inject(
        &["-f", job, "--architectures", "arm64", "-n", "team-a"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn namespace_is_honoured_from_the_document_or_the_flag() {
    let job = std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap();
    // kube-system is never injected: by flag ...
    let out = inject(&["-f", "-", "-n", "kube-system"], Some(&job));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(docs(&stdout(&out)), docs(&job));
    // ... or by the document's own namespace, which wins over the flag.
    let in_kube_system = job.replace(
        "  name: prestop-demo\n  labels:",
        "  name: prestop-demo\n  namespace: kube-system\n  labels:",
    );
    assert_ne!(in_kube_system, job);
    let out = inject(&["-f", "-", "-n", "default"], Some(&in_kube_system));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(docs(&stdout(&out)), docs(&in_kube_system));
}

#[test]
fn list_items_are_injected() {
    let job =
        docs(&std::fs::read_to_string(repo_root().join("examples/job-with-prestop.yaml")).unwrap())
            .remove(0);
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "List",
        "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, job]
    });
    let out = inject(&["-f", "-", "-o", "json"], Some(&list.to_string()));
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(value["items"][0], list["items"][0]);
    let job: Job = serde_json::from_value(value["items"][1].clone()).unwrap();
    assert_injected_template(&job.spec.unwrap().template);
}

/// The input is bounded by the server's body limit (4 MiB by default):
/// `-f /dev/zero` (which used to grow to gigabytes) and a file one byte
/// over it are refused at once, naming the file and the limit; stdin too.
#[test]
fn input_over_the_body_limit_is_refused() {
    let limit = kube_prestop_server::DEFAULT_MAX_BODY_BYTES;
    let start = std::time::Instant::now();
    let out = inject(&["-f", "/dev/zero"], None);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("/dev/zero") && err.contains(&format!("over {limit} bytes")),
        "{err}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    assert!(stdout(&out).is_empty());
    let dir = std::env::temp_dir().join(format!("kps-inject-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.yaml");
    std::fs::write(&big, " ".repeat(limit + 1)).unwrap();
    let out = inject(&["-f", big.to_str().unwrap()], None);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(big.to_str().unwrap()) && err.contains(&format!("over {limit} bytes")),
        "{err}"
    );
    let out = inject(&["-f", "-"], Some(&" ".repeat(limit + 1)));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("stdin is over"), "{}", stderr(&out));
    // Exactly at the limit: read (an empty stream: nothing to inject).
    std::fs::write(&big, " ".repeat(limit)).unwrap();
    let out = inject(&["-f", big.to_str().unwrap()], None);
    assert!(
        !stderr(&out).contains("bytes, the largest"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
