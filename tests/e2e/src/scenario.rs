//! Helpers for the scenario suite (issue 6): hook records on a hostPath
//! directory the test reads on the host, pod and Job builders with tiny
//! resources, condition waits with deadlines, sidecar log counting, the
//! webhook's metrics and logs, and a runner that executes independent
//! scenarios concurrently and reports each one.
//!
//! Records: every scenario gets its own directory under the node's hostPath
//! directory (`KUBE_PRESTOP_NODE_HOSTPATH`, default
//! `/var/lib/kube-prestop/cluster/hostpath`), mounted at [`RECORDS_MOUNT`] in
//! the watched container. The sidecar inherits the container's volumeMounts, so
//! a hook appending a line there leaves a record that outlives the pod; the
//! test counts the lines ("exactly once" is counted, not assumed).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::{TestNamespace, container_logs, diagnose, test_image, unique_suffix};

/// Where the records directory is mounted in the watched containers.
pub const RECORDS_MOUNT: &str = "/records";
/// Name of the records volume in the pods.
pub const RECORDS_VOLUME: &str = "records";
/// Namespace and release of the installed chart.
pub const WEBHOOK_NAMESPACE: &str = "kube-prestop";
/// Deployment name of the installed chart (release `kube-prestop`).
pub const WEBHOOK_DEPLOYMENT: &str = "kube-prestop";
/// Port of the webhook's plain-HTTP metrics endpoint.
pub const WEBHOOK_METRICS_PORT: u16 = 9090;
/// Label selector of the ConfigMaps the webhook creates to hold the sidecar
/// binary (`sidecarBinary.source=configMap`, the chart's default).
pub const BINARY_CONFIG_MAP_SELECTOR: &str =
    "app.kubernetes.io/managed-by=kube-prestop,app.kubernetes.io/component=sidecar-binary";
/// Name of the install init container the webhook adds when the binary does
/// not come from a ConfigMap.
pub const INSTALL_CONTAINER: &str = "kube-prestop-install";

/// A hook line that records who ran it: the sidecar sets
/// `KUBE_PRESTOP_CONTAINER`/`INSTANCE`/`ATTEMPT`; a preStop run by the kubelet
/// (through the wrapper) has none of them and records `by-kubelet`.
pub const RECORD_HOOK: &str = "echo \"${KUBE_PRESTOP_CONTAINER:-by-kubelet} \
${KUBE_PRESTOP_INSTANCE:-none} ${KUBE_PRESTOP_ATTEMPT:-0}\" >> /records/hooks";

/// Sidecar log marker of a hook run it started.
pub const HOOK_STARTED: &str = "kube-prestop: hook started";
/// Sidecar log marker of a hook run that ended.
pub const HOOK_FINISHED: &str = "kube-prestop: hook finished";
/// Sidecar log marker of an exit whose preStop the kubelet ran itself.
pub const HOOK_SKIPPED_KUBELET: &str = "the kubelet ran the preStop itself";

/// The node directory the test reads on the host.
pub fn node_hostpath() -> PathBuf {
    std::env::var_os("KUBE_PRESTOP_NODE_HOSTPATH").map_or_else(
        || PathBuf::from("/var/lib/kube-prestop/cluster/hostpath"),
        PathBuf::from,
    )
}

/// containerd's socket of the local cluster (for tagging images).
pub fn containerd_socket() -> PathBuf {
    std::env::var_os("KUBE_PRESTOP_CONTAINERD_SOCK").map_or_else(
        || PathBuf::from("/var/lib/kube-prestop/cluster/containerd/containerd.sock"),
        PathBuf::from,
    )
}

/// A per-scenario records directory on the node (and on the host: the same path).
#[derive(Debug, Clone)]
pub struct Records {
    pub host_dir: PathBuf,
}

impl Records {
    /// Creates `<hostpath>/e2e-records/<tag>-<suffix>`, mode 0777 so that
    /// non-root hooks can write to it.
    pub fn create(tag: &str) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let base = node_hostpath().join("e2e-records");
        let dir = base.join(format!("{tag}-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for d in [&base, &dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))
                .with_context(|| format!("chmod {}", d.display()))?;
        }
        Ok(Self { host_dir: dir })
    }

