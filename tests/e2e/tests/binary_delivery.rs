//! Which sidecar binary delivery each pod gets (issue 15), on the real local
//! cluster with the chart's default `sidecarBinary.source: auto`: the image
//! volume where it works (this cluster: Kubernetes 1.37, containerd 2.4);
//! in a cluster of several architectures (a Node object of another one,
//! created through the API beside the real node, no kubelet) the
//! ConfigMap only for pods pinned to an architecture, never for an unpinned
//! one; a pod pinned to an architecture no binary is shipped for is
//! admitted uninjected, saying why in `kube-prestop.io/skipped`. Each
//! function is named after its case; they run one at a time (`make e2e`
//! uses `--test-threads=1`) because the fake nodes change what every pod of
//! the cluster gets. The fall-back from an image
//! volume a node's runtime cannot mount to the ConfigMap and the install
//! init container is in `scenarios.rs`
//! (`image_volume_unsupported_falls_back_to_config_map_then_install_container`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use kube_prestop_e2e::checks::{
    binary_config_map, binary_delivery, binary_image_volume, config_map_binary, ensure_injected,
    ensure_sidecar_hooks, ensure_skipped, has_install_container,
};
use kube_prestop_e2e::fixtures::{container, job, pod_spec, set};
use kube_prestop_e2e::metrics::{sum, webhook_replica_metrics};
use kube_prestop_e2e::nodes::FakeNode;
use kube_prestop_e2e::records::{RECORD_HOOK, ensure_records};
use kube_prestop_e2e::scenario::with_scenario;
use kube_prestop_e2e::webhook::{dry_run, probe_pod_with, wait_delivery, webhook_log_lines};
use kube_prestop_e2e::{JobOutcome, client, init_tracing, job_pod, run_job, sidecar_name};
use serde_json::{Value, json};

const JOB_TIMEOUT: Duration = Duration::from_secs(240);
const WAIT: Duration = Duration::from_secs(120);
const C: &str = "main";

fn pinned(arch: &str) -> Value {
    json!({ "nodeSelector": { "kubernetes.io/arch": arch } })
}

fn pinned_by_affinity(arch: &str) -> Value {
    json!({ "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{ "matchExpressions": [
            { "key": "kubernetes.io/arch", "operator": "In", "values": [arch] }
        ]}]
    }}}})
}

/// The ELF machine of a binary: `amd64`, `arm64` or what it is.
fn elf_machine(binary: &[u8]) -> String {
    match binary.get(18..20) {
        Some([62, 0]) => "amd64".to_owned(),
        Some([183, 0]) => "arm64".to_owned(),
        other => format!("{other:?}"),
    }
}

/// `auto` on containerd 2.4 + Kubernetes 1.37: the install image mounted as
/// an image volume, no install init container, no ConfigMap. The hook runs
/// once, from the image volume's binary; the mount is read-only and allows
/// executables (no `noexec`), as the container's own mountinfo shows.
#[tokio::test]
async fn auto_chooses_the_image_volume_and_the_hook_runs_once_from_it() -> Result<()> {
    init_tracing();
    let client = client().await?;
    with_scenario(&client.clone(), "kpt-image-volume", |ns, rec| async move {
        wait_delivery(
            &client,
            &ns,
            &probe_pod_with(json!({}))?,
            "imageVolume",
            WAIT,
        )
        .await?;
        let body = "grep ' /.kube-prestop/bin ' /proc/self/mountinfo > /records/mounts; echo body";
        let j = job(
            "from-image-volume",
            pod_spec(&rec, vec![container(C, body, RECORD_HOOK)]),
            json!({}),
        )?;
        let outcome = run_job(&client, &ns, &j, JOB_TIMEOUT).await?;
        ensure!(outcome == JobOutcome::Complete, "Job ended {outcome:?}");
        let pod = job_pod(&client, &ns, "from-image-volume").await?;
        ensure_injected(&pod, C)?;
        ensure!(
            binary_image_volume(&pod).is_some()
                && !has_install_container(&pod)
                && binary_config_map(&pod).is_none(),
            "pod not given the image volume alone: {}",
            binary_delivery(&pod)
        );
        ensure_records(&rec, "hooks", 1).await?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        ensure_sidecar_hooks(&client, &ns, &name, C, 1).await?;
        let mounts = rec.lines("mounts");
        ensure!(
            mounts.len() == 1,
            "mountinfo lines for /.kube-prestop/bin: {mounts:?}"
        );
        // `ID PARENT DEV ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPER`.
        let options = mounts[0].split(' ').nth(5).unwrap_or_default();
        ensure!(
            options.split(',').any(|o| o == "ro") && !mounts[0].contains("noexec"),
            "image volume mount is not read-only with exec: {}",
            mounts[0]
        );
        tracing::info!(mount = %mounts[0], "image volume mount in the watched container");
        Ok(())
    })
    .await
}

/// A Node of another architecture (arm64) beside the real amd64 node, its
/// runtime too old for image volumes: an unpinned pod may land on either,
/// so it gets the install init container, never a ConfigMap; a pod pinned
/// to amd64 (nodeSelector) gets the amd64 ConfigMap once it exists, and
/// runs its hook once from it; a pod pinned to arm64 (node affinity) never
/// gets the amd64 one. With the fake node gone, image volumes come back.
#[tokio::test]
async fn mixed_cluster_gets_the_config_map_only_for_pinned_pods() -> Result<()> {
    init_tracing();
    let client = client().await?;
    let node = FakeNode::create(&client, "kpt-fake-arm64", "arm64", "containerd://1.7.0").await?;
    let result = mixed_cluster(&client).await;
    let deleted = node.delete().await;
    let back = with_scenario(&client.clone(), "kpt-mixed-back", |ns, _rec| {
        let client = client.clone();
        async move {
            wait_delivery(
                &client,
                &ns,
                &probe_pod_with(json!({}))?,
                "imageVolume",
                WAIT,
            )
            .await?;
            Ok(())
        }
    })
    .await;
    result.and(deleted).and(back)
}

