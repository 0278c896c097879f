//! Connection slots are shared fairly by peer address: with every slot held
//! by one peer, a client from another peer gets the slot of the holder's
//! longest-idle connection (closed gracefully); a connection with a request
//! in flight is not closed for it, nor one whose request has started
//! arriving, within `min_arrival_before_eviction` (60 s here; a request
//! stalled past it is, see `http_stalled_arrival.rs`); one that has not started its first request is dropped for it
//! as an idle one would be closed; peers holding equal shares keep them.
//!
//! Distinct peers on loopback: Linux routes all of 127.0.0.0/8 to `lo`, so
//! a client socket bound to 127.0.0.2 and one bound to 127.0.0.3 reach the
//! server (on 127.0.0.1) from different addresses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_alpn;
mod http_common;

use std::time::Duration;

use http_common::{TestServer, assert_review_echo, job_pod, read_head, read_response, review};
use kube_prestop_server::{MAX_WAITING_CONNECTIONS, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

const A: &str = "127.0.0.2";
const B: &str = "127.0.0.3";
const C: &str = "127.0.0.4";

/// How soon a newcomer must be answered when a slot can be freed for it:
/// well below the read timeout (60 s) and the idle timeout (300 s) of these
/// servers, so only an eviction can free one in time.
const BOUND: Duration = Duration::from_secs(5);

/// How long a client that must wait is watched not being answered.
const HOLD: Duration = Duration::from_millis(1500);

/// The longest wait for what should happen at once: generous, for a loaded
/// test machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// Four slots; no connection closed by a timeout while a test runs, and a
/// request arriving is not evictable while a test runs (60 s; the 1 s
/// default is tested in `http_stalled_arrival.rs`).
fn four_slots(c: &mut ServerConfig) {
    c.conn_limits.max_connections = 4;
    c.conn_limits.min_arrival_before_eviction = Duration::from_secs(60);
    c.conn_limits.idle_timeout = Duration::from_secs(300);
    c.conn_limits.header_read_timeout = Duration::from_secs(60);
    c.conn_limits.http2_keep_alive = Duration::from_secs(300);
    c.conn_limits.min_idle_before_eviction = Duration::ZERO;
    c.body_read_timeout = Duration::from_secs(60);
}

/// A TCP connection to the HTTPS port from `local` (any port).
async fn tcp_from(server: &TestServer, local: &str) -> TcpStream {
    http_alpn::tcp_from(server.https, local).await
}

/// The TLS handshake (ALPN `http/1.1`) on `tcp`: it completes only once the
/// server has given the connection a slot; an error if the server drops the
/// connection first.
async fn try_handshake(ca_pem: &str, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
    http_alpn::try_tls_over(ca_pem, tcp, b"http/1.1").await
}

/// [`try_handshake`], which must succeed.
async fn handshake(ca_pem: &str, tcp: TcpStream) -> TlsStream<TcpStream> {
    try_handshake(ca_pem, tcp).await.unwrap()
}

/// An HTTP/1.1 keep-alive connection from `local`, TLS done.
async fn connect_from(server: &TestServer, local: &str) -> TlsStream<TcpStream> {
    handshake(&server.pki.ca_pem(), tcp_from(server, local).await).await
}

/// `GET /livez` on a keep-alive connection; the status, or `None` if the
/// connection is closed.
async fn livez(tls: &mut TlsStream<TcpStream>) -> Option<u16> {
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    tls.flush().await.ok()?;
    tokio::time::timeout(PATIENCE, read_response(tls))
        .await
        .expect("an answer or a close in time")
        .map(|(status, _, _)| status)
}

/// Whether the server closes `tls` within `PATIENCE` (reads nothing but
/// the end of the stream).
async fn closed(tls: &mut TlsStream<TcpStream>) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(PATIENCE, tls.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A client from `local` that connects at once and, once it has a slot
/// (TLS done), asks `GET /livez`; the task ends with the status.
async fn newcomer(server: &TestServer, local: &str) -> JoinHandle<Option<u16>> {
    let tcp = tcp_from(server, local).await;
    let ca = server.pki.ca_pem();
    tokio::spawn(async move {
        let mut tls = handshake(&ca, tcp).await;
        livez(&mut tls).await
    })
}

#[tokio::test]
async fn a_peer_holding_every_slot_gives_its_longest_idle_connection_to_another_peer() {
    // Before, B waited in the accept queue until one of A's connections
    // closed by itself: here not for 60 s (the keep-alive read timeout).
    let server = TestServer::start(four_slots).await;
    let mut held = idle_from(&server, A, 4).await;
    let b = newcomer(&server, B).await;
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} while A held every slot idle: {answered:?}"
    );
    // A's longest-idle connection (its first) was closed for B; the
    // others still serve.
    assert!(
        closed(&mut held[0]).await,
        "A's longest-idle connection is still open"
    );
    for tls in &mut held[1..] {
        assert_eq!(livez(tls).await, Some(200));
    }
}

