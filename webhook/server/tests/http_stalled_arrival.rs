//! A request still arriving long after its first byte (a body declared
//! `Content-Length: 100000` of which one byte came, an HTTP/2 stream whose
//! DATA never comes) does not hold a connection slot against a newcomer
//! from another address: once it has been arriving for
//! `ConnLimits::min_arrival_before_eviction` (1 s), its connection may be
//! dropped for the newcomer by the same rule as an idle one (only from the
//! address holding the most, and strictly more than the newcomer's would
//! once admitted). A request arriving for less than that is kept, and so is
//! one whose response has been produced, however long it takes to send.
//!
//! The first test uses no setting added with the rule, so it also runs
//! against the code before it (where it fails: the newcomer waited for the
//! body read timeout).
//!
//! Distinct peers on loopback: Linux routes all of 127.0.0.0/8 to `lo`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_alpn;
mod http_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_common::{TestServer, assert_review_echo, job_pod, read_response, review};
use kube_prestop_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The address holding every slot.
const A: &str = "127.0.0.2";
/// The newcomer's address.
const B: &str = "127.0.0.3";

/// Slots of these servers.
const SLOTS: usize = 4;

/// How soon the newcomer's review must be answered: well under the API
/// server's webhook timeout (the chart's `timeoutSeconds`, 5 s), with room
/// for the 1 s grace and the waiting newcomer's 1 s re-check on a loaded
/// machine.
const BOUND: Duration = Duration::from_millis(3500);

/// The longest wait for what should happen at once: generous, for a
/// loaded test machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The defaults of `serve` (read timeout 10 s, the body's too; idle
/// eviction after 5 s; stalled arrivals after 1 s) with `SLOTS` slots and
/// the idle timeout out of the way.
fn defaults_with_few_slots(c: &mut ServerConfig) {
    c.conn_limits.max_connections = SLOTS;
    c.conn_limits.idle_timeout = Duration::from_secs(300);
    c.conn_limits.http2_keep_alive = Duration::from_secs(300);
}

/// Where clients connect: the HTTPS port and its CA (cheap to clone and
/// send to a task, unlike the server).
#[derive(Clone)]
struct Target {
    https: SocketAddr,
    ca_pem: String,
}

impl Target {
    fn of(server: &TestServer) -> Self {
        Self {
            https: server.https,
            ca_pem: server.pki.ca_pem(),
        }
    }
}

/// A TCP connection to the HTTPS port from `local` (any port).
async fn tcp_from(server: &Target, local: &str) -> TcpStream {
    http_alpn::tcp_from(server.https, local).await
}

/// The TLS handshake (ALPN `alpn`) on `tcp`: it completes once the server
/// has given the connection a slot.
async fn handshake(server: &Target, tcp: TcpStream, alpn: &[u8]) -> TlsStream<TcpStream> {
    http_alpn::try_tls_over(&server.ca_pem, tcp, alpn)
        .await
        .unwrap()
}

/// The head of a `/mutate` POST whose body is `len` bytes.
fn mutate_head(len: usize) -> String {
    format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// A connection from `A` holding a slot with a stalled request: headers
/// declaring a 100,000-byte body, then one byte of it, then nothing.
async fn stalled_from_a(server: &Target) -> TlsStream<TcpStream> {
    let mut tls = handshake(server, tcp_from(server, A).await, b"http/1.1").await;
    tls.write_all(mutate_head(100_000).as_bytes())
        .await
        .unwrap();
    tls.write_all(b"{").await.unwrap();
    tls.flush().await.unwrap();
    tls
}

/// A review from `B` on a new connection; its status and how long it took
/// from the connect.
async fn review_from_b(server: &Target) -> (Option<u16>, Duration) {
    let start = Instant::now();
    let mut tls = handshake(server, tcp_from(server, B).await, b"http/1.1").await;
    let body = review("uid-b", "pods", "CREATE", job_pod()).to_string();
    tls.write_all(mutate_head(body.len()).as_bytes())
        .await
        .unwrap();
    tls.write_all(body.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let answer = read_response(&mut tls).await;
    if let Some((200, _, text)) = &answer {
        assert_review_echo(&serde_json::from_str(text).unwrap(), "uid-b");
    }
    (answer.map(|(status, _, _)| status), start.elapsed())
}

#[tokio::test]
async fn stalled_request_bodies_from_one_address_do_not_keep_another_addresss_review_waiting() {
    // The tester's reproduction, scaled to 4 slots: before, B's review
    // waited for A's body read timeout (9.91 s with 16 slots and the
    // binary), past the API server's 5 s webhook timeout.
    let running = TestServer::start(defaults_with_few_slots).await;
    let server = Target::of(&running);
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        held.push(stalled_from_a(&server).await);
    }
    let to = server.clone();
    let b = tokio::spawn(async move { review_from_b(&to).await });
    let outcome = tokio::time::timeout(BOUND, b).await;
    let Ok(Ok((status, took))) = outcome else {
        panic!(
            "B's review was not answered within {BOUND:?} while A held every slot with stalled request bodies"
        );
    };
    eprintln!("B's review answered in {took:?} ({status:?})");
    assert_eq!(status, Some(200));
    // One of A's connections was dropped for B; the others still hold
    // their slots.
    let mut dropped = 0;
    for tls in &mut held {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), tls.read(&mut buf)).await
        {
            dropped += 1;
        }
    }
    assert_eq!(dropped, 1, "A's connections dropped for B");
}

