//! Attacks on the webhook's trust boundaries (issue 25), on the real local
//! cluster with the chart installed:
//! - an AdmissionReview crafted by someone who can reach the webhook pod
//!   (here through the API server's pods/proxy), for a pod of a namespace
//!   the webhook configuration does not select, makes the webhook write
//!   nothing there (before, it created the ~1 MiB sidecar ConfigMap);
//! - a pod that the patch would take past the documented size bound is
//!   admitted uninjected under the default failure mode, with only
//!   `kube-prestop.io/skipped` added (before, the patched pod was refused by
//!   the API server after the webhook answered);
//! - the chart's ValidatingAdmissionPolicy refuses the webhook's ServiceAccount
//!   any ConfigMap but its own sidecar-binary ones in selected namespaces;
//! - a container of an injected pod that tries to replace the sidecar
//!   binary and to forge another watched container's records, running as
//!   the same non-root UID (the install init container's delivery, where
//!   the binary lies in the pod's own `emptyDir`): every attempt fails
//!   (`EROFS` on the binary, `ENOENT` on the other's records) and both
//!   hooks run exactly once (before, the volume's root was read-write in
//!   every watched container: the binary could be renamed away and
//!   replaced, and a forged `prestop-<id>` made the other container's hook
//!   be skipped).
//!
//! - a flood of maximum-size reviews (48 concurrent 4 MiB bodies, posted
//!   to every webhook pod for 15 s): no webhook container restarts or is
//!   OOM-killed, the in-flight body budget sheds (`reason="overloaded"`
//!   counted), every ordinary review posted beside it is answered, and a
//!   pod created through the API server meanwhile is injected. The
//!   ordinary reviews' p99 and the container's peak memory (the kubelet's
//!   cAdvisor `container_memory_max_usage_bytes`) are printed; the timed
//!   figures are `make bench`'s (webhook part, flood phase;
//!   docs/figures.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use kube_prestop_e2e::checks::{
    ensure_injected, ensure_sidecar_hooks, ensure_skipped, has_install_container,
};
use kube_prestop_e2e::fixtures::{container, job, pod_spec, set};
use kube_prestop_e2e::metrics::{sum, webhook_replica_metrics};
use kube_prestop_e2e::nodes::FakeNode;
use kube_prestop_e2e::records::ensure_records;
use kube_prestop_e2e::scenario::with_scenario;
use kube_prestop_e2e::waits::{poll_until, wait_job_pod, wait_pod_finished};
use kube_prestop_e2e::webhook::{WEBHOOK_NAMESPACE, probe_pod_with, wait_delivery, webhook_pods};
use kube_prestop_e2e::{
    DEFAULT_TEST_IMAGE, JobOutcome, TestNamespace, client, container_names, init_tracing, run_job,
    sidecar_name, with_namespace,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const JOB_TIMEOUT: Duration = Duration::from_secs(240);
/// The chart's default HTTPS port of the webhook container.
const WEBHOOK_HTTPS_PORT: u16 = 8443;
const CONFIG_MAP_PREFIX: &str = "kube-prestop-sidecar-";
const REFUSALS: &str = "kube_prestop_sidecar_configmap_refusals_total";

/// A Job-owned pod pinned to amd64 with an exec preStop, in `ns`.
fn pinned_job_pod(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "crafted-", "namespace": ns, "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "crafted", "uid": "00000000-0000-0000-0000-000000000001", "controller": true}
        ]},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "containers": [{
                "name": "main", "image": DEFAULT_TEST_IMAGE,
                "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
            }]
        }
    })
}

fn review(uid: &str, ns: &str, pod: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": pod
        }
    })
}

/// Posts `body` to `/mutate` of webhook pod `pod` through the API server's
/// pods/proxy (the API server does not verify the pod's certificate there).
async fn post_to_webhook_pod(client: &Client, pod: &str, body: &Value) -> Result<Value> {
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{WEBHOOK_NAMESPACE}/pods/https:{pod}:{WEBHOOK_HTTPS_PORT}/proxy/mutate"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(body)?)?;
    let text = client
        .request_text(req)
        .await
        .with_context(|| format!("POST /mutate to webhook pod {pod}"))?;
    serde_json::from_str(&text).with_context(|| format!("answer of {pod}: {text}"))
}