    /// The hostPath volume for the pod spec.
    pub fn volume(&self) -> Value {
        json!({
            "name": RECORDS_VOLUME,
            "hostPath": { "path": self.host_dir.to_string_lossy(), "type": "Directory" }
        })
    }

    /// The volumeMount for a container.
    pub fn mount() -> Value {
        json!({ "name": RECORDS_VOLUME, "mountPath": RECORDS_MOUNT })
    }

    /// Host path of a record file.
    pub fn path(&self, file: &str) -> PathBuf {
        self.host_dir.join(file)
    }

    /// Non-empty lines of a record file (none if it does not exist).
    pub fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(file))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Creates an (empty) file the pod can poll for, e.g. a release signal.
    pub fn touch(&self, file: &str) -> Result<()> {
        std::fs::write(self.path(file), b"").with_context(|| format!("touch {file}"))
    }

    /// Waits until the file has at least `n` lines; returns all of them.
    pub async fn wait_lines(&self, file: &str, n: usize, timeout: Duration) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let ok = poll_until(timeout, Duration::from_millis(250), || {
            lines = self.lines(file);
            let done = lines.len() >= n;
            async move { Ok(done) }
        })
        .await;
        if ok.is_err() {
            bail!(
                "record {} has {} line(s), expected at least {n} within {timeout:?}: {lines:?}",
                self.path(file).display(),
                lines.len()
            );
        }
        Ok(lines)
    }

    /// Everything recorded, for failure reports.
    pub fn dump(&self) -> String {
        let mut out = format!("records in {}:\n", self.host_dir.display());
        if let Ok(entries) = std::fs::read_dir(&self.host_dir) {
            for e in entries.flatten() {
                let body = std::fs::read_to_string(e.path()).unwrap_or_default();
                out.push_str(&format!(
                    "  {}: {body:?}\n",
                    e.file_name().to_string_lossy()
                ));
            }
        }
        out
    }

    /// Removes the directory.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.host_dir);
    }
}

/// Polls `check` every `every` until it returns true or `timeout` passes.
pub async fn poll_until<F, Fut>(timeout: Duration, every: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_err {
                Some(e) => bail!("condition not met within {timeout:?} (last error: {e:#})"),
                None => bail!("condition not met within {timeout:?}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Requests of every test container: 10m CPU, 16Mi memory.
pub fn tiny_resources() -> Value {
    json!({ "requests": { "cpu": "10m", "memory": "16Mi" } })
}

/// A container running `sh -c command` with `sh -c prestop` as its preStop exec
/// handler, the records mount and tiny requests.
pub fn container(name: &str, command: &str, prestop: &str) -> Value {
    json!({
        "name": name,
        "image": test_image(),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        "lifecycle": { "preStop": { "exec": { "command": ["sh", "-c", prestop] } } },
        "resources": tiny_resources(),
        "volumeMounts": [Records::mount()]
    })
}

/// A pod spec: `restartPolicy: Never`, grace 10 s, the records volume.
pub fn pod_spec(records: &Records, containers: Vec<Value>) -> Value {
    json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 10,
        "containers": containers,
        "volumes": [records.volume()]
    })
}

/// Sets `value` at the JSON object key `key` (objects only).
pub fn set(target: &mut Value, key: &str, value: Value) {
    if let Some(obj) = target.as_object_mut() {
        obj.insert(key.to_owned(), value);
    }
}

/// A Job (`backoffLimit: 0`) with the given pod spec; `extra` keys are merged
/// into the Job's spec (e.g. completions, activeDeadlineSeconds).
pub fn job(name: &str, pod_spec: Value, extra: Value) -> Result<Job> {
    let mut spec = json!({ "backoffLimit": 0, "template": { "spec": pod_spec } });
    if let Some(obj) = extra.as_object() {
        for (k, v) in obj {
            set(&mut spec, k, v.clone());
        }
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": spec
    }))?)
}

/// Pods of a Job (any number).
pub async fn job_pods(client: &Client, ns: &str, job: &str) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={job}", crate::JOB_NAME_LABEL)))
        .await?
        .items)
}