#[tokio::test]
async fn stalled_http2_streams_from_one_address_do_not_keep_another_addresss_review_waiting() {
    // Each of A's HTTP/2 connections has one stream: its HEADERS (a POST
    // declaring a body), then no DATA. The handler waits for the body.
    let running = TestServer::start(defaults_with_few_slots).await;
    let server = Target::of(&running);
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        let mut tls = handshake(&server, tcp_from(&server, A).await, b"h2").await;
        tls.write_all(PREFACE).await.unwrap();
        tls.write_all(&post_mutate_headers()).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    let to = server.clone();
    let b = tokio::spawn(async move { review_from_b(&to).await });
    let outcome = tokio::time::timeout(BOUND, b).await;
    let Ok(Ok((status, took))) = outcome else {
        panic!(
            "B's review was not answered within {BOUND:?} while A held every slot with stalled HTTP/2 streams"
        );
    };
    eprintln!("B's review answered in {took:?} ({status:?})");
    assert_eq!(status, Some(200));
}

/// The HTTP/2 connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The HTTP/2 connection preface and a SETTINGS frame with
/// `SETTINGS_INITIAL_WINDOW_SIZE` 0: the server may send no DATA until the
/// client opens its window, which it never does.
const PREFACE_ZERO_WINDOW: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00";

/// One HEADERS frame on stream 1 (END_HEADERS, plus END_STREAM when
/// `end`) with `block`.
fn headers_frame(block: &[u8], end: bool) -> Vec<u8> {
    let len = u32::try_from(block.len()).unwrap().to_be_bytes();
    let flags = 0x04 | if end { 0x01 } else { 0 };
    let mut frame = vec![len[1], len[2], len[3], 0x01, flags, 0, 0, 0, 1];
    frame.extend_from_slice(block);
    frame
}

/// `POST /mutate` declaring a 100,000-byte JSON body, without END_STREAM
/// (HPACK from the static table and literals).
fn post_mutate_headers() -> Vec<u8> {
    let mut block = vec![0x83, 0x87]; // :method POST, :scheme https
    block.extend_from_slice(b"\x44\x07/mutate"); // :path, literal
    block.extend_from_slice(b"\x41\x09localhost"); // :authority, literal
    block.extend_from_slice(b"\x5f\x10application/json"); // content-type
    block.extend_from_slice(b"\x5c\x06100000"); // content-length
    headers_frame(&block, false)
}

/// `GET /livez` on stream 1, END_STREAM.
fn get_livez_headers() -> Vec<u8> {
    let mut block = vec![0x82, 0x87]; // :method GET, :scheme https
    block.extend_from_slice(b"\x44\x06/livez"); // :path, literal
    block.extend_from_slice(b"\x41\x09localhost"); // :authority, literal
    headers_frame(&block, true)
}

#[tokio::test]
async fn requests_arriving_steadily_within_the_grace_are_not_evicted() {
    // A's four requests arrive a few bytes at a time for about 1.2 s, with
    // the grace at 3 s: B, waiting from the start, takes none of them.
    const GRACE: Duration = Duration::from_secs(3);
    let running = TestServer::start(|c| {
        defaults_with_few_slots(c);
        c.conn_limits.min_arrival_before_eviction = GRACE;
    })
    .await;
    let server = Target::of(&running);
    let body = review("uid-a", "pods", "CREATE", job_pod()).to_string();
    let request = format!("{}{body}", mutate_head(body.len())).into_bytes();
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        let mut tls = handshake(&server, tcp_from(&server, A).await, b"http/1.1").await;
        tls.write_all(&request[..10]).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    let started = Instant::now();
    let waiting = server.clone();
    let b = tokio::spawn(async move { review_from_b(&waiting).await });
    // The rest in 12 pieces, 100 ms apart.
    let rest = &request[10..];
    let piece = rest.len().div_ceil(12);
    for chunk in rest.chunks(piece) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for tls in &mut held {
            tls.write_all(chunk).await.unwrap();
            tls.flush().await.unwrap();
        }
    }
    assert!(
        started.elapsed() < GRACE,
        "the test machine is too slow for this test: {:?}",
        started.elapsed()
    );
    for tls in &mut held {
        let (status, head, text) = tokio::time::timeout(PATIENCE, read_response(tls))
            .await
            .expect("an answer in time")
            .expect("the connection stays open for the answer");
        assert_eq!(status, 200, "{text}");
        assert!(
            !head.contains("connection: close"),
            "a connection with a request arriving within the grace was closed for B: {head}"
        );
        assert_review_echo(&serde_json::from_str(&text).unwrap(), "uid-a");
    }
    assert!(!b.is_finished(), "B was served while A's requests arrived");
    b.abort();
}

#[tokio::test]
async fn connections_whose_responses_are_being_written_are_never_evicted() {
    // Each of A's HTTP/2 connections has a response produced that it
    // cannot take (flow-control window 0): past the grace, still never
    // closed for B; B waits.
    const WAIT: Duration = Duration::from_millis(2500);
    let running = TestServer::start(|c| {
        defaults_with_few_slots(c);
        c.conn_limits.write_timeout = Duration::from_secs(60);
    })
    .await;
    let server = Target::of(&running);
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        let mut tls = handshake(&server, tcp_from(&server, A).await, b"h2").await;
        tls.write_all(PREFACE_ZERO_WINDOW).await.unwrap();
        tls.write_all(&get_livez_headers()).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    let waiting = server.clone();
    let mut b = tokio::spawn(async move { review_from_b(&waiting).await });
    let early = tokio::time::timeout(WAIT, &mut b).await;
    assert!(
        early.is_err(),
        "B was served while each of A's connections had a response being written: {early:?}"
    );
    // None of A's connections was closed.
    for tls in &mut held {
        let mut buf = [0u8; 256];
        let read = tokio::time::timeout(Duration::from_millis(100), tls.read(&mut buf)).await;
        assert!(
            !matches!(read, Ok(Ok(0) | Err(_))),
            "a connection with a response being written was closed for B"
        );
    }
    b.abort();
}