/// Counter `metric` with label `reason`, summed over every running webhook
/// replica.
async fn with_reason(client: &Client, metric: &str, reason: &str) -> Result<f64> {
    Ok(webhook_replica_metrics(client)
        .await?
        .iter()
        .map(|(_, samples)| {
            sum(samples, metric, |l| {
                l.get("reason").map(String::as_str) == Some(reason)
            })
        })
        .sum())
}

/// `kube_prestop_admissions_total` with label `reason`, all replicas.
async fn admissions_with_reason(client: &Client, reason: &str) -> Result<f64> {
    with_reason(client, "kube_prestop_admissions_total", reason).await
}

async fn refusals(client: &Client, reason: &str) -> Result<f64> {
    with_reason(client, REFUSALS, reason).await
}

async fn sidecar_config_maps(client: &Client, ns: &str) -> Result<Vec<String>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .filter(|name| name.starts_with(CONFIG_MAP_PREFIX))
        .collect())
}

/// A review crafted for a pod of an unlabelled namespace, posted straight to
/// every webhook replica: answered, counted as a refused write, and no
/// ConfigMap appears in that namespace. A Node of another architecture
/// (no kubelet) makes the chart's default `auto` source choose the
/// ConfigMap for pods pinned to amd64, as in a mixed cluster.
#[tokio::test]
async fn crafted_review_for_an_unselected_namespace_writes_nothing() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let node = FakeNode::create(&client, "kpt-attack-arm64", "arm64", "containerd://1.7.0").await?;
    let ns = TestNamespace::create(&client, "kpt-attack-unselected", false).await?;
    let result = with_namespace(ns, |ns| {
        let client = client.clone();
        async move {
            let before = refusals(&client, "unselected").await?;
            let pods = webhook_pods(&client).await?;
            ensure!(!pods.is_empty(), "no webhook pod");
            let body = review("crafted-1", &ns, pinned_job_pod(&ns));
            // The node facts reach every replica through its watch; post
            // until a replica answers with the ConfigMap delivery's refusal
            // counted (bounded).
            poll_until(WAIT, Duration::from_millis(500), || {
                let client = client.clone();
                let pods = pods.clone();
                let body = body.clone();
                async move {
                    for pod in &pods {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let answer = post_to_webhook_pod(&client, &name, &body).await?;
                        ensure!(
                            answer["response"]["uid"] == "crafted-1",
                            "{name} did not answer the review: {answer}"
                        );
                    }
                    Ok(refusals(&client, "unselected").await? > before)
                }
            })
            .await
            .context("no replica counted the refused ConfigMap write")?;
            let written = sidecar_config_maps(&client, &ns).await?;
            ensure!(
                written.is_empty(),
                "the webhook wrote {written:?} into {ns}"
            );
            Ok(())
        }
    })
    .await;
    let deleted = node.delete().await;
    result.and(deleted)
}

/// A pod that opts in and whose watched container carries 900 KiB of env:
/// the sidecar would copy it, taking the pod past the 1.5 MiB bound. Under
/// the chart's default failure mode it is admitted uninjected (the API
/// server stores it) with only `kube-prestop.io/skipped: pod_too_large:
/// ...` added, and the webhook counts `pod_too_large`.
#[tokio::test]
async fn a_pod_the_patch_would_take_too_large_is_admitted_unmodified() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kpt-attack-oversize", true).await?;
    with_namespace(ns, |ns| {
        let client = client.clone();
        async move {
            let before = admissions_with_reason(&client, "pod_too_large").await?;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "oversize", "annotations": {"kube-prestop.io/inject": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": DEFAULT_TEST_IMAGE, "command": ["true"],
                    "env": [{"name": "BIG", "value": "x".repeat(900 * 1024)}],
                    "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
                }]}
            }))?;
            let created = Api::<Pod>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &pod)
                .await
                .context("the API server refused the pod (before the bound, the patched pod was too large for etcd)")?;
            let names = container_names(&created);
            ensure!(
                !names.contains(&sidecar_name("main")),
                "the oversize pod was injected: {names:?}"
            );
            let note = ensure_skipped(&created, "pod_too_large")?;
            ensure!(
                note.contains("admitted without the preStop sidecar"),
                "{note}"
            );
            poll_until(WAIT, Duration::from_millis(500), || {
                let client = client.clone();
                async move { Ok(admissions_with_reason(&client, "pod_too_large").await? > before) }
            })
            .await
            .context("pod_too_large was not counted")?;
            Ok(())
        }
    })
    .await
}