/// Waits for the first pod of a Job to exist; returns it.
pub async fn wait_job_pod(client: &Client, ns: &str, job: &str, timeout: Duration) -> Result<Pod> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(pods) = job_pods(client, ns, job).await
            && let Some(p) = pods.into_iter().next()
        {
            return Ok(p);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no pod of Job {ns}/{job} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until `pred` holds for the pod; returns the pod.
pub async fn wait_pod<P>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: P,
) -> Result<Pod>
where
    P: Fn(&Pod) -> bool,
{
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last: Option<Pod> = None;
    loop {
        match pods.get(name).await {
            Ok(pod) if pred(&pod) => return Ok(pod),
            Ok(pod) => last = Some(pod),
            Err(e) => tracing::debug!(error = %e, "get pod"),
        }
        if tokio::time::Instant::now() >= deadline {
            let state = last
                .as_ref()
                .and_then(|p| p.status.as_ref())
                .map(|s| format!("{s:?}"));
            bail!("pod {ns}/{name}: not {what} within {timeout:?}; last status {state:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the pod no longer exists.
pub async fn wait_pod_gone(client: &Client, ns: &str, name: &str, timeout: Duration) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    poll_until(timeout, Duration::from_millis(300), || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt(name).await?.is_none()) }
    })
    .await
    .with_context(|| format!("pod {ns}/{name} still exists"))
}

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

/// Waits until the pod is finished (see [`pod_finished`]).
pub async fn wait_pod_finished(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Pod> {
    wait_pod(client, ns, name, "finished", timeout, pod_finished).await
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
    ensure!(
        pod.spec
            .as_ref()
            .and_then(|s| s.share_process_namespace)
            .is_none(),
        "pod {name} got shareProcessNamespace"
    );
    Ok(())
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

/// Checks the records file holds exactly `n` lines once the pod is finished
/// (waits for at least `n`, then requires exactly `n`).
pub async fn ensure_records(records: &Records, file: &str, n: usize) -> Result<Vec<String>> {
    let lines = records.wait_lines(file, n, Duration::from_secs(30)).await?;
    ensure!(
        lines.len() == n,
        "record {file}: {} line(s), expected exactly {n}: {lines:?}",
        lines.len()
    );
    Ok(lines)
}

/// Runs `kubectl` (from `PATH`, as env.sh sets it) and returns its stdout.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let shown = args.join(" ");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl").args(&args).output()
    })
    .await?
    .with_context(|| format!("running kubectl {shown}"))?;
    ensure!(
        out.status.success(),
        "kubectl {shown}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Tags an image already in the node's containerd under a second name.
pub async fn tag_image(source: &str, target: &str) -> Result<()> {
    let sock = containerd_socket();
    let (source, target) = (source.to_owned(), target.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io", "images", "tag", "--force", &source, &target])
            .output()
    })
    .await?
    .context("running ctr images tag")?;
    ensure!(
        out.status.success(),
        "ctr images tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Adds labels to a namespace.
pub async fn label_namespace(client: &Client, ns: &str, labels: Value) -> Result<()> {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": labels } })),
        )
        .await
        .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// Webhook pods of the installed chart.
pub async fn webhook_pods(client: &Client) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-prestop"))
        .await?
        .items
        .into_iter()
        .filter(|p| phase(p) == "Running")
        .collect())
}

/// Sum of `kube_prestop_admissions_total` over all running webhook pods,
/// scraped through the apiserver's pod proxy
/// ([`crate::metrics::webhook_replica_metrics`]).
pub async fn admissions_total(client: &Client) -> Result<f64> {
    Ok(crate::metrics::webhook_replica_metrics(client)
        .await?
        .iter()
        .flat_map(|(_, samples)| samples)
        .filter(|s| s.name == "kube_prestop_admissions_total")
        .map(|s| s.value)
        .sum())
}

/// Webhook log lines (all running pods) that mention `needle`.
pub async fn webhook_log_lines(client: &Client, needle: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for pod in webhook_pods(client).await? {
        let name = pod.metadata.name.unwrap_or_default();
        let logs = Api::<Pod>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
            .logs(&name, &kube::api::LogParams::default())
            .await?;
        out.extend(
            logs.lines()
                .filter(|l| l.contains(needle))
                .map(str::to_owned),
        );
    }
    Ok(out)
}

