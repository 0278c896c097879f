//! `init-start`: where an init container's CRI `StartContainer` time goes,
//! and in particular what kube-prestop's install init container pays for
//! its security context.
//!
//! Why: with `sidecarBinary.source=installContainer` every injected pod
//! starts the install init container before its sidecar, and the pod waits
//! for it. A manual prototype (10 pods each on the local cluster: Kubernetes
//! v1.37.2, containerd 2.4.2, runc 1.5.3) found `StartContainer` of busybox
//! `true` at a median 58.9 ms plain, 92.5 ms with the install container's
//! security context, 63.4 ms with that context less `seccompProfile:
//! RuntimeDefault` and 86.9 ms with the seccomp profile alone; the install
//! image running its install command took 87.7 ms, 64.0 ms without seccomp.
//! So the `RuntimeDefault` profile costs some 24-29 ms per container start:
//! runc compiles the profile into a BPF filter with libseccomp and loads
//! it at every start (`InitSeccomp`, `libcontainer/seccomp/seccomp_linux.go`,
//! runc v1.5.3), while the rest of the restricted context (non-root user,
//! read-only root, no capabilities, no privilege escalation) costs little.
//! This part makes that measurement repeatable.
//!
//! What it runs: `--pods N` rounds, each one bare pod per [`Variant`], in
//! the order of [`Variant::ALL`], one pod at a time, each waited for to its
//! end (Succeeded or Failed, at most [`POD_TIMEOUT`], else an error naming
//! the pod) before the next is created. Every pod is the same but for its
//! one init container: `restartPolicy: Never`,
//! `terminationGracePeriodSeconds: 0`, an `emptyDir`, the init container
//! and a main container running `true` from the test image (`--image`);
//! no resources, so the pods are BestEffort. The namespace is not
//! labelled for injection (and bare pods are not a workload kind the
//! webhook injects by default); a pod admission changed anyway is an error.
//! The install context is the engine's own
//! ([`kube_prestop_engine::mutate::install_security_context`]) and the
//! install container is built by the engine's own builder
//! ([`kube_prestop_engine::mutate::install_container`]): the image the
//! installed webhook passes as `--install-image` (and its
//! `--install-image-pull-policy`), or `--install-image`.
//!
//! What it measures: per pod, the init container's `StartContainer` from
//! containerd's log ([`crate::runtime_log`]: `StartContainer for "ID"` to
//! `StartContainer for "ID" returns successfully`, the CRI service's own
//! log lines), read once all pods ran. Per variant: n, median, p90, min and
//! max, and each variant's median less `plain`'s with its 95% percentile
//! bootstrap interval ([`crate::stats`]). A call that cannot be true is
//! refused, counted per variant and kept in the raw file with its reason,
//! not a sample: requested before the bench's pod create call, returned
//! before it was requested, or returned after the bench saw the pod
//! finished; so is a pod that failed (its init container did not run as
//! the variant means) and one whose call is not in the log.
//!
//! Output: `init_*` key=value lines on stdout, then the same figures as a
//! Markdown table (no `=` in it, so bench/report.py's key=value reader
//! skips it and copies it into the report); `--raw FILE` keeps each pod's
//! sample as JSON.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext};
use kube::api::PostParams;
use kube::{Api, Client};
use kube_prestop_e2e::checks::{container_status, phase};
use kube_prestop_e2e::metrics::percentile;
use kube_prestop_e2e::waits::wait_pod_finished;
use kube_prestop_e2e::webhook::{WEBHOOK_DEPLOYMENT, WEBHOOK_NAMESPACE};
use kube_prestop_e2e::{TestNamespace, unique_suffix};
use kube_prestop_engine::EngineConfig;
use kube_prestop_engine::mutate::{install_container, install_security_context};
use serde_json::{Value, json};

use crate::clock::outside;
use crate::runtime_log::{Call, RuntimeLog};
use crate::stats;
use crate::{C, POD_TIMEOUT, log, ms, now_ns, out, out_ms, with_namespaces};

/// Where the local cluster writes the node's containerd log
/// (tests/cluster; `KUBE_PRESTOP_STATE_ROOT` moves it).
pub const DEFAULT_RUNTIME_LOG: &str = "/var/lib/kube-prestop/cluster/logs/containerd.log";
/// Name of the measured init container in every pod.
const INIT: &str = "init";
/// The `emptyDir` every pod has (the install variants write the binary
/// into it).
const VOLUME: &str = "bin";
/// The webhook Deployment's container that carries `--install-image`.
const WEBHOOK_CONTAINER: &str = "webhook";

