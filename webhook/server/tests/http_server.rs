//! The admission server over real TLS on ephemeral ports: valid reviews,
//! every kind of bad input, HTTP/1.1 and HTTP/2, metrics, certificate
//! reload without restart, graceful shutdown and slow clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_alpn;
mod http_common;

use std::sync::Arc;
use std::time::Duration;

use http_alpn::tls_with_alpn;
use http_common::{
    Pki, TestServer, assert_review_echo, job_pod, patch_of, review, secret_volume, skipped_of,
    wait_for, warnings_of, write_pair,
};
use k8s_openapi::api::core::v1::Pod;
use kube_prestop_metrics::labels::DecisionLabel;
use kube_prestop_server::FailureMode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn job_pod_gets_a_patch_that_injects_it() {
    let server = TestServer::start(|_| {}).await;
    let pod = job_pod();
    let (status, body) = server
        .mutate(review("uid-inject", "pods", "CREATE", pod.clone()).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let response = assert_review_echo(&body, "uid-inject");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = patch_of(&response).expect("a patch");
    // Keys with `/` are escaped as `~1` in JSON pointers.
    let patch_json = serde_json::to_value(&patch).unwrap();
    let paths: Vec<String> = patch_json
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        paths.iter().any(|p| p.contains("kube-prestop.io~1")),
        "no escaped annotation key in {paths:?}"
    );
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch).expect("patch applies to the request object");
    let injected: Pod = serde_json::from_value(patched.clone()).expect("a valid Pod");
    let spec = injected.spec.unwrap();
    assert_eq!(spec.share_process_namespace, Some(true));
    let inits = spec.init_containers.unwrap_or_default();
    assert!(
        inits
            .iter()
            .any(|c| c.restart_policy.as_deref() == Some("Always")),
        "no native sidecar in {inits:?}"
    );
    // The user's own fields are untouched.
    assert_eq!(patched["metadata"]["labels"]["example.com/team"], "a");

    // A second pass (reinvocation) changes nothing.
    let (status, body) = server
        .mutate(review("uid-again", "pods", "CREATE", patched).to_string())
        .await;
    assert_eq!(status, 200);
    let response = assert_review_echo(&body, "uid-again");
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
}

#[tokio::test]
async fn skipped_pod_is_allowed_without_patch() {
    let server = TestServer::start(|_| {}).await;
    let mut pod = job_pod();
    pod["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("lifecycle");
    let (status, body) = server
        .mutate(review("uid-skip", "pods", "CREATE", pod).to_string())
        .await;
    assert_eq!(status, 200);
    let response = assert_review_echo(&body, "uid-skip");
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn bodies_that_are_not_admission_reviews_get_400() {
    let server = TestServer::start(|_| {}).await;
    let cases: Vec<(&str, String)> = vec![
        ("not JSON", "this is not json".to_owned()),
        ("empty", String::new()),
        ("JSON array", "[1, 2]".to_owned()),
        ("wrong kind", job_pod().to_string()),
        (
            "v1beta1",
            {
                let mut r = review("u", "pods", "CREATE", job_pod());
                r["apiVersion"] = json!("admission.k8s.io/v1beta1");
                r
            }
            .to_string(),
        ),
        (
            "no request",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).to_string(),
        ),
        (
            "request of the wrong shape",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}})
                .to_string(),
        ),
        ("truncated", {
            let s = review("u", "pods", "CREATE", job_pod()).to_string();
            s[..s.len() / 2].to_owned()
        }),
    ];
    for (what, body) in cases {
        let (status, value) = server.mutate(body).await;
        assert_eq!(status, 400, "{what}: {value}");
        assert!(value["error"].is_string(), "{what}: {value}");
        assert!(value.get("response").is_none(), "{what}: {value}");
    }
}

