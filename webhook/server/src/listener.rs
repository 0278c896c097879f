//! The accept loops of both ports, one loop with two ways to serve a
//! connection: connection limit, first-request deadline, idle timeout and
//! graceful shutdown for both; on the HTTPS port the TLS handshake timeout
//! and HTTP/1.1 and HTTP/2 on one port (ALPN); on the metrics port plain
//! HTTP/1.1.
//!
//! hyper bounds the wait for an HTTP/1.1 request's headers itself (the
//! header read timeout, also between keep-alive requests) but has no such
//! timer for HTTP/2: its connection waits for the client's preface for
//! ever, and a graceful shutdown asked for before the preface is deferred
//! until it arrives. So each connection is also watched here, by the
//! requests its service sees: a connection whose first request has not
//! started within the read timeout is dropped, one with no request (or
//! response) in flight for the idle timeout is closed gracefully, and a
//! close that the client does not complete within the read timeout is
//! finished by dropping the connection.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::middleware::{self, Next};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::tls::ClientCert;

/// Stop signal of an accept loop, seen by each of its connections.
type Stop = watch::Receiver<bool>;

/// HTTP/2: streams a client may have open at once on one connection
/// (`SETTINGS_MAX_CONCURRENT_STREAMS`): 100, the smallest value RFC 9113
/// (section 6.5.2) recommends, and what Go's HTTP/2 client (the API
/// server's) assumes before the server's settings arrive. A client that
/// wants more opens another connection, which takes a connection slot.
pub const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 100;

/// HTTP/2: largest header list of one request
/// (`SETTINGS_MAX_HEADER_LIST_SIZE`, decoded size), bytes: 16 KiB. An
/// admission review's headers (content type, accept, user agent, length)
/// take a few hundred bytes.
pub const HTTP2_MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;

/// HTTP/2: flow-control window of a connection and of each of its streams,
/// bytes: 64 KiB, the protocol's own initial window (RFC 9113 section
/// 6.9.2, 65,535). hyper's server default is 1 MiB each, which lets every
/// connection make the server buffer 1 MiB of request body before a handler
/// reads it and before the in-flight body budget
/// ([`crate::DEFAULT_MAX_INFLIGHT_BODY_BYTES`]) is charged: with 1,024
/// connections, 1 GiB. At 64 KiB the worst case is 64 MiB. Only HTTP/2
/// clients are slowed (a window update per 64 KiB); the API server calls a
/// service webhook over HTTP/1.1 (`NextProtos = ["http/1.1"]`,
/// `k8s.io/apiserver/pkg/util/webhook/client.go`, v0.37.2 = Kubernetes v1.37.2).
pub const HTTP2_WINDOW_BYTES: u32 = 64 * 1024;

/// Limits applied to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections served at once; further clients wait in the accept queue.
    pub max_connections: usize,
    /// Time allowed for the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time allowed to receive a request's headers (HTTP/1.1, hyper's
    /// header read timeout, also between keep-alive requests) and, on either
    /// protocol, for the first request to start after the connection is
    /// accepted (TLS handshake done): an HTTP/2 client that sends no preface
    /// or no request in that time is disconnected. Also the time a client
    /// gets to complete a graceful close (HTTP/2 `GOAWAY`) before the
    /// connection is dropped.
    pub header_read_timeout: Duration,
    /// HTTP/2: keep-alive ping interval (a dead peer is dropped after one
    /// unanswered ping of the same length).
    pub http2_keep_alive: Duration,
    /// A connection with no request or response in flight for this long is
    /// closed gracefully (HTTP/2 `GOAWAY`, or HTTP/1.1 closed after its last
    /// response): an idle client, however well it answers keep-alive pings,
    /// does not hold a connection slot for ever. The API server opens a new
    /// connection on its next call.
    pub idle_timeout: Duration,
}

