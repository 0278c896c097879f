//! `kube-prestop-webhook check`: what an operator needs to know about an
//! installation, from their own machine with their kubeconfig, as `PASS`,
//! `FAIL`, `WARN` and `INFO` lines ([`report`]) and an exit status (1 when
//! anything failed):
//!
//! 1. the cluster's version supports native sidecars (1.29+; a `WARN`
//!    below [`TESTED_MIN_MINOR`], the oldest minor the project's test
//!    matrix proved);
//! 2. the `MutatingWebhookConfiguration` has kube-prestop's webhook, its
//!    Service and a `caBundle` ([`config`]);
//! 3. the Service has ready endpoints (EndpointSlices);
//! 4. for each ready replica: the API server reaches it (`pods/proxy` to
//!    `/readyz`, the path of a webhook call), and the certificate it
//!    presents is trusted by the `caBundle` for `<service>.<namespace>.svc`
//!    ([`tls`], through a port-forward);
//! 5. which namespaces carry `kube-prestop.io/inject=enabled`, which of them
//!    the webhook configuration selects, whether another kube-prestop
//!    release's configuration selects it too (the one the API server calls
//!    first injects: a `FAIL` when that is not this one), and, for each
//!    namespace this one injects, a
//!    server-side dry-run create of a test pod ([`probe_pod`]) that must
//!    come back injected, saying how its sidecar binary would be delivered
//!    (the namespace's ConfigMap or the install init container): the API
//!    server really calls the webhook, and nothing is stored;
//! 6. with `--run-job NAMESPACE`: a tiny Job there whose preStop must run
//!    ([`job`]), then deleted.
//!
//! Needs: get and list on webhook configurations, Services and EndpointSlices in
//! the webhook's namespace, `pods/portforward` and `pods/proxy` there, list
//! on Namespaces, create on pods (dry run) in the selected namespaces, and
//! for `--run-job` create/delete Jobs and get pod logs in that namespace.

pub mod config;
pub mod job;
pub mod probe_pod;
pub mod report;
pub mod tls;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};

use kube_prestop_cluster::client::{self as cluster_client, ClientError};

use self::config::WebhookTarget;
use self::probe_pod::Delivery;
use self::report::Report;

/// Oldest Kubernetes minor with native sidecars on by default
/// (`SidecarContainers`, beta and on by default from 1.29): below it an
/// injected pod's sidecar would not be started as one, so `check` fails.
/// The chart's `kubeVersion` (`>=1.29.0-0`) says the same.
pub const MIN_MINOR: u32 = 29;

/// Oldest Kubernetes minor a `make e2e-matrix` run proved (the README's
/// Support table: 1.35, 1.36 and 1.37 on containerd 2 and 1.6 with runc).
/// `check` passes from it on and warns on `MIN_MINOR`..it: those minors
/// have everything kube-prestop relies on, but no test run here shows it.
pub const TESTED_MIN_MINOR: u32 = 35;

/// The label that turns injection on for a namespace.
pub const NAMESPACE_LABEL: (&str, &str) = ("kube-prestop.io/inject", "enabled");

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Name of the `MutatingWebhookConfiguration` (the chart's release
    /// fullname, `kube-prestop` by default).
    pub webhook_config: String,
    /// Image of the test pods (needs `sh`).
    pub image: String,
    /// Namespace for the test Job, if one is to run.
    pub run_job: Option<String>,
    /// Longest wait for the test Job.
    pub job_timeout: Duration,
}

/// Why the check could not start (anything found afterwards is a `FAIL`
/// line instead).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The tokio runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// No client: the kubeconfig, the inferred configuration or the client
    /// built from it failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// The command: run every check with `options`, print the findings and the