/// Replicas of the webhook Deployment.
pub async fn webhook_replicas(client: &Client) -> Result<i32> {
    let d = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .get(WEBHOOK_DEPLOYMENT)
        .await?;
    Ok(d.spec.and_then(|s| s.replicas).unwrap_or(1))
}

/// Scales the webhook Deployment.
pub async fn scale_webhook(client: &Client, replicas: i32) -> Result<()> {
    Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .patch(
            WEBHOOK_DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .context("scaling the webhook")?;
    Ok(())
}

/// The annotation `kubectl rollout restart` sets on the pod template.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// Sets (or, with `None`, removes) the pod template's [`RESTARTED_AT`]
/// annotation of the webhook Deployment, as `kubectl rollout restart` does:
/// a new value starts a rolling restart. Returns the previous value.
pub async fn set_webhook_restarted_at(
    client: &Client,
    value: Option<&str>,
) -> Result<Option<String>> {
    let api = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE);
    let before = api
        .get(WEBHOOK_DEPLOYMENT)
        .await
        .context("reading the webhook Deployment")?
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(RESTARTED_AT).cloned());
    api.patch(
        WEBHOOK_DEPLOYMENT,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "spec": { "template": { "metadata": { "annotations": { RESTARTED_AT: value } } } }
        })),
    )
    .await
    .context("patching the webhook's pod template")?;
    Ok(before)
}

/// Whether the webhook Deployment's rollout is complete (what `kubectl
/// rollout status` waits for, and no replica of an older template left):
/// `Ok(None)` when done, `Ok(Some(state))` while it is not.
pub async fn webhook_rollout_pending(client: &Client) -> Result<Option<String>> {
    let d = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .get(WEBHOOK_DEPLOYMENT)
        .await
        .context("reading the webhook Deployment")?;
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let generation = d.metadata.generation.unwrap_or_default();
    let st = d.status.unwrap_or_default();
    let observed = st.observed_generation.unwrap_or_default();
    let (total, updated, available) = (
        st.replicas.unwrap_or_default(),
        st.updated_replicas.unwrap_or_default(),
        st.available_replicas.unwrap_or_default(),
    );
    let done = observed >= generation && total == want && updated == want && available == want;
    Ok((!done).then(|| {
        format!(
            "generation {generation} (observed {observed}), replicas {total}/{want}, \
             updated {updated}, available {available}"
        )
    }))
}

/// Waits until the webhook's rollout is complete (see [`webhook_rollout_pending`]).
pub async fn wait_webhook_rolled_out(client: &Client, timeout: Duration) -> Result<()> {
    let last = std::sync::Mutex::new(String::new());
    let done = poll_until(timeout, Duration::from_millis(500), || {
        let client = client.clone();
        let last = &last;
        async move {
            let pending = webhook_rollout_pending(&client).await?;
            let done = pending.is_none();
            if let Ok(mut l) = last.lock() {
                *l = pending.unwrap_or_default();
            }
            Ok(done)
        }
    })
    .await;
    let last = last.lock().map(|l| l.clone()).unwrap_or_default();
    done.with_context(|| format!("the webhook Deployment did not roll out: {last}"))
}

/// A Job-like pod (opted in, with an exec preStop) for server-side dry-run
/// creates that ask the webhook what it would do.
fn probe_pod() -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "generateName": "webhook-probe-",
            "annotations": { "kube-prestop.io/inject": "true" }
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": test_image(),
                "imagePullPolicy": "Never",
                "command": ["true"],
                "lifecycle": { "preStop": { "exec": { "command": ["true"] } } }
            }]
        }
    }))?)
}

/// Waits until a server-side dry-run create of a Job-like pod in the labelled
/// namespace `ns` comes back injected: the webhook serves again.
pub async fn wait_webhook_serving(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let probe = probe_pod()?;
    poll_until(timeout, Duration::from_secs(1), || {
        let pods = pods.clone();
        let probe = probe.clone();
        async move {
            let pp = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let created = pods.create(&pp, &probe).await?;
            Ok(crate::container_names(&created).contains(&crate::sidecar_name("main")))
        }
    })
    .await
    .context("the webhook does not inject (dry run)")
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

/// Whether the pod has the install init container.
pub fn has_install_container(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .any(|c| c.name == INSTALL_CONTAINER)
}

/// The sidecar-binary ConfigMaps the webhook made in `ns`.
pub async fn binary_config_maps(client: &Client, ns: &str) -> Result<Vec<ConfigMap>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(BINARY_CONFIG_MAP_SELECTOR))
        .await?
        .items)
}

