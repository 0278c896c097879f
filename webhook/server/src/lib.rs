//! The admission server: HTTPS (`/mutate`, `/livez`, `/readyz`) and a
//! plain-HTTP metrics port (`/metrics`, `/livez`, `/readyz`).
//!
//! Lifecycle: [`Server::bind`] loads the certificate and binds both ports
//! (port 0 picks a free one; [`Server::https_addr`] tells which), then
//! [`Server::run`] serves until its shutdown future resolves: readiness
//! fails at once, connections are still accepted for the drain delay (so
//! the endpoint is removed before the listener goes away) and every HTTP/1.1
//! answer says `Connection: close` (so clients that pool connections, as the
//! API server does, stop reusing ours), then in-flight requests finish and
//! `run` returns.

pub mod admission;
pub mod body;
mod budget;
pub mod error;
mod health;
mod listener;
mod routes;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub use admission::FailureMode;
pub use error::HttpError;
pub use health::Health;
pub use listener::{
    ConnLimits, DEFAULT_WRITE_TIMEOUT, HTTP1_MAX_BUF_BYTES, HTTP2_MAX_CONCURRENT_STREAMS,
    HTTP2_MAX_HEADER_LIST_SIZE, HTTP2_WINDOW_BYTES, MAX_WAITING_CONNECTIONS,
};

use crate::tls::{ReloadEvent, ReloadingCertResolver, TlsLoadError};
use body::BodyBudget;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_engine::EngineConfig;
use kube_prestop_metrics::Metrics;
use routes::AppState;

/// Largest request body accepted on `/mutate`: 4 MiB.
///
/// The webhook is called for pod CREATEs only (the chart's rules), so a
/// review carries one pod and no `oldObject`. The API server refuses
/// request bodies over 3 MiB (`MaxRequestBodyBytes`, default 3 × 1024 ×
/// 1024, `k8s.io/apiserver/pkg/server/config.go`), and the pod it sends on
/// is that request decoded, defaulted and re-encoded as JSON; etcd stores
/// at most 1.5 MiB per object (its `--max-request-bytes` default), which
/// the pod's protobuf must fit. 4 MiB covers a 3 MiB request's pod with its
/// defaults and the review's envelope; anything larger could never be
/// stored, or is not from an API server.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Default idle timeout of a connection (no request in flight): 120 s,
/// longer than the API server's own, so that the client closes an idle
/// connection first. Its webhook client (client-go's transport, through
/// `k8s.io/apimachinery/pkg/util/net.SetOldTransportDefaults`, v0.37.2)
/// keeps an idle connection for `http.DefaultTransport`'s
/// `IdleConnTimeout`, 90 s, and speaks HTTP/1.1 to webhooks
/// (`k8s.io/apiserver/pkg/util/webhook/client.go`, v0.37.2). A review it
/// writes onto a connection the server is closing is lost: Go retries a
/// POST only when nothing of it was written (`persistConn.shouldRetryRequest`,
/// `net/http`, Go 1.26), and one admission of 6,000 failed open that way
/// when idle HTTP/1.1 connections were closed after 10 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Connections served at once on the metrics port.
pub const METRICS_MAX_CONNECTIONS: usize = 32;

/// Default budget of request body bytes held at once across `/mutate`
/// requests: 16 MiB. A review costs a few times its body in memory until
/// answered (the parsed pod, the patch), so this keeps the bodies' share
/// well under the chart's 128 MiB memory limit: three maximum-size bodies
/// at once, or thousands of ordinary ones.
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Default memory budget of the reviews being parsed at once: 64 MiB,
/// estimated from their JSON before parsing ([`admission::ParseBudget`];
/// a pod's k8s-openapi structs cost up to about 200 times its JSON). With
/// the body budget and the process's own 16 to 18 MiB this keeps the
/// webhook under the chart's 128 MiB memory limit; one review may take
/// half of it, 32 MiB, about 5,000 volumes or 7,000 containers.
pub const DEFAULT_MAX_INFLIGHT_PARSED_BYTES: usize = 64 * 1024 * 1024;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// HTTPS listen address (port 0: any free port).
    pub https_addr: SocketAddr,
    /// Plain-HTTP metrics listen address (port 0: any free port).
    pub metrics_addr: SocketAddr,
    /// PEM certificate chain, leaf first.
    pub tls_cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub tls_key_file: PathBuf,
    /// How often the certificate files are checked for changes.
    pub cert_reload_interval: Duration,
    /// Time between failing readiness and closing the listener on shutdown.
    pub drain_delay: Duration,
    /// Longest wait for in-flight requests after the listener closes.
    pub shutdown_grace: Duration,
    /// Fail open (default) or closed on engine errors.
    pub failure_mode: FailureMode,
    /// Engine configuration.
    pub engine: EngineConfig,
    /// Largest `/mutate` request body, bytes (larger: HTTP 413).
    pub max_body_bytes: usize,
    /// Time allowed to receive a whole request body.
    pub body_read_timeout: Duration,
    /// Request body bytes held at once across `/mutate` requests (more:
    /// HTTP 503; see [`body::BodyBudget`]).
    pub max_inflight_body_bytes: usize,
    /// Estimated memory of the reviews being parsed at once (more: HTTP
    /// 503; a pod estimated over half of it is not parsed, see
    /// [`admission::ParseBudget`]).
    pub max_inflight_parsed_bytes: usize,
    /// Per-connection limits.
    pub conn_limits: ConnLimits,
    /// PEM CA certificates that a `/mutate` client's certificate must
    /// chain to (`--client-ca-file`): the CA of the client certificate the
    /// API server presents per its `AdmissionConfiguration`
    /// (`kubeConfigFile`). `None`: no client certificate asked for (any
    /// client that reaches the port may post a review).
    pub client_ca_file: Option<PathBuf>,
}