/// `RESULT:` line on stdout; `Ok(true)` when nothing failed.
///
/// # Errors
/// [`CheckError`] when no runtime or client can be made.
pub fn run_to_stdout(
    options: &CheckOptions,
    kubeconfig: Option<&Path>,
) -> Result<bool, CheckError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(CheckError::Runtime)?;
    runtime.block_on(async {
        let client = cluster_client::client(kubeconfig).await?;
        let mut report = Report::new(std::io::stdout());
        report.info(format!(
            "kube-prestop-webhook {} check of MutatingWebhookConfiguration {}",
            env!("CARGO_PKG_VERSION"),
            options.webhook_config
        ));
        run(client, options, &mut report).await;
        Ok(report.finish())
    })
}

/// Run every check against `client`, writing findings to `report`.
pub async fn run<W: Write>(client: kube::Client, options: &CheckOptions, report: &mut Report<W>) {
    cluster_version(&client, report).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let target = match configs.get_opt(&options.webhook_config).await {
        Ok(Some(c)) => match config::target(&c) {
            Ok(t) => {
                report.pass(format!(
                    "MutatingWebhookConfiguration {}: webhook {} -> Service {}/{}:{}, failurePolicy {}",
                    options.webhook_config,
                    config::WEBHOOK_NAME,
                    t.namespace,
                    t.service,
                    t.port,
                    t.failure_policy
                ));
                t
            }
            Err(e) => {
                report.fail(format!(
                    "MutatingWebhookConfiguration {} {e}",
                    options.webhook_config
                ));
                return;
            }
        },
        Ok(None) => {
            report.fail(format!(
                "no MutatingWebhookConfiguration {} (is the chart installed? --webhook-config names another release's)",
                options.webhook_config
            ));
            return;
        }
        Err(e) => {
            report.fail(format!(
                "cannot read MutatingWebhookConfiguration {}: {e}",
                options.webhook_config
            ));
            return;
        }
    };
    if target.ca_bundle.is_empty() {
        report.fail(
            "the webhook configuration has no caBundle: the API server cannot verify the webhook (self-managed certificates: the webhook writes it within a minute of starting; see its log)",
        );
    }
    replicas(&client, &target, report).await;
    let others = other_releases(&client, &options.webhook_config, report).await;
    let found = namespaces(&client, &target, report).await;
    let mut injected_here = Vec::new();
    let mut shadowed = BTreeMap::new();
    for (namespace, labels) in &found {
        match first_other(&others, &options.webhook_config, namespace, labels, report) {
            Some(other) => {
                shadowed.insert(namespace.clone(), other);
            }
            None => injected_here.push(namespace.clone()),
        }
    }
    for namespace in &injected_here {
        dry_run(&client, namespace, &options.image, report).await;
    }
    if let Some(namespace) = &options.run_job {
        if injected_here.contains(namespace) {
            test_job(&client, namespace, options, report).await;
        } else if let Some(other) = shadowed.get(namespace) {
            report.fail(format!(
                "--run-job {namespace}: not run: pods there are injected by MutatingWebhookConfiguration {other}, not {}",
                options.webhook_config
            ));
        } else {
            report.fail(format!(
                "--run-job {namespace}: the webhook configuration does not select that namespace (label it kube-prestop.io/inject=enabled)"
            ));
        }
    }
}

/// The other kube-prestop installations of the cluster ([`config::other_releases`]);
/// none, with a `WARN`, when the configurations cannot be listed.
async fn other_releases<W: Write>(
    client: &kube::Client,
    ours: &str,
    report: &mut Report<W>,
) -> Vec<config::OtherRelease> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            let others = config::other_releases(&list.items, ours);
            for other in &others {
                if let Err(e) = &other.target {
                    report.warn(format!(
                        "MutatingWebhookConfiguration {} also has webhook {} but {e}: which namespaces it injects is not known",
                        other.name,
                        config::WEBHOOK_NAME
                    ));
                }
            }
            others
        }
        Err(e) => {
            report.warn(format!(
                "cannot list MutatingWebhookConfigurations ({e}): whether another kube-prestop release also selects these namespaces is not known"
            ));
            Vec::new()
        }
    }
}