#[tokio::test]
async fn a_connection_idle_for_less_than_the_minimum_is_not_evicted() {
    // A client reusing its pooled connections may have its next request on
    // the wire when the server closes one it sees idle: only connections
    // idle for `min_idle_before_eviction` are closed for a newcomer.
    const MIN_IDLE: Duration = Duration::from_secs(3);
    let server = TestServer::start(|c| {
        four_slots(c);
        c.conn_limits.min_idle_before_eviction = MIN_IDLE;
    })
    .await;
    // Kept open to the end: they hold every slot.
    let _held = idle_from(&server, A, 4).await;
    let last_request = tokio::time::Instant::now();
    let mut b = newcomer(&server, B).await;
    // Not before A's connections have been idle for the minimum...
    let early = tokio::time::timeout(MIN_IDLE - Duration::from_millis(500), &mut b).await;
    assert!(
        early.is_err(),
        "B was served {:?} after A's last request, before the minimum idle time {MIN_IDLE:?}: {early:?}",
        last_request.elapsed()
    );
    // ...but soon after (the waiting newcomer looks again every second).
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} once A's connections were idle for {MIN_IDLE:?}: {answered:?}"
    );
    assert!(
        last_request.elapsed() >= MIN_IDLE,
        "B was answered before the minimum idle time"
    );
}

#[tokio::test]
async fn connections_with_a_request_in_flight_are_never_evicted() {
    let server = TestServer::start(four_slots).await;
    let body = review("uid-busy", "pods", "CREATE", job_pod()).to_string();
    let (_, rest) = body.as_bytes().split_at(body.len() / 2);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(busy_from(&server, A, &body).await);
    }
    let mut b = newcomer(&server, B).await;
    let early = tokio::time::timeout(HOLD, &mut b).await;
    assert!(
        early.is_err(),
        "B was served while every connection of A had a request in flight: {early:?}"
    );
    // A's requests all complete.
    for tls in &mut held {
        tls.write_all(rest).await.unwrap();
        tls.flush().await.unwrap();
        let (status, head, text) = tokio::time::timeout(PATIENCE, read_response(tls))
            .await
            .expect("an answer in time")
            .expect("the connection stays open for the answer");
        assert_eq!(status, 200, "{text}");
        // A connection closed for B while its request was in flight would
        // end after this answer, which would say so.
        assert!(
            !head.contains("connection: close"),
            "a connection with a request in flight was closed for B: {head}"
        );
        assert_review_echo(&serde_json::from_str(&text).unwrap(), "uid-busy");
    }
    // Now idle, one of A's connections is B's.
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} once A's connections were idle: {answered:?}"
    );
}

#[tokio::test]
async fn equal_shares_are_kept_and_a_third_peer_gets_a_share() {
    let server = TestServer::start(four_slots).await;
    let mut a = idle_from(&server, A, 2).await;
    let mut b = idle_from(&server, B, 2).await;
    // B holds 2, as A: a third of B's would hold 3 against A's 2, so it
    // takes nothing and waits.
    let mut b3 = newcomer(&server, B).await;
    let early = tokio::time::timeout(HOLD, &mut b3).await;
    assert!(
        early.is_err(),
        "a third connection of B was served while A and B held 2 each: {early:?}"
    );
    // None of the four was closed: each still serves (a[0] first, so it
    // is the longest idle below), and B's third still waits.
    for tls in a.iter_mut().chain(b.iter_mut()) {
        assert_eq!(livez(tls).await, Some(200));
    }
    assert!(!b3.is_finished(), "B's third connection was answered");
    // A peer holding nothing would hold 1 against 2: it gets the
    // longest-idle connection's slot, a[0], and not B's third, which
    // waited longer.
    let c = newcomer(&server, C).await;
    let answered = tokio::time::timeout(BOUND, c).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "C was not answered within {BOUND:?}: {answered:?}"
    );
    assert!(
        closed(&mut a[0]).await,
        "A's longest-idle connection is still open"
    );
    assert!(!b3.is_finished(), "B's third connection was answered");
    b3.abort();
}

/// A client from `local` that connects at once and starts its TLS
/// handshake, which the server answers only once the connection has a slot;
/// then asks `GET /livez`. The task ends with the status and the connection,
/// still open (its slot held until it is dropped), or `None` if the server
/// dropped the connection first.
async fn waiter(
    server: &TestServer,
    local: &str,
) -> JoinHandle<Option<(u16, TlsStream<TcpStream>)>> {
    let tcp = tcp_from(server, local).await;
    let ca = server.pki.ca_pem();
    tokio::spawn(async move {
        let mut tls = try_handshake(&ca, tcp).await.ok()?;
        let status = livez(&mut tls).await?;
        Some((status, tls))
    })
}

