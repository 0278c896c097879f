//! `outcomes-memory`: the outcome exporter's memory with many injected pods
//! (issue 27 item 3). On API-created Nodes (the e2e suite's [`FakeNode`]s:
//! no kubelet, cordoned, tainted), it creates `--pods` pods through the API,
//! each bound to one of them (`spec.nodeName`, so no scheduler and no
//! kubelet is involved; the one real node could take only 110), labelled
//! `kube-prestop.io/injected=true` as the webhook labels injected pods, in a
//! namespace the webhook configuration does not select. The exporter
//! (`--exporter`, the `kube-prestop-webhook` binary to measure, run on this
//! host with the same kubeconfig) watches them. Phases, each measured as
//! the process's VmRSS and VmHWM (`/proc/PID/status`) once its metrics say
//! it is done:
//!
//! 1. `idle`: ready, before any bench pod exists;
//! 2. `created`: every pod created, none terminated (nothing to count: the
//!    exporter keeps nothing for them);
//! 3. `counted`: every pod's status patched as if its sidecar had stopped,
//!    with a termination message of `--runs` runs, until the exporter has
//!    counted all of them (`kube_prestop_hook_outcomes_total` summed);
//! 4. `restarted`: the exporter killed and started again, until it has
//!    counted them all again from its first list (the cost of counting at
//!    first sight).
//!
//! Then the pods are force-deleted (no kubelet would ever confirm), the
//! namespace and the nodes deleted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_prestop_e2e::nodes::FakeNode;
use kube_prestop_e2e::unique_suffix;
use kube_prestop_engine::annotations::{INJECTED_LABEL, INJECTED_LABEL_VALUE};
use serde_json::{Value, json};

/// The options.
pub struct OutcomesOpts {
    /// Pods to create.
    pub pods: u32,
    /// Fake nodes to spread them over.
    pub nodes: u32,
    /// Runs in each pod's termination message.
    pub runs: u32,
    /// Requests in flight at once (creates, status patches, deletes).
    pub concurrency: usize,
    /// The `kube-prestop-webhook` binary to run as the exporter.
    pub exporter: String,
}

fn log(msg: &str) {
    eprintln!("outcomes-memory: {msg}");
}

/// The exporter as a child process.
struct Exporter {
    child: Child,
    metrics: String,
}

impl Exporter {
    fn start(binary: &str) -> Result<Self> {
        let mut child = Command::new(binary)
            .args(["--log-format", "json", "--log-level", "warn", "outcomes"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env_remove("KUBE_PRESTOP_METRICS_ADDR")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {binary}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening metrics=")
            .with_context(|| format!("unexpected first line {line:?}"))?;
        Ok(Self {
            metrics: format!("http://{addr}/metrics"),
            child,
        })
    }

    /// VmRSS and VmHWM in KiB.
    fn memory(&self) -> Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |key: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .with_context(|| format!("no {key} in /proc/PID/status"))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// The exporter's samples: `name{labels}` → value.
    async fn scrape(&self) -> Result<BTreeMap<String, f64>> {
        let text = http_get(&self.metrics).await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
            .collect())
    }

    /// Waits until `done` holds for the samples; returns the wait.
    async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&BTreeMap<String, f64>) -> bool,
    ) -> Result<Duration> {
        let start = Instant::now();
        loop {
            if let Ok(samples) = self.scrape().await
                && done(&samples)
            {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                bail!("{what}: not done after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the exporter (also done on drop, so an error on the way never
    /// leaves it running).
    fn stop(self) {}
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain-HTTP GET on the loopback (no client library: one request).
async fn http_get(url: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").context("http only")?;
    let (host, path) = rest.split_once('/').context("no path")?;
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let (head, body) = out.split_once("\r\n\r\n").context("no body")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("{url}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_owned())
}

/// The runs counted in namespace `ns` (the bench's own: the cluster may
/// hold other injected pods, which the exporter counts too).
fn counted(samples: &BTreeMap<String, f64>, ns: &str) -> f64 {
    let label = format!("namespace=\"{ns}\"");
    samples
        .iter()
        .filter(|(k, _)| k.starts_with("kube_prestop_hook_outcomes_total{") && k.contains(&label))
        .map(|(_, v)| v)
        .sum()
}

fn pod(name: &str, node: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { INJECTED_LABEL: INJECTED_LABEL_VALUE }
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            // The fake nodes' taints, and the node controller's
            // not-ready/unreachable ones: never evicted.
            "tolerations": [{"operator": "Exists"}],
            "initContainers": [{
                "name": "kube-prestop-main",
                "image": "registry.invalid/kube-prestop-bench:none",
                "restartPolicy": "Always"
            }],
            "containers": [{"name": "main", "image": "registry.invalid/kube-prestop-bench:none"}]
        }
    }))?)
}