/// Requests in flight on one connection, whether any has started, and when
/// the last one ended; `changed` wakes the connection's watch when a request
/// starts or ends.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    started: AtomicBool,
    last: Mutex<Instant>,
    changed: Notify,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            last: Mutex::new(Instant::now()),
            changed: Notify::new(),
        })
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// Whether a request has reached the service on this connection.
    fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Whether a request or its response is in flight.
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// When the connection would become idle for `timeout` if nothing
    /// happens: `None` while a request is in flight.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.busy() {
            return None;
        }
        self.last.lock().ok().map(|last| *last + timeout)
    }
}

/// One request in flight on its connection's [`Activity`], from the moment
/// the service sees it until it is dropped: with the response body once
/// that is sent, or with the handler if the client cancels the request
/// (an HTTP/2 `RST_STREAM` drops the handler's future mid-way).
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: Arc<Activity>) -> Self {
        activity.started.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.touch();
        activity.changed.notify_one();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted as in flight until it
/// has been sent (or dropped).
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts a request in flight on its connection's [`Activity`] from its
/// start until its response body is sent or the request is cancelled.
async fn track(activity: Arc<Activity>, req: Request, next: Next) -> axum::response::Response {
    let in_flight = InFlight::enter(activity);
    let response = next.run(req).await;
    response.map(|inner| {
        Body::new(TrackedBody {
            inner,
            _in_flight: in_flight,
        })
    })
}

/// Serves one connection's requests with `router` until it ends: HTTP/2 when
/// `h2` (from ALPN), else HTTP/1.1 with `limits.header_read_timeout`.
/// Drops it if no request started within `limits.header_read_timeout`;
/// closes it gracefully when `stop` fires or when it has been idle (no
/// request in flight) for `limits.idle_timeout`, and drops it if the close
/// is not done `limits.header_read_timeout` later with nothing in flight.
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
    let accepted = Instant::now();
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
        .keep_alive_timeout(limits.http2_keep_alive)
        .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST_SIZE)
        .adaptive_window(false)
        .initial_connection_window_size(HTTP2_WINDOW_BYTES)
        .initial_stream_window_size(HTTP2_WINDOW_BYTES);
    // The protocol comes from ALPN, never from sniffing the first bytes:
    // the auto builder's sniff has no timer. HTTP/1 then bounds the wait
    // for each request's headers with header_read_timeout; HTTP/2 has no
    // such timer (not even for the preface), so the loop below bounds the
    // wait for its first request.
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
    // Set once a graceful close has begun: when to drop the connection if
    // it has not ended by then.
    let mut close_by: Option<Instant> = None;
    let first_request_by = accepted + limits.header_read_timeout;
    loop {
        // While a request is in flight, its end wakes the loop (`changed`).
        let idle_at = activity
            .idle_at(limits.idle_timeout)
            .unwrap_or_else(|| Instant::now() + limits.idle_timeout);
        let deadline = match close_by {
            Some(at) => at,
            None if !activity.started() => idle_at.min(first_request_by),
            None => idle_at,
        };
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = activity.changed.notified() => {}
            _ = stop.changed(), if close_by.is_none() => {
                conn.as_mut().graceful_shutdown();
                close_by = Some(Instant::now() + limits.header_read_timeout);
            }
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if close_by.is_some() {
                    if activity.busy() {
                        // In-flight requests finish (each bounded by the
                        // body read timeout; the accept loop's grace bounds
                        // a shutdown).
                        close_by = Some(now + limits.header_read_timeout);
                        continue;
                    }
                    tracing::debug!(%peer, "the client did not complete the close in time; dropping the connection");
                    return;
                }
                if !activity.started() && first_request_by <= now {
                    // HTTP/2 cannot close gracefully before the client's
                    // preface (hyper defers the GOAWAY until it arrives).
                    tracing::debug!(%peer, timeout = ?limits.header_read_timeout, "no request within the read timeout; dropping the connection");
                    return;
                }
                if activity.idle_at(limits.idle_timeout).is_some_and(|at| at <= now) {
                    tracing::debug!(%peer, idle_timeout = ?limits.idle_timeout, "closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    close_by = Some(now + limits.header_read_timeout);
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