impl ServerConfig {
    /// Defaults for everything but the addresses and certificate files.
    pub fn new(
        https_addr: SocketAddr,
        metrics_addr: SocketAddr,
        tls_cert_file: PathBuf,
        tls_key_file: PathBuf,
    ) -> Self {
        Self {
            https_addr,
            metrics_addr,
            tls_cert_file,
            tls_key_file,
            cert_reload_interval: Duration::from_secs(5),
            drain_delay: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(20),
            failure_mode: FailureMode::Allow,
            engine: EngineConfig::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: Duration::from_secs(10),
            max_inflight_body_bytes: DEFAULT_MAX_INFLIGHT_BODY_BYTES,
            max_inflight_parsed_bytes: DEFAULT_MAX_INFLIGHT_PARSED_BYTES,
            conn_limits: default_conn_limits(),
            client_ca_file: None,
        }
    }
}

/// The HTTPS port's default per-connection limits (`serve`'s flags change
/// some of them): 1,024 connections, 10 s for a TLS handshake and for a
/// request's headers, HTTP/2 keep-alive pings every 30 s, idle connections
/// closed after [`DEFAULT_IDLE_TIMEOUT`], [`DEFAULT_WRITE_TIMEOUT`] to send
/// a response.
pub fn default_conn_limits() -> ConnLimits {
    ConnLimits {
        max_connections: 1024,
        handshake_timeout: Duration::from_secs(10),
        header_read_timeout: Duration::from_secs(10),
        http2_keep_alive: Duration::from_secs(30),
        idle_timeout: DEFAULT_IDLE_TIMEOUT,
        min_idle_before_eviction: listener::DEFAULT_MIN_IDLE_BEFORE_EVICTION,
        min_arrival_before_eviction: listener::DEFAULT_MIN_ARRIVAL_BEFORE_EVICTION,
        write_timeout: listener::DEFAULT_WRITE_TIMEOUT,
    }
}

/// Serves `router` on `listener` as a metrics port: plain HTTP/1.1, until
/// `stop` resolves (then in-flight requests get 5 s), with `limits` but at
/// most [`METRICS_MAX_CONNECTIONS`] connections at once (a scraper needs
/// one or two) and a request head of at most [`HTTP1_MAX_BUF_BYTES`]
/// (longer: 431). The webhook's own metrics port passes its HTTPS port's
/// limits (the same header timeout); the outcome exporter's port
/// (`kube-prestop-webhook outcomes`) passes [`default_conn_limits`]. Anyone
/// who reaches either may call it.
pub async fn serve_metrics(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
) {
    let limits = ConnLimits {
        max_connections: METRICS_MAX_CONNECTIONS,
        ..limits
    };
    listener::serve_plain(listener, router, limits, stop, METRICS_SHUTDOWN_GRACE).await;
}

