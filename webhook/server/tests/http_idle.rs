//! How long a connection may stay open without requests, over HTTP/2 in
//! particular: a client that completes TLS (ALPN `h2`) and sends nothing,
//! or only the connection preface, is disconnected within the read timeout;
//! such clients holding every connection slot do not lock out a new one
//! for longer; a connection idle after a request is closed after the idle
//! timeout, also when the client ignores the `GOAWAY`; a client that does
//! not take its responses (an HTTP/2 flow-control window never opened, an
//! HTTP/1.1 client that never reads) is disconnected within the write
//! timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_alpn;
mod http_common;

use std::time::{Duration, Instant};

use http_alpn::{tls_over, tls_with_alpn};
use http_common::{TestServer, wait_for};
use kube_prestop_server::{HTTP2_MAX_CONCURRENT_STREAMS, HTTP2_WINDOW_BYTES, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The read timeout of these tests' servers.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest wait for what should happen after `READ_TIMEOUT` or the
/// idle timeout: generous, for a loaded test machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The HTTP/2 connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The HTTP/2 connection preface and a SETTINGS frame with
/// `SETTINGS_INITIAL_WINDOW_SIZE` (0x4) 0: the server may send no DATA on
/// any stream until the client opens its window, which it never does.
const PREFACE_ZERO_WINDOW: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00";

/// The write timeout of the tests that need one.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// A 1 s read timeout, and the idle timeout and keep-alive pings out of the
/// way (5 min) unless a test sets them.
fn short_read_timeout(c: &mut ServerConfig) {
    c.conn_limits.handshake_timeout = READ_TIMEOUT;
    c.conn_limits.header_read_timeout = READ_TIMEOUT;
    c.conn_limits.idle_timeout = Duration::from_secs(300);
    c.conn_limits.http2_keep_alive = Duration::from_secs(300);
}

/// Reads (and discards) until the server closes the connection; how long
/// that took, or `None` if it was still open after `PATIENCE`.
async fn closed_within<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = vec![0u8; 16 * 1024];
    let until_closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(PATIENCE, until_closed)
        .await
        .ok()
        .map(|()| start.elapsed())
}

#[tokio::test]
async fn an_http2_client_that_sends_nothing_after_tls_is_disconnected_within_the_read_timeout() {
    // Before, hyper's HTTP/2 connection waited for the preface for ever
    // (graceful shutdown is deferred until it arrives): held > 120 s.
    let server = TestServer::start(short_read_timeout).await;
    let mut tls = tls_with_alpn(&server, b"h2").await;
    let took = closed_within(&mut tls).await;
    assert!(
        took.is_some(),
        "an HTTP/2 client that sent nothing was still connected after {PATIENCE:?}"
    );
}

#[tokio::test]
async fn an_http2_client_that_sends_only_the_preface_is_disconnected_within_the_read_timeout() {
    // Before, only the keep-alive ping (interval + timeout, 60 s by
    // default) ended such a connection.
    let server = TestServer::start(short_read_timeout).await;
    let mut tls = tls_with_alpn(&server, b"h2").await;
    tls.write_all(PREFACE).await.unwrap();
    tls.flush().await.unwrap();
    let took = closed_within(&mut tls).await;
    assert!(
        took.is_some(),
        "an HTTP/2 client that sent only the preface was still connected after {PATIENCE:?}"
    );
}

#[tokio::test]
async fn idle_http2_clients_holding_every_slot_do_not_lock_out_a_new_client() {
    let server = TestServer::start(|c| {
        short_read_timeout(c);
        c.conn_limits.max_connections = 2;
    })
    .await;
    // Every slot taken by a client that completed TLS with ALPN h2 and sends
    // nothing; they stay open on the client's side throughout.
    let _holders = [
        tls_with_alpn(&server, b"h2").await,
        tls_with_alpn(&server, b"h2").await,
    ];
    let client = server
        .client_builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    wait_for(PATIENCE, "a new client served", || async {
        matches!(client.get(server.url("/readyz")).send().await, Ok(r) if r.status() == 200)
    })
    .await;
}

/// One raw HTTP/2 frame: type, flags, stream id.
async fn read_frame<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(u8, u8, u32)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Some((head[3], head[4], id))
}