/// One kind of init container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The test image's `true`, no security context.
    Plain,
    /// The same with the install container's security context.
    Restricted,
    /// [`Variant::Restricted`] less `seccompProfile: RuntimeDefault`.
    RestrictedWithoutSeccomp,
    /// Only `seccompProfile: RuntimeDefault`.
    SeccompOnly,
    /// The install container as the engine builds it.
    Install,
    /// [`Variant::Install`] less `seccompProfile: RuntimeDefault`.
    InstallWithoutSeccomp,
}

impl Variant {
    /// Every variant, in the order each round runs them.
    pub const ALL: [Self; 6] = [
        Self::Plain,
        Self::Restricted,
        Self::RestrictedWithoutSeccomp,
        Self::SeccompOnly,
        Self::Install,
        Self::InstallWithoutSeccomp,
    ];

    /// Its name: the table's, and its pods' names' prefix.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Restricted => "restricted",
            Self::RestrictedWithoutSeccomp => "restricted-without-seccomp",
            Self::SeccompOnly => "seccomp-only",
            Self::Install => "install",
            Self::InstallWithoutSeccomp => "install-without-seccomp",
        }
    }

    /// Its fragment of the output keys.
    fn key(self) -> String {
        self.name().replace('-', "_")
    }

    /// What its init container is, for the table.
    fn what(self) -> &'static str {
        match self {
            Self::Plain => "test image `true`, no security context",
            Self::Restricted => "test image `true`, the install container's security context",
            Self::RestrictedWithoutSeccomp => {
                "test image `true`, the install container's security context less seccomp RuntimeDefault"
            }
            Self::SeccompOnly => "test image `true`, only seccomp RuntimeDefault",
            Self::Install => "the install container as injected (install image, install command)",
            Self::InstallWithoutSeccomp => {
                "the install container as injected, less seccomp RuntimeDefault"
            }
        }
    }
}

/// The install image and the pull policy its container gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallImage {
    /// The image reference.
    pub image: String,
    /// Its `imagePullPolicy`.
    pub pull_policy: String,
}

impl InstallImage {
    /// `image` with the engine's default pull policy.
    pub fn with_default_policy(image: String) -> Self {
        Self {
            image,
            pull_policy: EngineConfig::default().install_image_pull_policy,
        }
    }
}

/// What the init-start part measures.
#[derive(Debug, Clone)]
pub struct InitStartOpts {
    /// Rounds (pods of each variant).
    pub pods: u32,
    /// The test image (busybox): the busybox variants' init container and
    /// every pod's main container.
    pub image: String,
    /// The install image; none: the installed webhook's
    /// ([`installed_install_image`]).
    pub install_image: Option<InstallImage>,
    /// The node's containerd log.
    pub runtime_log: PathBuf,
}

/// `--name=VALUE` or `--name VALUE` in `args`: the last one.
fn flag_value(args: &[String], name: &str) -> Option<String> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            found = Some(v.to_owned());
        } else if a == name {
            found = it.next().cloned();
        }
    }
    found
}

/// The install image and pull policy in the webhook's arguments
/// (`--install-image`, `--install-image-pull-policy`; the engine's
/// default policy when that is absent).
fn install_image_from_args(args: &[String]) -> Option<InstallImage> {
    let image = flag_value(args, "--install-image")?;
    Some(match flag_value(args, "--install-image-pull-policy") {
        Some(pull_policy) => InstallImage { image, pull_policy },
        None => InstallImage::with_default_policy(image),
    })
}

/// The install image the installed webhook Deployment passes as
/// `--install-image` (and its `--install-image-pull-policy`).
pub async fn installed_install_image(client: &Client) -> Result<InstallImage> {
    let what = format!("deployment {WEBHOOK_NAMESPACE}/{WEBHOOK_DEPLOYMENT}");
    let d = Api::<Deployment>::namespaced(client.clone(), WEBHOOK_NAMESPACE)
        .get(WEBHOOK_DEPLOYMENT)
        .await
        .with_context(|| {
            format!("reading {what} for its --install-image (or pass --install-image)")
        })?;
    let args = d
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| {
            s.containers
                .into_iter()
                .find(|c| c.name == WEBHOOK_CONTAINER)
        })
        .and_then(|c| c.args)
        .unwrap_or_default();
    install_image_from_args(&args).with_context(|| {
        format!("{what}: container {WEBHOOK_CONTAINER} has no --install-image argument (pass --install-image)")
    })
}

/// The seccomp-less copy of `sc`.
fn without_seccomp(mut sc: SecurityContext) -> SecurityContext {
    sc.seccomp_profile = None;
    sc
}