/// The webhook's ServiceAccount as the API server sees it.
const WEBHOOK_ACCOUNT: &str = "system:serviceaccount:kube-prestop:kube-prestop";

/// A client that acts as the webhook's ServiceAccount (impersonation: the
/// test's admin may impersonate anyone).
async fn as_webhook_account() -> Result<Client> {
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(WEBHOOK_ACCOUNT.to_owned());
    Ok(Client::try_from(config)?)
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": { "x": "y" }
    }))
    .expect("a ConfigMap")
}

/// Creates `name` in `ns` as the webhook's account; the API server's error
/// message when refused.
async fn create_as_webhook(account: &Client, ns: &str, name: &str) -> Result<Option<String>> {
    match Api::<ConfigMap>::namespaced(account.clone(), ns)
        .create(&PostParams::default(), &config_map(name))
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 422 => {
            Ok(Some(status.message))
        }
        Err(e) => Err(e.into()),
    }
}

/// The chart's ValidatingAdmissionPolicy, whatever the webhook process is
/// made to do: its ServiceAccount (whose RBAC may create ConfigMaps in any
/// namespace, since RBAC cannot restrict a create by name or by the
/// namespace's labels) may create only `kube-prestop-sidecar-*` ConfigMaps,
/// and only in namespaces labelled for injection. Before, the policy was
/// installed but no denial of it had been seen.
#[tokio::test]
async fn the_policy_refuses_the_webhook_account_any_other_config_map() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let account = as_webhook_account().await?;
    let labelled = TestNamespace::create(&client, "kpt-vap-selected", true).await?;
    let unlabelled = TestNamespace::create(&client, "kpt-vap-unselected", false).await?;
    let other = unlabelled.name.clone();
    let result =
        with_namespace(labelled, |ns| {
            let account = account.clone();
            async move {
                let refused = create_as_webhook(&account, &ns, "not-ours").await?;
                ensure!(
                    refused.as_deref().is_some_and(
                        |m| m.contains("may create only its sidecar-binary ConfigMaps")
                    ),
                    "a ConfigMap of another name in {ns}: {refused:?}"
                );
                let forged = format!("{CONFIG_MAP_PREFIX}vap-forged");
                let refused = create_as_webhook(&account, &other, &forged).await?;
                ensure!(
                    refused.as_deref().is_some_and(|m| m
                        .contains("only in namespaces labelled kube-prestop.io/inject=enabled")),
                    "a sidecar ConfigMap in the unlabelled {other}: {refused:?}"
                );
                // Its own kind of ConfigMap in a selected namespace passes.
                let own = format!("{CONFIG_MAP_PREFIX}vap-allowed");
                let refused = create_as_webhook(&account, &ns, &own).await?;
                ensure!(refused.is_none(), "its own ConfigMap in {ns}: {refused:?}");
                Ok(())
            }
        })
        .await;
    let deleted = unlabelled.delete().await;
    result.and(deleted)
}

