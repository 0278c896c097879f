//! The start gate: the native sidecar's `lifecycle.postStart` `httpGet`
//! handler, answered by the watcher itself once it is armed.
//!
//! The kubelet runs a postStart handler to completion before it returns from
//! starting the container, and starts the containers after this native
//! sidecar only in a later pod sync (`startContainer` in
//! `pkg/kubelet/kuberuntime/kuberuntime_container.go`, v1.37.2). An
//! `httpGet` handler is one request from the kubelet to the pod's IP
//! (`runHTTPHandler` in `pkg/kubelet/lifecycle/handlers.go`, v1.37.2;
//! `docs/facts.md` K14):
//! - a response of any status ends the handler with success (the status is
//!   not read: only a transport error is a failure);
//! - a transport error (connection refused, reset) fails it, and the
//!   kubelet then kills the sidecar (`FailedPostStartHook`) and restarts it
//!   with its back-off;
//! - the kubelet's client has no timeout (`insecureContainerLifecycleHTTPClient`
//!   in `pkg/kubelet/kuberuntime/kuberuntime_manager.go`), so a request the
//!   gate holds holds the pod's next containers.
//!
//! So the watcher listens from its first instruction and holds every
//! request until it is armed ([`Armed`]), or until the fail-open deadline:
//! then it answers anyway, so that a watcher that cannot arm never blocks
//! the Job. That costs no `runc exec`, which the exec handler
//! ([`crate::poststart`], the default) does. But the kubelet asks right
//! after the runtime's `StartContainer` returns: a watcher not scheduled by
//! then is not listening, the request is refused and the kubelet restarts
//! the sidecar, again and again on a CPU-saturated node (`docs/figures.md`,
//! "Why `http-get` is not the default"). Hence opt-in only
//! (`kube-prestop.io/gate: http-get`).
//!
//! Anyone who can reach the pod's IP can reach the port: every request is
//! hostile. A request learns only whether the watcher is armed. Every
//! connection is accepted at once (the accept queue is widened to the
//! kernel's cap); each may take [`READ_TIMEOUT`] for at most
//! [`MAX_REQUEST_BYTES`] of request head. With [`MAX_CONNECTIONS`] open,
//! a new one shuts down the oldest that has not sent a whole head (a
//! silent client: the kubelet sends its head at once), so silent clients
//! cannot keep the kubelet's request waiting; the answer never depends on
//! what was sent.

use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once before a new one shuts down the oldest
/// silent one; twice this many, all holding a whole request head, close
/// any further one.
pub const MAX_CONNECTIONS: usize = 16;
/// Most bytes of a request head read (the kubelet's is about 150).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a connection may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Stack of each connection's thread: it reads into an 8 KiB buffer and
/// formats one line.
const THREAD_STACK_BYTES: usize = 64 * 1024;

/// Whether the watcher is armed, shared by the watcher (which sets it) and
/// the gate's threads (which wait for it). Cloning shares the flag.
#[derive(Debug, Clone, Default)]
pub struct Armed(Arc<(Mutex<bool>, Condvar)>);

impl Armed {
    /// A flag not set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the flag and wakes every waiting request.
    pub fn set(&self) {
        let (lock, cond) = &*self.0;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cond.notify_all();
    }

    /// Waits until the flag is set or `deadline` passes; returns whether it
    /// is set.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let (lock, cond) = &*self.0;
        let mut armed = lock.lock().unwrap_or_else(|p| p.into_inner());
        while !*armed {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            armed = cond
                .wait_timeout(armed, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *armed
    }
}

/// Listens on `port` on every address of the pod: `[::]` (which takes IPv4
/// too unless the pod's `net.ipv6.bindv6only` is set), and `0.0.0.0`
/// besides when that bind leaves IPv4 out or IPv6 is unavailable. The
/// kubelet asks the pod's first IP, of either family
/// (`runHTTPHandler`: `status.IPs[0]`).
///
/// Call it first: until it returns, the kubelet's request is refused and
/// the kubelet restarts this sidecar. The kubelet's request comes after the
/// runtime's `StartContainer` has returned and after two more CRI calls
/// (`GetPod`, `GetPodStatus`), about 5 ms on an idle node: a watcher that
/// is scheduled in that time is listening; a starved one is not.
///
/// # Errors
/// The bind's error (`EADDRINUSE`: a process of the pod holds the port,
/// which no container declares; the kubelet's request then reaches it).
pub fn listen(port: u16) -> io::Result<Vec<TcpListener>> {
    let v6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)));
    let dual = v6.as_ref().is_ok_and(|l| !v6_only(l));
    let mut out = Vec::with_capacity(2);
    let v6_err = match v6 {
        Ok(l) => {
            out.push(l);
            None
        }
        // IPv6 requests would reach the holder: say so.
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(e),
        Err(e) => Some(e),
    };
    if !dual {
        match TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))) {
            Ok(l) => out.push(l),
            Err(e) if out.is_empty() => return Err(v6_err.unwrap_or(e)),
            // IPv4 requests would reach the holder: say so.
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(e),
            // No IPv4 in this pod: IPv6 serves the kubelet.
            Err(_) => {}
        }
    }
    for l in &out {
        widen_backlog(l);
    }
    Ok(out)
}

