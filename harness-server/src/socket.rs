//! The socket layer: accepts TCP connections and serves HTTP/1.1 on them within
//! [`ConnectionLimits`], so that slow or hostile clients cannot hold the server.
//!
//! ```no_run
//! use harness_server::socket::{ConnectionLimits, serve};
//! use std::time::Duration;
//! # async fn run(server: harness_server::Server) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8700").await?;
//! let limits = ConnectionLimits::new()
//!     .header_timeout(Duration::from_secs(5))
//!     .max_connections_per_peer(32);
//! serve(listener, server.router(), limits)
//!     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
//!     .await;
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Request heads arrive in time**: a connection that has not sent a whole request head
//!   within [`header_timeout`](ConnectionLimits::header_timeout) (10 s by default) is closed,
//!   without an answer. The time counts from the accept on a new connection, and from the
//!   first byte of the next request on a kept-alive one; trickling bytes does not extend it.
//! - **Request bodies arrive in time**: the whole body must arrive within
//!   [`body_timeout`](ConnectionLimits::body_timeout) (30 s) of its head. Past it the
//!   handler's read fails and the answer is `408 Request Timeout`
//!   (`{"error": {"category": "timeout", ...}}`, `Connection: close`), then the connection
//!   closes.
//! - **Idle connections go**: a kept-alive connection with no request in progress and no
//!   byte received for [`idle_timeout`](ConnectionLimits::idle_timeout) (60 s) is closed.
//! - **Connections are capped**: at most [`max_connections`](ConnectionLimits::max_connections)
//!   (1,024) open at once, and at most
//!   [`max_connections_per_peer`](ConnectionLimits::max_connections_per_peer) (128) from one
//!   IP address. A connection past either cap is answered at once with
//!   `503 Service Unavailable`, `Retry-After: 1`, `Connection: close` and a `capacity` error
//!   naming the cap, then closed; an accepted connection that closes makes room at once.
//! - **Answers being streamed are never cut while they are read**: while a response is
//!   being written (an SSE stream however long, or a large page), none of the timeouts above
//!   runs on its connection.
//! - **A client that stops reading is dropped**: when a write to the socket makes no
//!   progress for [`write_timeout`](ConnectionLimits::write_timeout) (60 s by default: the
//!   client's receive buffer and the kernel's send buffer are full), the connection is reset
//!   (closed with `SO_LINGER` 0, so the kernel drops what it still held for it) and counted
//!   (phase `write`). Meanwhile the server holds for it at most what hyper buffers for one
//!   connection (some 400 KiB) and one SSE chunk (at most 512 events): an SSE stream pulls
//!   its events from the execution's log only as the socket takes them, so neither the
//!   execution nor any other reader waits for it. A dropped SSE client resumes with
//!   `Last-Event-ID` from the last event it read.
//! - **Shutdown is graceful**: on the signal the listener closes, idle connections close,
//!   and the future ends when every response in progress has ended.
//!
//! Every refusal and every timeout is counted: [`names`].
//!
//! # Decisions where the spec is silent
//!
//! - **HTTP/1.1 only**, through hyper's HTTP/1 connection (the router is built for HTTP/1
//!   only); put a proxy in front for HTTP/2 or TLS.
//! - **A refusal is an answer, not a silent close**: a client (or its operator) learns which
//!   cap it hit and when to retry. The answer is written before the request is read; the
//!   server then reads and discards what the client sent (up to 64 KiB, at most 1 s) so that
//!   the close does not reset the connection before the client reads the answer. At most
//!   64 refusals linger so at once; past that a refused connection is closed at once
//!   (still counted).
//! - **The head timeout is ours, not hyper's**: hyper's `header_read_timeout` starts when a
//!   kept-alive connection begins to wait for its next request, so it would also end idle
//!   connections at the head timeout. Here the two are separate, as in Go's
//!   `ReadHeaderTimeout` and `IdleTimeout`.
//! - **A whole-body deadline, no minimum rate**: with the body limit (1 MiB by default) a
//!   30 s deadline already means at least 35 KB/s; a rate would add a second knob for the
//!   same bound.
//! - **A peer is an IP address** (an IPv4-mapped IPv6 address counts as its IPv4 one). Behind
//!   a reverse proxy every client is the proxy's address: raise the per-peer cap to the
//!   server cap there and let the proxy bound its clients.
//! - **The write timeout bounds a stall, not a rate**: any progress (a byte taken by the
//!   socket) starts it again, so a client reading very slowly keeps its stream; the caps
//!   bound how many such connections one address holds. A stall is judged by the socket,
//!   not by the response: it covers every response, SSE or not.
//! - **A stalled connection is reset, not closed gracefully**: a graceful close would leave
//!   the unsent bytes in the kernel until the client read them or the kernel gave up. The
//!   client sees a reset (`ECONNRESET`); events it had not read are sent again after its
//!   `Last-Event-ID`.
//! - A request whose head is partly read together with the end of the previous one
//!   (pipelining) is under the idle timeout, not the head timeout, until more bytes come.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::io;
use std::net::IpAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use harness_core::error::{ErrorCategory, HarnessError};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::error::ApiError;

