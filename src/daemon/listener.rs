//! The gRPC listener's accept loop and the connections it hands to tonic: what keeps
//! the daemon reachable when clients misbehave or descriptors run out.
//!
//! tonic's own accept loop ends on the first accept error it does not expect (EMFILE
//! among them), and with it the server, while the process stays up. Here the loop is
//! ours ([`serve_incoming`]): an accept error is counted, logged at error (at most
//! once per [`ERROR_LOG_EVERY`]), backed off and retried; it never ends the loop.
//!
//! Every accepted connection is a [`Conn`] in a [`ConnTable`], wrapped in a
//! [`TrackedIo`] that tonic serves. What the table knows of each connection:
//! bytes read (the handshake), requests started and in flight, and whether one of
//! them carried the token (set by the auth interceptor through [`ConnInfo`], which
//! tonic puts in every request's extensions; [`TrackLayer`] counts the requests).
//! From that, the bounds (`[daemon]` in config.toml):
//! - `max_connections` open at once. At the cap a new connection closes an old one
//!   that has not sent a request yet (oldest first), else one that has not
//!   authenticated, else the one idle longest; one with a request in flight is never
//!   closed. When every connection is busy the new one is refused.
//! - deadlines from accept: `handshake_timeout_secs` for the first 24 bytes (the
//!   HTTP/2 preface, or a TLS ClientHello), `first_request_timeout_secs` for a
//!   request to start, `auth_timeout_secs` for one that carries the token;
//! - `idle_timeout_secs` without a request in flight.
//!
//! A connection is closed with `shutdown(2)` on its socket, which wakes whatever
//! task holds it (hyper, or tonic's TLS handshake) with an error so that the socket
//! is dropped and its descriptor freed. [`TrackedIo`]'s drop clears the descriptor
//! from the table under the same lock first, so a closed descriptor number reused by
//! another file is never shut down.

use std::{
    collections::HashMap,
    future::Future,
    io,
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::{codegen::http, transport::server::Connected};
use tracing::{debug, error};

use super::DaemonConfig;

/// Accept errors are logged at most this often (with the count since the last).
const ERROR_LOG_EVERY: Duration = Duration::from_secs(5);
/// How often the deadlines are checked.
const REAP_EVERY: Duration = Duration::from_millis(250);
/// Bytes of the HTTP/2 client preface; a TLS ClientHello is longer.
const HANDSHAKE_BYTES: u64 = 24;

/// Why a connection was closed by the daemon (the `reason` label of
/// `cuzk_listener_connections_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    Handshake,
    FirstRequest,
    Auth,
    Idle,
    /// Closed to make room for a new connection at the cap, or to free a descriptor.
    Evicted,
    /// A new connection at the cap when every open one had a request in flight.
    Refused,
}

impl CloseReason {
    pub const ALL: [CloseReason; 6] = [
        CloseReason::Handshake,
        CloseReason::FirstRequest,
        CloseReason::Auth,
        CloseReason::Idle,
        CloseReason::Evicted,
        CloseReason::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Handshake => "handshake",
            CloseReason::FirstRequest => "first_request",
            CloseReason::Auth => "auth",
            CloseReason::Idle => "idle",
            CloseReason::Evicted => "evicted",
            CloseReason::Refused => "refused",
        }
    }
}

/// The bounds of one listener, from `[daemon]`.
#[derive(Clone, Debug)]
pub struct Bounds {
    pub max_connections: usize,
    pub handshake: Duration,
    pub first_request: Duration,
    /// `None` when no token is required.
    pub auth: Option<Duration>,
    pub idle: Duration,
}

impl Bounds {
    pub fn from_config(cfg: &DaemonConfig, auth_enabled: bool) -> Bounds {
        Bounds {
            max_connections: cfg.max_connections,
            handshake: Duration::from_secs(cfg.handshake_timeout_secs),
            first_request: Duration::from_secs(cfg.first_request_timeout_secs),
            auth: auth_enabled.then(|| Duration::from_secs(cfg.auth_timeout_secs)),
            idle: Duration::from_secs(cfg.idle_timeout_secs),
        }
    }
}