/// `n` connections from `local`, one after the other, each holding a slot
/// idle after one request (the first idle longest).
async fn idle_from(server: &TestServer, local: &str, n: usize) -> Vec<TlsStream<TcpStream>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut tls = connect_from(server, local).await;
        assert_eq!(livez(&mut tls).await, Some(200));
        held.push(tls);
    }
    held
}

/// A connection from `local` holding a slot with a request in flight: one
/// request done ([`idle_from`]), then a review's headers in, the server
/// reading its body (`100 Continue`), half the body sent. The rest of the
/// body follows.
async fn busy_from(server: &TestServer, local: &str, body: &str) -> TlsStream<TcpStream> {
    let (first, _) = body.as_bytes().split_at(body.len() / 2);
    let mut tls = idle_from(server, local, 1).await.remove(0);
    let headers = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(headers.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let (status, _) = tokio::time::timeout(PATIENCE, read_head(&mut tls))
        .await
        .expect("100 Continue in time")
        .expect("the connection is open");
    assert_eq!(status, 100);
    tls.write_all(first).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

#[tokio::test]
async fn a_peer_holding_every_slot_and_every_seat_does_not_keep_another_peer_out() {
    // Before, with every seat taken the accept loop stopped accepting: B
    // (and the extra connection of A below) waited in the kernel's accept
    // queue, behind A's waiting connections, which A re-opens as they time
    // out.
    let server = TestServer::start(four_slots).await;
    let body = review("uid-seats", "pods", "CREATE", job_pod()).to_string();
    // A holds every slot, each connection busy: nothing can be evicted.
    let mut busy = Vec::new();
    for _ in 0..4 {
        busy.push(busy_from(&server, A, &body).await);
    }
    // A takes every seat with connections waiting for a slot.
    let mut waiting = Vec::new();
    for _ in 0..MAX_WAITING_CONNECTIONS {
        waiting.push(waiter(&server, A).await);
    }
    // One more from A is dropped at once (A has every seat and would only
    // have more): accepted, so every one before it is seated.
    let extra = tokio::time::timeout(PATIENCE, waiter(&server, A).await).await;
    assert!(
        matches!(extra, Ok(Ok(None))),
        "A's connection past every seat was not dropped at once: {extra:?}"
    );
    // B is seated: A's oldest waiting connection is dropped for it.
    let mut b = waiter(&server, B).await;
    let oldest = tokio::time::timeout(PATIENCE, &mut waiting[0]).await;
    assert!(
        matches!(oldest, Ok(Ok(None))),
        "A's oldest waiting connection was not dropped for B: {oldest:?}"
    );
    assert!(!b.is_finished(), "B ended while every slot was busy");
    // One of A's requests ends: its connection is idle now, and B, not one
    // of A's waiting connections, gets its slot.
    let (_, rest) = body.as_bytes().split_at(body.len() / 2);
    busy[0].write_all(rest).await.unwrap();
    busy[0].flush().await.unwrap();
    let (status, _, text) = tokio::time::timeout(PATIENCE, read_response(&mut busy[0]))
        .await
        .expect("an answer in time")
        .expect("the connection stays open for the answer");
    assert_eq!(status, 200, "{text}");
    let answered = tokio::time::timeout(BOUND, &mut b).await;
    assert!(
        matches!(answered, Ok(Ok(Some((200, _))))),
        "B was not answered within {BOUND:?} once one of A's slots was idle: {answered:?}"
    );
    for (i, w) in waiting.iter().enumerate().skip(1) {
        assert!(
            !w.is_finished(),
            "A's waiting connection {i} ended before or with B"
        );
    }
    for w in &waiting {
        w.abort();
    }
}

#[tokio::test]
async fn connections_that_never_send_a_request_are_evicted_for_another_peer() {
    // Before, a connection that finished TLS and sent nothing was not idle
    // (no request had started): A held every slot with them, and B waited
    // for the read timeout (here 60 s; 10 s by default, and A re-opened
    // them).
    let server = TestServer::start(four_slots).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(&server, A).await);
    }
    let b = newcomer(&server, B).await;
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} while A held every slot with connections that sent nothing: {answered:?}"
    );
    // The oldest of them was dropped for B.
    assert!(
        closed(&mut held[0]).await,
        "A's oldest connection without a request is still open"
    );
}