/// The metrics of the socket layer, emitted through the `metrics` macros.
///
/// | name | type | unit | labels | meaning |
/// |---|---|---|---|---|
/// | `harness_server_connections_open` | gauge | count | none | connections accepted and not yet closed |
/// | `harness_server_connections_refused_total` | counter | count | limit | connections refused past a cap (`server`, `peer`) |
/// | `harness_server_connection_timeouts_total` | counter | count | phase | connections ended by a timeout (`header`, `body`, `idle`, `write`) |
pub mod names {
    use metrics::Unit;

    /// Gauge: connections accepted and not yet closed. No labels.
    pub const CONNECTIONS_OPEN: &str = "harness_server_connections_open";
    /// Counter: connections refused past a cap. Labels: limit.
    pub const CONNECTIONS_REFUSED: &str = "harness_server_connections_refused_total";
    /// Counter: connections ended by a timeout. Labels: phase.
    pub const CONNECTION_TIMEOUTS: &str = "harness_server_connection_timeouts_total";

    /// Label key: which cap refused a connection ([`LIMIT_SERVER`], [`LIMIT_PEER`]).
    pub const LABEL_LIMIT: &str = "limit";
    /// Label key: which timeout ended a connection ([`PHASE_HEADER`], [`PHASE_BODY`],
    /// [`PHASE_IDLE`], [`PHASE_WRITE`]).
    pub const LABEL_PHASE: &str = "phase";
    /// Limit label value: the server's cap on open connections.
    pub const LIMIT_SERVER: &str = "server";
    /// Limit label value: the cap on open connections from one address.
    pub const LIMIT_PEER: &str = "peer";
    /// Phase label value: the request head did not arrive in time.
    pub const PHASE_HEADER: &str = "header";
    /// Phase label value: the request body did not arrive in time.
    pub const PHASE_BODY: &str = "body";
    /// Phase label value: a kept-alive connection stayed idle too long.
    pub const PHASE_IDLE: &str = "idle";
    /// Phase label value: the client stopped reading a response (no write progress).
    pub const PHASE_WRITE: &str = "write";

    /// Every metric: name, unit, label keys, help.
    pub const CATALOG: &[(&str, Unit, &[&str], &str)] = &[
        (
            CONNECTIONS_OPEN,
            Unit::Count,
            &[],
            "Connections accepted and not yet closed.",
        ),
        (
            CONNECTIONS_REFUSED,
            Unit::Count,
            &[LABEL_LIMIT],
            "Connections refused past a cap (server, peer).",
        ),
        (
            CONNECTION_TIMEOUTS,
            Unit::Count,
            &[LABEL_PHASE],
            "Connections ended by a timeout (header, body, idle, write).",
        ),
    ];

    /// Registers every metric of the [`CATALOG`] with the installed recorder, with its unit
    /// and help text (call it after installing the recorder).
    pub fn describe() {
        metrics::describe_gauge!(CATALOG[0].0, CATALOG[0].1, CATALOG[0].3);
        for (name, unit, _, help) in &CATALOG[1..] {
            metrics::describe_counter!(*name, *unit, *help);
        }
    }
}

