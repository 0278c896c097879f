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
//!
//! Slots are shared fairly by peer address ([`slots`]): when every slot is
//! held and a client arrives from a peer holding fewer than the peer holding
//! the most, one of that peer's connections is closed and its slot handed
//! to the newcomer: first one whose requests have stalled arriving (every
//! request on it has been arriving for
//! [`ConnLimits::min_arrival_before_eviction`] without its body read to the
//! end: dropped at once), else its longest-idle one (no request in flight,
//! idle for [`ConnLimits::min_idle_before_eviction`]: closed gracefully). At most
//! [`MAX_WAITING_CONNECTIONS`] accepted connections wait for a slot at
//! once (seats), each for at most the read timeout, and the seats are
//! shared by peer address the same way ([`seats`]): the loop never stops
//! accepting; when every seat is taken, the newcomer takes the seat of the
//! oldest waiting connection of the peer with the most waiting, which is
//! dropped (it has served nothing yet), if that peer has strictly more
//! waiting than the newcomer's would once seated; otherwise the newcomer
//! is dropped at once. A slot freed by a connection that ends goes to a
//! waiting connection by peer, the peers with connections waiting taking
//! turns ([`seats::Seats::next_for_slot`]), and a newcomer takes a free slot at
//! once, without a seat (one is free only while none waits).
//!
//! A connection that has not started its first request may be closed for a
//! newcomer as an idle one, dropped at once (nothing of a request has
//! arrived: [`request_bytes`]); one whose request bytes have started
//! arriving only once they have been arriving for
//! [`ConnLimits::min_arrival_before_eviction`] (1 s); one whose handler has
//! read its request's body, or whose response is produced, never. A response not sent within the write timeout (the
//! client does not read, or never opens its HTTP/2 flow-control window)
//! drops its connection.

mod request_bytes;
mod seats;
mod slots;

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError, oneshot, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::tls::ClientCert;
use request_bytes::RequestBytes;
use seats::{SeatId, Seats};
use slots::{ConnId, Registry, peer_key};

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

/// HTTP/1.1: largest read buffer of one connection (hyper's
/// `max_buf_size`), bytes: 16 KiB, so a request's headers are bounded as
/// over HTTP/2 ([`HTTP2_MAX_HEADER_LIST_SIZE`]); larger headers get 431.
/// hyper's default, about 400 KiB, let every connection hold that much of
/// an unfinished request head, charged to no budget: 600 connections each
/// sending 300 KB of one header line took a debug build to 370 MiB resident
/// (64 MiB with this bound).
/// A body is read through the same buffer, in reads of at most this size.
pub const HTTP1_MAX_BUF_BYTES: usize = 16 * 1024;

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

/// Accepted connections that may wait for a connection slot at once, per
/// port (accept loop): 64 seats. While every slot is held, a newcomer is
/// accepted (so that its peer address is known and it may take an idle
/// connection's slot from a peer holding more, see `listener/slots.rs`)
/// and waits in a seat, holding a file descriptor and a small task but no
/// TLS state, for at most the read timeout
/// (`ConnLimits::header_read_timeout`). The loop keeps accepting with every
/// seat taken, and shares the seats by peer address as the slots
/// (`listener/seats.rs`): the newcomer takes the seat of the oldest waiting
/// connection of the peer with the most waiting (that connection is
/// dropped; it has served nothing) if that peer has strictly more waiting
/// than the newcomer's would once seated; otherwise the newcomer is dropped
/// at once. So one address cannot keep another's clients in the kernel's
/// accept queue by filling the seats.
pub const MAX_WAITING_CONNECTIONS: usize = 64;

/// Limits applied to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections served at once (slots). When all are held, a newcomer
    /// from a peer address holding fewer than the peer holding the most
    /// gets the slot of that peer's longest-idle connection, closed
    /// gracefully; otherwise it waits in a seat, if it gets one (see
    /// [`MAX_WAITING_CONNECTIONS`]).
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
    /// How long a connection must have been idle before it may be closed
    /// for a newcomer from a peer holding fewer ([`slots`]); a connection
    /// that has not started its first request is idle from when it took
    /// its slot, and one with a request's bytes arriving is not idle. An HTTP/1.1
    /// keep-alive connection the server closes while the client's next
    /// request is on the wire loses that request unanswered ("closed before
    /// status"), and Go's client (the API server's) does not retry a POST;
    /// a connection idle this long is one its client is not reusing (Go's
    /// `Transport` hands out the most recently used idle connection first,
    /// `net/http` `getIdleConn`), so the race is rare. Without it, clients
    /// churning connections from a few addresses had the webhook close a
    /// legitimate client's pooled connections under its requests (14 of
    /// 600 reviews failed in a local attack, 0 before slots were shared).
    pub min_idle_before_eviction: Duration,
    /// How long a request must have been arriving before its connection
    /// may be closed for a newcomer from a peer holding fewer ([`slots`],
    /// the same rule as an idle connection's): from the request's first
    /// byte until the request reaches the service (HTTP/1.1 headers, an
    /// HTTP/2 header block) and then until the handler has read its body
    /// to the end. Such a connection is dropped at once (nothing has been
    /// handled; a graceful close would wait for the stalled request). One
    /// whose handler has read its body (the review is being decided) or
    /// whose response is produced is never closed for a newcomer. See
    /// [`DEFAULT_MIN_ARRIVAL_BEFORE_EVICTION`].
    pub min_arrival_before_eviction: Duration,
    /// The longest time a response may take to be sent: a response the
    /// handler has produced and the connection has not taken in whole
    /// within this time (an HTTP/2 client that never opens its flow-control
    /// window), or a write to the socket that makes no progress for this
    /// long (a client that does not read, its TCP window full), drops the
    /// connection. The write timeout of other servers (nginx's
    /// `send_timeout`, Go's `http.Server.WriteTimeout`).
    pub write_timeout: Duration,
}