/// The status of a pod whose sidecar stopped with `runs` runs in its
/// message (about 90 bytes each).
fn terminated_status(uid: &str, runs: u32) -> Value {
    let mut message = String::from("kube-prestop hook runs, oldest first:\n");
    for i in 0..runs {
        let hook = if i % 10 == 9 { "exit:1" } else { "exit:0" };
        message.push_str(&format!(
            "container=main instance={}-{} container_exit=exit:0 hook={hook} duration_ms=12 grace_cut=false\n",
            1000 + i,
            900_000 + i
        ));
    }
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .map(|t| t.to_string())
        .unwrap_or_default();
    json!({
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{
                "name": "kube-prestop-main",
                "image": "registry.invalid/kube-prestop-bench:none",
                "imageID": "",
                "ready": false,
                "restartCount": 0,
                "started": false,
                "state": {"terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "containerID": format!("containerd://{uid}"),
                    "startedAt": now,
                    "finishedAt": now,
                    "message": message
                }}
            }]
        }
    })
}

/// Runs the bench; returns its `key=value` lines and raw figures.
pub async fn outcomes_memory(
    client: &Client,
    prefix: &str,
    o: OutcomesOpts,
) -> Result<(String, Value)> {
    let suffix = unique_suffix();
    let ns_name = format!("{prefix}-outcomes-{suffix}");
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns_name}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {ns_name}"))?;
    let mut nodes = Vec::new();
    let result = async {
        for i in 0..o.nodes {
            nodes.push(
                FakeNode::create(
                    client,
                    &format!("{prefix}-outcomes-{suffix}-{i}"),
                    "amd64",
                    "containerd://2.1.0",
                )
                .await?,
            );
        }
        log(&format!("{} fake nodes", nodes.len()));
        run(client, &ns_name, &nodes, &o).await
    }
    .await;
    // Clean up whatever happened: pods force-deleted (no kubelet confirms).
    let pods = Api::<Pod>::namespaced(client.clone(), &ns_name);
    if let Ok(list) = pods.list_metadata(&ListParams::default()).await {
        let names: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        log(&format!("force-deleting {} pods", names.len()));
        futures::stream::iter(names)
            .map(|name| {
                let pods = pods.clone();
                async move {
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                }
            })
            .buffer_unordered(o.concurrency)
            .collect::<Vec<()>>()
            .await;
    }
    if let Err(e) = namespaces.delete(&ns_name, &DeleteParams::default()).await {
        log(&format!("deleting namespace {ns_name}: {e}"));
    }
    for node in nodes {
        if let Err(e) = node.delete().await {
            log(&format!("deleting a node: {e:#}"));
        }
    }
    result
}