#[tokio::test]
async fn oversize_body_gets_413() {
    let server = TestServer::start(|_| {}).await;
    // Over the default 7 MiB cap.
    let big = vec![b' '; 7 * 1024 * 1024 + 1];
    let (status, value) = server.mutate(big).await;
    assert_eq!(status, 413, "{value}");
    assert!(value["error"].as_str().unwrap().contains("larger than"));
    // Just under the cap, still not a review: 400, so the cap is the cause above.
    let under = vec![b' '; 1024];
    let (status, _) = server.mutate(under).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn small_cap_is_enforced_over_http1_too() {
    let server = TestServer::start(|c| c.max_body_bytes = 4096).await;
    let client = server.client_builder().http1_only().build().unwrap();
    let r = client
        .post(server.url("/mutate"))
        .body(vec![b'x'; 5000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // A real review over the cap is refused as well; one under it is answered.
    let body = review(
        "u",
        "configmaps",
        "CREATE",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    );
    let r = client
        .post(server.url("/mutate"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// POSTs `len` bytes to `/mutate` over a raw HTTP/2 stream, honouring flow
/// control (the client sends only what the server's window allows), with a
/// `content-length` header when `declare`. Returns the status and body, or
/// the h2 error, e.g. the server resetting the stream under the client.
async fn h2_post(
    server: &TestServer,
    len: usize,
    declare: bool,
) -> Result<(u16, Vec<u8>), h2::Error> {
    let tls = tls_with_alpn(server, b"h2").await;
    let (mut client, connection) = h2::client::handshake(tls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request =
        axum::http::Request::post(server.url("/mutate")).header("content-type", "application/json");
    if declare {
        request = request.header("content-length", len);
    }
    let (response, mut send) = client.send_request(request.body(()).unwrap(), false)?;
    let mut left = len;
    while left > 0 {
        send.reserve_capacity(left.min(64 * 1024));
        let granted = std::future::poll_fn(|cx| send.poll_capacity(cx))
            .await
            .expect("the stream is open")?;
        let n = granted.min(left);
        send.send_data(axum::body::Bytes::from(vec![b' '; n]), false)?;
        left -= n;
    }
    send.send_data(axum::body::Bytes::new(), true)?;
    let response = response.await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    Ok((status, bytes))
}

#[tokio::test]
async fn oversize_body_gets_a_clean_413_over_http2() {
    // Regression (issue #8): the server answered 413 without reading the
    // rest of the body, so h2 reset the stream while the client was still
    // sending; curl showed "Stream error in the HTTP/2 framing layer"
    // instead of the 413. A body of twice the cap is more than the cap
    // plus hyper's 1 MiB stream window: the client can only finish sending
    // it if the server reads the rest.
    let cap = 2 * 1024 * 1024;
    let server = TestServer::start(|c| c.max_body_bytes = cap).await;
    for declare in [true, false] {
        let (status, body) =
            tokio::time::timeout(Duration::from_secs(20), h2_post(&server, 2 * cap, declare))
                .await
                .unwrap_or_else(|_| panic!("no answer in time (content-length: {declare})"))
                .unwrap_or_else(|e| panic!("h2 error (content-length: {declare}): {e}"));
        assert_eq!(status, 413, "content-length: {declare}");
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            value["error"].as_str().unwrap().contains("larger than"),
            "{value}"
        );
    }
    // Far over the cap: still a 413 with its JSON body (the stream is reset
    // only after the complete answer, which hyper-based clients accept).
    let (status, value) = server.mutate(vec![b' '; 5 * cap]).await;
    assert_eq!(status, 413, "{value}");
}

#[tokio::test]
async fn oversize_body_over_http1_gets_413_and_the_connection_stays_usable() {
    // Regression (issue #8): hyper closed the connection under a client
    // still sending the rest of an oversize body, which can lose the 413
    // ("Broken pipe"). Now the body is read to its end and the connection
    // serves the next request.
    let cap = 256 * 1024;
    let server = TestServer::start(|c| c.max_body_bytes = cap).await;
    let mut tls = raw_tls(&server).await;
    let len = cap + cap / 2;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&vec![b' '; len]).await.unwrap();
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut response))
        .await
        .expect("answers in time")
        .expect("the connection is not reset");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.contains(&format!("request body larger than {cap} bytes")),
        "{text}"
    );
    let second = text
        .find("HTTP/1.1 200")
        .unwrap_or_else(|| panic!("no second answer: {text}"));
    assert!(text[second..].ends_with("ok\n"), "{text}");
}

#[tokio::test]
async fn other_resources_and_operations_are_allowed_without_patch() {
    let server = TestServer::start(|_| {}).await;
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "demo"}});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "demo"}, "spec": {"template": {"spec": {"containers": []}}}});
    let mut delete = review("uid-delete", "pods", "DELETE", Value::Null);
    delete["request"]["oldObject"] = job_pod();
    let cases = vec![
        (
            "uid-cm",
            review("uid-cm", "configmaps", "CREATE", configmap),
        ),
        ("uid-job", review("uid-job", "jobs", "CREATE", job)),
        (
            "uid-update",
            review("uid-update", "pods", "UPDATE", job_pod()),
        ),
        ("uid-delete", delete),
    ];
    for (uid, body) in cases {
        let (status, value) = server.mutate(body.to_string()).await;
        assert_eq!(status, 200, "{uid}: {value}");
        let response = assert_review_echo(&value, uid);
        assert_eq!(response["allowed"], true, "{uid}");
        assert!(response.get("patch").is_none(), "{uid}: {response}");
    }
    // A subresource of pods (e.g. pods/ephemeralcontainers) is not a pod CREATE.
    let mut sub = review("uid-sub", "pods", "CREATE", job_pod());
    sub["request"]["subResource"] = json!("binding");
    let (status, value) = server.mutate(sub.to_string()).await;
    assert_eq!(status, 200);
    assert!(assert_review_echo(&value, "uid-sub").get("patch").is_none());
}

fn broken_pods() -> Vec<(&'static str, Value)> {
    let mut bad_annotation = job_pod();
    bad_annotation["metadata"]["annotations"]["kube-prestop.io/sidecar-cpu-limit"] = json!("lots");
    let mut bad_shape = job_pod();
    bad_shape["spec"]["containers"] = json!("not a list");
    let mut no_spec = job_pod();
    no_spec.as_object_mut().unwrap().remove("spec");
    vec![
        ("engine error (invalid annotation)", bad_annotation),
        ("pod does not deserialize", bad_shape),
        ("pod without spec", no_spec),
    ]
}

#[tokio::test]
async fn misspelt_annotation_is_a_warning_and_the_pod_is_still_injected() {
    // Regression (issue #8): unknown keys under kube-prestop.io/ were
    // silently ignored.
    let server = TestServer::start(|_| {}).await;
    let mut pod = job_pod();
    pod["metadata"]["annotations"]["kube-prestop.io/contianers"] = json!("work");
    let (status, body) = server
        .mutate(review("uid-typo", "pods", "CREATE", pod.clone()).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let response = assert_review_echo(&body, "uid-typo");
    assert_eq!(response["allowed"], true);
    assert!(patch_of(&response).is_some(), "still injected: {response}");
    let warnings = warnings_of(&response).expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    for needle in [
        "kube-prestop.io/contianers",
        "did you mean kube-prestop.io/containers?",
        "known annotations: kube-prestop.io/inject, kube-prestop.io/containers, kube-prestop.io/sidecar-cpu-request",
    ] {
        assert!(warning.contains(needle), "{needle} not in {warning}");
    }
    // With an engine error too (failure mode allow): both warnings.
    pod["metadata"]["annotations"]["kube-prestop.io/sidecar-cpu-limit"] = json!("lots");
    let (_, body) = server
        .mutate(review("uid-typo2", "pods", "CREATE", pod).to_string())
        .await;
    let response = assert_review_echo(&body, "uid-typo2");
    let warnings = warnings_of(&response).expect("warnings");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("admitted without"));
    assert!(warnings[1].contains("contianers"));
    // A pod without unknown annotations gets no warning.
    let (_, body) = server
        .mutate(review("uid-clean", "pods", "CREATE", job_pod()).to_string())
        .await;
    assert_eq!(warnings_of(&assert_review_echo(&body, "uid-clean")), None);
}