/// `GET /livez` on stream 1 as one HEADERS frame (END_STREAM, END_HEADERS),
/// HPACK from the static table and literals.
fn get_livez() -> Vec<u8> {
    let mut block = vec![0x82, 0x87]; // :method GET, :scheme https
    block.extend_from_slice(b"\x44\x06/livez"); // :path, literal
    block.extend_from_slice(b"\x41\x09localhost"); // :authority, literal
    let len = u32::try_from(block.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], 0x01, 0x05, 0, 0, 0, 1];
    frame.extend_from_slice(&block);
    frame
}

#[tokio::test]
async fn an_http2_connection_idle_after_a_request_is_closed_even_if_the_client_ignores_goaway() {
    // Before, the idle close was a graceful shutdown only: the server sent
    // GOAWAY and a PING and waited for the PING's answer for ever.
    let idle_timeout = Duration::from_secs(2);
    let server = TestServer::start(|c| {
        short_read_timeout(c);
        c.conn_limits.idle_timeout = idle_timeout;
    })
    .await;
    let mut tls = tls_with_alpn(&server, b"h2").await;
    tls.write_all(PREFACE).await.unwrap();
    tls.write_all(&get_livez()).await.unwrap();
    tls.flush().await.unwrap();
    // Until the response's last frame (END_STREAM on stream 1); the client
    // answers nothing, neither SETTINGS nor PING.
    let answered = tokio::time::timeout(PATIENCE, async {
        while let Some((_, flags, id)) = read_frame(&mut tls).await {
            if id == 1 && flags & 0x01 != 0 {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(answered, Ok(true)), "no answer to GET /livez");
    let took = closed_within(&mut tls).await;
    let took = took.expect("an idle HTTP/2 connection stays open");
    assert!(
        took + Duration::from_millis(100) >= idle_timeout,
        "closed after {took:?}, before the idle timeout {idle_timeout:?}"
    );
}

#[tokio::test]
async fn an_http2_connection_idle_after_a_request_is_closed_gracefully_after_the_idle_timeout() {
    let idle_timeout = Duration::from_secs(2);
    let server = TestServer::start(|c| {
        short_read_timeout(c);
        c.conn_limits.idle_timeout = idle_timeout;
    })
    .await;
    let tls = tls_with_alpn(&server, b"h2").await;
    // A send buffer larger than any window the server could grant, so the
    // capacity below is the server's window (h2's default caps it at 400 KiB).
    let (mut client, connection) = h2::client::Builder::new()
        .max_send_buffer_size(4 << 20)
        .handshake::<_, axum::body::Bytes>(tls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let request = axum::http::Request::get(server.url("/livez"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        chunk.unwrap();
    }
    // The server's settings are in by now.
    assert_eq!(
        client.current_max_send_streams(),
        usize::try_from(HTTP2_MAX_CONCURRENT_STREAMS).unwrap()
    );
    // A request body may be sent only as far as the server's flow-control
    // window: 64 KiB, not hyper's 1 MiB (the server's settings and window
    // updates are in: the first request's answer came after them).
    let post = axum::http::Request::post(server.url("/mutate"))
        .body(())
        .unwrap();
    let (posted, mut stream) = client.send_request(post, false).unwrap();
    stream.reserve_capacity(4 << 20);
    let granted = tokio::time::timeout(
        PATIENCE,
        std::future::poll_fn(|cx| stream.poll_capacity(cx)),
    )
    .await
    .expect("capacity is granted")
    .expect("the stream is open")
    .unwrap();
    assert!(
        granted <= usize::try_from(HTTP2_WINDOW_BYTES).unwrap(),
        "the server let a client send {granted} bytes of body unread (window {HTTP2_WINDOW_BYTES})"
    );
    stream.send_reset(h2::Reason::CANCEL);
    drop(posted);
    let idle_since = Instant::now();
    let ended = tokio::time::timeout(PATIENCE, connection).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the server closes the idle connection gracefully (GOAWAY): {ended:?}"
    );
    assert!(
        idle_since.elapsed() + Duration::from_millis(100) >= idle_timeout,
        "closed after {:?}, before the idle timeout {idle_timeout:?}",
        idle_since.elapsed()
    );
}

#[tokio::test]
async fn an_http2_client_that_never_opens_its_window_is_disconnected_within_the_write_timeout() {
    // Before, the response's DATA was never sent and its request counted
    // as in flight for ever: the connection was never idle, never closed by
    // the idle timeout or for a newcomer (8 of them held `--max-connections
    // 8` for 60 s and more).
    let server = TestServer::start(|c| {
        short_read_timeout(c);
        c.conn_limits.write_timeout = WRITE_TIMEOUT;
    })
    .await;
    let mut tls = tls_with_alpn(&server, b"h2").await;
    tls.write_all(PREFACE_ZERO_WINDOW).await.unwrap();
    tls.write_all(&get_livez()).await.unwrap();
    tls.flush().await.unwrap();
    // The response's HEADERS come (they need no window); its DATA cannot.
    let took = closed_within(&mut tls).await;
    assert!(
        took.is_some(),
        "an HTTP/2 client with a zero window was still connected after {PATIENCE:?}"
    );
}

#[tokio::test]
async fn an_http1_client_that_never_reads_is_disconnected_within_the_write_timeout() {
    // Before, the server's writes stalled with the client's TCP window
    // full and nothing bounded them: the connection, its responses handed
    // to hyper, looked idle and held its slot until the idle timeout.
    let server = TestServer::start(|c| {
        short_read_timeout(c);
        // Only the write timeout may end the connection within PATIENCE.
        c.conn_limits.header_read_timeout = Duration::from_secs(60);
        c.conn_limits.write_timeout = WRITE_TIMEOUT;
    })
    .await;
    // A small receive buffer, so that a few hundred responses fill it.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(server.https).await.unwrap();
    let tls = tls_over(&server, tcp, b"http/1.1").await;
    let (_unread, mut requests) = tokio::io::split(tls);
    // Pipelined requests whose responses the client never reads: once the
    // server's writes stall it stops reading, and the client's writes
    // stall too, until the server drops the connection (then they fail).
    let writer = tokio::spawn(async move {
        let get = b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n";
        while requests.write_all(get).await.is_ok() {}
    });
    let dropped = tokio::time::timeout(PATIENCE, writer).await;
    assert!(
        dropped.is_ok(),
        "a client that never reads was still connected after {PATIENCE:?}"
    );
}

/// Reads one HTTP/1.1 response (headers and a `content-length` body) from
/// `stream`; its status line.
async fn read_http1_response<S: AsyncRead + Unpin>(stream: &mut S) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())
                            .flatten()
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    return head.lines().next().unwrap_or_default().to_owned();
                }
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the connection closed before a whole response");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("no whole response within PATIENCE")
}

#[tokio::test]
async fn an_http1_keep_alive_connection_idle_past_the_read_timeout_serves_its_next_request() {
    // Before, hyper's header timer also ran while a keep-alive connection
    // waited for its next request, and closed it after the read timeout
    // (10 s by default) though the API server keeps an idle connection
    // 90 s: a review it wrote onto one as it closed was lost (one
    // admission of 6,000 failed open, `write: broken pipe`).
    let server = TestServer::start(short_read_timeout).await;
    let mut tls = tls_with_alpn(&server, b"http/1.1").await;
    let get = b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n";
    tls.write_all(get).await.unwrap();
    assert!(
        read_http1_response(&mut tls)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // Idle for three read timeouts: the server must not close it.
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(3 * READ_TIMEOUT, tls.read(&mut byte)).await;
    assert!(
        closed.is_err(),
        "the server ended an idle keep-alive connection within {:?} (read timeout {READ_TIMEOUT:?}, idle timeout 300 s): {closed:?}",
        3 * READ_TIMEOUT
    );
    tls.write_all(get).await.unwrap();
    assert!(
        read_http1_response(&mut tls)
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn an_http1_request_whose_headers_stall_is_disconnected_within_the_read_timeout() {
    // The header timer now starts at a request's first byte: headers begun
    // on a keep-alive connection and never finished still end it.
    let server = TestServer::start(short_read_timeout).await;
    let mut tls = tls_with_alpn(&server, b"http/1.1").await;
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_http1_response(&mut tls)
            .await
            .starts_with("HTTP/1.1 200")
    );
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let took = closed_within(&mut tls).await;
    assert!(
        took.is_some(),
        "a client whose headers stalled was still connected after {PATIENCE:?}"
    );
}