/// How often a newcomer waiting for a slot looks again for a connection
/// idle long enough to close for it: 1 s.
const EVICTION_RECHECK: Duration = Duration::from_secs(1);

/// Default [`ConnLimits::min_idle_before_eviction`]: 5 s.
pub const DEFAULT_MIN_IDLE_BEFORE_EVICTION: Duration = Duration::from_secs(5);

/// Default [`ConnLimits::min_arrival_before_eviction`]: 1 s. The API
/// server writes a review in one burst (headers and a body of a few KiB,
/// at most a few MiB, over a connection it already holds), which arrives
/// within milliseconds, or a few hundred on a starved node; a request
/// still arriving after 1 s is stalled (a client that declared
/// `Content-Length: 100000` and sent one byte, or dribbles its headers).
/// Before, such requests counted as in progress until the read timeout
/// (10 s), so one address holding every slot with them kept another
/// address's review waiting 9.9 s, past the API server's webhook timeout
/// (the chart's `timeoutSeconds`, 5 s), and under `failurePolicy: Ignore`
/// pods were admitted without the sidecar. With 1 s, a newcomer waits at
/// most about the grace plus one [`EVICTION_RECHECK`] (2 s).
pub const DEFAULT_MIN_ARRIVAL_BEFORE_EVICTION: Duration = Duration::from_secs(1);

/// Default [`ConnLimits::write_timeout`]: 10 s, as the read timeout. An
/// admission response is at most a few MiB (the patched pod is bounded at
/// 1.5 MiB), sent in milliseconds to a client that reads.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests in flight on one connection, whether any has started, when
/// the last one ended (or, before the first, when the connection took its
/// slot), whether request bytes have arrived that no request has started
/// with yet, the responses produced and not yet taken by the connection,
/// since when a write to its socket has been blocked, and whether the
/// connection is to close for a newcomer; `changed` wakes the connection's
/// watch when a request starts or ends, a response is produced, a write
/// blocks or the connection is evicted; `idle` (shared by the accept loop's
/// connections) wakes the newcomers waiting for a slot when a connection
/// becomes idle.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    started: AtomicBool,
    evicted: AtomicBool,
    last: Mutex<Instant>,
    /// Request bytes read since the last request started or the last one
    /// ended ([`RequestBytes`]).
    request_arrived: AtomicBool,
    /// When the first of those bytes arrived: an HTTP/1.1 request's
    /// headers must be complete within the read timeout from then.
    arrived_at: Mutex<Option<Instant>>,
    /// The bytes read so far stop inside what may be a request (HTTP/2).
    mid_request: AtomicBool,
    /// Responses produced and not yet taken in whole by the connection, by
    /// number: when each was produced.
    unsent: Mutex<BTreeMap<u64, Instant>>,
    next_response: AtomicU64,
    /// Since when a write to the socket has made no progress.
    write_blocked: Mutex<Option<Instant>>,
    /// Requests in flight still arriving, by number: the handler has not
    /// read the body to its end and no response is produced; when each
    /// request's first byte arrived ([`ArrivingBody`]).
    arriving: Mutex<BTreeMap<u64, Instant>>,
    next_request: AtomicU64,
    /// The slot the connection holds, to [spare](Slots::spare) it.
    slot: Mutex<Option<(Weak<Slots>, ConnId)>>,
    changed: Notify,
    idle: Arc<Notify>,
}

impl Activity {
    fn new(idle: Arc<Notify>) -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            last: Mutex::new(Instant::now()),
            request_arrived: AtomicBool::new(false),
            arrived_at: Mutex::new(None),
            mid_request: AtomicBool::new(false),
            unsent: Mutex::new(BTreeMap::new()),
            next_response: AtomicU64::new(0),
            write_blocked: Mutex::new(None),
            arriving: Mutex::new(BTreeMap::new()),
            next_request: AtomicU64::new(0),
            slot: Mutex::new(None),
            changed: Notify::new(),
            idle,
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

    /// Whether no request bytes have arrived that no request has started
    /// with (nor ended with) yet, and the bytes read do not stop inside what
    /// may be a request.
    fn quiet(&self) -> bool {
        !self.request_arrived.load(Ordering::Acquire) && !self.mid_request.load(Ordering::Acquire)
    }