#[tokio::test]
async fn connections_whose_first_request_has_started_arriving_are_not_evicted() {
    let server = TestServer::start(four_slots).await;
    // Each of A's connections has received part of its first request's
    // headers, no more: the server has not seen a request yet.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut tls = connect_from(&server, A).await;
        tls.write_all(b"GET /livez HTTP/1.1\r\nHost: loc")
            .await
            .unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    let mut b = newcomer(&server, B).await;
    let early = tokio::time::timeout(HOLD, &mut b).await;
    assert!(
        early.is_err(),
        "B was served while each of A's connections had a request arriving: {early:?}"
    );
    // Each of A's requests completes, on a connection not closed for B.
    for tls in &mut held {
        tls.write_all(b"alhost\r\n\r\n").await.unwrap();
        tls.flush().await.unwrap();
        let (status, head, _) = tokio::time::timeout(PATIENCE, read_response(tls))
            .await
            .expect("an answer in time")
            .expect("the connection stays open for the answer");
        assert_eq!(status, 200);
        assert!(
            !head.contains("connection: close"),
            "a connection with a request arriving was closed for B: {head}"
        );
    }
    // Idle now: one of them is B's.
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} once A's connections were idle: {answered:?}"
    );
}

#[tokio::test]
async fn http2_connections_that_sent_only_their_preface_are_evicted_for_another_peer() {
    // The HTTP/2 preface and settings are not a request: such a connection
    // is dropped for a newcomer as one that sent nothing.
    let server = TestServer::start(four_slots).await;
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut tls = http_alpn::tls_with_alpn(&server, b"h2").await;
        tls.write_all(preface).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    let b = newcomer(&server, B).await;
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some(200)))),
        "B was not answered within {BOUND:?} while HTTP/2 connections that sent only their preface held every slot: {answered:?}"
    );
}

#[tokio::test]
async fn a_freed_slot_goes_to_a_waiting_peer_holding_fewer_before_the_peer_holding_every_slot() {
    // Before, a slot freed by a connection that ended went to the
    // connection waiting longest, whatever its address: B waited behind
    // every connection A kept waiting, and a client opening a new
    // connection per request piled its own up in the seats until it reached
    // A's share of them and was refused (44 of 600 reviews under churn from
    // five addresses).
    let server = TestServer::start(|c| {
        four_slots(c);
        // No eviction: only connections that end free slots here.
        c.conn_limits.min_idle_before_eviction = Duration::from_secs(300);
    })
    .await;
    let body = review("uid-fifo", "pods", "CREATE", job_pod()).to_string();
    let mut busy = Vec::new();
    for _ in 0..4 {
        busy.push(busy_from(&server, A, &body).await);
    }
    // A keeps connections waiting, each accepted before B's.
    let mut waiting = Vec::new();
    for _ in 0..8 {
        waiting.push(waiter(&server, A).await);
    }
    let b = waiter(&server, B).await;
    // One of A's connections ends: its slot is B's, A holding 3 and B none.
    drop(busy.remove(0));
    // B keeps its connection (and slot) open: no slot frees after it.
    let answered = tokio::time::timeout(BOUND, b).await;
    assert!(
        matches!(answered, Ok(Ok(Some((200, _))))),
        "B was not answered within {BOUND:?} once a slot was freed: {answered:?}"
    );
    for (i, w) in waiting.iter().enumerate() {
        assert!(!w.is_finished(), "A's waiting connection {i} was served");
    }
    for w in &waiting {
        w.abort();
    }
}

#[tokio::test]
async fn a_burst_of_connections_is_served_whole_while_slots_are_free() {
    // Before, every accepted connection took a seat first and left it once
    // its task took the free slot: a burst of more than
    // MAX_WAITING_CONNECTIONS from one address, accepted before their tasks
    // ran, had those past the seats dropped though every slot was free.
    let server = TestServer::start(|c| {
        four_slots(c);
        c.conn_limits.max_connections = 2 * MAX_WAITING_CONNECTIONS;
    })
    .await;
    // Connected (by the kernel) before the server accepts any of them: no
    // await between the connects lets the server's accept loop run.
    let burst = MAX_WAITING_CONNECTIONS + 16;
    let connected: Vec<_> = (0..burst)
        .map(|_| std::net::TcpStream::connect(server.https).unwrap())
        .collect();
    let connected: Vec<_> = connected
        .into_iter()
        .map(|tcp| {
            tcp.set_nonblocking(true).unwrap();
            TcpStream::from_std(tcp).unwrap()
        })
        .collect();
    let ca = server.pki.ca_pem();
    let mut dropped = 0;
    for tcp in connected {
        if try_handshake(&ca, tcp).await.is_err() {
            dropped += 1;
        }
    }
    assert_eq!(
        dropped, 0,
        "{dropped} of a burst of {burst} connections were dropped with every slot free"
    );
}