/// The init container of `variant`: busybox variants run `true` from
/// `image`; the install variants are the engine's install container.
pub fn init_container(variant: Variant, image: &str, install: &InstallImage) -> Container {
    let busybox = |security_context: Option<SecurityContext>| Container {
        name: INIT.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("Never".to_owned()),
        command: Some(vec!["true".to_owned()]),
        security_context,
        ..Container::default()
    };
    let installer = || {
        let config = EngineConfig {
            install_image: install.image.clone(),
            install_image_pull_policy: install.pull_policy.clone(),
            ..EngineConfig::default()
        };
        install_container(INIT.to_owned(), VOLUME, &config, None)
    };
    match variant {
        Variant::Plain => busybox(None),
        Variant::Restricted => busybox(Some(install_security_context())),
        Variant::RestrictedWithoutSeccomp => {
            busybox(Some(without_seccomp(install_security_context())))
        }
        Variant::SeccompOnly => busybox(Some(SecurityContext {
            seccomp_profile: install_security_context().seccomp_profile,
            ..SecurityContext::default()
        })),
        Variant::Install => installer(),
        Variant::InstallWithoutSeccomp => {
            let mut c = installer();
            c.security_context = c.security_context.map(without_seccomp);
            c
        }
    }
}

/// The bare pod `name` of `variant` (see the module docs).
pub fn variant_pod(
    name: &str,
    variant: Variant,
    image: &str,
    install: &InstallImage,
) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "volumes": [{ "name": VOLUME, "emptyDir": {} }],
            "initContainers": [init_container(variant, image, install)],
            "containers": [{
                "name": C,
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["true"]
            }]
        }
    }))?)
}

/// One pod the bench ran, before the log is read.
#[derive(Debug, Clone)]
struct Ran {
    variant: Variant,
    round: u32,
    namespace: String,
    name: String,
    /// The bench's clock just before the create call (ns).
    created: i128,
    /// The bench's clock once it saw the pod finished (ns).
    finished_seen: i128,
    /// Why the pod does not count whatever its times: it failed.
    failed: Option<String>,
}

/// One pod's outcome: its `StartContainer` duration (ms) or why it is not a
/// sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its variant.
    pub variant: Variant,
    /// Its round (0-based).
    pub round: u32,
    /// `namespace/name`.
    pub pod: String,
    /// The init container's `StartContainer` call, ms, or why it is refused.
    pub start_ms: Result<f64, String>,
}

/// The `StartContainer` call's duration (ms), or why it cannot be true:
/// not both its lines in the log, requested or returned outside the pod's
/// window ([`outside`]: before the pod create call `created`, or after the
/// pod was seen finished `finished_seen`), or returned before requested;
/// all ns on the host's clock, which the node shares.
pub fn call_ms(call: Call, created: i128, finished_seen: i128) -> Result<f64, String> {
    let (Some(req), Some(ret)) = (call.requested, call.returned) else {
        return Err(format!(
            "StartContainer not (completely) in the runtime log: requested {}, returned {}",
            call.requested.is_some(),
            call.returned.is_some()
        ));
    };
    let window = |event, at| {
        outside(
            event,
            at,
            (created, "the pod create call"),
            (finished_seen, "the pod was seen finished"),
        )
    };
    if let Some(why) = window("StartContainer requested", req) {
        return Err(why);
    }
    if ret < req {
        return Err(format!(
            "StartContainer returned {:.3} ms before it was requested",
            ms(req - ret)
        ));
    }
    if let Some(why) = window("StartContainer returned", ret) {
        return Err(why);
    }
    Ok(ms(ret - req))
}

/// The samples of `ran` from the runtime log.
fn samples(ran: &[Ran], rt: &RuntimeLog) -> Vec<Sample> {
    ran.iter()
        .map(|r| {
            let call = rt
                .pod(&r.namespace, &r.name)
                .and_then(|p| p.containers.get(INIT))
                .map(|c| c.start)
                .unwrap_or_default();
            Sample {
                variant: r.variant,
                round: r.round,
                pod: format!("{}/{}", r.namespace, r.name),
                start_ms: match &r.failed {
                    Some(why) => Err(why.clone()),
                    None => call_ms(call, r.created, r.finished_seen),
                },
            }
        })
        .collect()
}

/// Why a finished pod does not count, if it does not: it is not
/// Succeeded (its init container's exit code, or its phase).
fn failure(pod: &Pod) -> Option<String> {
    let p = phase(pod);
    if p == "Succeeded" {
        return None;
    }
    let exit = container_status(pod, INIT)
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .map(|t| {
            let reason = t.reason.map(|r| format!(" ({r})")).unwrap_or_default();
            format!(", init container exit code {}{reason}", t.exit_code)
        });
    Some(format!("pod {p}{}", exit.unwrap_or_default()))
}