/// What container `a` tries against container `b` of its pod, as `sh`: it
/// finds `b`'s container process as the sidecar does (the parentless
/// process whose mountinfo has `b`'s identifying mount, in the shared PID
/// namespace) and computes its instance id `<pid>-<start time>`, waiting
/// for it (bounded); then it tries to rename the binary's directory away,
/// overwrite the binary, plant a file beside it, forge `b`'s `done-` and
/// `prestop-` records for that instance (a file, a link), make `b`'s state
/// directory and the evidence of `b`'s start in it (`created`, a faked
/// start), and write into `/.kube-prestop` itself (not a mount: the
/// parent the runtime made for the mount points). Each attempt appends
/// `<what>: ok` or `<what>: refused: <error>` to `/records/attack`; before
/// them, the owner and mode of its own state directory (its state volume,
/// an `emptyDir` the kubelet made root-owned 0777, docs/facts.md K16) and
/// whether it can write there.
const ATTACK: &str = r#"
log() { echo "$*" >> /records/attack; }
try() { what=$1; shift; if out=$("$@" 2>&1); then log "$what: ok"; else log "$what: refused: $out"; fi; }
id=
i=0
while [ -z "$id" ] && [ "$i" -lt 300 ]; do
  for p in /proc/[0-9]*; do
    grep -q ' /.kube-prestop/state/b/created ' "$p/mountinfo" 2>/dev/null || continue
    set -- $(cat "$p/stat" 2>/dev/null)
    [ "$4" = 0 ] && id="$1-${22}" && break
  done
  [ -n "$id" ] || sleep 0.1
  i=$((i + 1))
done
log "own-dir: $(stat -c '%u %a' /.kube-prestop/state/a)"
try own-write sh -c 'echo x > /.kube-prestop/state/a/.attack && rm /.kube-prestop/state/a/.attack'
try bin-rename mv /.kube-prestop/bin /.kube-prestop/bin.old
try bin-replace cp /bin/sh /.kube-prestop/bin/kube-prestop
try bin-plant sh -c 'echo evil > /.kube-prestop/bin/evil'
try forge-done sh -c "echo outcome=ran > /.kube-prestop/state/b/done-$id"
try forge-prestop sh -c "echo wrapper_pid=1 > /.kube-prestop/state/b/prestop-$id"
try forge-link ln -s /dev/null "/.kube-prestop/state/b/prestop-$id"
try make-dir mkdir /.kube-prestop/state/b
try forge-created mkdir /.kube-prestop/state/b/created
try write-root sh -c 'echo x > /.kube-prestop/planted'
log "b-instance: $id"
"#;

/// The attempts of [`ATTACK`] that must fail, and the errors each may fail
/// with (busybox's words): the binary's directory is a read-only mount
/// (`EROFS`; its rename fails in the root-owned directory of `a`'s image
/// that holds the mount point, `EACCES`, or as a mount point, `EBUSY`);
/// `b`'s state volume is not mounted in `a` at all (`ENOENT`, "nonexistent
/// directory"; `EACCES` or `EROFS` for what `a`, not root, would make in the
/// root-owned directories the runtime made for the mount points).
const REFUSED: [(&str, &[&str]); 9] = [
    (
        "bin-rename",
        &[
            "Read-only file system",
            "Resource busy",
            "Permission denied",
        ],
    ),
    ("bin-replace", &["Read-only file system"]),
    ("bin-plant", &["Read-only file system"]),
    (
        "forge-done",
        &["No such file or directory", "nonexistent directory"],
    ),
    (
        "forge-prestop",
        &["No such file or directory", "nonexistent directory"],
    ),
    ("forge-link", &["No such file or directory"]),
    ("make-dir", &["Permission denied", "Read-only file system"]),
    (
        "forge-created",
        &["No such file or directory", "nonexistent directory"],
    ),
    (
        "write-root",
        &["Permission denied", "Read-only file system"],
    ),
];