/// For a namespace `ours` selects: the other installation whose webhook
/// the API server calls first there, which then injects every pod of the
/// namespace (a `FAIL` line), or `None` (with a `WARN` line for each other
/// one selecting it that is called after `ours` and so never injects).
fn first_other<W: Write>(
    others: &[config::OtherRelease],
    ours: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    report: &mut Report<W>,
) -> Option<String> {
    let selecting: Vec<&config::OtherRelease> =
        others.iter().filter(|o| o.selects(labels)).collect();
    if let Some(first) = selecting.iter().find(|o| o.called_before(ours)) {
        report.fail(format!(
            "namespace {namespace}: MutatingWebhookConfiguration {} (another kube-prestop release) selects it too and the API server calls it first (configurations are called in name order), so it injects every pod there and {ours} never does: exclude the namespace from one release (webhook.excludedNamespaces) or uninstall one; not dry-run",
            first.name
        ));
        return Some(first.name.clone());
    }
    for later in selecting {
        report.warn(format!(
            "namespace {namespace}: MutatingWebhookConfiguration {} (another kube-prestop release) selects it too; it is called after {ours} and leaves the pods {ours} injected alone (kube-prestop.io/status), so it never injects there",
            later.name
        ));
    }
    None
}

async fn cluster_version<W: Write>(client: &kube::Client, report: &mut Report<W>) {
    match client.apiserver_version().await {
        Ok(info) => version_line(&info.git_version, &info.major, &info.minor, report),
        Err(e) => report.fail(format!("cannot reach the API server: {e}")),
    }
}

/// The version line for an API server reporting `git_version`, `major` and
/// `minor` (`/version`; managed clusters append `+` to the minor, e.g.
/// `"35+"`): `FAIL` below [`MIN_MINOR`], `WARN` from it up to
/// [`TESTED_MIN_MINOR`], `PASS` from there on, and `WARN` when the version is
/// not understood.
fn version_line<W: Write>(git_version: &str, major: &str, minor: &str, report: &mut Report<W>) {
    let parsed: Option<u32> = minor
        .trim_end_matches('+')
        .parse()
        .ok()
        .filter(|_| major == "1");
    match parsed {
        Some(m) if m >= TESTED_MIN_MINOR => report.pass(format!(
            "Kubernetes {git_version} (tested from 1.{TESTED_MIN_MINOR}; native sidecars from 1.{MIN_MINOR})"
        )),
        Some(m) if m >= MIN_MINOR => report.warn(format!(
            "Kubernetes {git_version}: has native sidecars (1.{MIN_MINOR} or newer), but kube-prestop is tested from 1.{TESTED_MIN_MINOR} on (README, Support)"
        )),
        Some(_) => report.fail(format!(
            "Kubernetes {git_version}: kube-prestop needs 1.{MIN_MINOR} or newer (native sidecars)"
        )),
        None => report.warn(format!(
            "Kubernetes {git_version}: version not understood (major {major}, minor {minor})"
        )),
    }
}