    /// Request bytes arrived (`true`) or were taken by a request that
    /// started or ended (`false`); [`Self::arrived_at`] follows.
    fn set_request_arrived(&self, arrived: bool) {
        let was = self.request_arrived.swap(arrived, Ordering::AcqRel);
        if was != arrived {
            if let Ok(mut at) = self.arrived_at.lock() {
                *at = arrived.then(Instant::now);
            }
            if arrived {
                // The connection's watch arms the header deadline.
                self.changed.notify_one();
            }
        }
    }

    /// When the first request bytes not yet taken by a request arrived.
    fn arrived_at(&self) -> Option<Instant> {
        self.arrived_at.lock().ok().and_then(|at| *at)
    }

    /// Since when the connection has been idle, if it may be closed for a
    /// newcomer: no request in flight and none arriving ([`Self::quiet`]);
    /// idle since its last request ended or, if it has served none, since
    /// it took its slot.
    fn idle_since(&self) -> Option<Instant> {
        if self.busy() || !self.quiet() {
            return None;
        }
        self.last.lock().ok().map(|last| *last)
    }

    /// Since when the connection has had a request arriving, if every
    /// request on it is still arriving (none is handled past reading its
    /// body, no response is produced) and at least one is: the earliest
    /// first byte among the requests in flight whose bodies the handler has
    /// not read to the end, and the request bytes read that no request has
    /// started with yet. `None` otherwise (idle, or handling a request).
    fn arriving_since(&self) -> Option<Instant> {
        let arriving = self.arriving.lock().ok()?;
        // Requests enter `in_flight` before `arriving` and leave it after:
        // a request between the two counts as handled (never evicted).
        if self.in_flight.load(Ordering::Acquire) != arriving.len() {
            return None;
        }
        let unstarted = (!self.quiet()).then(|| self.arrived_at()).flatten();
        arriving.values().copied().chain(unstarted).min()
    }

    /// Whether and how the connection may be closed for a newcomer at
    /// `now`: a request arriving for at least `min_arrival`
    /// ([`Self::arriving_since`]), or idle for at least `min_idle`
    /// ([`Self::idle_since`]); `None` if neither.
    fn evictable(
        &self,
        now: Instant,
        min_idle: Duration,
        min_arrival: Duration,
    ) -> Option<Evictable> {
        if let Some(since) = self.arriving_since() {
            return (now.saturating_duration_since(since) >= min_arrival)
                .then_some(Evictable::Stalled(since));
        }
        self.idle_since()
            .filter(|since| now.saturating_duration_since(*since) >= min_idle)
            .map(Evictable::Idle)
    }

    /// A request entered the service; its number, for
    /// [`Self::arrived_whole`], and counted as arriving since `since` until
    /// then.
    fn start_arriving(&self, since: Instant) -> u64 {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut arriving) = self.arriving.lock() {
            arriving.insert(n, since);
        }
        n
    }

    /// Request `n` is no longer arriving: its body was read to its end (or
    /// dropped), or its response produced, or it ended.
    fn arrived_whole(&self, n: u64) {
        if let Ok(mut arriving) = self.arriving.lock() {
            arriving.remove(&n);
        }
    }

    /// Record a response produced on this connection; its number, to
    /// [forget](Self::sent) once the connection has taken it in whole.
    fn produced(&self) -> u64 {
        let n = self.next_response.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut unsent) = self.unsent.lock() {
            unsent.insert(n, Instant::now());
        }
        self.changed.notify_one();
        n
    }

    fn sent(&self, n: u64) {
        if let Ok(mut unsent) = self.unsent.lock() {
            unsent.remove(&n);
        }
    }

    /// A write to the socket returned pending (`true`) or made progress.
    fn write_blocked(&self, blocked: bool) {
        if let Ok(mut since) = self.write_blocked.lock() {
            *since = blocked.then(Instant::now);
        }
        if blocked {
            self.changed.notify_one();
        }
    }

    /// When the connection is to be dropped for not taking its output:
    /// `timeout` after the oldest response not yet taken was produced, or
    /// after a write started to block; `None` if neither.
    fn send_by(&self, timeout: Duration) -> Option<Instant> {
        let unsent = self
            .unsent
            .lock()
            .ok()
            .and_then(|u| u.values().next().copied());
        let blocked = self.write_blocked.lock().ok().and_then(|b| *b);
        unsent
            .into_iter()
            .chain(blocked)
            .min()
            .map(|at| at + timeout)
    }

    /// Resolves once the connection is evicted.
    async fn wait_evicted(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.evicted() {
                return;
            }
            changed.await;
        }
    }

    /// Ask the connection's watch to close it gracefully, for a newcomer.
    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// Take back its eviction: a request has started arriving since it was
    /// chosen. The newcomer it was chosen for looks again.
    fn spare(&self) {
        self.evicted.store(false, Ordering::Release);
        let slot = self.slot.lock().ok().and_then(|s| s.clone());
        if let Some((slots, id)) = slot
            && let Some(slots) = slots.upgrade()
        {
            slots.spare(id);
        }
    }

    /// Whether the connection is to close for a newcomer.
    fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
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

