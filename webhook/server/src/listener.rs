//! The accept loops of both ports, one loop with two ways to serve a
//! connection: connection limit, idle timeout and graceful shutdown for
//! both; on the HTTPS port the TLS handshake timeout and HTTP/1.1 and HTTP/2
//! on one port (ALPN); on the metrics port plain HTTP/1.1.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::tls::ClientCert;

/// Stop signal of an accept loop, seen by each of its connections.
type Stop = watch::Receiver<bool>;

/// Limits applied to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections served at once; further clients wait in the accept queue.
    pub max_connections: usize,
    /// Time allowed for the TLS handshake.
    pub handshake_timeout: Duration,
    /// HTTP/1.1: time allowed to receive a request's headers.
    pub header_read_timeout: Duration,
    /// HTTP/2: keep-alive ping interval (a dead peer is dropped after one
    /// unanswered ping of the same length).
    pub http2_keep_alive: Duration,
    /// A connection with no request in flight for this long is closed
    /// gracefully (HTTP/2 `GOAWAY`, or HTTP/1.1 closed after its last
    /// response): an idle client, however well it answers keep-alive pings,
    /// does not hold a connection slot for ever. The API server opens a new
    /// connection on its next call.
    pub idle_timeout: Duration,
}

/// Requests in flight on one connection, and when the last one ended.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        })
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// When the connection would become idle for `timeout` if nothing
    /// happens: `None` while a request is in flight.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        self.last.lock().ok().map(|last| *last + timeout)
    }
}

/// Counts a request in flight on its connection's [`Activity`] from its
/// start until its response is produced.
async fn track(activity: Arc<Activity>, req: Request, next: Next) -> axum::response::Response {
    activity.in_flight.fetch_add(1, Ordering::AcqRel);
    activity.touch();
    let response = next.run(req).await;
    activity.touch();
    activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    response
}

/// Serves one connection's requests with `router` until it ends: HTTP/2 when
/// `h2` (from ALPN), else HTTP/1.1 with `limits.header_read_timeout`. Closes
/// it gracefully when `stop` fires or when it has been idle (no request in
/// flight) for `limits.idle_timeout`.
async fn serve_connection<I>(
    io: I,
    h2: bool,
    router: Router,
    limits: ConnLimits,
    mut stop: Stop,
    peer: SocketAddr,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive)
        .keep_alive_timeout(limits.http2_keep_alive);
    // The protocol comes from ALPN, never from sniffing the first bytes:
    // the auto builder's sniff has no timer, so a client that sent nothing
    // would hold a connection slot forever. HTTP/1 then bounds the wait for
    // the first request with header_read_timeout.
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let activity = Activity::new();
    let tracked = activity.clone();
    let router = router.layer(middleware::from_fn(move |req: Request, next: Next| {
        track(tracked.clone(), req, next)
    }));
    let conn = builder.serve_connection(io, TowerToHyperService::new(router));
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        // While a request is in flight, look again after a full timeout.
        let idle_at = activity
            .idle_at(limits.idle_timeout)
            .unwrap_or_else(|| Instant::now() + limits.idle_timeout);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep_until(idle_at), if !closing => {
                if activity.idle_at(limits.idle_timeout).is_some_and(|at| at <= Instant::now()) {
                    tracing::debug!(%peer, idle_timeout = ?limits.idle_timeout, "closing an idle connection");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Accept and serve plain-HTTP/1.1 connections (the metrics port) until
/// `stop` resolves, with the same limits as the HTTPS port: at most
/// `limits.max_connections` at once (further clients wait in the accept
/// queue) and `limits.header_read_timeout` per request's headers. Its
/// routes read no request body.
pub async fn serve_plain(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    grace: Duration,
) {
    accept_loop(
        "metrics",
        listener,
        limits,
        stop,
        grace,
        move |tcp, peer, stop| {
            let router = router.clone();
            async move {
                serve_connection(TokioIo::new(tcp), false, router, limits, stop, peer).await;
            }
        },
    )
    .await;
}

/// Accept and serve connections until `stop` resolves, then let in-flight
/// requests finish for at most `grace`.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    grace: Duration,
) {
    accept_loop(
        "https",
        listener,
        limits,
        stop,
        grace,
        move |tcp, peer, stop| {
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let router = router.clone();
            async move {
                let handshake = acceptor.accept(tcp);
                let tls = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let session = tls.get_ref().1;
                let h2 = session.alpn_protocol() == Some(b"h2".as_slice());
                // rustls verified any certificate the client presented.
                let verified = session.peer_certificates().is_some_and(|c| !c.is_empty());
                let router = router.layer(axum::Extension(ClientCert { verified }));
                serve_connection(TokioIo::new(tls), h2, router, limits, stop, peer).await;
            }
        },
    )
    .await;
}

/// The accept loop both ports share: takes a connection slot (at most
/// `limits.max_connections`; further clients wait in the accept queue),
/// accepts, and spawns `serve` on the connection holding the slot, until
/// `stop` resolves; then tells every connection to close gracefully and
/// waits for all of them (every slot back) for at most `grace`. `port`
/// names the listener in its log lines.
async fn accept_loop<F, Fut>(
    port: &'static str,
    listener: TcpListener,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    grace: Duration,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr, Stop) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = limits.max_connections.max(1);
    let (stop_tx, stop_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(slots));
    tokio::pin!(stop);
    loop {
        let next = async {
            let permit = permits.clone().acquire_owned().await;
            let accepted = listener.accept().await;
            (permit, accepted)
        };
        let (permit, accepted) = tokio::select! {
            () = &mut stop => break,
            next = next => next,
        };
        let Ok(permit) = permit else { break };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(port, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let connection = serve(tcp, peer, stop_rx.clone());
        tokio::spawn(async move {
            let _permit = permit;
            connection.await;
        });
    }
    drop(listener);
    tracing::info!(
        port,
        "stopped accepting connections; waiting for in-flight requests"
    );
    let _ = stop_tx.send(true);
    let all_closed = permits.acquire_many(u32::try_from(slots).unwrap_or(u32::MAX));
    if tokio::time::timeout(grace, all_closed).await.is_err() {
        tracing::warn!(port, ?grace, "in-flight connections did not finish in time");
    }
}