/// The bounds the socket layer keeps its clients to; see the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use harness_server::socket::ConnectionLimits;
///
/// let limits = ConnectionLimits::new().idle_timeout(Duration::from_secs(5));
/// assert_eq!(limits.header_timeout, Duration::from_secs(10));
/// assert_eq!(limits.idle_timeout, Duration::from_secs(5));
/// assert_eq!(limits, ConnectionLimits::default().idle_timeout(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// How long a request head may take to arrive ([`Self::DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// How long a request body may take to arrive after its head
    /// ([`Self::DEFAULT_BODY_TIMEOUT`]).
    pub body_timeout: Duration,
    /// How long a kept-alive connection may stay idle ([`Self::DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// How long a write to the socket may make no progress (the client stopped reading)
    /// before the connection is reset ([`Self::DEFAULT_WRITE_TIMEOUT`]).
    pub write_timeout: Duration,
    /// The most connections open at once ([`Self::DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// The most connections open at once from one IP address
    /// ([`Self::DEFAULT_MAX_CONNECTIONS_PER_PEER`]).
    pub max_connections_per_peer: usize,
}

impl ConnectionLimits {
    /// 10 s to send a request head.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// 30 s to send a request body.
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// 60 s idle between requests.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// 60 s without write progress.
    pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
    /// 1,024 connections (raise the process's open-file limit above it).
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// 128 connections from one address.
    pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 128;

    /// The defaults.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            write_timeout: Self::DEFAULT_WRITE_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: Self::DEFAULT_MAX_CONNECTIONS_PER_PEER,
        }
    }

    /// Sets [`header_timeout`](Self::header_timeout).
    #[must_use]
    pub const fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets [`body_timeout`](Self::body_timeout).
    #[must_use]
    pub const fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Sets [`idle_timeout`](Self::idle_timeout).
    #[must_use]
    pub const fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets [`write_timeout`](Self::write_timeout).
    #[must_use]
    pub const fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Sets [`max_connections`](Self::max_connections).
    #[must_use]
    pub const fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Sets [`max_connections_per_peer`](Self::max_connections_per_peer).
    #[must_use]
    pub const fn max_connections_per_peer(mut self, max: usize) -> Self {
        self.max_connections_per_peer = max;
        self
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::new()
    }
}

/// Serves `router` on `listener` within `limits`: `.await` it, after
/// [`with_graceful_shutdown`](Serve::with_graceful_shutdown) if it should end. See the
/// [module docs](self).
pub fn serve(listener: TcpListener, router: Router, limits: ConnectionLimits) -> Serve {
    Serve {
        listener,
        router,
        limits,
        signal: Box::pin(std::future::pending()),
    }
}

/// The future of [`serve`]: runs until its shutdown signal, then until every connection has
/// closed.
#[must_use = "a server does nothing until awaited"]
pub struct Serve {
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    signal: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("listener", &self.listener)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Serve {
    /// Stops accepting when `signal` completes, closes idle connections, lets responses in
    /// progress end, then completes.
    pub fn with_graceful_shutdown(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.signal = Box::pin(signal);
        self
    }
}

impl IntoFuture for Serve {
    type Output = ();
    type IntoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// How many refused connections may linger (answer written, request drained) at once.
const LINGERING_REFUSALS: usize = 64;
/// How long a refused connection lingers at most.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// How much of a refused connection's request is read and dropped at most.
const REFUSAL_DRAIN: usize = 64 * 1024;

impl Serve {
    async fn run(self) {
        let Self {
            listener,
            router,
            limits,
            mut signal,
        } = self;
        let open = Arc::new(Open::new(limits));
        let refusals = Arc::new(Refusals::new(limits));
        let (stop, stopped) = watch::channel(());
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        if !is_connection_error(&e) {
                            // Out of descriptors, most likely: wait for some to close.
                            tracing::error!(error = %e, "accept failed");
                            tokio::select! {
                                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                                () = &mut signal => break,
                            }
                        }
                        continue;
                    }
                },
                () = &mut signal => break,
            };
            match Open::admit(&open, peer.ip()) {
                Ok(admitted) => {
                    let connection = Connection {
                        router: router.clone(),
                        limits,
                        _admitted: admitted,
                    };
                    tokio::spawn(connection.run(stream, stopped.clone()));
                }
                Err(limit) => refusals.refuse(stream, limit),
            }
        }
        drop(listener);
        drop(stopped);
        stop.send_replace(());
        stop.closed().await;
    }
}