/// Runs the part (see the module docs).
pub async fn init_start(
    client: &Client,
    prefix: &str,
    opts: InitStartOpts,
) -> Result<(String, Value)> {
    ensure!(opts.pods > 0, "--pods must be at least 1");
    let install = match &opts.install_image {
        Some(i) => i.clone(),
        None => installed_install_image(client).await?,
    };
    log(&format!(
        "init-start: install image {} (pull policy {}); {} rounds of {} variants",
        install.image,
        install.pull_policy,
        opts.pods,
        Variant::ALL.len()
    ));
    let ns = TestNamespace::create(client, &format!("{prefix}-init-start"), false).await?;
    let client = client.clone();
    with_namespaces(vec![ns], |names| async move {
        let ns = &names[0];
        let run = run_pods(&client, ns, &opts, &install);
        // Interrupted (Ctrl-C): stop, still delete the namespace.
        let ran = tokio::select! {
            r = run => r?,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (SIGINT)"),
        };
        let text = std::fs::read_to_string(&opts.runtime_log)
            .with_context(|| format!("reading the runtime log {}", opts.runtime_log.display()))?;
        let rt = RuntimeLog::parse(&text);
        ensure!(
            ran.iter().any(|r| rt.pod(&r.namespace, &r.name).is_some()),
            "no pod of the run is in {}: is it the node's containerd log?",
            opts.runtime_log.display()
        );
        let samples = samples(&ran, &rt);
        for s in &samples {
            match &s.start_ms {
                Ok(v) => log(&format!("{}: StartContainer {v:.1} ms", s.pod)),
                Err(why) => log(&format!("{}: REFUSED, not a sample: {why}", s.pod)),
            }
        }
        Ok(report(
            &Header {
                pods: opts.pods,
                image: &opts.image,
                install: &install,
            },
            &samples,
        ))
    })
    .await
}

/// Creates and waits for every pod, round by round.
async fn run_pods(
    client: &Client,
    ns: &str,
    opts: &InitStartOpts,
    install: &InstallImage,
) -> Result<Vec<Ran>> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let suffix = unique_suffix();
    let mut ran = Vec::new();
    for round in 0..opts.pods {
        for variant in Variant::ALL {
            let name = format!("{}-{round:03}-{suffix}", variant.name());
            let pod = variant_pod(&name, variant, &opts.image, install)?;
            let created = now_ns();
            let got = api
                .create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {ns}/{name}"))?;
            let inits = got
                .spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .map_or(0, Vec::len);
            ensure!(
                inits == 1,
                "pod {ns}/{name}: admission changed it ({inits} init containers): is the namespace selected for injection?"
            );
            let done = wait_pod_finished(client, ns, &name, POD_TIMEOUT).await?;
            let finished_seen = now_ns();
            let failed = failure(&done);
            log(&format!(
                "{name}: {} after {:.0} ms",
                phase(&done),
                ms(finished_seen - created)
            ));
            ran.push(Ran {
                variant,
                round,
                namespace: ns.to_owned(),
                name,
                created,
                finished_seen,
                failed,
            });
        }
    }
    Ok(ran)
}

/// What the report says about the run besides the samples.
#[derive(Debug, Clone)]
pub struct Header<'a> {
    /// Rounds.
    pub pods: u32,
    /// The test image.
    pub image: &'a str,
    /// The install image.
    pub install: &'a InstallImage,
}

/// One variant's figures (ms).
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    n: usize,
    refused: usize,
    p50: Option<f64>,
    p90: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    /// Its median less `plain`'s, with the interval; none for `plain`.
    vs_plain: Option<stats::MedianDiff>,
}

/// A variant's sorted samples (ms).
fn sorted(samples: &[Sample], v: Variant) -> Vec<f64> {
    let mut x: Vec<f64> = samples
        .iter()
        .filter(|s| s.variant == v)
        .filter_map(|s| s.start_ms.as_ref().ok().copied())
        .collect();
    x.sort_by(f64::total_cmp);
    x
}

fn figures(samples: &[Sample], v: Variant) -> Figures {
    let x = sorted(samples, v);
    let plain = sorted(samples, Variant::Plain);
    Figures {
        n: x.len(),
        refused: samples
            .iter()
            .filter(|s| s.variant == v && s.start_ms.is_err())
            .count(),
        p50: percentile(&x, 0.5),
        p90: percentile(&x, 0.9),
        min: x.first().copied(),
        max: x.last().copied(),
        vs_plain: (v != Variant::Plain)
            .then(|| stats::median_diff(&x, &plain, stats::RESAMPLES, stats::SEED))
            .flatten(),
    }
}