/// Two watched containers running as the same non-root UID (1000, no
/// fsGroup), with the binary copied into the pod's `emptyDir` by the install
/// init container (a Node of another architecture whose runtime mounts no
/// image volume, no kubelet, makes `auto` choose it for an unpinned pod):
/// container `a` tries [`ATTACK`] on the binary and on `b`'s records while
/// `b` runs. Every attempt is refused (the binary's volume is mounted
/// read-only, and `a` mounts nothing else of ours writable but its own
/// state volume, an `emptyDir` the kubelet made 0777, which `a` can write),
/// and each container's hook runs exactly once; each hook's attempt to make
/// a directory under `id/` (faking a container's start, which would make a
/// sidecar run a late hook) is refused too, and so is its attempt to write
/// into the other container's state volume, which its sidecar mounts
/// read-only (for the termination message).
#[tokio::test]
async fn a_container_cannot_replace_the_binary_or_forge_another_containers_records() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let node =
        FakeNode::create(&client, "kpt-attack-volume", "arm64", "containerd://1.7.0").await?;
    let result = with_scenario(&client.clone(), "kpt-attack-volume", |ns, rec| {
        let client = client.clone();
        async move {
            wait_delivery(
                &client,
                &ns,
                &probe_pod_with(json!({}))?,
                "installContainer",
                WAIT,
            )
            .await?;
            // Each hook (run by its sidecar, which mounts the id volume
            // read-only) also tries to write into the id volume, the source
            // that identifies a watched container, and into the other
            // container's state volume (read-only in its sidecar), where
            // `created` would fake that container's start.
            let hook = "echo $KUBE_PRESTOP_CONTAINER >> /records/hooks; \
                        out=$(mkdir /.kube-prestop/id/forged 2>&1) && r=ok || r=\"refused: $out\"; \
                        echo \"$KUBE_PRESTOP_CONTAINER forge-start: $r\" >> /records/forge; \
                        for d in /.kube-prestop/state/*; do \
                        [ \"$d\" = /.kube-prestop/state/$KUBE_PRESTOP_CONTAINER ] && continue; \
                        out=$(touch \"$d/forged\" 2>&1) && r=ok || r=\"refused: $out\"; \
                        echo \"$KUBE_PRESTOP_CONTAINER forge-other $d: $r\" >> /records/forge-other; done";
            let mut spec = pod_spec(
                &rec,
                vec![
                    container("a", ATTACK, hook),
                    container("b", "sleep 8", hook),
                ],
            );
            set(
                &mut spec,
                "securityContext",
                json!({ "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true }),
            );
            let j = job("attack-volume", spec, json!({}))?;
            let outcome = run_job(&client, &ns, &j, JOB_TIMEOUT).await?;
            ensure!(outcome == JobOutcome::Complete, "Job ended {outcome:?}");
            let pod = wait_job_pod(&client, &ns, "attack-volume", WAIT).await?;
            let name = pod.metadata.name.clone().unwrap_or_default();
            let pod = wait_pod_finished(&client, &ns, &name, WAIT).await?;
            ensure_injected(&pod, "a")?;
            ensure_injected(&pod, "b")?;
            ensure!(
                has_install_container(&pod),
                "not the install container's delivery: {:?}",
                container_names(&pod)
            );

            let lines = ensure_records(&rec, "attack", REFUSED.len() + 3).await?;
            let line = |what: &str| {
                lines
                    .iter()
                    .find(|l| l.starts_with(&format!("{what}: ")))
                    .cloned()
                    .unwrap_or_default()
            };
            ensure!(
                line("own-dir") == "own-dir: 0 777",
                "a's state directory (owner, mode) is not the kubelet's root-owned 0777: {lines:?}"
            );
            ensure!(line("own-write") == "own-write: ok", "{lines:?}");
            ensure!(
                line("b-instance").len() > "b-instance: ".len(),
                "a never found b's container process: {lines:?}"
            );
            for (what, errors) in REFUSED {
                let l = line(what);
                ensure!(
                    l.starts_with(&format!("{what}: refused: "))
                        && errors.iter().any(|e| l.contains(e)),
                    "{what} was not refused with one of {errors:?}: {l:?} (all: {lines:?})"
                );
            }

            let mut hooks = ensure_records(&rec, "hooks", 2).await?;
            hooks.sort();
            ensure!(hooks == ["a", "b"], "hook lines {hooks:?}");
            let forged = ensure_records(&rec, "forge", 2).await?;
            for l in &forged {
                ensure!(
                    l.contains("forge-start: refused: ")
                        && ["Read-only file system", "Permission denied"]
                            .iter()
                            .any(|e| l.contains(e)),
                    "a hook could make a directory in the id volume (mounted read-only everywhere): {forged:?}"
                );
            }
            // Each sidecar sees the other's state volume, read-only.
            let mut other = ensure_records(&rec, "forge-other", 2).await?;
            other.sort();
            ensure!(
                other.len() == 2
                    && other[0].starts_with("a forge-other /.kube-prestop/state/b: refused: ")
                    && other[1].starts_with("b forge-other /.kube-prestop/state/a: refused: ")
                    && other.iter().all(|l| l.contains("Read-only file system")),
                "a hook could write into the other container's state volume, or did not see it: {other:?}"
            );
            ensure_sidecar_hooks(&client, &ns, &name, "a", 1).await?;
            let b_log = ensure_sidecar_hooks(&client, &ns, &name, "b", 1).await?;
            ensure!(
                !b_log.contains("refusing "),
                "b's sidecar met a forged record:\n{b_log}"
            );
            Ok(())
        }
    })
    .await;
    let deleted = node.delete().await;
    result.and(deleted)
}

/// The chart's `--max-body-bytes` (the server's default): the flood's body
/// size, so that every body is read whole.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A review of `size` bytes whose pod is padded by an annotation (not
/// Job-owned: the answer is a skip, the cost is the body's).
fn padded_review(uid: &str, ns: &str, size: usize) -> Result<Vec<u8>> {
    let mut body = review(
        uid,
        ns,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "flood-", "namespace": ns, "annotations": {"flood": ""}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": DEFAULT_TEST_IMAGE}]}
        }),
    );
    let pad = size.saturating_sub(serde_json::to_vec(&body)?.len());
    body["request"]["object"]["metadata"]["annotations"]["flood"] = json!("x".repeat(pad));
    Ok(serde_json::to_vec(&body)?)
}