/// Waits until server-side dry-run creates of a Job-like pod in the labelled
/// namespace `ns` come back with the binary from a ConfigMap three times in
/// a row (each webhook replica learns of the ConfigMap from its own watch),
/// and returns the ConfigMap's name.
pub async fn wait_injects_from_config_map(
    client: &Client,
    ns: &str,
    timeout: Duration,
) -> Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let probe = probe_pod()?;
    let streak = std::sync::Arc::new(std::sync::Mutex::new((0u32, String::new())));
    let seen = streak.clone();
    poll_until(timeout, Duration::from_millis(200), move || {
        let pods = pods.clone();
        let probe = probe.clone();
        let streak = streak.clone();
        async move {
            let pp = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let created = pods.create(&pp, &probe).await?;
            let from = binary_config_map(&created);
            let Ok(mut s) = streak.lock() else {
                bail!("poisoned lock");
            };
            match from {
                Some(name) if !has_install_container(&created) => {
                    s.0 += 1;
                    s.1 = name;
                }
                _ => s.0 = 0,
            }
            Ok(s.0 >= 3)
        }
    })
    .await
    .context("the webhook does not mount the sidecar binary from a ConfigMap (dry run)")?;
    let name = seen.lock().map(|s| s.1.clone()).unwrap_or_default();
    Ok(name)
}

/// A labelled namespace plus a records directory for one scenario; on failure
/// prints diagnostics and the records; always deletes both.
pub async fn with_scenario<F, Fut>(client: &Client, prefix: &str, body: F) -> Result<()>
where
    F: FnOnce(String, Records) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    with_scenario_in(client, prefix, true, body).await
}

/// [`with_scenario`] with the namespace labelled for injection only when
/// `inject` is set (the body labels it itself otherwise).
pub async fn with_scenario_in<F, Fut>(
    client: &Client,
    prefix: &str,
    inject: bool,
    body: F,
) -> Result<()>
where
    F: FnOnce(String, Records) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let ns = TestNamespace::create(client, prefix, inject).await?;
    let records = Records::create(prefix)?;
    let name = ns.name.clone();
    let result = body(name.clone(), records.clone()).await;
    if let Err(e) = &result {
        eprintln!(
            "==== scenario {prefix} failed: {e:#}\n{}\n{}",
            records.dump(),
            diagnose(client, &name).await
        );
    }
    let deleted = ns.delete().await;
    records.remove();
    result.and(deleted)
}

/// A scenario to run: its name and its future.
pub type Scenario = (
    &'static str,
    Pin<Box<dyn Future<Output = Result<()>> + Send>>,
);

/// Runs scenarios with at most `concurrency` at a time, prints one line per
/// scenario (pass/FAIL, duration) and fails naming every failed one.
pub async fn run_scenarios(scenarios: Vec<Scenario>, concurrency: usize) -> Result<()> {
    let started = Instant::now();
    let results: Vec<(&'static str, Duration, Result<()>)> = futures::stream::iter(scenarios)
        .map(|(name, fut)| async move {
            let t = Instant::now();
            eprintln!("scenario {name}: started");
            let r = fut.await;
            eprintln!(
                "scenario {name}: {} after {:.1}s",
                if r.is_ok() { "passed" } else { "FAILED" },
                t.elapsed().as_secs_f64()
            );
            (name, t.elapsed(), r)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut failed = Vec::new();
    let mut sorted = results;
    sorted.sort_by_key(|(n, _, _)| *n);
    eprintln!(
        "==== scenario summary ({:.1}s) ====",
        started.elapsed().as_secs_f64()
    );
    for (name, took, r) in &sorted {
        match r {
            Ok(()) => eprintln!("SCENARIO {name}: pass ({:.1}s)", took.as_secs_f64()),
            Err(e) => {
                eprintln!("SCENARIO {name}: FAIL ({:.1}s): {e:#}", took.as_secs_f64());
                failed.push(format!("{name}: {e:#}"));
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} scenario(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}

/// Reads a file on the host, for checks on records written by pods.
pub fn read_host_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