/// Why a connection may be closed for a newcomer, and since when; ordered
/// for [`slots::Registry::choose_victim`], the first chosen first: a
/// connection whose requests have stalled arriving before one idle
/// between requests (an idle HTTP/1.1 keep-alive connection may have the
/// client's next request on the wire, which closing it would lose unanswered;
/// a stalled request has already taken longer than a legitimate client's),
/// then the one stalled, or idle, longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Evictable {
    /// Every request on it has been arriving since then (the earliest
    /// first byte), for at least [`ConnLimits::min_arrival_before_eviction`].
    Stalled(Instant),
    /// Idle since then, for at least
    /// [`ConnLimits::min_idle_before_eviction`].
    Idle(Instant),
}

/// One request in flight on its connection's [`Activity`], from the moment
/// the service sees it until it is dropped: with the response body once
/// that is sent, or with the handler if the client cancels the request
/// (an HTTP/2 `RST_STREAM` drops the handler's future mid-way). Once the
/// handler has produced the response, it is counted as unsent until then.
#[derive(Debug)]
struct InFlight {
    activity: Arc<Activity>,
    response: Option<u64>,
    /// Its number among the connection's arriving requests.
    request: u64,
}

impl InFlight {
    /// Also counts the request as arriving since its first byte (the
    /// request bytes not yet taken by a request, else now) until
    /// the handler has read its body ([`ArrivingBody`]) or
    /// [`Self::produced`].
    fn enter(activity: Arc<Activity>) -> Self {
        activity.started.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        let now = Instant::now();
        let since = activity.arrived_at().map_or(now, |at| at.min(now));
        let request = activity.start_arriving(since);
        activity.set_request_arrived(false);
        activity.touch();
        activity.changed.notify_one();
        Self {
            activity,
            response: None,
            request,
        }
    }

    /// The handler produced the response: it is to be sent within the
    /// write timeout, and the request is no longer arriving.
    fn produced(&mut self) {
        self.activity.arrived_whole(self.request);
        self.response = Some(self.activity.produced());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.activity;
        activity.arrived_whole(self.request);
        if let Some(n) = self.response {
            activity.sent(n);
        }
        activity.touch();
        let was = activity.in_flight.fetch_sub(1, Ordering::AcqRel);
        if was == 1 {
            // Bytes read while it was in flight were its own (HTTP/1.1
            // body) or a request that has started since.
            activity.set_request_arrived(false);
        }
        activity.changed.notify_one();
        if was == 1 {
            activity.idle.notify_waiters();
        }
    }
}

/// A connection's socket (TLS stream or TCP), watched: the bytes it reads
/// are told to its [`Activity`] as request bytes or not ([`RequestBytes`]),
/// and so is a write that blocks (returns pending) and its end.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
    request_bytes: RequestBytes,
    write_blocked: bool,
}

