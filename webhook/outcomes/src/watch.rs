//! The exporter's loop: one cluster-wide watch of the injected pods
//! (kube-runtime's `watcher`, label selector `kube-prestop.io/injected=true`,
//! its default backoff on errors) folded into a [`Tracker`], and a
//! plain-HTTP server for `/metrics`, `/livez` and `/readyz` (ready once the
//! first list is done).
//!
//! No reflector store: each pod the watch delivers is read and dropped;
//! only the tracker's keys stay (see [`crate::tracker`]). The watcher's
//! initial list and re-lists are paged, [`LIST_PAGE_SIZE`] pods a page, so
//! a page is the most held at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube_prestop_engine::annotations::{INJECTED_LABEL, INJECTED_LABEL_VALUE};

use crate::metrics::OutcomeMetrics;
use crate::tracker::{Count, Tracker};

/// Where the exporter serves its metrics.
#[derive(Debug, Clone)]
pub struct OutcomesConfig {
    /// Plain-HTTP listen address of `/metrics`, `/livez`, `/readyz` (port
    /// 0: any free port).
    pub metrics_addr: SocketAddr,
}

/// Pods per page of the watch's list and re-lists: 10.
///
/// Any pod author can label a pod as injected, and a pod may be as large
/// as etcd stores (1.5 MiB by default, its `--max-request-bytes`): kube's
/// client reads a whole page and then builds every pod of it, about 2 to 3
/// times the page's JSON at its peak, so kube-runtime's default of 500 a
/// page (`watcher::Config::default`, kube-runtime 5.0) would let 40 or so such pods,
/// pending on no node, take the exporter past the chart's 128 MiB limit at
/// every start. Ten pods are at most 15 MiB of JSON. The cost is time: a
/// first list of 10,000 pods took 48.5 s, against 2.1 s at 500 a page
/// (docs/figures.md, "The outcome exporter at 10,000 pods"). The sidecar-binary
/// ConfigMaps' watch pages the same way (`WATCH_PAGE_SIZE` in the cluster
/// crate).
pub const LIST_PAGE_SIZE: u32 = 10;

/// The watch's label selector: the label the engine puts on every injected
/// pod.
pub fn label_selector() -> String {
    format!("{INJECTED_LABEL}={INJECTED_LABEL_VALUE}")
}

#[derive(Clone)]
struct Shared {
    metrics: OutcomeMetrics,
    ready: Arc<AtomicBool>,
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    match s.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the first list of pods is not done",
        )
    }
}

/// Serves the metrics on `config.metrics_addr` and watches the injected
/// pods through `client` until `serve` returns. `on_listening` is called
/// with the bound address; `serve` gets the bound listener and the router
/// of `/metrics`, `/livez` and `/readyz`, serves them with its own limits
/// (the binary passes the webhook's metrics-port server,
/// `kube_prestop_server::serve_metrics`: anyone who reaches the port may
/// call it) and returns on shutdown.
///
/// Errors: the address cannot be bound. Watch errors are retried (logged
/// and counted), never returned.
pub async fn run<F>(
    client: kube::Client,
    config: OutcomesConfig,
    on_listening: impl FnOnce(SocketAddr),
    serve: impl FnOnce(tokio::net::TcpListener, Router) -> F,
) -> std::io::Result<()>
where
    F: Future<Output = ()>,
{
    let shared = Shared {
        metrics: OutcomeMetrics::new(),
        ready: Arc::new(AtomicBool::new(false)),
    };
    let listener = tokio::net::TcpListener::bind(config.metrics_addr).await?;
    on_listening(listener.local_addr()?);
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(shared.clone());
    let api: Api<Pod> = Api::all(client);
    tokio::select! {
        () = serve(listener, app) => Ok(()),
        () = watch_pods(api, shared) => Ok(()),
    }
}

/// Folds the watch into the tracker and the counters (never returns: the
/// watcher retries with backoff).
async fn watch_pods(api: Api<Pod>, shared: Shared) {
    let selector = label_selector();
    tracing::info!(selector, "watching injected pods");
    let config = watcher::Config::default()
        .labels(&selector)
        .page_size(LIST_PAGE_SIZE);
    let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
    let mut tracker = Tracker::new();
    let record = |counts: Vec<Count>| {
        for c in &counts {
            shared.metrics.record(c);
        }
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => tracker.begin_relist(),
            Ok(watcher::Event::InitApply(pod) | watcher::Event::Apply(pod)) => {
                record(tracker.observe(&pod));
            }
            Ok(watcher::Event::InitDone) => {
                let forgotten = tracker.end_relist();
                shared.ready.store(true, Ordering::Relaxed);
                tracing::info!(
                    tracked_pods = tracker.tracked_pods(),
                    tracked_keys = tracker.tracked_keys(),
                    forgotten,
                    "pods listed"
                );
            }
            Ok(watcher::Event::Delete(pod)) => {
                // Its last state may carry messages not seen yet.
                record(tracker.observe(&pod));
                tracker.forget(&pod);
            }
            Err(e) => {
                shared.metrics.record_watch_error();
                tracing::warn!(error = %e, "pod watch failed; retrying");
            }
        }
        shared.metrics.set_tracked_pods(tracker.tracked_pods());
    }
}