/// POSTs raw `body` to `/mutate` of webhook pod `pod` (as
/// [`post_to_webhook_pod`]); `Err` for any answer but 200.
async fn post_raw(client: &Client, pod: &str, body: Vec<u8>) -> Result<String> {
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{WEBHOOK_NAMESPACE}/pods/https:{pod}:{WEBHOOK_HTTPS_PORT}/proxy/mutate"
    ))
    .header("content-type", "application/json")
    .body(body)?;
    Ok(client.request_text(req).await?)
}

/// Each webhook container's restart count and whether it was ever
/// OOM-killed, by pod name.
async fn webhook_restarts(client: &Client) -> Result<Vec<(String, i32, bool)>> {
    Ok(webhook_pods(client)
        .await?
        .into_iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let status = p
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.name == "webhook");
            let restarts = status.as_ref().map_or(0, |c| c.restart_count);
            let oom = status
                .and_then(|c| c.last_state)
                .and_then(|l| l.terminated)
                .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"));
            (name, restarts, oom)
        })
        .collect())
}

/// The webhook pod's peak memory in bytes, as the kubelet's cAdvisor
/// reports it (`container_memory_max_usage_bytes`, cgroup v1
/// `memory.max_usage_in_bytes`): the webhook container's own series, or,
/// where cAdvisor labels only the pod's cgroup (containerd 2 here), the
/// pod's, which holds the webhook container and an exited init container;
/// `None` where neither is reported (cgroup v2 has no such file).
async fn webhook_peak_memory(client: &Client, pod: &Pod) -> Option<f64> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let name = pod.metadata.name.clone()?;
    let req = http::Request::get(format!("/api/v1/nodes/{node}/proxy/metrics/cadvisor"))
        .body(Vec::new())
        .ok()?;
    let text = client.request_text(req).await.ok()?;
    let series = |container: &str| {
        text.lines()
            .filter(|l| l.starts_with("container_memory_max_usage_bytes{"))
            .filter(|l| {
                l.contains(&format!("container=\"{container}\""))
                    && l.contains(&format!("pod=\"{name}\""))
            })
            .find_map(|l| l.split_whitespace().nth(1)?.parse().ok())
    };
    series("webhook").or_else(|| series(""))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::test]