/// The key=value lines followed by the Markdown table, and the raw JSON.
pub fn report(h: &Header<'_>, samples: &[Sample]) -> (String, Value) {
    let mut lines = String::new();
    out(&mut lines, "init_pods_each", h.pods);
    out(&mut lines, "init_image", h.image);
    out(&mut lines, "init_install_image", &h.install.image);
    out(
        &mut lines,
        "init_install_image_pull_policy",
        &h.install.pull_policy,
    );
    out(
        &mut lines,
        "init_variants",
        Variant::ALL
            .iter()
            .map(|v| v.name())
            .collect::<Vec<_>>()
            .join(","),
    );
    out(&mut lines, "init_boot_resamples", stats::RESAMPLES);
    out(&mut lines, "init_boot_seed", stats::SEED);
    out(&mut lines, "init_boot_level", stats::LEVEL);
    let all: Vec<(Variant, Figures)> = Variant::ALL
        .iter()
        .map(|&v| (v, figures(samples, v)))
        .collect();
    for (v, f) in &all {
        let key = format!("init_{}", v.key());
        out(&mut lines, &format!("{key}_n"), f.n);
        out(&mut lines, &format!("{key}_refused"), f.refused);
        out_ms(&mut lines, &format!("{key}_p50_ms"), f.p50);
        out_ms(&mut lines, &format!("{key}_p90_ms"), f.p90);
        out_ms(&mut lines, &format!("{key}_min_ms"), f.min);
        out_ms(&mut lines, &format!("{key}_max_ms"), f.max);
        if *v != Variant::Plain {
            let d = f.vs_plain;
            out_ms(
                &mut lines,
                &format!("{key}_minus_plain_p50_ms"),
                d.map(|d| d.estimate),
            );
            out_ms(
                &mut lines,
                &format!("{key}_minus_plain_ci95_lo_ms"),
                d.map(|d| d.lo),
            );
            out_ms(
                &mut lines,
                &format!("{key}_minus_plain_ci95_hi_ms"),
                d.map(|d| d.hi),
            );
        }
    }
    lines.push('\n');
    lines.push_str(&table(h, &all));
    let raw = samples
        .iter()
        .map(|s| match &s.start_ms {
            Ok(v) => json!({
                "pod": s.pod, "variant": s.variant.name(), "round": s.round,
                "start_container_ms": v,
            }),
            Err(why) => json!({
                "pod": s.pod, "variant": s.variant.name(), "round": s.round,
                "refused": why,
            }),
        })
        .collect();
    (lines, Value::Array(raw))
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"))
}