/// A listener's counters, read by `/metrics`, GetStatus and `cuzk status`.
#[derive(Debug)]
pub struct ListenerStats {
    /// "grpc" or "metrics".
    pub name: &'static str,
    pub address: String,
    pub max_connections: usize,
    /// True while the accept loop runs.
    pub up: AtomicBool,
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    pub accept_errors: AtomicU64,
    closed: [AtomicU64; 6],
}

impl ListenerStats {
    pub fn new(name: &'static str, address: String, max_connections: usize) -> Arc<ListenerStats> {
        Arc::new(ListenerStats {
            name,
            address,
            max_connections,
            up: AtomicBool::new(false),
            open: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            closed: Default::default(),
        })
    }

    pub fn closed(&self, r: CloseReason) -> u64 {
        self.closed[r as usize].load(Relaxed)
    }

    pub(super) fn count_closed(&self, r: CloseReason) {
        self.closed[r as usize].fetch_add(1, Relaxed);
    }

    /// Counts an accept error and logs it at error, at most once per
    /// [`ERROR_LOG_EVERY`] (`last` is the caller's clock of the last log).
    pub(super) fn accept_error(&self, e: &io::Error, last: &mut Option<(Instant, u64)>) {
        let n = self.accept_errors.fetch_add(1, Relaxed) + 1;
        let due = last.is_none_or(|(t, _)| t.elapsed() >= ERROR_LOG_EVERY);
        if due {
            let since = last.map_or(n, |(_, before)| n - before);
            error!(listener = self.name, address = %self.address, error = %e, errors_since_last_report = since,
                "accept failed; backing off and accepting again");
            *last = Some((Instant::now(), n));
        }
    }
}

/// The listeners' figures in Prometheus text (appended to `/metrics` and GetMetrics).
pub fn render(listeners: &[Arc<ListenerStats>]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    type Get = fn(&ListenerStats) -> u64;
    let families: [(&str, &str, &str, Get); 5] = [
        ("cuzk_listener_up", "gauge", "1 while the listener accepts connections.", |l| l.up.load(Relaxed) as u64),
        ("cuzk_listener_connections", "gauge", "Connections open now.", |l| l.open.load(Relaxed)),
        ("cuzk_listener_max_connections", "gauge", "The cap on open connections.", |l| l.max_connections as u64),
        ("cuzk_listener_accepted_total", "counter", "Connections accepted.", |l| l.accepted.load(Relaxed)),
        (
            "cuzk_listener_accept_errors_total",
            "counter",
            "Accept errors (EMFILE: out of file descriptors), each backed off and retried.",
            |l| l.accept_errors.load(Relaxed),
        ),
    ];
    for (name, kind, help, get) in families {
        crate::metrics::family(&mut o, name, kind, help);
        for l in listeners {
            let _ = writeln!(o, "{name}{{listener=\"{}\"}} {}", l.name, get(l));
        }
    }
    let name = "cuzk_listener_connections_closed_total";
    crate::metrics::family(
        &mut o,
        name,
        "counter",
        "Connections the daemon closed, by the bound that closed them (handshake, first_request, auth, idle: \
         deadlines; evicted: to make room at the cap; refused: at the cap with every connection busy).",
    );
    for l in listeners {
        for r in CloseReason::ALL {
            let _ = writeln!(o, "{name}{{listener=\"{}\",reason=\"{}\"}} {}", l.name, r.as_str(), l.closed(r));
        }
    }
    o
}

/// One accepted connection, as the table sees it.
#[derive(Debug)]
pub struct Conn {
    accepted: Instant,
    /// The socket, until [`TrackedIo`] is dropped (see the module docs).
    fd: Mutex<Option<RawFd>>,
    bytes_read: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU32,
    authed: AtomicBool,
    /// Milliseconds since `accepted` of the last request's start or end.
    last_active_ms: AtomicU64,
    closing: AtomicBool,
}

impl Conn {
    fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.accepted + Duration::from_millis(self.last_active_ms.load(Relaxed)))
    }

    fn touch(&self) {
        self.last_active_ms.store(self.accepted.elapsed().as_millis() as u64, Relaxed);
    }

    /// Marks the connection as having carried the token.
    pub fn authenticated(&self) {
        self.authed.store(true, Relaxed);
    }

    /// Closes the socket under the daemon's feet; false if already closing or gone.
    #[allow(unsafe_code)]
    fn close(&self) -> bool {
        if self.closing.swap(true, Relaxed) {
            return false;
        }
        let fd = self.fd.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fd) = *fd {
            // SAFETY: `fd` is the open socket of a live TrackedIo: its drop clears
            // this slot under the same lock before the socket is closed.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
            true
        } else {
            false
        }
    }
}

