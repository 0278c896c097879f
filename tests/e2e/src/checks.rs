//! Reading what happened and asserting on it: predicates on a pod (phase,
//! container states, injected or untouched, where the sidecar binary comes
//! from), and the sidecar's log markers and hook counts. Record counts are
//! in [`crate::records`].

use std::path::Path;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;

use crate::container_logs;

/// Sidecar log marker of a hook run it started.
pub const HOOK_STARTED: &str = "kube-prestop: hook started";
/// Sidecar log marker of a hook run that ended.
pub const HOOK_FINISHED: &str = "kube-prestop: hook finished";
/// Sidecar log marker of a watched container the watcher never saw running
/// (a reported miss: the warning `watch.rs` logs when the sidecar stops).
pub const NEVER_SEEN_RUNNING: &str = "was never seen running";
/// Sidecar log marker of an exit whose preStop the kubelet ran itself.
pub const HOOK_SKIPPED_KUBELET: &str = "the kubelet ran the preStop itself";

/// Name of the install init container the webhook adds when the binary does
/// not come from a ConfigMap.
pub const INSTALL_CONTAINER: &str = "kube-prestop-install";

/// The pod's phase.
pub fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Succeeded or Failed, and every container (init and regular) terminated or
/// never started.
pub fn pod_finished(pod: &Pod) -> bool {
    let p = phase(pod);
    if p != "Succeeded" && p != "Failed" {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none()))
}

/// Status of one container (init or regular) by name.
pub fn container_status(
    pod: &Pod,
    name: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
}

/// Whether the container is running.
pub fn container_running(pod: &Pod, name: &str) -> bool {
    container_status(pod, name)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
}

/// Fails unless the webhook injected a sidecar for `container`.
pub fn ensure_injected(pod: &Pod, container: &str) -> Result<()> {
    let sidecar = crate::sidecar_name(container);
    let names = crate::container_names(pod);
    ensure!(
        names.contains(&sidecar),
        "pod {} was not injected: containers {names:?} lack {sidecar}",
        pod.metadata.name.clone().unwrap_or_default()
    );
    Ok(())
}

/// Whether `pod` was injected for `container`: its sidecar is there and the
/// status annotation says so (the non-failing twin of [`ensure_injected`]).
pub fn injected(pod: &Pod, container: &str) -> bool {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kube-prestop.io/status"))
        .is_some_and(|v| v == "injected");
    annotated && crate::container_names(pod).contains(&crate::sidecar_name(container))
}

/// The Job a pod belongs to (its `batch.kubernetes.io/job-name` label), or
/// empty.
pub fn job_name(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::JOB_NAME_LABEL).cloned())
        .unwrap_or_default()
}

/// Fails if the pod carries anything of kube-prestop.
pub fn ensure_untouched(pod: &Pod, containers: &[&str]) -> Result<()> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let names = crate::container_names(pod);
    ensure!(
        names == containers,
        "pod {name} was changed: containers {names:?}, expected {containers:?}"
    );
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        !annotations.contains_key("kube-prestop.io/status"),
        "pod {name} carries kube-prestop.io/status: {annotations:?}"
    );
    // Skipped for a reason it did not opt in against: not even why.
    ensure!(
        !annotations.contains_key(SKIPPED),
        "pod {name} carries {SKIPPED}: {annotations:?}"
    );
    ensure!(
        pod.spec
            .as_ref()
            .and_then(|s| s.share_process_namespace)
            .is_none(),
        "pod {name} got shareProcessNamespace"
    );
    Ok(())
}

/// The annotation the webhook writes on a pod it admits without injection,
/// saying why (`<reason>: <message>`).
pub const SKIPPED: &str = "kube-prestop.io/skipped";

/// Checks that `pod` was admitted without injection (no sidecar, no
/// `kube-prestop.io/status`) and carries [`SKIPPED`] with `reason`, the
/// decision's label; returns the annotation's value.
pub fn ensure_skipped(pod: &Pod, reason: &str) -> Result<String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        !annotations.contains_key("kube-prestop.io/status"),
        "pod {name} was injected: {annotations:?}"
    );
    let Some(note) = annotations.get(SKIPPED) else {
        anyhow::bail!("pod {name} has no {SKIPPED}: {annotations:?}");
    };
    let (label, message) = note.split_once(": ").unwrap_or((note.as_str(), ""));
    ensure!(
        label == reason && !message.is_empty() && message.len() <= 1024,
        "pod {name}: {SKIPPED} is {note:?}, expected \"{reason}: <message>\""
    );
    Ok(note.clone())
}

/// Lines of `logs` containing `needle`.
pub fn count_lines(logs: &str, needle: &str) -> usize {
    logs.lines().filter(|l| l.contains(needle)).count()
}

/// The sidecar's logs of a pod.
pub async fn sidecar_logs(client: &Client, ns: &str, pod: &str, container: &str) -> Result<String> {
    container_logs(client, ns, pod, &crate::sidecar_name(container)).await
}

/// Checks the sidecar of `container` started and finished exactly `n` hook runs.
pub async fn ensure_sidecar_hooks(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
    n: usize,
) -> Result<String> {
    let logs = sidecar_logs(client, ns, pod, container).await?;
    let started = count_lines(&logs, HOOK_STARTED);
    let finished = count_lines(&logs, HOOK_FINISHED);
    ensure!(
        started == n && finished == n,
        "sidecar of {container} in {pod}: {started} hook(s) started, {finished} finished, expected {n}:\n{logs}"
    );
    Ok(logs)
}

/// The ConfigMap a pod mounts the sidecar binary from, if it does (else the
/// install init container copied it).
pub fn binary_config_map(pod: &Pod) -> Option<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.config_map.as_ref())
        .map(|c| c.name.clone())
        .find(|n| n.starts_with("kube-prestop-sidecar-"))
}

/// The sidecar binary a sidecar-binary ConfigMap carries (its `binaryData`
/// under the contract's key), empty when it has none.
pub fn config_map_binary(cm: &ConfigMap) -> Vec<u8> {
    cm.binary_data
        .as_ref()
        .and_then(|d| d.get(kube_prestop_contract::BINARY_CONFIG_MAP_KEY))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// The image a pod mounts the sidecar binary from as an image volume, if it
/// does (`sidecarBinary.source` `auto` or `imageVolume` where image volumes
/// work).
pub fn binary_image_volume(pod: &Pod) -> Option<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.name.starts_with("kube-prestop-bin"))
        .find_map(|v| v.image.as_ref().and_then(|i| i.reference.clone()))
}

/// Where an injected pod's sidecar binary comes from, as the webhook's
/// metric labels it: `imageVolume`, `configMap` or `installContainer`
/// (`none` for a pod that is not injected).
pub fn binary_delivery(pod: &Pod) -> &'static str {
    if binary_image_volume(pod).is_some() {
        "imageVolume"
    } else if binary_config_map(pod).is_some() {
        "configMap"
    } else if has_install_container(pod) {
        "installContainer"
    } else {
        "none"
    }
}

/// Whether the pod has the install init container.
pub fn has_install_container(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .any(|c| c.name == INSTALL_CONTAINER)
}

/// Reads a file on the host, for checks on records written by pods.
pub fn read_host_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
