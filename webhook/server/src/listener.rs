//! The accept loops of both ports, one loop with two ways to serve a
//! connection: connection limit and graceful shutdown for both; on the
//! HTTPS port the TLS handshake timeout and HTTP/1.1 and HTTP/2 on one port
//! (ALPN); on the metrics port plain HTTP/1.1.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

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
}

/// Serves one connection's requests with `router` until it ends: HTTP/2 when
/// `h2` (from ALPN), else HTTP/1.1 with `limits.header_read_timeout`.
async fn serve_connection<I>(
    io: I,
    h2: bool,
    router: Router,
    limits: ConnLimits,
    watcher: Watcher,
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
    let service = TowerToHyperService::new(router);
    let conn = builder.serve_connection(io, service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
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
        move |tcp, peer, watcher| {
            let router = router.clone();
            async move {
                serve_connection(TokioIo::new(tcp), false, router, limits, watcher, peer).await;
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
        move |tcp, peer, watcher| {
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
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                serve_connection(TokioIo::new(tls), h2, router, limits, watcher, peer).await;
            }
        },
    )
    .await;
}

/// The accept loop both ports share: takes a connection slot (at most
/// `limits.max_connections`; further clients wait in the accept queue),
/// accepts, and spawns `serve` on the connection holding the slot, until
/// `stop` resolves; then lets in-flight requests finish for at most `grace`.
/// `port` names the listener in its log lines.
async fn accept_loop<F, Fut>(
    port: &'static str,
    listener: TcpListener,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    grace: Duration,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr, Watcher) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
        let connection = serve(tcp, peer, graceful.watcher());
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
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(port, ?grace, "in-flight connections did not finish in time");
    }
}