/// Errors of one connection that say nothing about the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The connections open, in all and by peer.
#[derive(Debug)]
struct Open {
    limits: ConnectionLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Server,
    Peer,
}

impl Open {
    fn new(limits: ConnectionLimits) -> Self {
        Self {
            limits,
            counts: Mutex::default(),
        }
    }

    fn admit(this: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Limit> {
        let peer = peer.to_canonical();
        let mut counts = this.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.total >= this.limits.max_connections {
            return Err(Limit::Server);
        }
        let from_peer = counts.by_peer.entry(peer).or_default();
        if *from_peer >= this.limits.max_connections_per_peer {
            if *from_peer == 0 {
                counts.by_peer.remove(&peer);
            }
            return Err(Limit::Peer);
        }
        *from_peer += 1;
        counts.total += 1;
        metrics::gauge!(names::CONNECTIONS_OPEN).increment(1.0);
        Ok(Admitted {
            open: Arc::clone(this),
            peer,
        })
    }
}

/// One accepted connection's place in [`Open`], given back on drop.
#[derive(Debug)]
struct Admitted {
    open: Arc<Open>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self
            .open
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.total -= 1;
        if let Some(n) = counts.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                counts.by_peer.remove(&self.peer);
            }
        }
        metrics::gauge!(names::CONNECTIONS_OPEN).decrement(1.0);
    }
}

/// The refusals' answers, written once, and the bound on those lingering.
struct Refusals {
    server: Bytes,
    peer: Bytes,
    lingering: Arc<Semaphore>,
}

impl Refusals {
    fn new(limits: ConnectionLimits) -> Self {
        Self {
            server: refusal(&format!(
                "this server has {} connections open, its limit: retry in a second",
                limits.max_connections
            )),
            peer: refusal(&format!(
                "your address has {} connections open to this server, its limit: close one or retry in a second",
                limits.max_connections_per_peer
            )),
            lingering: Arc::new(Semaphore::new(LINGERING_REFUSALS)),
        }
    }

    fn refuse(&self, stream: TcpStream, limit: Limit) {
        let (label, answer) = match limit {
            Limit::Server => (names::LIMIT_SERVER, self.server.clone()),
            Limit::Peer => (names::LIMIT_PEER, self.peer.clone()),
        };
        metrics::counter!(names::CONNECTIONS_REFUSED, names::LABEL_LIMIT => label).increment(1);
        let Ok(permit) = Arc::clone(&self.lingering).try_acquire_owned() else {
            // Too many lingering already: the close is the answer.
            return;
        };
        tokio::spawn(async move {
            let _permit = permit;
            let mut stream = stream;
            let _ = tokio::time::timeout(REFUSAL_LINGER, async {
                stream.write_all(&answer).await?;
                stream.shutdown().await?;
                // Read what the client sent: closing with unread bytes would reset the
                // connection, and the client could lose the answer.
                let mut sink = [0u8; 4096];
                let mut read = 0;
                while read < REFUSAL_DRAIN {
                    match stream.read(&mut sink).await? {
                        0 => break,
                        n => read += n,
                    }
                }
                io::Result::Ok(())
            })
            .await;
        });
    }
}

/// A whole `503` response with a `capacity` error saying `message`.
fn refusal(message: &str) -> Bytes {
    let error = ApiError::new(HarnessError::new(
        ErrorCategory::Capacity,
        message.to_owned(),
    ));
    let body = serde_json::to_vec(&crate::view::ErrorBody {
        error: error.public(),
    })
    .unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Bytes::from(answer)
}

/// One accepted connection.
struct Connection {
    router: Router,
    limits: ConnectionLimits,
    _admitted: Admitted,
}