/// The Service's target port on the pods, and the ready pods behind it.
async fn replicas<W: Write>(client: &kube::Client, target: &WebhookTarget, report: &mut Report<W>) {
    let services: Api<Service> = Api::namespaced(client.clone(), &target.namespace);
    let service = match services.get(&target.service).await {
        Ok(s) => s,
        Err(e) => {
            report.fail(format!(
                "Service {}/{}: {e}",
                target.namespace, target.service
            ));
            return;
        }
    };
    // The Service port the API server calls; its name picks the
    // EndpointSlice port (the target port number on the pods).
    let port_name = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == target.port))
        .map(|p| p.name.clone().unwrap_or_default());
    let Some(port_name) = port_name else {
        report.fail(format!(
            "Service {}/{} has no port {} (the webhook configuration calls that port)",
            target.namespace, target.service, target.port
        ));
        return;
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &target.namespace);
    let list = match slices
        .list(
            &ListParams::default()
                .labels(&format!("kubernetes.io/service-name={}", target.service)),
        )
        .await
    {
        Ok(l) => l,
        Err(e) => {
            report.fail(format!("EndpointSlices of Service {}: {e}", target.service));
            return;
        }
    };
    let mut ready: Vec<(String, String, u16)> = Vec::new();
    for slice in &list.items {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.clone().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else { continue };
        for endpoint in &slice.endpoints {
            let is_ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(false);
            let pod = endpoint
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.clone());
            if let (true, Some(pod)) = (is_ready, pod) {
                let address = endpoint.addresses.first().cloned().unwrap_or_default();
                ready.push((pod, address, port));
            }
        }
    }
    if ready.is_empty() {
        report.fail(format!(
            "Service {}/{} has no ready endpoint: no webhook replica is ready (kubectl -n {} get pods,events)",
            target.namespace, target.service, target.namespace
        ));
        return;
    }
    report.pass(format!(
        "{} ready webhook replica(s): {}",
        ready.len(),
        ready
            .iter()
            .map(|(p, _, _)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
    for (pod, address, port) in &ready {
        reachable(client, &target.namespace, pod, address, *port, report).await;
        if !target.ca_bundle.is_empty() {
            certificate(&pods, target, pod, *port, report).await;
        }
    }
}

/// The API server connects to the replica (`pods/proxy`, HTTPS, `/readyz`).
async fn reachable<W: Write>(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    address: &str,
    port: u16,
    report: &mut Report<W>,
) {
    let path = format!("/api/v1/namespaces/{namespace}/pods/https:{pod}:{port}/proxy/readyz");
    let request = match http::Request::get(&path).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => {
            report.fail(format!("{pod}: cannot build the proxy request: {e}"));
            return;
        }
    };
    match tokio::time::timeout(Duration::from_secs(15), client.request_text(request)).await {
        Ok(Ok(_)) => report.pass(format!(
            "the API server reaches {pod} at {address}:{port} (/readyz through pods/proxy)"
        )),
        Ok(Err(e)) => report.fail(format!(
            "the API server cannot reach {pod} at {address}:{port}: {e} (an API server outside the pod network: see docs/platforms.md, chart value hostNetwork)"
        )),
        Err(_) => report.fail(format!(
            "the API server cannot reach {pod} at {address}:{port}: no answer within 15s (a firewall between the control plane and the pods? see docs/platforms.md)"
        )),
    }
}

async fn certificate<W: Write>(
    pods: &Api<Pod>,
    target: &WebhookTarget,
    pod: &str,
    port: u16,
    report: &mut Report<W>,
) {
    let name = target.server_name();
    match tls::presented(pods, pod, port, &name, &target.ca_bundle).await {
        Ok(p) => {
            let days = (p.not_after - now_unix()) / 86_400;
            match p.verified {
                Ok(()) => report.pass(format!(
                    "{pod} presents a certificate for {name} that the caBundle trusts (subject {}, expires in {days} days)",
                    p.subject
                )),
                Err(e) => report.fail(format!(
                    "{pod} presents a certificate the caBundle does not accept for {name}: {e} (subject {}, issuer {}); the API server's calls fail and, under failurePolicy {}, pods are {}",
                    p.subject,
                    p.issuer,
                    target.failure_policy,
                    if target.failure_policy == "Ignore" { "created without injection" } else { "refused" }
                )),
            }
            if (0..30).contains(&days) {
                report.warn(format!(
                    "{pod}: the serving certificate expires in {days} days"
                ));
            }
        }
        Err(e) => report.fail(format!("{pod}: {e}")),
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Namespaces labelled for injection, reported; returns those the webhook
/// selects, with their labels.
async fn namespaces<W: Write>(
    client: &kube::Client,
    target: &WebhookTarget,
    report: &mut Report<W>,
) -> Vec<(String, BTreeMap<String, String>)> {
    let api: Api<Namespace> = Api::all(client.clone());
    let (key, value) = NAMESPACE_LABEL;
    let list = match api
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
    {
        Ok(l) => l,
        Err(e) => {
            report.fail(format!("cannot list namespaces: {e}"));
            return Vec::new();
        }
    };
    let mut labelled = Vec::new();
    let mut selected = Vec::new();
    for ns in &list.items {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let labels: BTreeMap<String, String> = ns.metadata.labels.clone().unwrap_or_default();
        if target.selects(&labels) {
            selected.push((name.clone(), labels));
        }
        labelled.push(name);
    }
    if labelled.is_empty() {
        report.warn(format!(
            "no namespace is labelled {key}={value}: nothing is injected (kubectl label namespace NAMESPACE {key}={value})"
        ));
        return selected;
    }
    report.info(format!(
        "labelled {key}={value}: {} ({} namespace{})",
        labelled.join(", "),
        labelled.len(),
        if labelled.len() == 1 { "" } else { "s" }
    ));
    let excluded: Vec<&String> = labelled
        .iter()
        .filter(|n| !selected.iter().any(|(s, _)| s == *n))
        .collect();
    if !excluded.is_empty() {
        report.warn(format!(
            "labelled but never injected (kube-system, the webhook's namespace or webhook.excludedNamespaces): {}",
            excluded.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    selected
}

/// A dry-run create of the test pod in `namespace` must come back injected.
async fn dry_run<W: Write>(
    client: &kube::Client,
    namespace: &str,
    image: &str,
    report: &mut Report<W>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("kube-prestop-check".to_owned()),
    };
    match pods.create(&params, &probe_pod::pod(image)).await {
        Ok(pod) => match probe_pod::injected(&pod) {
            Some(Delivery::ImageVolume(image)) => report.pass(format!(
                "namespace {namespace}: a dry-run test pod comes back injected; sidecar binary from the image volume {image}"
            )),
            Some(Delivery::ConfigMap(name)) => report.pass(format!(
                "namespace {namespace}: a dry-run test pod comes back injected; sidecar binary from ConfigMap {name}"
            )),
            Some(Delivery::InstallContainer) => report.pass(format!(
                "namespace {namespace}: a dry-run test pod comes back injected; sidecar binary from the install init container (no image volumes, and no ConfigMap there yet or the nodes' architecture not known; the webhook's admission log line says why in sidecar_binary_why)"
            )),
            None => report.fail(format!(
                "namespace {namespace}: a dry-run test pod came back NOT injected: the API server did not get an answer from the webhook (with failurePolicy Ignore it creates the pod unchanged; its log says \"failed calling webhook\"), or the pod was skipped (see the webhook's decision log line)"
            )),
        },
        Err(e) => report.fail(format!(
            "namespace {namespace}: dry-run create of a test pod refused: {e}"
        )),
    }
}

async fn test_job<W: Write>(
    client: &kube::Client,
    namespace: &str,
    options: &CheckOptions,
    report: &mut Report<W>,
) {
    report.info(format!(
        "running a test Job in {namespace} (image {}, up to {}s)",
        options.image,
        options.job_timeout.as_secs()
    ));
    match job::run(
        client.clone(),
        namespace,
        &options.image,
        options.job_timeout,
    )
    .await
    {
        Ok(o) => {
            let pod = o.pod.clone().unwrap_or_else(|| "(no pod)".to_owned());
            if let Some(why) = &o.stuck {
                report.fail(format!(
                    "test Job {namespace}/{}: pod {pod} cannot start: {why} (for an image pull error: main and its sidecar run --image, the install container and the image volume the chart's installImage; the nodes must be able to pull both); Job deleted",
                    o.job
                ));
            } else if o.delivery.is_none() {
                report.fail(format!(
                    "test Job {namespace}/{}: pod {pod} was not injected (ended: {})",
                    o.job, o.ended
                ));
            } else if o.hook_ran() {
                report.pass(format!(
                    "test Job {namespace}/{}: pod {pod} injected, its preStop ran after the container exited (\"{}\"; {}); Job deleted",
                    o.job,
                    probe_pod::HOOK_OUTPUT,
                    o.hook_finished.as_deref().map_or("", |l| l.trim_start_matches("kube-prestop: ")),
                ));
            } else {
                report.fail(format!(
                    "test Job {namespace}/{}: pod {pod} injected but no successful hook run in the log of {} (ended: {}; hook line: {}); Job deleted",
                    o.job,
                    job::SIDECAR,
                    o.ended,
                    o.hook_finished.as_deref().unwrap_or("none")
                ));
            }
        }
        Err(e) => report.fail(format!("test Job in {namespace}: {e}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn release(name: &str) -> config::OtherRelease {
        let config: MutatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": config::WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "clientConfig": {"service": {"namespace": name, "name": name}},
                "namespaceSelector": {"matchLabels": {"kube-prestop.io/inject": "enabled"}}
            }]
        }))
        .unwrap();
        config::other_releases(&[config], "kube-prestop")
            .pop()
            .unwrap()
    }

    fn lines(others: &[config::OtherRelease]) -> (Option<String>, String) {
        let labels = BTreeMap::from([("kube-prestop.io/inject".to_owned(), "enabled".to_owned())]);
        let mut out = Vec::new();
        let mut report = Report::new(&mut out);
        let first = first_other(others, "kube-prestop", "batch", &labels, &mut report);
        drop(report);
        (first, String::from_utf8(out).unwrap())
    }

    fn version_text(major: &str, minor: &str) -> String {
        let mut out = Vec::new();
        let mut report = Report::new(&mut out);
        version_line(&format!("v{major}.{minor}.0"), major, minor, &mut report);
        drop(report);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn versions_fail_below_native_sidecars_and_warn_below_the_tested_range() {
        assert!(
            version_text("1", "28")
                .starts_with("FAIL  Kubernetes v1.28.0: kube-prestop needs 1.29 or newer")
        );
        assert!(
            version_text("1", "29").starts_with("WARN  Kubernetes v1.29.0: has native sidecars")
        );
        assert!(
            version_text("1", "34+").starts_with("WARN  Kubernetes v1.34+.0: has native sidecars")
        );
        assert_eq!(
            version_text("1", "35+"),
            "PASS  Kubernetes v1.35+.0 (tested from 1.35; native sidecars from 1.29)\n"
        );
        assert!(version_text("1", "37").starts_with("PASS  "));
        assert!(
            version_text("2", "0").starts_with("WARN  Kubernetes v2.0.0: version not understood")
        );
        assert!(version_text("1", "x").starts_with("WARN  "));
    }

    #[test]
    fn a_release_called_first_takes_the_namespace_and_fails_the_check() {
        let (first, text) = lines(&[release("batch-kube-prestop"), release("kube-prestop-v2")]);
        assert_eq!(first.as_deref(), Some("batch-kube-prestop"));
        assert!(
            text.starts_with("FAIL  namespace batch: MutatingWebhookConfiguration batch-kube-prestop (another kube-prestop release) selects it too and the API server calls it first"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn a_release_called_after_is_a_warning_only() {
        let (first, text) = lines(&[release("kube-prestop-v2")]);
        assert_eq!(first, None);
        assert!(
            text.starts_with("WARN  namespace batch: MutatingWebhookConfiguration kube-prestop-v2 (another kube-prestop release) selects it too; it is called after kube-prestop"),
            "{text}"
        );
        let (first, text) = lines(&[]);
        assert_eq!((first, text.as_str()), (None, ""));
    }
}