async fn run(
    client: &Client,
    ns: &str,
    nodes: &[FakeNode],
    o: &OutcomesOpts,
) -> Result<(String, Value)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let mut lines = String::new();
    let mut raw = serde_json::Map::new();
    let mut note = |phase: &str, exporter: &Exporter, extra: &[(&str, String)]| -> Result<()> {
        let (rss, hwm) = exporter.memory()?;
        lines.push_str(&format!(
            "outcomes_{phase}_rss_kib={rss}\noutcomes_{phase}_hwm_kib={hwm}\n"
        ));
        let mut entry = serde_json::Map::new();
        entry.insert("rss_kib".into(), json!(rss));
        entry.insert("hwm_kib".into(), json!(hwm));
        for (k, v) in extra {
            lines.push_str(&format!("outcomes_{phase}_{k}={v}\n"));
            entry.insert((*k).into(), json!(v));
        }
        raw.insert(phase.into(), Value::Object(entry));
        log(&format!("{phase}: rss {rss} KiB, hwm {hwm} KiB {extra:?}"));
        Ok(())
    };
    let exporter = Exporter::start(&o.exporter)?;
    exporter
        .wait("ready", Duration::from_secs(60), |s| {
            s.contains_key("kube_prestop_outcomes_tracked_pods")
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    note("idle", &exporter, &[])?;

    let started = Instant::now();
    let names: Vec<String> = (0..o.pods).map(|i| format!("p-{i}")).collect();
    let results: Vec<Result<()>> = futures::stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let pods = pods.clone();
            let node = nodes[i % nodes.len()].name.clone();
            async move {
                pods.create(&PostParams::default(), &pod(name, &node)?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(o.concurrency)
        .collect()
        .await;
    results
        .into_iter()
        .collect::<Result<()>>()
        .context("creating the pods")?;
    let create_s = started.elapsed().as_secs_f64();
    log(&format!("{} pods created in {create_s:.1} s", o.pods));
    // The watch has seen them all once the API server's list shows them;
    // give the events a moment to arrive.
    tokio::time::sleep(Duration::from_secs(10)).await;
    note(
        "created",
        &exporter,
        &[
            ("pods", o.pods.to_string()),
            ("create_s", format!("{create_s:.1}")),
        ],
    )?;

    let started = Instant::now();
    let list = pods.list_metadata(&ListParams::default()).await?;
    let uids: Vec<(String, String)> = list
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect();
    let runs = o.runs;
    let results: Vec<Result<()>> = futures::stream::iter(uids)
        .map(|(name, uid)| {
            let pods = pods.clone();
            async move {
                pods.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(terminated_status(&uid, runs)),
                )
                .await
                .with_context(|| format!("patching the status of {name}"))?;
                Ok(())
            }
        })
        .buffer_unordered(o.concurrency)
        .collect()
        .await;
    results.into_iter().collect::<Result<()>>()?;
    let want = f64::from(o.pods) * f64::from(o.runs);
    let waited = exporter
        .wait("counting", Duration::from_secs(600), |s| {
            counted(s, ns) >= want
        })
        .await?;
    let count_s = started.elapsed().as_secs_f64();
    let samples = exporter.scrape().await?;
    let tracked = samples
        .get("kube_prestop_outcomes_tracked_pods")
        .copied()
        .unwrap_or(0.0);
    note(
        "counted",
        &exporter,
        &[
            ("runs", format!("{}", counted(&samples, ns))),
            ("tracked_pods", format!("{tracked}")),
            ("count_s", format!("{count_s:.1}")),
            (
                "count_after_patches_s",
                format!("{:.1}", waited.as_secs_f64()),
            ),
        ],
    )?;
    if counted(&samples, ns) > want {
        bail!(
            "counted {} runs, {want} written: counted twice",
            counted(&samples, ns)
        );
    }
    exporter.stop();

    let started = Instant::now();
    let exporter = Exporter::start(&o.exporter)?;
    exporter
        .wait("recounting", Duration::from_secs(600), |s| {
            counted(s, ns) >= want
        })
        .await?;
    let relist_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    note(
        "restarted",
        &exporter,
        &[("relist_count_s", format!("{relist_s:.1}"))],
    )?;
    exporter.stop();
    Ok((lines, Value::Object(raw)))
}