impl Connection {
    async fn run(self, stream: TcpStream, mut stop: watch::Receiver<()>) {
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::new());
        let io = TokioIo::new(Watched {
            inner: stream,
            phase: Arc::clone(&phase),
            write_timeout: self.limits.write_timeout,
            stall: None,
            stalled: false,
            expired: false,
        });
        let service = {
            let (router, phase) = (self.router.clone(), Arc::clone(&phase));
            let body_timeout = self.limits.body_timeout;
            hyper::service::service_fn(move |request| {
                handle(router.clone(), request, Arc::clone(&phase), body_timeout)
            })
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        // Ours (see the module docs): hyper's would also end idle connections.
        builder.header_read_timeout(None);
        let mut connection = pin!(builder.serve_connection(io, service));
        let mut expired = pin!(phase.expired(self.limits));
        let mut stopping = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    break;
                }
                label = &mut expired => {
                    metrics::counter!(names::CONNECTION_TIMEOUTS, names::LABEL_PHASE => label)
                        .increment(1);
                    break;
                }
                changed = stop.changed(), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// Answers one request: its body under the body deadline, its response body keeping the
/// connection busy (no timeout) until it ends.
async fn handle(
    router: Router,
    request: Request<Incoming>,
    phase: Arc<Phase>,
    body_timeout: Duration,
) -> Result<Response<Tracked>, Infallible> {
    let busy = Phase::begin(&phase);
    let timed_out = Arc::new(AtomicBool::new(false));
    let request =
        request.map(|body| Body::new(Timed::new(body, body_timeout, Arc::clone(&timed_out))));
    let Ok(response) = router.oneshot(request).await;
    let response = if timed_out.load(Ordering::Acquire) {
        metrics::counter!(names::CONNECTION_TIMEOUTS, names::LABEL_PHASE => names::PHASE_BODY)
            .increment(1);
        body_timed_out(body_timeout)
    } else {
        response
    };
    Ok(response.map(|body| Tracked { inner: body, busy }))
}

/// The `408` for a body that did not arrive in time.
fn body_timed_out(timeout: Duration) -> Response<Body> {
    let mut response = ApiError::new(HarnessError::new(
        ErrorCategory::Timeout,
        format!(
            "the request body did not arrive within {} ms of its head: send it at once, or in a smaller request",
            timeout.as_millis()
        ),
    ))
    .into_response();
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Where a connection is: answering requests (no timeout), or waiting for one.
#[derive(Debug)]
struct Phase {
    state: Mutex<PhaseState>,
    changed: Notify,
}

#[derive(Debug)]
struct PhaseState {
    /// Requests being answered (until their response body ends).
    busy: usize,
    /// When the connection last began to wait for a request.
    waiting_since: Instant,
    /// When the request head now arriving began (the accept, on a new connection).
    head_since: Option<Instant>,
}

impl Phase {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(PhaseState {
                busy: 0,
                waiting_since: now,
                head_since: Some(now),
            }),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PhaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes came in: between requests, the next head has begun.
    fn received(&self) {
        let mut state = self.state();
        if state.busy == 0 && state.head_since.is_none() {
            state.head_since = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    fn begin(this: &Arc<Self>) -> Busy {
        let mut state = this.state();
        state.busy += 1;
        state.head_since = None;
        Busy(Arc::clone(this))
    }

    fn end(&self) {
        let mut state = self.state();
        state.busy -= 1;
        if state.busy == 0 {
            state.waiting_since = Instant::now();
            state.head_since = None;
            drop(state);
            self.changed.notify_one();
        }
    }

    /// When the connection's current wait runs out, and which timeout that is.
    fn deadline(&self, limits: ConnectionLimits) -> Option<(Instant, &'static str)> {
        let state = self.state();
        if state.busy > 0 {
            None
        } else if let Some(since) = state.head_since {
            Some((since + limits.header_timeout, names::PHASE_HEADER))
        } else {
            Some((state.waiting_since + limits.idle_timeout, names::PHASE_IDLE))
        }
    }

    /// Completes when a wait runs out, with the phase label of the timeout.
    async fn expired(&self, limits: ConnectionLimits) -> &'static str {
        loop {
            match self.deadline(limits) {
                None => self.changed.notified().await,
                Some((at, label)) => {
                    if at <= Instant::now() {
                        return label;
                    }
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.changed.notified() => {}
                    }
                }
            }
        }
    }
}

/// A request being answered; ends on drop.
#[derive(Debug)]
struct Busy(Arc<Phase>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The socket, telling its [`Phase`] when bytes come in, and failing a write that made no
/// progress for the write timeout.
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
    write_timeout: Duration,
    /// Armed while writes are pending; kept (reset) across stalls, boxed once.
    stall: Option<Pin<Box<Sleep>>>,
    /// Whether the last write was pending (the stall timer runs).
    stalled: bool,
    /// Whether the write timeout ran out: every write fails from then on.
    expired: bool,
}

impl Watched {
    /// Passes a write's result through, timing how long writes stay pending: past the write
    /// timeout the write fails (`TimedOut`), and hyper ends the connection.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if self.expired {
            return Poll::Ready(Err(stalled()));
        }
        if polled.is_ready() {
            self.stalled = false;
            return polled;
        }
        let deadline = Instant::now() + self.write_timeout;
        let stall = match &mut self.stall {
            Some(stall) if self.stalled => stall,
            Some(stall) => {
                stall.as_mut().reset(deadline);
                stall
            }
            None => self
                .stall
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.stalled = true;
        if stall.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        metrics::counter!(names::CONNECTION_TIMEOUTS, names::LABEL_PHASE => names::PHASE_WRITE)
            .increment(1);
        // A reset: the kernel drops what it still holds for this client at once.
        let _ = self.inner.set_zero_linger();
        self.expired = true;
        self.stall = None;
        Poll::Ready(Err(stalled()))
    }
}

fn stalled() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client read nothing for the write timeout",
    )
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.phase.received();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.timed(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The error a request body gives when it did not arrive within the body timeout; the
/// response is then the socket layer's `408`, whatever the handler answered.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body did not arrive in time")]
#[non_exhaustive]
pub struct BodyTimeout;

pin_project! {
    /// A request body with a deadline.
    struct Timed {
        inner: Incoming,
        #[pin]
        deadline: Option<Sleep>,
        timed_out: Arc<AtomicBool>,
    }
}

impl Timed {
    fn new(inner: Incoming, timeout: Duration, timed_out: Arc<AtomicBool>) -> Self {
        let deadline = (!inner.is_end_stream()).then(|| tokio::time::sleep(timeout));
        Self {
            inner,
            deadline,
            timed_out,
        }
    }
}

impl HttpBody for Timed {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Poll::Ready(frame) = Pin::new(this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some(deadline) = this.deadline.as_pin_mut()
            && deadline.poll(cx).is_ready()
        {
            this.timed_out.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(BodyTimeout.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its connection [`Busy`] until it ends or is dropped.
struct Tracked {
    inner: Body,
    #[allow(dead_code)] // Held for its drop.
    busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::names;
    use metrics_util::debugging::DebuggingRecorder;

    #[test]
    fn describe_registers_every_metric_and_the_docs_list_each() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            names::describe();
            metrics::gauge!(names::CONNECTIONS_OPEN).increment(0.0);
            metrics::counter!(names::CONNECTIONS_REFUSED).increment(0);
            metrics::counter!(names::CONNECTION_TIMEOUTS).increment(0);
        });
        let seen = snapshotter.snapshot().into_vec();
        assert_eq!(seen.len(), names::CATALOG.len());
        let source = include_str!("socket.rs");
        for (name, unit, _, help) in names::CATALOG {
            let (_, seen_unit, seen_help, _) = seen
                .iter()
                .find(|(key, ..)| key.key().name() == *name)
                .unwrap_or_else(|| panic!("{name} not recorded"));
            assert_eq!(*seen_unit, Some(*unit), "{name}");
            assert_eq!(seen_help.as_deref(), Some(*help), "{name}");
            assert_eq!(name.ends_with("_total"), *name != names::CONNECTIONS_OPEN);
            assert!(
                source.contains(&format!("/// | `{name}` |")),
                "no docs row for {name}"
            );
        }
    }
}