async fn a_flood_of_maximum_size_reviews_neither_restarts_the_webhook_nor_stops_ordinary_reviews()
-> Result<()> {
    init_tracing();
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kpt-attack-flood", true).await?;
    with_namespace(ns, |ns| {
        let client = client.clone();
        async move {
            let pods = webhook_pods(&client).await?;
            ensure!(!pods.is_empty(), "no webhook pod");
            let names: Vec<String> = pods
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            let before = webhook_restarts(&client).await?;
            let shed_before = admissions_with_reason(&client, "overloaded").await?;
            let big = padded_review("flood", &ns, MAX_BODY_BYTES)?;
            let flood_for = Duration::from_secs(15);
            let started = Instant::now();
            let mut flood = tokio::task::JoinSet::new();
            for i in 0..48 {
                let (client, big) = (client.clone(), big.clone());
                let pod = names[i % names.len()].clone();
                flood.spawn(async move {
                    let (mut answered, mut refused) = (0u32, 0u32);
                    while started.elapsed() < flood_for {
                        // The proxy passes the webhook's 503 (shed) on.
                        match post_raw(&client, &pod, big.clone()).await {
                            Ok(text) if text.contains("\"uid\":\"flood\"") => answered += 1,
                            _ => refused += 1,
                        }
                    }
                    (answered, refused)
                });
            }
            // Beside the flood: ordinary reviews to every pod, and a pod
            // created through the API server (its review goes to whichever
            // replica the Service picks).
            tokio::time::sleep(Duration::from_secs(2)).await;
            let ordinary = serde_json::to_vec(&review("ordinary", &ns, pinned_job_pod(&ns)))?;
            let mut latencies = Vec::new();
            let mut failures = Vec::new();
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "during-flood", "annotations": {"kube-prestop.io/inject": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": DEFAULT_TEST_IMAGE, "command": ["true"],
                    "lifecycle": {"preStop": {"exec": {"command": ["echo", "bye"]}}}
                }]}
            }))?;
            let created = Api::<Pod>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &pod)
                .await
                .context("creating a pod during the flood")?;
            for round in 0..10 {
                for name in &names {
                    let t = Instant::now();
                    match post_raw(&client, name, ordinary.clone()).await {
                        Ok(text) if text.contains("\"allowed\":true") => latencies.push(t.elapsed()),
                        Ok(text) => failures.push(format!("{name} round {round}: {text:.200}")),
                        Err(e) => failures.push(format!("{name} round {round}: {e:#}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let (mut answered, mut refused) = (0u32, 0u32);
            while let Some(r) = flood.join_next().await {
                let (a, r) = r?;
                answered += a;
                refused += r;
            }
            latencies.sort();
            // kube's client retries a 503 with backoff, so the sheds are
            // counted where they happen: the webhook's metrics.
            let shed_count = admissions_with_reason(&client, "overloaded").await? - shed_before;
            let peaks: Vec<String> = {
                let mut v = Vec::new();
                for p in &pods {
                    let peak = webhook_peak_memory(&client, p).await;
                    v.push(format!(
                        "{}: {}",
                        p.metadata.name.as_deref().unwrap_or(""),
                        peak.map_or("not reported".to_owned(), |b| format!("{:.1} MiB", b / 1048576.0))
                    ));
                }
                v
            };
            println!(
                "flood: {answered} large reviews answered, {shed_count} shed by the webhook, {refused} failed after the client's retries (48 connections, {} s); ordinary reviews beside it: {} answered, p50 {:?}, p99 {:?}; webhook peak memory (cAdvisor): {}",
                flood_for.as_secs(),
                latencies.len(),
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99),
                peaks.join(", ")
            );
            ensure!(failures.is_empty(), "ordinary reviews not answered during the flood: {failures:?}");
            let names_created = container_names(&created);
            ensure!(
                names_created.contains(&sidecar_name("main")),
                "the pod created during the flood was not injected: {names_created:?}"
            );
            ensure!(
                shed_count > 0.0,
                "no request was shed: the flood did not reach the in-flight budget ({answered} answered)"
            );
            let after = webhook_restarts(&client).await?;
            for (name, restarts, oom) in &after {
                let was = before.iter().find(|(n, ..)| n == name).map_or(0, |b| b.1);
                ensure!(
                    *restarts == was && !oom,
                    "webhook pod {name} restarted during the flood ({was} -> {restarts} restarts, OOM-killed: {oom})"
                );
            }
            ensure!(
                after.len() == before.len(),
                "webhook pods before {before:?}, after {after:?}"
            );
            Ok(())
        }
    })
    .await
}