impl<T> Watched<T> {
    fn new(inner: T, h2: bool, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            request_bytes: RequestBytes::new(h2),
            write_blocked: false,
        }
    }

    /// Tell the activity whether a write is blocked, on a change only.
    fn wrote<R>(&mut self, polled: &Poll<R>) {
        let blocked = polled.is_pending();
        if blocked != self.write_blocked {
            self.write_blocked = blocked;
            self.activity.write_blocked(blocked);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = buf.filled().get(before..).unwrap_or_default();
            if !new.is_empty() {
                let me = &mut *self;
                let arrived = me.request_bytes.feed(new);
                let mid = me.request_bytes.mid_request();
                me.activity.mid_request.store(mid, Ordering::Release);
                if arrived || mid {
                    me.activity.set_request_arrived(true);
                }
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(&polled);
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.wrote(&polled);
        polled
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

/// A request body that keeps its request counted as arriving
/// ([`Activity::arriving_since`]) until the handler has read it to its end,
/// or dropped it.
struct ArrivingBody {
    inner: Body,
    /// The connection and the request's number; `None` once read.
    arriving: Option<(Arc<Activity>, u64)>,
}

impl ArrivingBody {
    fn arrived(&mut self) {
        if let Some((activity, n)) = self.arriving.take() {
            activity.arrived_whole(n);
        }
    }
}

impl Drop for ArrivingBody {
    fn drop(&mut self) {
        self.arrived();
    }
}

impl HttpBody for ArrivingBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            self.arrived();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts a request in flight on its connection's [`Activity`] from its
/// start until its response body is sent or the request is cancelled, and
/// as arriving until the handler has read its body to the end (at once if
/// it has none) or produced the response.
async fn track(activity: Arc<Activity>, req: Request, next: Next) -> axum::response::Response {
    let mut in_flight = InFlight::enter(activity.clone());
    let request = in_flight.request;
    let req = req.map(|inner| {
        let mut body = ArrivingBody {
            inner,
            arriving: Some((activity, request)),
        };
        if body.inner.is_end_stream() {
            body.arrived();
        }
        Body::new(body)
    });
    let response = next.run(req).await;
    in_flight.produced();
    response.map(|inner| {
        Body::new(TrackedBody {
            inner,
            _in_flight: in_flight,
        })
    })
}

/// Serves one connection's requests with `router` until it ends: HTTP/2 when
/// `h2` (from ALPN), else HTTP/1.1 with `limits.header_read_timeout`.
/// Drops it if no request started within `limits.header_read_timeout`, or
/// if a response is not taken in whole, or a write makes no progress,
/// within `limits.write_timeout`; closes it gracefully when `stop` fires,
/// when it has been idle (no request in flight) for `limits.idle_timeout`,
/// or when `activity` is evicted for a newcomer (dropped at once if no
/// request has started on it and none is arriving), and drops it if the
/// close is not done `limits.header_read_timeout` later with nothing in
/// flight.
async fn serve_connection<I>(
    io: I,
    h2: bool,
    router: Router,
    limits: ConnLimits,
    mut stop: Stop,
    peer: SocketAddr,
    activity: Arc<Activity>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Watched::new(io, h2, activity.clone()));
    let accepted = Instant::now();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Not hyper's header timer: it also runs while a keep-alive
        // connection waits for its next request (`Conn::poll_read_head`,
        // hyper 1.12.0), closing it after the read timeout, 10 s, while the
        // API server keeps an idle connection 90 s and loses a review it
        // writes onto one as it closes. The loop below times the headers
        // from their first byte instead.
        .header_read_timeout(None)
        .max_buf_size(HTTP1_MAX_BUF_BYTES)
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
    // the auto builder's sniff has no timer. The loop below bounds the
    // wait for the first request (HTTP/2 has no timer, not even for the
    // preface) and, over HTTP/1.1, each request's headers from their first
    // byte.
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
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
        if close_by.is_none() && activity.evicted() {
            // Chosen while idle, or with its requests stalled arriving. Let
            // the runtime look at the socket (a yielding task resumes after
            // the I/O driver is polled), take in whatever it holds, and
            // keep the connection unless it is still as it was chosen.
            tokio::task::yield_now().await;
            if let Poll::Ready(ended) =
                std::future::poll_fn(|cx| Poll::Ready(conn.as_mut().poll(cx))).await
            {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            let now = Instant::now();
            match activity.evictable(
                now,
                limits.min_idle_before_eviction,
                limits.min_arrival_before_eviction,
            ) {
                Some(Evictable::Stalled(since)) => {
                    // Nothing handled yet; a graceful close would wait
                    // for the stalled request.
                    tracing::debug!(%peer, arriving_for = ?now.saturating_duration_since(since), "dropping a connection whose request stalled arriving: its slot goes to a peer holding fewer");
                    return;
                }
                // Idle: no request in flight nor arriving
                // (`Activity::idle_since`).
                Some(Evictable::Idle(_)) => {}
                None => {
                    tracing::debug!(%peer, "a request started arriving on the connection chosen for a newcomer (it is no longer idle nor stalled); keeping it");
                    activity.spare();
                    continue;
                }
            }
            if !activity.started() {
                // Nothing is lost; hyper cannot close an HTTP/1.1
                // connection gracefully before its first request, nor an
                // HTTP/2 one before the client's preface.
                tracing::debug!(%peer, "dropping a connection that has not started a request: its slot goes to a peer holding fewer");
                return;
            }
            tracing::debug!(%peer, "closing an idle connection: its slot goes to a peer holding fewer");
            conn.as_mut().graceful_shutdown();
            close_by = Some(Instant::now() + limits.header_read_timeout);
        }
        // While a request is in flight, its end wakes the loop (`changed`).
        let idle_at = activity
            .idle_at(limits.idle_timeout)
            .unwrap_or_else(|| Instant::now() + limits.idle_timeout);
        let deadline = match close_by {
            Some(at) => at,
            None if !activity.started() => idle_at.min(first_request_by),
            None => idle_at,
        };
        let send_by = activity.send_by(limits.write_timeout);
        let deadline = send_by.map_or(deadline, |at| at.min(deadline));
        // A request whose first bytes arrived reaches the service within
        // the read timeout (a request in flight has): over HTTP/1.1 its
        // headers are then complete; over HTTP/2 a stream that never
        // reaches it (hyper reset it: no `:method`, say) must not keep the
        // connection from being idle for good.
        let headers_by = (!activity.busy())
            .then(|| activity.arrived_at())
            .flatten()
            .map(|at| at + limits.header_read_timeout);
        let deadline = headers_by.map_or(deadline, |at| at.min(deadline));
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
                if send_by.is_some_and(|at| at <= now) {
                    // A graceful close would wait on the same output.
                    tracing::debug!(%peer, write_timeout = ?limits.write_timeout, "a response not sent within the write timeout (the client does not read, or its flow-control window is closed); dropping the connection");
                    return;
                }
                if headers_by.is_some_and(|at| at <= now) && !activity.busy() {
                    if h2 {
                        tracing::debug!(%peer, timeout = ?limits.header_read_timeout, "request bytes that started no request within the read timeout; the connection counts as idle again");
                        activity.mid_request.store(false, Ordering::Release);
                        activity.set_request_arrived(false);
                        continue;
                    }
                    tracing::debug!(%peer, timeout = ?limits.header_read_timeout, "a request's headers not read within the read timeout of their first byte; dropping the connection");
                    return;
                }
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
/// `limits.max_connections` at once, shared by peer address as on the HTTPS
/// port, and `limits.header_read_timeout` per request's headers. Its
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
        move |tcp, peer, stop, activity| {
            let router = router.clone();
            async move {
                serve_connection(tcp, false, router, limits, stop, peer, activity).await;
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
        move |tcp, peer, stop, activity| {
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let router = router.clone();
            async move {
                let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp));
                let tls = tokio::select! {
                    done = handshake => match done {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    },
                    // No request can have started arriving yet.
                    () = activity.wait_evicted() => {
                        tracing::debug!(%peer, "dropping a connection still in its TLS handshake: its slot goes to a peer holding fewer");
                        return;
                    }
                };
                // Idle (for a newcomer's eviction) from the handshake's
                // end, not from taking the slot: a handshake slowed by a
                // starved CPU does not cost the request that follows it.
                activity.touch();
                let session = tls.get_ref().1;
                let h2 = session.alpn_protocol() == Some(b"h2".as_slice());
                // rustls verified any certificate the client presented.
                let verified = session.peer_certificates().is_some_and(|c| !c.is_empty());
                let router = router.layer(axum::Extension(ClientCert { verified }));
                serve_connection(tls, h2, router, limits, stop, peer, activity).await;
            }
        },
    )
    .await;
}

/// What the accept loop keeps per connection holding a slot: its activity
/// (to tell whether it is idle, and to evict it) and, once it is evicted,
/// where its slot goes when it ends (the newcomer it was evicted for).
#[derive(Debug)]
struct Holder {
    activity: Arc<Activity>,
    handoff: Option<oneshot::Sender<SlotPermit>>,
}

/// The connection slots of one accept loop: the permits (one per slot), who
/// holds them by peer address, the connections waiting for one (at most
/// [`MAX_WAITING_CONNECTIONS`] seats, by peer address, [`seats`]; each
/// seated connection's entry holds the sender on which its slot comes, and
/// whose drop tells it that its seat went to a newcomer), and the wake-up of
/// newcomers waiting for one when a connection becomes idle.
///
/// A permit is free in the semaphore only while no connection waits: a
/// freed one goes to the next waiting connection ([`Seats::next_for_slot`])
/// when there is one ([`SlotPermit`]). Locks: `seats` before `registry`
/// when both are held.
#[derive(Debug)]
struct Slots {
    permits: Arc<Semaphore>,
    registry: Mutex<Registry<Holder>>,
    seats: Mutex<Seats<oneshot::Sender<SlotPermit>>>,
    idle: Arc<Notify>,
}

/// A slot's permit: when dropped, it goes to the next waiting connection
/// ([`Slots::give`]), or back to the semaphore if none waits.
#[derive(Debug)]
struct SlotPermit {
    slots: Arc<Slots>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.slots.give(permit);
        }
    }
}