#[tokio::test]
async fn an_explicit_opt_in_that_is_skipped_gets_a_warning() {
    // Newcomer finding: `kube-prestop.io/inject: "true"` on a pod that
    // cannot be injected was skipped without a word.
    let server = TestServer::start(|_| {}).await;
    let mut pod = job_pod();
    pod["metadata"]["annotations"]["kube-prestop.io/inject"] = json!("true");
    pod["spec"]["restartPolicy"] = json!("Always");
    let (status, body) = server
        .mutate(review("uid-optin", "pods", "CREATE", pod.clone()).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let response = assert_review_echo(&body, "uid-optin");
    assert_eq!(response["allowed"], true);
    let warnings = warnings_of(&response).expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    for needle in [
        "kube-prestop.io/inject is \"true\"",
        "not injected",
        "restartPolicy is Always",
    ] {
        assert!(warning.contains(needle), "{needle} not in {warning}");
    }
    // Not injected: the patch only writes why, which the Job controller's
    // pods keep (it drops the warning).
    assert_eq!(
        skipped_of(&pod, &response),
        Some(format!(
            "restart_policy_always: {}",
            warning.strip_prefix("kube-prestop: ").unwrap()
        )),
        "{response}"
    );
    // The same pod skipped without an explicit opt-in: no warning, no patch.
    pod["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("kube-prestop.io/inject");
    let (_, body) = server
        .mutate(review("uid-plain-skip", "pods", "CREATE", pod).to_string())
        .await;
    let response = assert_review_echo(&body, "uid-plain-skip");
    assert_eq!(warnings_of(&response), None);
    assert!(patch_of(&response).is_none(), "{response}");
}

#[tokio::test]
async fn pods_the_engine_cannot_handle_are_admitted_with_a_warning() {
    let server = TestServer::start(|_| {}).await;
    // The engine's errors: the pod is annotated with why (its label and the
    // warning's text); an object that does not parse: the warning only.
    let labels = [Some("invalid_annotation"), None, Some("invalid_pod")];
    for ((what, pod), label) in broken_pods().into_iter().zip(labels) {
        let (status, value) = server
            .mutate(review("uid-err", "pods", "CREATE", pod.clone()).to_string())
            .await;
        assert_eq!(status, 200, "{what}: {value}");
        let response = assert_review_echo(&value, "uid-err");
        assert_eq!(response["allowed"], true, "{what}");
        let warnings = warnings_of(&response).expect("warnings");
        assert!(warnings[0].contains("kube-prestop"), "{what}: {warnings:?}");
        let expected = label.map(|label| {
            format!(
                "{label}: {}",
                warnings[0].strip_prefix("kube-prestop: ").unwrap()
            )
        });
        let note = match label {
            Some(_) => skipped_of(&pod, &response),
            None => response.get("patch").map(ToString::to_string),
        };
        assert_eq!(note, expected, "{what}");
    }
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains(
            r#"kube_prestop_admissions_total{decision="error",reason="invalid_annotation"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn failure_mode_deny_refuses_pods_the_engine_cannot_handle() {
    let server = TestServer::start(|c| c.failure_mode = FailureMode::Deny).await;
    // The pod's own faults get a 4xx (issue #8: they used to get 500
    // InternalError); a pod we cannot even parse is a fault of ours: 500.
    let expected = [
        (422, "Invalid"),
        (500, "InternalError"),
        (400, "BadRequest"),
    ];
    for ((what, pod), (code, reason)) in broken_pods().into_iter().zip(expected) {
        let (status, value) = server
            .mutate(review("uid-deny", "pods", "CREATE", pod).to_string())
            .await;
        assert_eq!(status, 200, "{what}: {value}");
        let response = assert_review_echo(&value, "uid-deny");
        assert_eq!(response["allowed"], false, "{what}");
        assert!(
            response["status"]["message"]
                .as_str()
                .unwrap()
                .contains("kube-prestop"),
            "{what}: {response}"
        );
        assert_eq!(response["status"]["code"], code, "{what}: {response}");
        assert_eq!(response["status"]["reason"], reason, "{what}: {response}");
        assert_eq!(
            response["status"]["status"], "Failure",
            "{what}: {response}"
        );
    }
    // The invalid annotation: the message (what kubectl prints) names the
    // annotation, its value and what is wrong; the cause names the field.
    let (what, pod) = broken_pods().remove(0);
    let (_, value) = server
        .mutate(review("uid-deny", "pods", "CREATE", pod).to_string())
        .await;
    let status = &assert_review_echo(&value, "uid-deny")["status"];
    let message = status["message"].as_str().unwrap();
    for needle in [
        "kube-prestop.io/sidecar-cpu-limit",
        "\"lots\"",
        "not a Kubernetes quantity",
    ] {
        assert!(
            message.contains(needle),
            "{what}: {needle} not in {message}"
        );
    }
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.annotations[kube-prestop.io/sidecar-cpu-limit]",
        "{status}"
    );
    // A Job's pod has no name yet (generateName): none is made up.
    assert_eq!(
        status["details"]["name"].as_str().unwrap_or(""),
        "",
        "{status}"
    );
    // A named pod: kubectl prints `The Pod "<name>" is invalid: ...`.
    let (_, mut named) = broken_pods().remove(0);
    named["metadata"]["name"] = json!("deny1");
    let (_, value) = server
        .mutate(review("uid-deny-named", "pods", "CREATE", named).to_string())
        .await;
    let status = &assert_review_echo(&value, "uid-deny-named")["status"];
    assert_eq!(status["details"]["name"], "deny1", "{status}");
    assert_eq!(status["details"]["kind"], "Pod", "{status}");
    // A good pod is still injected.
    let (_, value) = server
        .mutate(review("uid-ok", "pods", "CREATE", job_pod()).to_string())
        .await;
    let response = assert_review_echo(&value, "uid-ok");
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_some());
}

/// The newcomer's reproductions (issue: invalid annotation values echoed
/// whole): a `kube-prestop.io/containers` value of about 4 MB gave an
/// 8.38 MB answer, a 3 MB `gate` and a `run-on` given 100,000 times over a
/// megabyte each. The answers now show the annotation, what is wrong and
/// the value's start with its length, in a few kilobytes, under both
/// failure modes; so do a review and a pod object that do not parse.
#[tokio::test]
async fn huge_values_are_cut_in_every_answer() {
    // The review around the pod is about 1 KB: the body stays under the
    // 4 MiB cap.
    let containers = "a".repeat(4 * 1024 * 1024 - 3000);
    let gate = "g".repeat(3_000_000);
    let run_on = "failure,".repeat(100_000);
    let cases = [
        (
            "kube-prestop.io/containers",
            containers.as_str(),
            "is not a valid container name",
        ),
        (
            "kube-prestop.io/gate",
            gate.as_str(),
            "is not one of exec, http-get, none",
        ),
        (
            "kube-prestop.io/run-on",
            run_on.as_str(),
            "gives more than one value for every container",
        ),
    ];
    let allow = TestServer::start(|_| {}).await;
    let deny = TestServer::start(|c| c.failure_mode = FailureMode::Deny).await;
    for (key, value, wrong) in cases {
        let start: String = value.chars().take(128).collect();
        let shown = format!("\"{start}\"...({} bytes)", value.len());
        let mut pod = job_pod();
        pod["metadata"]["annotations"][key] = json!(value);
        let body = review("uid-huge", "pods", "CREATE", pod.clone()).to_string();
        let (status, answer) = allow.mutate(body.clone()).await;
        assert_eq!(status, 200);
        let size = answer.to_string().len();
        assert!(size < 8 * 1024, "{key}: an answer of {size} bytes");
        let response = assert_review_echo(&answer, "uid-huge");
        let warning = warnings_of(&response).unwrap().remove(0);
        for needle in [key, shown.as_str(), wrong] {
            assert!(warning.contains(needle), "{key}: {needle} not in {warning}");
        }
        // No kube-prestop.io/skipped: the pod's annotations are over the
        // API server's 256 KiB already.
        assert!(skipped_of(&pod, &response).is_none(), "{key}");
        let (status, answer) = deny.mutate(body).await;
        assert_eq!(status, 200);
        let size = answer.to_string().len();
        assert!(size < 8 * 1024, "{key}: a refusal of {size} bytes");
        let message = assert_review_echo(&answer, "uid-huge")["status"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        for needle in [key, shown.as_str(), wrong] {
            assert!(message.contains(needle), "{key}: {needle} not in {message}");
        }
    }
    // A pod object that does not parse: serde quotes the value whole.
    let mut pod = job_pod();
    pod["spec"]["containers"][0]["ports"] = json!([{"containerPort": gate}]);
    let (status, answer) = allow
        .mutate(review("uid-unparsable", "pods", "CREATE", pod).to_string())
        .await;
    assert_eq!(status, 200);
    let size = answer.to_string().len();
    assert!(size < 8 * 1024, "an unparsable pod: {size} bytes");
    let warning = warnings_of(&assert_review_echo(&answer, "uid-unparsable"))
        .unwrap()
        .remove(0);
    assert!(
        warning.contains("spec.containers[0].ports[0].containerPort")
            && warning.contains("gggg...(3000037 bytes)"),
        "{warning}"
    );
    // Not a review at all: the 400's body quotes no value whole either.
    let mut wrong_kind = review("uid-kind", "pods", "CREATE", job_pod());
    wrong_kind["kind"] = json!(gate);
    let mut wrong_operation = review("uid-operation", "pods", "CREATE", job_pod());
    wrong_operation["request"]["operation"] = json!(gate);
    for body in [wrong_kind, wrong_operation] {
        let (status, answer) = allow.mutate(body.to_string()).await;
        assert_eq!(status, 400, "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.len() < 1024, "a 400 of {} bytes", error.len());
        assert!(error.contains("ggg"), "{error}");
    }
}

#[tokio::test]
async fn failure_mode_deny_keeps_500_for_internal_errors() {
    // A webhook misconfiguration is not the pod's fault.
    let server = TestServer::start(|c| {
        c.failure_mode = FailureMode::Deny;
        c.engine.install_image = String::new();
    })
    .await;
    let (_, value) = server
        .mutate(review("uid-internal", "pods", "CREATE", job_pod()).to_string())
        .await;
    let response = assert_review_echo(&value, "uid-internal");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 500, "{response}");
    assert_eq!(response["status"]["reason"], "InternalError", "{response}");
    assert!(response["status"].get("details").is_none(), "{response}");
}

#[tokio::test]
async fn http2_and_http1_both_work() {
    let server = TestServer::start(|_| {}).await;
    let body = review("uid-h", "pods", "CREATE", job_pod()).to_string();
    let h2 = server
        .client()
        .post(server.url("/mutate"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
    assert_eq!(h2.status(), 200);
    let h1 = server
        .client_builder()
        .http1_only()
        .build()
        .unwrap()
        .post(server.url("/mutate"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status(), 200);
    let v: Value = h1.json().await.unwrap();
    assert_review_echo(&v, "uid-h");
}

#[tokio::test]
async fn metrics_and_health_endpoints() {
    let server = TestServer::start(|_| {}).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    server
        .mutate(review("m1", "configmaps", "CREATE", cm).to_string())
        .await;
    server
        .mutate(review("m2", "pods", "CREATE", job_pod()).to_string())
        .await;
    // A dry run is answered (and counted as an admission) but is not an
    // injection: nothing will be created.
    let mut dry = review("m3", "pods", "CREATE", job_pod());
    dry["request"]["dryRun"] = json!(true);
    server.mutate(dry.to_string()).await;
    server.mutate("junk").await;
    let text = server.metrics_text().await;
    for needle in [
        r#"kube_prestop_admissions_total{decision="ignored",reason="other_resource"} 1"#,
        r#"kube_prestop_admissions_total{decision="inject",reason="injected"} 2"#,
        r#"kube_prestop_admissions_total{decision="invalid",reason="bad_request"} 1"#,
        r#"kube_prestop_injections_total{sidecar_binary="installContainer"} 1"#,
        r#"kube_prestop_injections_total{sidecar_binary="configMap"} 0"#,
        "kube_prestop_admission_duration_seconds_count 4",
        "kube_prestop_admission_duration_seconds_bucket{le=",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    // The serving certificate's notAfter, from the certificate itself.
    let (_, cert) = x509_parser::parse_x509_certificate(&server.first_cert.der).unwrap();
    let not_after = cert.validity().not_after.timestamp();
    assert!(
        text.contains(&format!(
            "kube_prestop_certificate_expiry_timestamp_seconds {not_after}"
        )),
        "{text}"
    );
    for url in [
        server.metrics_url("/livez"),
        server.metrics_url("/readyz"),
        server.url("/livez"),
        server.url("/readyz"),
    ] {
        let r = server.client().get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
    }
    // Unknown paths and wrong methods.
    let r = server
        .client()
        .get(server.url("/mutate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = server
        .client()
        .get(server.url("/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// The value of the sample `series` (name with labels) in a text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn every_metric_series_exists_at_zero_before_any_event() {
    // Regression (issue #8): series appeared only with their first event.
    let server = TestServer::start(|_| {}).await;
    let text = server.metrics_text().await;
    let outcomes = kube_prestop_metrics::labels::admission_outcomes();
    for (decision, reason) in &outcomes {
        let series =
            format!(r#"kube_prestop_admissions_total{{decision="{decision}",reason="{reason}"}}"#);
        assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
    }
    // Spot checks of the list itself: skips, engine errors, server outcomes.
    for pair in [
        (DecisionLabel::Skip, "not_job_owned"),
        (DecisionLabel::Skip, "opted_out"),
        (DecisionLabel::Error, "invalid_annotation"),
        (DecisionLabel::Error, "limit_range_unsatisfiable"),
        (DecisionLabel::Inject, "injected"),
        (DecisionLabel::Ignored, "other_resource"),
        (DecisionLabel::Invalid, "body_too_large"),
    ] {
        assert!(outcomes.contains(&pair), "{pair:?} not pre-registered");
    }
    for result in ["success", "error"] {
        let series = format!(r#"kube_prestop_certificate_reloads_total{{result="{result}"}}"#);
        assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
    }
    assert_eq!(
        sample(&text, "kube_prestop_admission_duration_seconds_count"),
        Some(0.0),
        "{text}"
    );
    // The first event counts from there.
    server
        .mutate(review("uid-first", "pods", "CREATE", job_pod()).to_string())
        .await;
    let text = server.metrics_text().await;
    let injected = r#"kube_prestop_admissions_total{decision="inject",reason="injected"}"#;
    assert_eq!(sample(&text, injected), Some(1.0), "{text}");
}

/// DER of the certificate the server presents to a new connection.
async fn served_cert(server: &TestServer) -> Option<Vec<u8>> {
    let r = server
        .client()
        .get(server.url("/livez"))
        .send()
        .await
        .ok()?;
    let info = r.extensions().get::<reqwest::tls::TlsInfo>()?;
    info.peer_certificate().map(<[u8]>::to_vec)
}

#[tokio::test]
async fn certificate_replaced_on_disk_is_served_without_restart() {
    let server = TestServer::start(|_| {}).await;
    assert_eq!(served_cert(&server).await.unwrap(), server.first_cert.der);
    let second = server.pki.issue("second");
    assert_ne!(second.der, server.first_cert.der);
    // Write the key first, then the certificate (a non-atomic update: the
    // reloader must cope with seeing a mismatched pair in between).
    std::fs::write(&server.key_file, &second.key_pem).unwrap();
    std::fs::write(&server.cert_file, &second.cert_pem).unwrap();
    wait_for(Duration::from_secs(10), "the new certificate", || async {
        served_cert(&server).await.as_deref() == Some(second.der.as_slice())
    })
    .await;
}

#[tokio::test]
async fn secret_volume_symlink_swap_is_picked_up() {
    let server =
        TestServer::start_with_files(|dir, issued| secret_volume(dir, issued, 1), |_| {}).await;
    assert_eq!(served_cert(&server).await.unwrap(), server.first_cert.der);
    let second = server.pki.issue("second");
    secret_volume(server.dir.path(), &second, 2);
    wait_for(
        Duration::from_secs(10),
        "the swapped certificate",
        || async { served_cert(&server).await.as_deref() == Some(second.der.as_slice()) },
    )
    .await;
}

#[tokio::test]
async fn broken_certificate_on_disk_keeps_the_old_one() {
    let server = TestServer::start(|_| {}).await;
    std::fs::write(&server.cert_file, "not a certificate").unwrap();
    // Wait until the reloader has seen the broken file (it counts the
    // failure), then check the first certificate is still served.
    let metrics_url = server.metrics_url("/metrics");
    wait_for(Duration::from_secs(10), "a failed reload", || {
        let url = metrics_url.clone();
        async move {
            let text = reqwest::get(url).await.unwrap().text().await.unwrap();
            // The series exists from the start at 0: wait for a count.
            sample(
                &text,
                r#"kube_prestop_certificate_reloads_total{result="error"}"#,
            )
            .is_some_and(|n| n >= 1.0)
        }
    })
    .await;
    assert_eq!(served_cert(&server).await.unwrap(), server.first_cert.der);
    // A good pair afterwards is picked up.
    let third = server.pki.issue("third");
    write_pair(server.dir.path(), &third);
    wait_for(
        Duration::from_secs(10),
        "the repaired certificate",
        || async { served_cert(&server).await.as_deref() == Some(third.der.as_slice()) },
    )
    .await;
    let text = server.metrics_text().await;
    assert!(
        text.contains(r#"kube_prestop_certificate_reloads_total{result="success"} 1"#),
        "{text}"
    );
}

/// Reads one HTTP/1.1 response (head and a Content-Length body); returns the
/// head, lower-cased, and the body.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> (String, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "connection closed inside a response head: {buf:?}");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

/// The API server talks HTTP/1.1 to webhooks and keeps idle connections in
/// a pool: endpoint removal does not stop it from reusing a connection to a
/// replica that got SIGTERM, so when the drain ends and the server closes
/// it, a request written at that moment fails (and is let through without
/// injection). During the drain every answer says `Connection: close`, so the
/// client retires each such connection itself after its next answer.
#[tokio::test]
async fn during_the_drain_http1_answers_close_the_connection() {
    // A drain longer than the test: the connection must end because of the
    // answer, not because the server stops.
    let mut server = TestServer::start(|c| c.drain_delay = Duration::from_secs(60)).await;
    let body = review("uid-keepalive", "pods", "CREATE", job_pod()).to_string();
    let request = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut tls = raw_tls(&server).await;
    tls.write_all(request.as_bytes()).await.unwrap();
    let (head, answer) = read_response(&mut tls).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    assert!(answer.contains("uid-keepalive"), "{answer}");

    let _task = server.shutdown();
    let client = reqwest::Client::new();
    let readyz = server.metrics_url("/readyz");
    wait_for(Duration::from_secs(5), "readiness to fail", || {
        let client = client.clone();
        let readyz = readyz.clone();
        async move { matches!(client.get(&readyz).send().await, Ok(r) if r.status() == 503) }
    })
    .await;

    // Same connection, during the drain: served, and told to close.
    tls.write_all(request.as_bytes()).await.unwrap();
    let (head, answer) = read_response(&mut tls).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(answer.contains("uid-keepalive"), "{answer}");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection after the answer")
        .ok();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    // New connections are still served during the drain (the endpoint may
    // not be removed everywhere yet), with the same header.
    let mut fresh = raw_tls(&server).await;
    fresh.write_all(request.as_bytes()).await.unwrap();
    let (head, _) = read_response(&mut fresh).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
}

/// HTTP/1.1 request heads are bounded as HTTP/2's header lists are: one
/// header line past the read buffer gets 431, not a buffer of hyper's
/// default 400 KiB per connection (600 such connections took a debug build
/// to 370 MiB); ordinary headers are served.
#[tokio::test]
async fn an_oversized_http1_request_head_gets_431() {
    let server = TestServer::start(|_| {}).await;
    let mut tls = raw_tls(&server).await;
    let pad = "a".repeat(kube_prestop_server::HTTP1_MAX_BUF_BYTES);
    let request = format!("GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Pad: {pad}\r\n\r\n");
    // The server may answer and close before it has read all of it.
    let _ = tls.write_all(request.as_bytes()).await;
    let (head, _) = read_response(&mut tls).await;
    assert!(head.starts_with("http/1.1 431"), "{head}");

    let mut tls = raw_tls(&server).await;
    let pad = "a".repeat(4 * 1024);
    let request = format!("GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Pad: {pad}\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let (head, _) = read_response(&mut tls).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

/// A raw TLS connection to the server (HTTP/1.1 only via ALPN).
async fn raw_tls(server: &TestServer) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_with_alpn(server, b"http/1.1").await
}

fn rcgen_ca_der(server: &TestServer) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(server.pki.ca_pem().as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn tls12_clients_are_served_and_alpn_offers_h2() {
    let server = TestServer::start(|_| {}).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(rcgen_ca_der(
            &server,
        )))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.https).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (_, conn) = tls.get_ref();
    assert_eq!(
        conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
}

#[tokio::test]
async fn connection_limit_holds_further_clients_until_a_slot_frees() {
    let server = TestServer::start(|c| c.conn_limits.max_connections = 1).await;
    // `start` polled /readyz with a client that keeps no idle connections;
    // wait until its connection is gone and a new one takes the only slot.
    let held = raw_tls(&server).await;
    let client = server
        .client_builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // While the slot is taken, a new client gets no answer.
    assert!(client.get(server.url("/livez")).send().await.is_err());
    drop(held);
    // Once it is free, clients are served again.
    let client = server.client();
    wait_for(
        Duration::from_secs(10),
        "a free connection slot",
        || async {
            matches!(client.get(server.url("/livez")).send().await, Ok(r) if r.status() == 200)
        },
    )
    .await;
}

#[tokio::test]
async fn client_that_stalls_in_the_body_gets_408() {
    let server = TestServer::start(|c| c.body_read_timeout = Duration::from_millis(300)).await;
    let mut tls = raw_tls(&server).await;
    tls.write_all(
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"apiVersion\"",
    )
    .await
    .unwrap();
    tls.flush().await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
        .await
        .expect("an answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
}

/// Connects with a 300 ms header timeout, sends `prefix` (possibly nothing)
/// and asserts the server closes the connection within 10 s.
async fn assert_disconnected_after_header_timeout(prefix: &[u8], what: &str) {
    let server = TestServer::start(|c| {
        c.conn_limits.header_read_timeout = Duration::from_millis(300);
    })
    .await;
    let mut tls = raw_tls(&server).await;
    tls.write_all(prefix).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "{what} still open after the header timeout");
}

#[tokio::test]
async fn client_that_never_sends_headers_is_disconnected() {
    assert_disconnected_after_header_timeout(
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n",
        "connection",
    )
    .await;
}

#[tokio::test]
async fn client_that_sends_nothing_after_the_handshake_is_disconnected() {
    // Regression: the protocol used to be sniffed from the first bytes with
    // no timer, so an idle TLS client held a connection slot forever.
    assert_disconnected_after_header_timeout(b"", "idle connection").await;
}

#[tokio::test]
async fn shutdown_fails_readiness_then_finishes_in_flight_requests() {
    let mut server = TestServer::start(|c| c.drain_delay = Duration::from_millis(500)).await;
    // An in-flight request: headers and half the body sent.
    let body = review("uid-inflight", "pods", "CREATE", job_pod()).to_string();
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    let mut tls = raw_tls(&server).await;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(first).await.unwrap();
    tls.flush().await.unwrap();

    let task = server.shutdown();
    let client = reqwest::Client::new();
    let readyz = server.metrics_url("/readyz");
    wait_for(Duration::from_secs(5), "readiness to fail", || {
        let client = client.clone();
        let readyz = readyz.clone();
        async move { matches!(client.get(&readyz).send().await, Ok(r) if r.status() == 503) }
    })
    .await;

    // Wait until the listener is closed (graceful shutdown has begun), then
    // finish the in-flight request: it is answered normally.
    let https = server.https;
    wait_for(
        Duration::from_secs(10),
        "the listener to close",
        || async move { tokio::net::TcpStream::connect(https).await.is_err() },
    )
    .await;
    tls.write_all(rest).await.unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut response))
        .await
        .expect("response in time")
        .ok();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("uid-inflight"), "{text}");

    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server stops in time")
        .unwrap();
}

/// A large body that is still arriving holds its share of the in-flight
/// budget, charged by the bytes received: a second large one is shed with
/// 503 (counted as `overloaded`) while an ordinary review is still
/// answered; a client that only declares a large body holds next to
/// nothing; once the first is gone the budget is free again.
#[tokio::test]
async fn large_bodies_in_flight_are_shed_and_ordinary_reviews_still_answered() {
    let server = TestServer::start(|c| {
        c.max_body_bytes = 512 * 1024;
        c.max_inflight_body_bytes = 1024 * 1024;
    })
    .await;
    // Declared-only bodies: 64 streams declaring 64 KiB each (4 MiB, four
    // times the budget) with one byte sent hold 64 KiB between them.
    let tls = tls_with_alpn(&server, b"h2").await;
    let (mut idle, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut declared_only = Vec::new();
    for _ in 0..64 {
        let request = axum::http::Request::post(server.url("/mutate"))
            .header("content-length", 64 * 1024)
            .body(())
            .unwrap();
        let (answer, mut send) = idle.send_request(request, false).unwrap();
        send.send_data(axum::body::Bytes::from_static(b"{"), false)
            .unwrap();
        declared_only.push((answer, send));
    }
    // The first large body: 500 KiB of a declared 512 KiB, then nothing more.
    let tls = tls_with_alpn(&server, b"h2").await;
    let (mut client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = axum::http::Request::post(server.url("/mutate"))
        .header("content-type", "application/json")
        .header("content-length", 512 * 1024)
        .body(())
        .unwrap();
    let (held, mut send) = client.send_request(request, false).unwrap();
    let mut left = 500 * 1024;
    while left > 0 {
        send.reserve_capacity(left.min(64 * 1024));
        let granted = std::future::poll_fn(|cx| send.poll_capacity(cx))
            .await
            .expect("the stream is open")
            .unwrap();
        let n = granted.min(left);
        send.send_data(axum::body::Bytes::from(vec![b' '; n]), false)
            .unwrap();
        left -= n;
    }
    // Poll a second large body until it is shed (the first one's bytes reach
    // the server meanwhile), bounded.
    let big = vec![b' '; 400 * 1024];
    let shed = post_until(&server, &big, |status| status == 503).await;
    assert!(
        shed.is_some(),
        "a second large body was never shed while the first was held"
    );
    // An ordinary review gets its answer meanwhile.
    let (status, body) = server
        .mutate(review("u", "pods", "CREATE", job_pod()).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let metrics = server
        .client()
        .get(server.metrics_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("reason=\"overloaded\"") && !l.ends_with(" 0")),
        "no overloaded count in:\n{metrics}"
    );
    // The first body ends: its budget is released, and a large one fits.
    drop(send);
    drop(held);
    drop(client);
    let fits = post_until(&server, &big, |status| status != 503).await;
    assert_eq!(
        fits,
        Some(400),
        "the budget was not released, or a large non-review body was not read and refused"
    );
    drop(declared_only);
    drop(idle);
}

/// POSTs `body` to `/mutate` every 20 ms, at most 100 times, until `done`
/// holds for the answer's status; that status, or `None`.
async fn post_until(server: &TestServer, body: &[u8], done: impl Fn(u16) -> bool) -> Option<u16> {
    for _ in 0..100 {
        let status = server
            .client()
            .post(server.url("/mutate"))
            .body(body.to_vec())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if done(status) {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_and_frees_its_slot() {
    // Before, a client that answered HTTP/2 keep-alive pings but sent no
    // request held its connection slot for ever: with every slot held so,
    // the API server's reviews waited in the accept queue.
    let server = TestServer::start(|c| {
        c.conn_limits.max_connections = 1;
        c.conn_limits.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let tls = tls_with_alpn(&server, b"h2").await;
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    let closed = tokio::spawn(connection);
    let _idle = client;
    let ended = tokio::time::timeout(Duration::from_secs(10), closed).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the server closes the idle connection gracefully: {ended:?}"
    );
    // The slot is free again: a review is answered.
    let body = review("uid-idle", "pods", "CREATE", job_pod()).to_string();
    let (status, _) = tokio::time::timeout(Duration::from_secs(10), server.mutate(body))
        .await
        .expect("the freed slot serves the next client");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_busy_connection_is_not_closed_as_idle() {
    let server = TestServer::start(|c| {
        c.conn_limits.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let client = server.client();
    let body = review("uid-busy", "pods", "CREATE", job_pod()).to_string();
    // Requests closer together than the idle timeout reuse one connection.
    for _ in 0..5 {
        let r = client
            .post(server.url("/mutate"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_idle_http1_keep_alive_connection_is_closed() {
    let server = TestServer::start(|c| {
        c.conn_limits.idle_timeout = Duration::from_millis(300);
        c.conn_limits.header_read_timeout = Duration::from_secs(30);
    })
    .await;
    let mut tcp = tokio::net::TcpStream::connect(server.metrics)
        .await
        .unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Read the response, then the close: read returns 0 at end of stream.
    let mut buf = vec![0u8; 1 << 20];
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "an idle keep-alive connection is closed");
}

/// A client CA of its own, written to a file for `--client-ca-file`.
fn client_ca(dir: &std::path::Path) -> (Pki, std::path::PathBuf) {
    let pki = Pki::new();
    let path = dir.join("client-ca.crt");
    std::fs::write(&path, pki.ca_pem()).unwrap();
    (pki, path)
}

fn with_identity(server: &TestServer, issued: &http_common::Issued) -> reqwest::Client {
    let pem = format!("{}{}", issued.cert_pem, issued.key_pem);
    server
        .client_builder()
        .identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn with_a_client_ca_only_a_client_with_its_certificate_may_post_reviews() {
    // Before, anyone who reached the port could post a review: the API
    // server's AdmissionConfiguration client certificate was never asked for.
    let dir = tempfile::tempdir().unwrap();
    let (client_pki, ca_file) = client_ca(dir.path());
    let server = TestServer::start(|c| c.client_ca_file = Some(ca_file)).await;
    let body = review("uid-mtls", "pods", "CREATE", job_pod()).to_string();
    // No certificate: refused, counted; the probes' endpoints still answer.
    let (status, value) = server.mutate(body.clone()).await;
    assert_eq!(status, 401, "{value}");
    assert!(
        value["error"]
            .as_str()
            .unwrap()
            .contains("--client-ca-file"),
        "{value}"
    );
    let ready = server
        .client()
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    // The API server's certificate: answered.
    let apiserver = with_identity(&server, &client_pki.issue("kube-apiserver"));
    let r = apiserver
        .post(server.url("/mutate"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A certificate of another CA: the handshake fails.
    let stranger = with_identity(&server, &Pki::new().issue("kube-apiserver"));
    let r = stranger.post(server.url("/mutate")).body(body).send().await;
    assert!(r.is_err(), "{r:?}");
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains(
            r#"kube_prestop_admissions_total{decision="invalid",reason="unauthenticated"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_ca_file_without_a_certificate_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("empty.crt");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let pki = Pki::new();
    let (cert, key) = http_common::write_pair(dir.path(), &pki.issue("localhost"));
    let mut config = kube_prestop_server::ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        cert,
        key,
    );
    config.client_ca_file = Some(bad.clone());
    let Err(err) = kube_prestop_server::Server::bind(
        config,
        kube_prestop_cluster::cluster_cache::ClusterCache::disconnected(),
    )
    .await
    else {
        panic!("a client CA file without a certificate was accepted");
    };
    let text = err.to_string();
    assert!(text.contains("--client-ca-file"), "{text}");
    assert!(text.contains(&bad.display().to_string()), "{text}");
}

/// Every message of `err`'s chain, joined as anyhow's `{:#}` prints them.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[tokio::test]
async fn a_port_in_use_is_named_once_with_its_listener_and_address() {
    // Before: "cannot listen on 127.0.0.1:P: Address already in use (os
    // error 98): Address already in use (os error 98)", the I/O error both
    // in the message and as its source.
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = http_common::write_pair(dir.path(), &pki.issue("localhost"));
    for https in [true, false] {
        let taken = (21800..21900)
            .find_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
            .expect("a free port in 21800..21900");
        let addr = taken.local_addr().unwrap();
        let free: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (https_addr, metrics_addr) = if https { (addr, free) } else { (free, addr) };
        let config = kube_prestop_server::ServerConfig::new(
            https_addr,
            metrics_addr,
            cert.clone(),
            key.clone(),
        );
        let Err(err) = kube_prestop_server::Server::bind(
            config,
            kube_prestop_cluster::cluster_cache::ClusterCache::disconnected(),
        )
        .await
        else {
            panic!("a port in use was bound");
        };
        let text = chain(&err);
        assert_eq!(text.matches("in use").count(), 1, "{text}");
        assert!(text.contains(&addr.to_string()), "{text}");
        let listener = if https { "HTTPS port" } else { "metrics port" };
        assert!(text.contains(listener), "{text}");
    }
}