async fn mixed_cluster(client: &Client) -> Result<()> {
    let client = client.clone();
    with_scenario(&client.clone(), "kpt-mixed", |ns, rec| async move {
        let unpinned = probe_pod_with(json!({}))?;
        wait_delivery(&client, &ns, &unpinned, "installContainer", WAIT).await?;

        // Pinned to amd64: the first pod makes the webhook create the amd64
        // ConfigMap; later ones mount it.
        let mut spec = pod_spec(&rec, vec![container(C, "echo body", RECORD_HOOK)]);
        set(
            &mut spec,
            "nodeSelector",
            pinned("amd64")["nodeSelector"].clone(),
        );
        let first = job("pinned-first", spec.clone(), json!({}))?;
        ensure!(run_job(&client, &ns, &first, JOB_TIMEOUT).await? == JobOutcome::Complete);
        ensure_records(&rec, "hooks", 1).await?;
        let pod = wait_delivery(
            &client,
            &ns,
            &probe_pod_with(pinned("amd64"))?,
            "configMap",
            WAIT,
        )
        .await?;
        let name = binary_config_map(&pod).context("no ConfigMap")?;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get(&name)
            .await?;
        let arch_label = cm
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kube-prestop.io/arch"))
            .cloned()
            .unwrap_or_default();
        let binary = config_map_binary(&cm);
        ensure!(
            arch_label == "amd64" && elf_machine(&binary) == "amd64",
            "ConfigMap {name}: label {arch_label:?}, binary {}",
            elf_machine(&binary)
        );
        let second = job("pinned-second", spec, json!({}))?;
        ensure!(run_job(&client, &ns, &second, JOB_TIMEOUT).await? == JobOutcome::Complete);
        let pod = job_pod(&client, &ns, "pinned-second").await?;
        ensure!(
            binary_config_map(&pod).as_deref() == Some(name.as_str())
                && !has_install_container(&pod),
            "pinned pod not given {name}: {}",
            binary_delivery(&pod)
        );
        ensure_records(&rec, "hooks", 2).await?;

        // The ConfigMap exists now; an unpinned pod still never gets it.
        for _ in 0..5 {
            let got = dry_run(&client, &ns, &unpinned).await?;
            ensure!(
                binary_delivery(&got) == "installContainer",
                "unpinned pod in a mixed cluster given {}",
                binary_delivery(&got)
            );
        }
        let hook = RECORD_HOOK.replace("/records/hooks", "/records/unpinned");
        let j = job(
            "unpinned",
            pod_spec(&rec, vec![container(C, "echo body", &hook)]),
            json!({}),
        )?;
        ensure!(run_job(&client, &ns, &j, JOB_TIMEOUT).await? == JobOutcome::Complete);
        let pod = job_pod(&client, &ns, "unpinned").await?;
        ensure!(
            has_install_container(&pod),
            "unpinned pod: {}",
            binary_delivery(&pod)
        );
        ensure_records(&rec, "unpinned", 1).await?;

        // Pinned to arm64 by node affinity: never the amd64 binary.
        for _ in 0..5 {
            let got = dry_run(&client, &ns, &probe_pod_with(pinned_by_affinity("arm64"))?).await?;
            ensure!(
                got.spec
                    .iter()
                    .flat_map(|s| &s.init_containers)
                    .flatten()
                    .any(|c| c.name == sidecar_name(C)),
                "arm64 pod not injected"
            );
            ensure!(
                binary_config_map(&got).as_deref() != Some(name.as_str()),
                "a pod pinned to arm64 was given the amd64 ConfigMap {name}"
            );
        }
        Ok(())
    })
    .await
}

/// A pod pinned to an architecture kube-prestop ships no binary for
/// (s390x) is admitted uninjected (failure mode allow), carrying
/// `kube-prestop.io/skipped: unsupported_architecture: ...` (a dry run
/// gets the webhook's patch like a real create), with a log line and the
/// `unsupported_architecture` error counted.
#[tokio::test]
async fn pod_pinned_to_an_unshipped_architecture_is_admitted_unmodified() -> Result<()> {
    init_tracing();
    let client = client().await?;
    with_scenario(&client.clone(), "kpt-s390x", |ns, _rec| async move {
        let count = |samples: &[kube_prestop_e2e::metrics::Sample]| {
            sum(samples, "kube_prestop_admissions_total", |l| {
                l.get("reason").map(String::as_str) == Some("unsupported_architecture")
            })
        };
        let before: f64 = webhook_replica_metrics(&client)
            .await?
            .iter()
            .map(|(_, s)| count(s))
            .sum();
        let got = dry_run(&client, &ns, &probe_pod_with(pinned("s390x"))?).await?;
        ensure!(
            got.spec
                .iter()
                .flat_map(|s| &s.init_containers)
                .flatten()
                .next()
                .is_none(),
            "a pod pinned to s390x was injected"
        );
        let note = ensure_skipped(&got, "unsupported_architecture")?;
        ensure!(note.contains("s390x"), "{note}");
        let after: f64 = webhook_replica_metrics(&client)
            .await?
            .iter()
            .map(|(_, s)| count(s))
            .sum();
        ensure!(
            after >= before + 1.0,
            "unsupported_architecture not counted ({before} -> {after})"
        );
        let lines = webhook_log_lines(&client, "s390x").await?;
        ensure!(
            lines.iter().any(|l| l.contains("unsupported_architecture")),
            "no webhook log line for the s390x pod"
        );
        Ok(())
    })
    .await
}