/// A slot held by one connection: given back when dropped, to the newcomer
/// the connection was evicted for if there is one, else to the next waiting
/// connection ([`SlotPermit`]).
struct Slot {
    slots: Arc<Slots>,
    id: ConnId,
    permit: Option<SlotPermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Forgotten first, so that its peer's count is right for the next.
        let holder = self.slots.registry().remove(self.id);
        if let (
            Some(Holder {
                handoff: Some(to), ..
            }),
            Some(permit),
        ) = (holder, self.permit.take())
        {
            // A newcomer that gave up sends it back: dropped, it goes to
            // the next waiting connection.
            let _ = to.send(permit);
        }
    }
}

impl Slots {
    fn new(slots: usize, seats: usize) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(slots)),
            registry: Mutex::new(Registry::default()),
            seats: Mutex::new(Seats::new(seats)),
            idle: Arc::new(Notify::new()),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry<Holder>> {
        // The registry's updates do not panic half-way; a poisoned lock
        // holds a consistent registry.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn seats(&self) -> MutexGuard<'_, Seats<oneshot::Sender<SlotPermit>>> {
        // The seats' updates do not panic half-way; a poisoned lock holds
        // consistent seats.
        self.seats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free slot now, if one is: only when no connection waits for one
    /// (a freed slot goes to a waiting connection first).
    fn try_take(self: &Arc<Self>) -> Result<SlotPermit, TryAcquireError> {
        let permit = self.permits.clone().try_acquire_owned()?;
        Ok(SlotPermit {
            slots: self.clone(),
            permit: Some(permit),
        })
    }

    /// Hand a freed slot to the waiting connection
    /// [`Seats::next_for_slot`] names (the peers with connections waiting
    /// take turns), or to the semaphore if none waits.
    fn give(self: &Arc<Self>, mut permit: OwnedSemaphorePermit) {
        loop {
            let next = {
                let mut seats = self.seats();
                let registry = self.registry();
                seats.next_for_slot(|peer| registry.held(peer))
            };
            let Some((_, to)) = next else {
                // Back to the semaphore (dropped).
                return;
            };
            let given = SlotPermit {
                slots: self.clone(),
                permit: Some(permit),
            };
            match to.send(given) {
                Ok(()) => return,
                // That connection is gone: the next one.
                Err(mut back) => match back.permit.take() {
                    Some(p) => permit = p,
                    None => return,
                },
            }
        }
    }

    /// Record `activity`'s connection from `peer` as holding `permit`.
    fn hold(self: &Arc<Self>, peer: IpAddr, activity: Arc<Activity>, permit: SlotPermit) -> Slot {
        // Not yet started: idle since now, for eviction.
        activity.touch();
        let id = self.registry().insert(
            peer,
            Holder {
                activity: activity.clone(),
                handoff: None,
            },
        );
        if let Ok(mut slot) = activity.slot.lock() {
            *slot = Some((Arc::downgrade(self), id));
        }
        Slot {
            slots: self.clone(),
            id,
            permit: Some(permit),
        }
    }

    /// For a newcomer from `peer`: evict a connection per
    /// [`Registry::choose_victim`] and return where its slot will come, or
    /// `None` if none may be evicted. The newcomer's reservation lasts until
    /// [`Self::release`].
    fn evict_for(
        &self,
        port: &'static str,
        peer: IpAddr,
        limits: ConnLimits,
    ) -> Option<oneshot::Receiver<SlotPermit>> {
        let now = Instant::now();
        let mut registry = self.registry();
        let victim = registry.choose_victim(peer, |h| {
            h.activity.evictable(
                now,
                limits.min_idle_before_eviction,
                limits.min_arrival_before_eviction,
            )
        })?;
        let (to, from) = oneshot::channel();
        victim.conn.handoff = Some(to);
        victim.conn.activity.evict();
        let why = match victim.key {
            Evictable::Stalled(_) => "a request stalled arriving",
            Evictable::Idle(_) => "idle",
        };
        tracing::debug!(
            port,
            peer = %victim.id.peer(),
            held = victim.peer_held,
            newcomer = %peer,
            why,
            "every connection slot held: closing a connection of the peer holding the most (stalled arrivals first, then the longest idle)"
        );
        Some(from)
    }

    fn release(&self, peer: IpAddr) {
        self.registry().release(peer);
    }

    /// Take back the eviction of `id` ([`Registry::spare`]): the newcomer
    /// it was chosen for is told (its handoff is dropped) and looks again.
    fn spare(&self, id: ConnId) {
        let handoff = self
            .registry()
            .spare(id)
            .and_then(|holder| holder.handoff.take());
        drop(handoff);
    }

    /// Seat a connection from `peer` accepted at `accepted`, per
    /// [`Seats::seat`]: if every seat is taken, the oldest waiting
    /// connection of the peer with the most waiting is told to drop its
    /// connection (it has served nothing yet), or `None`: the newcomer is
    /// to be dropped.
    fn seat(self: &Arc<Self>, port: &'static str, peer: IpAddr, accepted: Instant) -> Option<Seat> {
        let (to, given) = oneshot::channel();
        let mut seats = self.seats();
        let seated = match seats.seat(peer, to) {
            Ok(seated) => seated,
            Err(_) => {
                let waiting = seats.waiting(peer);
                drop(seats);
                tracing::debug!(port, %peer, waiting, "every seat taken and none may go to this peer; dropping the connection");
                return None;
            }
        };
        drop(seats);
        if let Some(gone) = seated.unseated {
            tracing::debug!(
                port,
                peer = %gone.id.peer(),
                waiting = gone.peer_waiting,
                newcomer = %peer,
                "every seat taken: dropping the oldest waiting connection of the peer with the most waiting"
            );
            // Dropping the sender wakes it; it drops its connection.
            drop(gone.conn);
        }
        Some(Seat {
            slots: self.clone(),
            id: seated.id,
            accepted,
            given,
        })
    }

    /// A slot for the connection in `seat` (from `seat.peer()`, accepted at
    /// `seat.accepted`): a free one, else the slot of a connection evicted
    /// for it, else a freed one handed to it; `None` if none came within
    /// `limits.header_read_timeout` of `seat.accepted` (or of the eviction,
    /// plus the victim's own `limits.header_read_timeout` to close), or
    /// `stop` fired, or the connection lost its seat to a newcomer.
    async fn take(
        self: &Arc<Self>,
        port: &'static str,
        activity: Arc<Activity>,
        limits: ConnLimits,
        stop: &mut Stop,
        seat: &mut Seat,
    ) -> Option<Slot> {
        let peer = seat.peer();
        let (permit, reserved) = match self.try_take() {
            Ok(permit) => (permit, false),
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => self.wait(port, limits, stop, seat).await?,
        };
        let slot = self.hold(peer, activity, permit);
        // Counted as a connection now: the reservation is done.
        if reserved {
            self.release(peer);
        }
        Some(slot)
    }

    /// The waiting part of [`Self::take`]: the permit, and whether a
    /// reservation made for it is still to be [released](Self::release).
    async fn wait(
        self: &Arc<Self>,
        port: &'static str,
        limits: ConnLimits,
        stop: &mut Stop,
        seat: &mut Seat,
    ) -> Option<(SlotPermit, bool)> {
        let peer = seat.peer();
        let mut until = seat.accepted + limits.header_read_timeout;
        let mut handoff: Option<oneshot::Receiver<SlotPermit>> = None;
        let permit = loop {
            // Registered before looking for a victim, so that a connection
            // that becomes idle meanwhile still wakes this loop.
            let became_idle = self.idle.notified();
            tokio::pin!(became_idle);
            became_idle.as_mut().enable();
            // A slot given back to the semaphore while this connection was
            // being seated (a freed slot's hand-out found no one waiting
            // yet) is free: take it.
            if handoff.is_none() {
                if let Ok(permit) = self.try_take() {
                    break Some(permit);
                }
                handoff = self.evict_for(port, peer, limits);
                if handoff.is_some() {
                    // The victim closes gracefully within its own read
                    // timeout (or after a request that started meanwhile).
                    until = until.max(Instant::now() + 2 * limits.header_read_timeout);
                }
            }
            let waiting_for_handoff = handoff.is_some();
            let handed = async {
                match handoff.as_mut() {
                    Some(from) => from.await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // A freed slot handed to this seat, or the seat went to a
                // newcomer (the sender is dropped).
                given = &mut seat.given => break given.ok(),
                permit = handed => match permit {
                    Some(permit) => break Some(permit),
                    // The victim ended without handing its slot over (it
                    // cannot, but then look again).
                    None => {
                        handoff = None;
                        self.release(peer);
                    }
                },
                () = became_idle, if !waiting_for_handoff => {}
                // A connection idle but not yet for
                // `min_idle_before_eviction` becomes a candidate with no
                // event: look again every second.
                () = tokio::time::sleep(EVICTION_RECHECK), if !waiting_for_handoff => {}
                () = tokio::time::sleep_until(until) => break None,
                _ = stop.wait_for(|stopped| *stopped) => break None,
            }
        };
        let reserved = handoff.is_some();
        if permit.is_none() && reserved {
            self.release(peer);
        }
        permit.map(|permit| (permit, reserved))
    }
}

/// A connection's seat among those waiting for a slot: its peer, when it
/// was accepted, and where a freed slot is handed to it (closed without one
/// when its seat goes to a newcomer). It leaves the seat when dropped (once
/// it has a slot, or gave up); a slot handed to it meanwhile goes to the
/// next waiting connection.
#[derive(Debug)]
struct Seat {
    slots: Arc<Slots>,
    id: SeatId,
    accepted: Instant,
    given: oneshot::Receiver<SlotPermit>,
}

impl Seat {
    fn peer(&self) -> IpAddr {
        self.id.peer()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        // Nothing if the seat already went to a newcomer or was handed a
        // slot.
        let _ = self.slots.seats().remove(self.id);
    }
}

/// How an accepted connection is let in: with a slot free at once, or into
/// a seat to wait for one.
enum Admitted {
    Slot(SlotPermit),
    Seat(Seat),
}

/// The accept loop both ports share: accepts a connection at a time; gives
/// it a free slot at once if one is free (then no connection waits), else
/// seats it among those waiting for one ([`Slots::seat`]: at most
/// [`MAX_WAITING_CONNECTIONS`], shared by peer address; a newcomer that gets
/// no seat is dropped at once, so accepting never stops) and spawns its
/// task, which waits for a slot ([`Slots::take`]: at most
/// `limits.max_connections` at once, shared by peer address), leaves its
/// seat and runs `serve` on the connection, until `stop` resolves; then
/// tells every connection to close gracefully and waits for all of them
/// (every slot back) for at most `grace`. `port` names the listener in its
/// log lines.
async fn accept_loop<F, Fut>(
    port: &'static str,
    listener: TcpListener,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
    grace: Duration,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr, Stop, Arc<Activity>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let count = limits.max_connections.max(1);
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Slots::new(count, MAX_WAITING_CONNECTIONS);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(port, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let accepted = Instant::now();
        let key = peer_key(peer);
        // A free slot is taken at once, without a seat; else decided at
        // once: a seat (a connection gives it back once it has a slot, or
        // gives up), or dropped here.
        let admitted = match slots.try_take() {
            Ok(permit) => Admitted::Slot(permit),
            Err(_) => match slots.seat(port, key, accepted) {
                Some(seat) => Admitted::Seat(seat),
                None => {
                    drop(tcp);
                    continue;
                }
            },
        };
        let activity = Activity::new(slots.idle.clone());
        let connection = serve(tcp, peer, stop_rx.clone(), activity.clone());
        match admitted {
            Admitted::Slot(permit) => {
                let slot = slots.hold(key, activity, permit);
                tokio::spawn(async move {
                    let _slot = slot;
                    connection.await;
                });
            }
            Admitted::Seat(mut seat) => {
                let mut stop = stop_rx.clone();
                let slots = slots.clone();
                tokio::spawn(async move {
                    let taken = slots
                        .take(port, activity, limits, &mut stop, &mut seat)
                        .await;
                    drop(seat);
                    let Some(_slot) = taken else {
                        tracing::debug!(port, %peer, "no connection slot within the read timeout, or the seat went to a newcomer; dropping the connection");
                        return;
                    };
                    connection.await;
                });
            }
        }
    }
    drop(listener);
    tracing::info!(
        port,
        "stopped accepting connections; waiting for in-flight requests"
    );
    let _ = stop_tx.send(true);
    let all_closed = slots
        .permits
        .acquire_many(u32::try_from(count).unwrap_or(u32::MAX));
    if tokio::time::timeout(grace, all_closed).await.is_err() {
        tracing::warn!(port, ?grace, "in-flight connections did not finish in time");
    }
}