/// Raises the accept queue from the standard library's 128 to the
/// kernel's cap (`net.core.somaxconn`, 4096 by default since Linux 5.4),
/// so that connections waiting for the gate are queued, not dropped.
fn widen_backlog(l: &TcpListener) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: listen(2) again on a listening socket only changes its
    // backlog; the kernel caps the value at somaxconn.
    let _ = unsafe { libc::listen(l.as_raw_fd(), 4096) };
}

/// Whether an IPv6 socket takes IPv6 only (`IPV6_V6ONLY`).
fn v6_only(l: &TcpListener) -> bool {
    use std::os::fd::AsRawFd as _;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one int option into `v`, whose size `len` gives.
    let rc = unsafe {
        libc::getsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    // Unknown (the call failed): taken as dual-stack, the kernel default,
    // rather than binding IPv4 beside it and failing on our own socket.
    rc == 0 && v != 0
}

/// What the gate answers with, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The watcher is armed.
    Armed,
    /// The fail-open deadline passed first.
    FailOpen,
}

/// The HTTP response for `answer`: `200 OK` either way (the kubelet reads no
/// status; a later one that did must still let the pod go when the watcher
/// cannot arm), with a one-line body that says which.
pub fn response(answer: Answer) -> String {
    let body = match answer {
        Answer::Armed => "armed\n",
        Answer::FailOpen => "not armed: the pod goes on without the watcher (see its log)\n",
    };
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Whether `buf` holds a whole request head (up to the empty line).
pub fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

/// Serves the gate on `listeners` in threads of their own, for the life of
/// the process: each request is answered once `armed` is set, or at
/// `fail_open_at`. Log lines name `container`. Call after the signal mask of
/// the watcher is set (the threads inherit it, so the watcher's `signalfd`
/// still gets every signal).
///
/// # Errors
/// A thread could not be started (the gate then does not answer: the
/// kubelet's request fails and it restarts the sidecar).
pub fn serve(
    listeners: Vec<TcpListener>,
    armed: Armed,
    fail_open_at: Instant,
    container: String,
) -> io::Result<()> {
    let shared = Arc::new(Shared {
        armed,
        fail_open_at,
        container,
        started: Instant::now(),
        conns: Mutex::new(Conns::default()),
        answered: AtomicU64::new(0),
    });
    for listener in listeners {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("gate".into())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || accept_loop(&listener, &shared))?;
    }
    Ok(())
}

struct Shared {
    armed: Armed,
    fail_open_at: Instant,
    container: String,
    started: Instant,
    /// The connections being served ([`Conns`]).
    conns: Mutex<Conns>,
    answered: AtomicU64,
}

/// The connections being served: each one's id, a handle to shut it down,
/// and whether its request head has come whole.
#[derive(Default)]
struct Conns {
    next_id: u64,
    open: Vec<(u64, TcpStream, bool)>,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new connection; at [`MAX_CONNECTIONS`], first shuts down
    /// the oldest one whose request head has not come whole (a client that
    /// connects and says nothing; the kubelet sends its head at once), so a
    /// new client is never left waiting behind silent ones. Above twice
    /// that (every held connection sent a whole head before the watcher
    /// armed), `None`: the new connection is closed.
    fn admit(&self, stream: &TcpStream) -> Option<u64> {
        let mut c = self.conns();
        if c.open.len() >= MAX_CONNECTIONS
            && let Some(oldest) = c.open.iter().position(|(_, _, head)| !head)
        {
            // Out of the count at once (its thread's `done` finds nothing).
            let (_, victim, _) = c.open.remove(oldest);
            let _ = victim.shutdown(Shutdown::Both);
        }
        if c.open.len() >= 2 * MAX_CONNECTIONS {
            return None;
        }
        let handle = stream.try_clone().ok()?;
        c.next_id += 1;
        let id = c.next_id;
        c.open.push((id, handle, false));
        Some(id)
    }

    fn head_done(&self, id: u64) {
        if let Some(e) = self.conns().open.iter_mut().find(|(i, _, _)| *i == id) {
            e.2 = true;
        }
    }