/// How long in-flight metrics requests may take once a metrics port's
/// `stop` has resolved.
const METRICS_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The serving certificate or key could not be loaded.
    #[error("serving certificate: {0}")]
    Tls(#[from] TlsLoadError),
    /// The client CA file (`--client-ca-file`) could not be loaded.
    #[error("client CA (--client-ca-file): {0}")]
    ClientCa(TlsLoadError),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    TlsConfig(#[from] rustls::Error),
    /// A listen address could not be bound. The message names the
    /// listener and the address; the I/O error is its source only, so a
    /// chain printed whole (`{:#}`) says it once.
    #[error("cannot listen on {addr} ({listener})")]
    Bind {
        /// Which listener: `HTTPS port (--listen-addr)` or `metrics port
        /// (--metrics-addr)`.
        listener: &'static str,
        /// The address.
        addr: SocketAddr,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A bound, not yet running server.
pub struct Server {
    https: TcpListener,
    metrics_listener: TcpListener,
    https_addr: SocketAddr,
    metrics_addr: SocketAddr,
    resolver: Arc<ReloadingCertResolver>,
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
    config: ServerConfig,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("https_addr", &self.https_addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

/// Bind `addr` for `listener` (named in the error).
async fn bind(
    listener: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ServerError> {
    let to_err = |source| ServerError::Bind {
        listener,
        addr,
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(to_err)?;
    let local = listener.local_addr().map_err(to_err)?;
    Ok((listener, local))
}

impl Server {
    /// Load the certificate and bind both ports. Must run inside a tokio
    /// runtime.
    pub async fn bind(config: ServerConfig, cache: ClusterCache) -> Result<Self, ServerError> {
        Self::bind_with_metrics(config, cache, Metrics::new()).await
    }

    /// [`Self::bind`], recording into `metrics` (shared with what else the
    /// process runs, e.g. the sidecar-binary ConfigMaps).
    pub async fn bind_with_metrics(
        config: ServerConfig,
        cache: ClusterCache,
        metrics: Metrics,
    ) -> Result<Self, ServerError> {
        let resolver = Arc::new(ReloadingCertResolver::new(
            config.tls_cert_file.clone(),
            config.tls_key_file.clone(),
        )?);
        let client_roots = config
            .client_ca_file
            .as_deref()
            .map(crate::tls::load_client_roots)
            .transpose()
            .map_err(ServerError::ClientCa)?;
        let tls = crate::tls::server_config(resolver.clone(), client_roots)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        metrics.set_certificate_expiry(resolver.not_after_unix());
        let (https, https_addr) = bind("HTTPS port, --listen-addr", config.https_addr).await?;
        let (metrics_listener, metrics_addr) =
            bind("metrics port, --metrics-addr", config.metrics_addr).await?;
        let state = Arc::new(AppState {
            health: Arc::new(Health::new(cache.clone())),
            cache,
            engine: config.engine.clone(),
            failure_mode: config.failure_mode,
            metrics,
            max_body_bytes: config.max_body_bytes,
            body_read_timeout: config.body_read_timeout,
            max_inflight_body_bytes: config.max_inflight_body_bytes,
            body_budget: BodyBudget::new(config.max_inflight_body_bytes),
            parse_budget: admission::ParseBudget::new(config.max_inflight_parsed_bytes),
            require_client_cert: config.client_ca_file.is_some(),
        });
        Ok(Self {
            https,
            metrics_listener,
            https_addr,
            metrics_addr,
            resolver,
            acceptor,
            state,
            config,
        })
    }

    /// The bound HTTPS address.
    pub fn https_addr(&self) -> SocketAddr {
        self.https_addr
    }

    /// The bound metrics address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Readiness state (tests and embedders may watch it).
    pub fn health(&self) -> Arc<Health> {
        self.state.health.clone()
    }

    /// Serve until `shutdown` resolves, then drain and return.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let Self {
            https,
            metrics_listener,
            https_addr,
            metrics_addr,
            resolver,
            acceptor,
            state,
            config,
        } = self;
        tracing::info!(%https_addr, %metrics_addr, "serving");

        let metrics = state.metrics.clone();
        let reload =
            tokio::spawn(
                resolver.watch(config.cert_reload_interval, move |event| match event {
                    ReloadEvent::Reloaded { not_after_unix } => {
                        metrics.set_certificate_expiry(not_after_unix);
                        metrics.record_certificate_reload(true);
                    }
                    ReloadEvent::Failed => metrics.record_certificate_reload(false),
                }),
            );

        let (metrics_stop_tx, metrics_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let metrics_app = routes::metrics_router(state.clone());
        // The metrics port is plain HTTP and reachable like the HTTPS one:
        // the same limits, and a small connection limit of its own.
        let metrics_task = tokio::spawn(serve_metrics(
            metrics_listener,
            metrics_app,
            config.conn_limits,
            async {
                let _ = metrics_stop_rx.await;
            },
        ));

        let health = state.health.clone();
        let drain_delay = config.drain_delay;
        let stop = async move {
            shutdown.await;
            health.start_draining();
            tracing::info!(
                ?drain_delay,
                "shutdown requested: readiness now fails; draining"
            );
            tokio::time::sleep(drain_delay).await;
        };
        listener::serve_tls(
            https,
            acceptor,
            routes::https_router(state),
            config.conn_limits,
            stop,
            config.shutdown_grace,
        )
        .await;

        reload.abort();
        let _ = metrics_stop_tx.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), metrics_task).await;
        tracing::info!("server stopped");
    }
}