/// The figures as Markdown (no `=` anywhere: see the module docs).
fn table(h: &Header<'_>, all: &[(Variant, Figures)]) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "## Init container StartContainer ({} pods per variant, interleaved; ms)\n\n",
        h.pods
    ));
    t.push_str("| variant | init container | n | p50 | p90 | p50 − plain (95% CI) |\n");
    t.push_str("|---|---|---|---|---|---|\n");
    for (v, f) in all {
        let n = if f.refused > 0 {
            format!("{} ({} refused)", f.n, f.refused)
        } else {
            f.n.to_string()
        };
        let diff = match (v, f.vs_plain) {
            (Variant::Plain, _) => "—".to_owned(),
            (_, None) => "—".to_owned(),
            (_, Some(d)) => format!("{:+.1} ({:+.1} … {:+.1})", d.estimate, d.lo, d.hi),
        };
        t.push_str(&format!(
            "| {} | {} | {n} | {} | {} | {diff} |\n",
            v.name(),
            v.what(),
            cell(f.p50),
            cell(f.p90),
        ));
    }
    t.push_str(&format!(
        "\nStartContainer: containerd's CRI log lines of the init container (called to returned successfully). \
         Test image {}; install image {} (pull policy {}). \
         p50 − plain: difference of medians, {:.0}% percentile bootstrap interval ({} resamples, seed {}).\n",
        h.image,
        h.install.image,
        h.install.pull_policy,
        stats::LEVEL * 100.0,
        stats::RESAMPLES,
        stats::SEED
    ));
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use super::*;

    fn install() -> InstallImage {
        InstallImage {
            image: "localhost/kube-prestop/kube-prestop-sidecar:dev".to_owned(),
            pull_policy: "Never".to_owned(),
        }
    }

    /// The pod of `v` as JSON.
    fn pod(v: Variant) -> Value {
        serde_json::to_value(variant_pod("p", v, "bb:test", &install()).unwrap()).unwrap()
    }

    const RESTRICTED: &str = r#"{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},
        "privileged":false,"readOnlyRootFilesystem":true,"runAsGroup":65532,"runAsNonRoot":true,
        "runAsUser":65532,"seccompProfile":{"type":"RuntimeDefault"}}"#;

    fn restricted(seccomp: bool) -> Value {
        let mut v: Value = serde_json::from_str(RESTRICTED).unwrap();
        if !seccomp {
            v.as_object_mut().unwrap().remove("seccompProfile");
        }
        v
    }

    #[test]
    fn every_pod_is_the_same_but_for_its_init_container() {
        for v in Variant::ALL {
            let p = pod(v);
            let spec = &p["spec"];
            assert_eq!(spec["restartPolicy"], "Never", "{v:?}");
            assert_eq!(spec["terminationGracePeriodSeconds"], 0, "{v:?}");
            assert_eq!(
                spec["volumes"],
                json!([{ "name": VOLUME, "emptyDir": {} }]),
                "{v:?}"
            );
            assert_eq!(
                spec["containers"],
                json!([{ "name": "main", "image": "bb:test", "imagePullPolicy": "Never", "command": ["true"] }]),
                "{v:?}"
            );
            let inits = spec["initContainers"].as_array().unwrap();
            assert_eq!(inits.len(), 1, "{v:?}");
            assert_eq!(inits[0]["name"], INIT, "{v:?}");
            assert!(inits[0].get("resources").is_none(), "{v:?}");
        }
    }

    #[test]
    fn busybox_variants_differ_only_in_their_security_context() {
        for (v, sc) in [
            (Variant::Plain, None),
            (Variant::Restricted, Some(restricted(true))),
            (Variant::RestrictedWithoutSeccomp, Some(restricted(false))),
            (
                Variant::SeccompOnly,
                Some(json!({ "seccompProfile": { "type": "RuntimeDefault" } })),
            ),
        ] {
            let init = pod(v)["spec"]["initContainers"][0].clone();
            let mut want = json!({
                "name": "init", "image": "bb:test", "imagePullPolicy": "Never", "command": ["true"]
            });
            if let Some(sc) = sc {
                want["securityContext"] = sc;
            }
            assert_eq!(init, want, "{v:?}");
        }
    }

    #[test]
    fn install_variants_are_the_engines_install_container() {
        let init = pod(Variant::Install)["spec"]["initContainers"][0].clone();
        assert_eq!(
            init,
            json!({
                "name": "init",
                "image": "localhost/kube-prestop/kube-prestop-sidecar:dev",
                "imagePullPolicy": "Never",
                "command": ["/kube-prestop-sidecar", "install", "--dest", "/.kube-prestop/bin/kube-prestop"],
                "volumeMounts": [{ "name": VOLUME, "mountPath": "/.kube-prestop/bin" }],
                "securityContext": restricted(true),
                "terminationMessagePolicy": "FallbackToLogsOnError"
            })
        );
        let mut without = init;
        without["securityContext"] = restricted(false);
        assert_eq!(
            pod(Variant::InstallWithoutSeccomp)["spec"]["initContainers"][0],
            without
        );
    }

    #[test]
    fn the_install_image_comes_from_the_webhooks_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            install_image_from_args(&args(&[
                "serve",
                "--install-image=reg/x:1",
                "--install-image-pull-policy=Never",
                "--sidecar-binary-source=auto",
            ])),
            Some(InstallImage {
                image: "reg/x:1".into(),
                pull_policy: "Never".into()
            })
        );
        // Space-separated, no policy: the engine's default policy.
        assert_eq!(
            install_image_from_args(&args(&["serve", "--install-image", "reg/y:2"])),
            Some(InstallImage::with_default_policy("reg/y:2".into()))
        );
        assert_eq!(
            InstallImage::with_default_policy("i".into()).pull_policy,
            "IfNotPresent"
        );
        assert_eq!(install_image_from_args(&args(&["serve"])), None);
        // --install-image-pull-policy is not --install-image.
        assert_eq!(
            install_image_from_args(&args(&["--install-image-pull-policy=Always"])),
            None
        );
    }

    #[test]
    fn impossible_calls_are_refused() {
        let call = |req: Option<i128>, ret: Option<i128>| Call {
            requested: req,
            returned: ret,
        };
        // Created at 100 ns, seen finished at 1000 ns.
        assert_eq!(call_ms(call(Some(200), Some(300)), 100, 1000), Ok(0.0001));
        assert_eq!(call_ms(call(Some(100), Some(1000)), 100, 1000), Ok(0.0009));
        for (c, needle) in [
            (call(Some(50), Some(300)), "before the pod create call"),
            (call(Some(300), Some(200)), "before it was requested"),
            (
                call(Some(300), Some(1001)),
                "after the pod was seen finished",
            ),
            (call(None, Some(300)), "not (completely) in the runtime log"),
            (call(Some(300), None), "not (completely) in the runtime log"),
        ] {
            let why = call_ms(c, 100, 1000).unwrap_err();
            assert!(why.contains(needle), "{c:?}: {why}");
        }
    }

    #[test]
    fn only_a_succeeded_pod_counts() {
        let with = |phase: &str, exit: i32| -> Pod {
            serde_json::from_value(json!({
                "status": {
                    "phase": phase,
                    "initContainerStatuses": [{
                        "name": "init", "image": "i", "imageID": "", "ready": false,
                        "restartCount": 0,
                        "state": { "terminated": { "exitCode": exit, "reason": "Error" } }
                    }]
                }
            }))
            .unwrap()
        };
        assert_eq!(failure(&with("Succeeded", 0)), None);
        assert_eq!(
            failure(&with("Failed", 1)).unwrap(),
            "pod Failed, init container exit code 1 (Error)"
        );
    }

    /// containerd 2.4.2's lines for one pod's init container.
    fn log_lines(ns: &str, pod: &str, id: &str, req: &str, ret: &str) -> String {
        format!(
            r#"time="2026-12-07T01:00:00.100000000Z" level=info msg="RunPodSandbox for name:\"{pod}\"  uid:\"u\"  namespace:\"{ns}\""
time="2026-12-07T01:00:00.200000000Z" level=info msg="RunPodSandbox for name:\"{pod}\"  uid:\"u\"  namespace:\"{ns}\" returns sandbox id \"5{id}\""
time="2026-12-07T01:00:00.210000000Z" level=info msg="CreateContainer within sandbox \"5{id}\" for container name:\"init\""
time="2026-12-07T01:00:00.240000000Z" level=info msg="CreateContainer within sandbox \"5{id}\" for name:\"init\" returns container id \"{id}\""
time="{req}" level=info msg="StartContainer for \"{id}\""
time="{ret}" level=info msg="StartContainer for \"{id}\" returns successfully"
"#
        )
    }

    #[test]
    fn samples_come_from_the_runtime_log_and_are_judged() {
        let t = |s: &str| crate::runtime_log::parse_time(s).unwrap();
        let text = log_lines(
            "ns",
            "plain-000",
            "a1",
            "2026-12-07T01:00:00.250000000Z",
            "2026-12-07T01:00:00.308900000Z",
        ) + &log_lines(
            "ns",
            "restricted-000",
            "b2",
            "2026-12-07T01:00:01.250000000Z",
            "2026-12-07T01:00:01.342500000Z",
        );
        let rt = RuntimeLog::parse(&text);
        let ran = |variant, name: &str, failed: Option<&str>| Ran {
            variant,
            round: 0,
            namespace: "ns".into(),
            name: name.into(),
            created: t("2026-12-07T01:00:00Z"),
            finished_seen: t("2026-12-07T01:00:05Z"),
            failed: failed.map(str::to_owned),
        };
        let got = samples(
            &[
                ran(Variant::Plain, "plain-000", None),
                ran(Variant::Restricted, "restricted-000", None),
                ran(Variant::Restricted, "restricted-000", Some("pod Failed")),
                ran(Variant::SeccompOnly, "not-in-the-log", None),
            ],
            &rt,
        );
        let ok = |i: usize| *got[i].start_ms.as_ref().unwrap();
        assert!((ok(0) - 58.9).abs() < 1e-9, "{:?}", got[0]);
        assert!((ok(1) - 92.5).abs() < 1e-9, "{:?}", got[1]);
        assert_eq!(got[1].pod, "ns/restricted-000");
        assert_eq!(got[2].start_ms, Err("pod Failed".to_owned()));
        assert!(
            got[3]
                .start_ms
                .as_ref()
                .unwrap_err()
                .contains("not (completely) in the runtime log")
        );
    }

    /// Five samples of each variant: `base + [0, 1, 2, 3, 4]` ms, plus one
    /// refused `install` pod.
    fn fixture() -> Vec<Sample> {
        let base = |v| match v {
            Variant::Plain => 58.0,
            Variant::Restricted => 92.0,
            Variant::RestrictedWithoutSeccomp => 63.0,
            Variant::SeccompOnly => 86.0,
            Variant::Install => 87.0,
            Variant::InstallWithoutSeccomp => 64.0,
        };
        let mut s: Vec<Sample> = (0..5u32)
            .flat_map(|round| {
                Variant::ALL.into_iter().map(move |v| Sample {
                    variant: v,
                    round,
                    pod: format!("ns/{}-{round:03}", v.name()),
                    start_ms: Ok(base(v) + f64::from(round)),
                })
            })
            .collect();
        s.push(Sample {
            variant: Variant::Install,
            round: 5,
            pod: "ns/install-005".into(),
            start_ms: Err("pod Failed, init container exit code 1".into()),
        });
        s
    }

    #[test]
    fn the_report_gives_each_variant_against_plain() {
        let install = install();
        let h = Header {
            pods: 5,
            image: "bb:test",
            install: &install,
        };
        let (text, raw) = report(&h, &fixture());
        let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        assert_eq!(kv["init_pods_each"], "5");
        assert_eq!(
            kv["init_variants"],
            "plain,restricted,restricted-without-seccomp,seccomp-only,install,install-without-seccomp"
        );
        assert_eq!(kv["init_plain_n"], "5");
        assert_eq!(kv["init_plain_p50_ms"], "60.000");
        assert_eq!(kv["init_plain_p90_ms"], "61.600");
        assert_eq!(kv["init_plain_min_ms"], "58.000");
        assert_eq!(kv["init_plain_max_ms"], "62.000");
        assert!(!kv.contains_key("init_plain_minus_plain_p50_ms"));
        assert_eq!(kv["init_restricted_minus_plain_p50_ms"], "34.000");
        assert_eq!(kv["init_seccomp_only_minus_plain_p50_ms"], "28.000");
        assert_eq!(
            kv["init_restricted_without_seccomp_minus_plain_p50_ms"],
            "5.000"
        );
        for v in Variant::ALL.iter().filter(|v| **v != Variant::Plain) {
            let key = format!("init_{}_minus_plain", v.key());
            let est: f64 = kv[format!("{key}_p50_ms").as_str()].parse().unwrap();
            let lo: f64 = kv[format!("{key}_ci95_lo_ms").as_str()].parse().unwrap();
            let hi: f64 = kv[format!("{key}_ci95_hi_ms").as_str()].parse().unwrap();
            assert!(lo <= est && est <= hi && lo < hi, "{v:?}: {lo} {est} {hi}");
        }
        assert_eq!(kv["init_install_n"], "5");
        assert_eq!(kv["init_install_refused"], "1");
        assert_eq!(kv["init_restricted_refused"], "0");
        assert_eq!(kv["init_install_image_pull_policy"], "Never");

        // The table follows the key=value lines, one row per variant, with
        // no '=' for report.py's key=value reader to take.
        let table: Vec<&str> = text.lines().skip_while(|l| l.contains('=')).collect();
        assert!(table.iter().all(|l| !l.contains('=')), "{table:?}");
        let rows: Vec<&str> = table
            .iter()
            .copied()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| variant"))
            .collect();
        assert_eq!(rows.len(), Variant::ALL.len());
        assert!(
            rows[0].starts_with(
                "| plain | test image `true`, no security context | 5 | 60.0 | 61.6 | — |"
            ),
            "{}",
            rows[0]
        );
        assert!(
            rows[1].starts_with("| restricted |") && rows[1].contains("| 94.0 | 95.6 | +34.0 ("),
            "{}",
            rows[1]
        );
        assert!(rows[4].contains("| 5 (1 refused) |"), "{}", rows[4]);

        // Every pod in the raw samples, the refused one with its reason.
        let raw = raw.as_array().unwrap();
        assert_eq!(raw.len(), 31);
        assert_eq!(raw[0]["variant"], "plain");
        assert_eq!(raw[0]["start_container_ms"], 58.0);
        assert_eq!(raw[30]["refused"], "pod Failed, init container exit code 1");
        assert!(raw[30].get("start_container_ms").is_none());
    }

    #[test]
    fn a_variant_without_samples_has_no_figures() {
        let install = install();
        let h = Header {
            pods: 1,
            image: "bb:test",
            install: &install,
        };
        let only_plain: Vec<Sample> = fixture()
            .into_iter()
            .filter(|s| s.variant == Variant::Plain)
            .collect();
        let (text, _) = report(&h, &only_plain);
        let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        assert_eq!(kv["init_install_n"], "0");
        assert_eq!(kv["init_install_p50_ms"], "nan");
        assert_eq!(kv["init_install_minus_plain_p50_ms"], "nan");
        assert!(text.contains("| install | the install container as injected (install image, install command) | 0 | — | — | — |"));
    }

    #[test]
    fn variant_names_are_pod_name_prefixes_and_keys() {
        for v in Variant::ALL {
            let name = format!("{}-000-abcdef", v.name());
            assert!(
                name.len() <= 63
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            );
            assert!(!v.key().contains('-'));
        }
    }
}