/// What tonic puts in every request's extensions for this connection.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    pub conn: Arc<Conn>,
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct ConnTable {
    pub stats: Arc<ListenerStats>,
    bounds: Bounds,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
}

impl ConnTable {
    pub fn new(stats: Arc<ListenerStats>, bounds: Bounds) -> Arc<ConnTable> {
        Arc::new(ConnTable { stats, bounds, conns: Mutex::new(HashMap::new()), next: AtomicU64::new(0) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a new connection in, making room at the cap (module docs); `None` if it
    /// was refused (every open connection is busy).
    fn admit<S: AsRawFd>(self: &Arc<Self>, io: S, remote: Option<SocketAddr>) -> Option<TrackedIo<S>> {
        let now = Instant::now();
        let open = self.lock().values().filter(|c| !c.closing.load(Relaxed)).count();
        if open >= self.bounds.max_connections && !self.evict_one(now) {
            self.stats.count_closed(CloseReason::Refused);
            debug!(listener = self.stats.name, ?remote, "at max_connections with every connection busy: refused");
            return None;
        }
        let conn = Arc::new(Conn {
            accepted: now,
            fd: Mutex::new(Some(io.as_raw_fd())),
            bytes_read: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            authed: AtomicBool::new(false),
            last_active_ms: AtomicU64::new(0),
            closing: AtomicBool::new(false),
        });
        let id = self.next.fetch_add(1, Relaxed);
        self.lock().insert(id, conn.clone());
        self.stats.open.fetch_add(1, Relaxed);
        self.stats.accepted.fetch_add(1, Relaxed);
        Some(TrackedIo { io, info: ConnInfo { remote, conn }, id, table: self.clone() })
    }

    /// Closes the connection that matters least (module docs). False if every open
    /// connection has a request in flight.
    fn evict_one(&self, now: Instant) -> bool {
        let victim = {
            let conns = self.lock();
            let open = conns.values().filter(|c| !c.closing.load(Relaxed) && c.in_flight.load(Relaxed) == 0);
            // Lowest rank first: no request yet (oldest first), then not authenticated
            // (oldest first), then idle longest.
            open.min_by_key(|c| {
                let rank = if c.requests.load(Relaxed) == 0 {
                    0
                } else if self.bounds.auth.is_some() && !c.authed.load(Relaxed) {
                    1
                } else {
                    2
                };
                let age = if rank < 2 { now - c.accepted } else { c.idle_for(now) };
                (rank, std::cmp::Reverse(age))
            })
            .cloned()
        };
        match victim {
            Some(c) => {
                if c.close() {
                    self.stats.count_closed(CloseReason::Evicted);
                }
                true
            }
            None => false,
        }
    }

    /// Applies the deadlines once.
    fn reap(&self, now: Instant) {
        let b = &self.bounds;
        let conns: Vec<Arc<Conn>> = self.lock().values().cloned().collect();
        for c in conns {
            if c.closing.load(Relaxed) {
                continue;
            }
            let age = now - c.accepted;
            let requests = c.requests.load(Relaxed);
            let reason = if c.bytes_read.load(Relaxed) < HANDSHAKE_BYTES && age > b.handshake {
                Some(CloseReason::Handshake)
            } else if requests == 0 && age > b.first_request {
                Some(CloseReason::FirstRequest)
            } else if b.auth.is_some_and(|t| age > t) && !c.authed.load(Relaxed) {
                Some(CloseReason::Auth)
            } else if requests > 0 && c.in_flight.load(Relaxed) == 0 && c.idle_for(now) > b.idle {
                Some(CloseReason::Idle)
            } else {
                None
            };
            if let Some(r) = reason {
                if c.close() {
                    debug!(listener = self.stats.name, reason = r.as_str(), "connection closed by its deadline");
                    self.stats.count_closed(r);
                }
            }
        }
    }

    /// Applies the deadlines every [`REAP_EVERY`], for as long as the table lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let table = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(t) = table.upgrade() else { return };
                t.reap(Instant::now());
            }
        });
    }
}