    fn done(&self, id: u64) {
        self.conns().open.retain(|(i, _, _)| *i != id);
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: wait a little rather than spin.
                if e.kind() != io::ErrorKind::Interrupted {
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
        };
        let Some(id) = shared.admit(&stream) else {
            continue;
        };
        let s = Arc::clone(shared);
        let conn = Arc::new(Mutex::new(Some(stream)));
        let theirs = Arc::clone(&conn);
        let spawned = std::thread::Builder::new()
            .name("gate-conn".into())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || {
                if let Some(stream) = theirs.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    serve_one(stream, id, &s);
                }
                s.done(id);
            });
        if spawned.is_err() {
            // No thread (the pod's process limit): serve it here rather
            // than drop it unread, which would reset the kubelet's request.
            if let Some(stream) = conn.lock().unwrap_or_else(|p| p.into_inner()).take() {
                serve_one(stream, id, shared);
            }
            shared.done(id);
        }
    }
}

fn serve_one(mut stream: TcpStream, id: u64, shared: &Shared) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.ip().to_canonical().to_string());
    if !read_head(&mut stream, Instant::now() + READ_TIMEOUT) {
        return;
    }
    shared.head_done(id);
    let answer = if shared.armed.wait_until(shared.fail_open_at) {
        Answer::Armed
    } else {
        Answer::FailOpen
    };
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    if stream.write_all(response(answer).as_bytes()).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let n = shared.answered.fetch_add(1, Ordering::Relaxed) + 1;
    // The first answers say when the pod's next containers were let go; a
    // flood of requests logs one line per thousand.
    if n <= 3 || n.is_multiple_of(1000) {
        let waited = shared.started.elapsed().as_secs_f64();
        match answer {
            Answer::Armed => crate::log!(
                "gate answered container={} peer={peer} answers={n} since_start={waited:.3}s: the kubelet may start the pod's next containers",
                shared.container
            ),
            Answer::FailOpen => crate::log!(
                "warning: gate answered container={} peer={peer} answers={n} since_start={waited:.3}s without the watcher armed: the pod goes on (fail-open); this watcher may miss its container's first start",
                shared.container
            ),
        }
    }
}

/// Reads a request head of at most [`MAX_REQUEST_BYTES`] by `deadline`;
/// whether it came whole.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    while len < buf.len() {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        if stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .is_err()
        {
            return false;
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return false,
            Ok(n) => {
                len += n;
                if head_complete(&buf[..len]) {
                    return true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn get(port: u16) -> io::Result<String> {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        s.write_all(b"GET /armed HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-lifecycle/1.37\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn a_request_waits_until_armed() {
        let port = free_port();
        let armed = Armed::new();
        serve(
            listen(port).unwrap(),
            armed.clone(),
            Instant::now() + Duration::from_secs(60),
            "main".into(),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(get(port)));
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "answered before armed"
        );
        armed.set();
        let answer = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\narmed\n"), "{answer}");
        // Once armed, at once.
        assert!(get(port).unwrap().ends_with("armed\n"));
    }

    #[test]
    fn without_arming_it_answers_at_the_fail_open_deadline() {
        let port = free_port();
        serve(
            listen(port).unwrap(),
            Armed::new(),
            Instant::now() + Duration::from_millis(200),
            "main".into(),
        )
        .unwrap();
        let answer = get(port).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("not armed"), "{answer}");
    }

    #[test]
    fn silent_connections_do_not_hold_the_kubelets_request() {
        let port = free_port();
        let armed = Armed::new();
        armed.set();
        serve(
            listen(port).unwrap(),
            armed,
            Instant::now() + Duration::from_secs(60),
            "main".into(),
        )
        .unwrap();
        // Many more silent connections than slots: each new one shuts down
        // the oldest silent one, and the kubelet's request is answered at
        // once, well within the silent ones' read timeout.
        let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS * 4)
            .map(|_| TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap())
            .collect();
        let t = Instant::now();
        let answer = get(port).unwrap();
        assert!(answer.ends_with("armed\n"), "{answer}");
        assert!(t.elapsed() < READ_TIMEOUT, "waited {:?}", t.elapsed());
        drop(silent);
    }

    #[test]
    fn garbage_and_oversized_requests_get_no_answer_and_break_nothing() {
        let port = free_port();
        let armed = Armed::new();
        armed.set();
        serve(listen(port).unwrap(), armed, Instant::now(), "main".into()).unwrap();
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        // The server stops reading at the cap and closes: writing may fail.
        let _ = s.write_all(&vec![b'x'; MAX_REQUEST_BYTES + 1]);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(out.is_empty(), "no answer to a request without a head");
        assert!(get(port).unwrap().ends_with("armed\n"));
    }

    #[test]
    fn heads_end_at_the_empty_line() {
        assert!(head_complete(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(head_complete(b"GET / HTTP/1.0\n\n"));
        assert!(!head_complete(b"GET / HTTP/1.1\r\nHost: a\r\n"));
        assert!(!head_complete(b""));
    }

    #[test]
    fn a_held_port_is_an_error() {
        let held = TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
            .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))
            .unwrap();
        let port = held.local_addr().unwrap().port();
        let e = listen(port).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }
}