/// An accepted socket as tonic serves it: counts what it reads and leaves the table
/// when dropped.
pub struct TrackedIo<S> {
    io: S,
    info: ConnInfo,
    id: u64,
    table: Arc<ConnTable>,
}

impl<S> Drop for TrackedIo<S> {
    fn drop(&mut self) {
        // Before `io` (and its descriptor) is dropped: see the module docs.
        *self.info.conn.fd.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if self.table.lock().remove(&self.id).is_some() {
            self.table.stats.open.fetch_sub(1, Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TrackedIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            self.info.conn.bytes_read.fetch_add(n, Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TrackedIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<S> Connected for TrackedIo<S> {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// A listener the accept loop can take connections from.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, Option<SocketAddr>)>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<(Self::Io, Option<SocketAddr>)> {
        let (s, a) = tokio::net::TcpListener::accept(self).await?;
        // gRPC messages are small and latency matters (a status poll).
        let _ = s.set_nodelay(true);
        Ok((s, Some(a)))
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<(Self::Io, Option<SocketAddr>)> {
        let (s, _) = tokio::net::UnixListener::accept(self).await?;
        Ok((s, None))
    }
}

/// Errors that mean the process (or the host) is out of something that closing
/// connections and waiting can give back.
fn is_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// The accept loop: sends every admitted connection to `tx` (tonic's incoming
/// stream) until `tx` closes. Never ends on an accept error.
pub async fn serve_incoming<L: Accept>(
    listener: L,
    table: Arc<ConnTable>,
    tx: tokio::sync::mpsc::Sender<Result<TrackedIo<L::Io>, io::Error>>,
) {
    table.stats.up.store(true, Relaxed);
    let _down = scopeguard(table.stats.clone());
    let mut last_log = None;
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = tx.closed() => return,
        };
        match accepted {
            Ok((io, remote)) => {
                backoff = Duration::ZERO;
                let Some(io) = table.admit(io, remote) else { continue };
                if tx.send(Ok(io)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                table.stats.accept_error(&e, &mut last_log);
                if is_exhaustion(&e) {
                    // Free a descriptor for the connections still queued: the one
                    // that matters least goes (a connection with a request in
                    // flight never does).
                    table.evict_one(Instant::now());
                    backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                } else {
                    // ECONNABORTED and the like concern one connection only.
                    backoff = Duration::from_millis(1);
                }
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Marks a listener down when its loop ends, however it ends (a panic included).
fn scopeguard(stats: Arc<ListenerStats>) -> impl Drop {
    struct Down(Arc<ListenerStats>);
    impl Drop for Down {
        fn drop(&mut self) {
            self.0.up.store(false, Relaxed);
        }
    }
    Down(stats)
}

/// A tower layer that counts each request against its connection: a connection
/// with a request in flight is never idle, and is never closed to make room.
#[derive(Clone, Copy, Default)]
pub struct TrackLayer;

impl<S> tower::Layer<S> for TrackLayer {
    type Service = Track<S>;
    fn layer(&self, inner: S) -> Track<S> {
        Track(inner)
    }
}

#[derive(Clone)]
pub struct Track<S>(S);

/// Ends a request's count on its connection when dropped (response sent, or the
/// request abandoned).
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
        self.0.touch();
    }
}

impl<S, B> tower::Service<http::Request<B>> for Track<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let guard = req.extensions().get::<ConnInfo>().map(|i| {
            let c = i.conn.clone();
            c.requests.fetch_add(1, Relaxed);
            c.in_flight.fetch_add(1, Relaxed);
            c.touch();
            InFlight(c)
        });
        let fut = self.0.call(req);
        Box::pin(async move {
            let r = fut.await;
            drop(guard);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max: usize) -> Bounds {
        Bounds {
            max_connections: max,
            handshake: Duration::from_secs(5),
            first_request: Duration::from_secs(10),
            auth: Some(Duration::from_secs(10)),
            idle: Duration::from_secs(60),
        }
    }

    /// Pairs of connected unix sockets: the table's side and the peer's.
    fn pair() -> (tokio::net::UnixStream, tokio::net::UnixStream) {
        tokio::net::UnixStream::pair().unwrap()
    }

    #[tokio::test]
    async fn at_the_cap_the_connection_without_a_request_goes_first_and_busy_ones_never() {
        let table = ConnTable::new(ListenerStats::new("grpc", "test".into(), 3), bounds(3));
        let (a, mut pa) = pair();
        let (b, _pb) = pair();
        let (c, _pc) = pair();
        let a = table.admit(a, None).unwrap();
        let b = table.admit(b, None).unwrap();
        let c = table.admit(c, None).unwrap();
        // b: authenticated, a request in flight; c: a request done, authenticated, idle.
        for (io, flight) in [(&b, 1), (&c, 0)] {
            io.info.conn.requests.store(1, Relaxed);
            io.info.conn.in_flight.store(flight, Relaxed);
            io.info.conn.authed.store(true, Relaxed);
        }
        let (d, _pd) = pair();
        let d = table.admit(d, None).expect("room made");
        // a had sent nothing: it was shut down, and its peer reads end of stream.
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1];
        assert_eq!(pa.read(&mut buf).await.unwrap(), 0);
        assert!(a.info.conn.closing.load(Relaxed));
        assert_eq!(table.stats.closed(CloseReason::Evicted), 1);
        // Next in line: d (no request yet); then, with e busy, c (idle); b never.
        let (e, _pe) = pair();
        let e = table.admit(e, None).unwrap();
        assert!(d.info.conn.closing.load(Relaxed));
        e.info.conn.requests.store(1, Relaxed);
        e.info.conn.in_flight.store(1, Relaxed);
        let (f, _pf) = pair();
        let _f = table.admit(f, None).unwrap();
        assert!(c.info.conn.closing.load(Relaxed));
        assert!(!e.info.conn.closing.load(Relaxed));
        assert!(!b.info.conn.closing.load(Relaxed));
        // Dropping closes nothing twice and keeps the count right.
        drop((a, c, d));
        assert_eq!(table.stats.open.load(Relaxed), 3);
    }

    #[tokio::test]
    async fn refused_when_every_connection_has_a_request_in_flight() {
        let table = ConnTable::new(ListenerStats::new("grpc", "test".into(), 1), bounds(1));
        let (a, _pa) = pair();
        let a = table.admit(a, None).unwrap();
        a.info.conn.in_flight.store(1, Relaxed);
        let (b, _pb) = pair();
        assert!(table.admit(b, None).is_none());
        assert_eq!(table.stats.closed(CloseReason::Refused), 1);
        assert!(!a.info.conn.closing.load(Relaxed));
    }

    #[tokio::test]
    async fn deadlines_close_by_reason() {
        let table = ConnTable::new(ListenerStats::new("grpc", "test".into(), 8), bounds(8));
        let mk = || table.admit(pair().0, None).unwrap();
        let (silent, preface, unauthed, idle, busy) = (mk(), mk(), mk(), mk(), mk());
        for io in [&preface, &unauthed, &idle, &busy] {
            io.info.conn.bytes_read.store(100, Relaxed);
        }
        for io in [&unauthed, &idle, &busy] {
            io.info.conn.requests.store(1, Relaxed);
        }
        for io in [&idle, &busy] {
            io.info.conn.authed.store(true, Relaxed);
        }
        busy.info.conn.in_flight.store(1, Relaxed);
        let t0 = silent.info.conn.accepted;
        table.reap(t0 + Duration::from_secs(6));
        assert!(silent.info.conn.closing.load(Relaxed));
        assert!(!preface.info.conn.closing.load(Relaxed));
        table.reap(t0 + Duration::from_secs(11));
        assert!(preface.info.conn.closing.load(Relaxed));
        assert!(unauthed.info.conn.closing.load(Relaxed));
        assert!(!idle.info.conn.closing.load(Relaxed));
        table.reap(t0 + Duration::from_secs(61));
        assert!(idle.info.conn.closing.load(Relaxed));
        table.reap(t0 + Duration::from_secs(3600));
        assert!(!busy.info.conn.closing.load(Relaxed), "a request in flight is never closed");
        let s = &table.stats;
        assert_eq!(
            [CloseReason::Handshake, CloseReason::FirstRequest, CloseReason::Auth, CloseReason::Idle]
                .map(|r| s.closed(r)),
            [1, 1, 1, 1]
        );
    }
}
