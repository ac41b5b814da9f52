//! The accept loop: every TCP connection is bounded in number and in time,
//! before it is authenticated and while it is idle.
//!
//! - **Number**: at most `--max-connections` are open, WebSocket
//!   attachments included. A new connection past the cap displaces the one
//!   that has waited longest for a request head (a client that means to ask
//!   something asks at once; one that dawdles is the likeliest to be
//!   hostile), so a flood of half-sent requests cannot lock out health
//!   checks. When every connection is busy (a request in flight, or an
//!   attachment), the newcomer is answered 503 `too_many_connections` and
//!   closed.
//! - **Time**: the request head must arrive within `--header-timeout-ms`
//!   (hyper's header read timeout, which also bounds an idle keep-alive
//!   connection waiting for its next request), the body within
//!   `--body-timeout-ms` of the head ([`DeadlineBody`]), and a response
//!   write may stall at most `--send-timeout-ms` (`GuardedIo`). Once
//!   upgraded to a WebSocket none of these apply: the attachment keeps
//!   itself alive with pings and bounds its own writes.
//! - **Shutdown**: [`Phase::Draining`] stops accepting, closes connections
//!   that are waiting for a request and lets the others finish the one in
//!   flight; [`Phase::Closing`] (the deadline) drops every HTTP connection
//!   still open.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::config::Config;
use crate::error::ApiError;
use crate::grant::Peer;
use crate::metrics::Metrics;
use crate::transport::{self, Conn, Raw, Transport};

/// Where the server is in its life, as the connections see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepting and serving.
    Serving,
    /// Shutting down: no new connections; idle ones close, requests in
    /// flight finish.
    Draining,
    /// The shutdown deadline: every HTTP connection closes now.
    Closing,
}

/// The per-connection bounds, from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub write_stall: Duration,
}

impl Settings {
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            max_connections: config.max_connections.max(1),
            header_timeout: config.header_timeout(),
            body_timeout: config.body_timeout(),
            write_stall: config.send_timeout().max(Duration::from_millis(1)),
        }
    }
}

/// Largest request head and read buffer per connection: tether's requests
/// are small, and the cap times this bounds the memory a flood can pin.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Refused connections that may linger at once to drain the request they
/// sent (so the kernel does not reset the 503 away); past it a refused
/// connection is closed at once.
const MAX_LINGERING: usize = 64;
/// How long a refused connection may linger.
const LINGER: Duration = Duration::from_millis(200);
/// After a resource error from accept (EMFILE and the like), wait this long
/// before the next accept, so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const WAITING: u8 = 0;
const BUSY: u8 = 1;
const UPGRADED: u8 = 2;
const DISPLACED: u8 = 3;

/// One open connection as the registry sees it.
struct ConnState {
    /// WAITING for a request head, BUSY with one, UPGRADED to a WebSocket,
    /// or DISPLACED (told to close).
    state: AtomicU8,
    /// When it began waiting for its current request head (ms since the
    /// registry's epoch).
    waiting_since: AtomicU64,
    displaced: Notify,
}

/// Every open connection, for the cap, displacement and shutdown.
pub struct Connections {
    metrics: Arc<Metrics>,
    epoch: Instant,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    count: watch::Sender<usize>,
    lingering: AtomicUsize,
}

impl Connections {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Connections> {
        Arc::new(Connections {
            metrics,
            epoch: Instant::now(),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            count: watch::Sender::new(0),
            lingering: AtomicUsize::new(0),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Open connections, WebSocket attachments included.
    pub fn len(&self) -> usize {
        *self.count.borrow()
    }

    /// True when no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Completes once every connection has closed.
    pub async fn all_closed(&self) {
        let mut count = self.count.subscribe();
        let _ = count.wait_for(|n| *n == 0).await;
    }

    fn counted(&self, open: usize) {
        self.count.send_replace(open);
        self.metrics
            .connections_open
            .store(open as u64, Ordering::Relaxed);
    }

    fn register(self: &Arc<Self>) -> (Arc<ConnState>, Registration) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            state: AtomicU8::new(WAITING),
            waiting_since: AtomicU64::new(self.now_ms()),
            displaced: Notify::new(),
        });
        let mut open = self.open();
        open.insert(id, state.clone());
        self.counted(open.len());
        drop(open);
        let registration = Registration {
            connections: self.clone(),
            id,
        };
        (state, registration)
    }

    /// Tells the connection that has waited longest for a request head to
    /// close. False when no connection is waiting.
    fn displace_oldest_waiting(&self) -> bool {
        let open = self.open();
        // Ties within a millisecond go to the one accepted first.
        let oldest = open
            .iter()
            .filter(|(_, c)| c.state.load(Ordering::Relaxed) == WAITING)
            .min_by_key(|(id, c)| (c.waiting_since.load(Ordering::Relaxed), **id))
            .map(|(_, c)| c);
        let Some(oldest) = oldest else {
            return false;
        };
        let displaced = oldest
            .state
            .compare_exchange(WAITING, DISPLACED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if displaced {
            oldest.displaced.notify_one();
            self.metrics
                .connections_displaced
                .fetch_add(1, Ordering::Relaxed);
        }
        displaced
    }
}

impl ConnState {
    fn begin_request(&self) {
        let _ = self
            .state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Relaxed);
    }

    fn end_request(&self, now_ms: u64) {
        self.waiting_since.store(now_ms, Ordering::Relaxed);
        let _ = self
            .state
            .compare_exchange(BUSY, WAITING, Ordering::AcqRel, Ordering::Relaxed);
    }

    fn upgraded(&self) {
        self.state.store(UPGRADED, Ordering::Release);
    }

    fn is(&self, state: u8) -> bool {
        self.state.load(Ordering::Acquire) == state
    }
}

/// Removes a connection from the registry when its socket is dropped, which
/// for a WebSocket is when its attachment ends.
struct Registration {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut open = self.connections.open();
        open.remove(&self.id);
        self.connections.counted(open.len());
    }
}

/// Accepts until the phase leaves [`Phase::Serving`], then drops the
/// listener (new connections are refused by the kernel).
pub async fn serve(
    transport: Transport,
    app: Router,
    settings: Settings,
    connections: Arc<Connections>,
    mut phase: watch::Receiver<Phase>,
) {
    let mut errors = AcceptErrors::default();
    loop {
        let accepted = tokio::select! {
            accepted = transport.accept() => accepted,
            _ = phase.wait_for(|p| *p != Phase::Serving) => return,
        };
        let (raw, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                if is_resource_error(&error) {
                    // Out of descriptors: shed the connection that has
                    // waited longest for a request, then try again.
                    connections.displace_oldest_waiting();
                    errors.note(&error);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
                continue;
            }
        };
        if connections.len() >= settings.max_connections && !connections.displace_oldest_waiting() {
            refuse(raw, &connections, settings.max_connections);
            continue;
        }
        if let Some(tcp) = raw.tcp() {
            tune_socket(tcp);
        }
        let (state, registration) = connections.register();
        tokio::spawn(serve_connection(
            raw,
            peer,
            transport.tls(),
            state,
            registration,
            app.clone(),
            settings.clone(),
            connections.clone(),
            phase.clone(),
        ));
    }
}

/// Errors of accept that mean "no resources now", as opposed to one
/// connection that failed on its way in.
fn is_resource_error(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Logs resource errors of accept at most once per interval, with a count.
#[derive(Default)]
struct AcceptErrors {
    since_log: u64,
    last_log: Option<Instant>,
}

impl AcceptErrors {
    const INTERVAL: Duration = Duration::from_secs(10);

    fn note(&mut self, error: &io::Error) {
        self.since_log += 1;
        if self.last_log.is_none_or(|t| t.elapsed() >= Self::INTERVAL) {
            tracing::warn!(%error, times = self.since_log, "accept failed; shedding waiting connections");
            self.since_log = 0;
            self.last_log = Some(Instant::now());
        }
    }
}

/// Answers a connection over the cap with a 503 and closes it. The request
/// it sent is drained for a moment first (a bounded number at once), so
/// the kernel does not answer unread data with a reset that destroys the
/// 503 before the client reads it.
fn refuse(mut tcp: Raw, connections: &Arc<Connections>, limit: usize) {
    connections
        .metrics
        .connections_refused
        .fetch_add(1, Ordering::Relaxed);
    let error = ApiError::TooManyConnections(limit);
    let body = serde_json::to_string(&error.body()).unwrap_or_default();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The socket's send buffer is empty: one non-blocking write fits.
    let _ = tcp.try_write(response.as_bytes());
    if connections.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
        connections.lingering.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let connections = connections.clone();
    tokio::spawn(async move {
        let _ = tcp.shutdown().await;
        let drain = async {
            let mut sink = [0u8; 4096];
            loop {
                if tcp.readable().await.is_err() {
                    return;
                }
                match tcp.try_read(&mut sink) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(LINGER, drain).await;
        connections.lingering.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Serves HTTP/1.1 on one connection (with upgrades) until it closes, is
/// displaced, or shutdown closes it.
#[allow(clippy::too_many_arguments)]
async fn serve_connection(
    raw: Raw,
    peer: Peer,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<ConnState>,
    registration: Registration,
    app: Router,
    settings: Settings,
    connections: Arc<Connections>,
    mut phase: watch::Receiver<Phase>,
) {
    // The TLS handshake (bounded) while the connection counts as waiting
    // for a request head: displaceable, and closed by a drain.
    let conn = tokio::select! {
        conn = transport::establish(raw, tls) => match conn {
            Ok(conn) => conn,
            Err(error) => {
                tracing::debug!(%peer, %error, "connection not established");
                return;
            }
        },
        _ = state.displaced.notified() => return,
        _ = phase.wait_for(|p| *p != Phase::Serving) => return,
    };
    let io = TokioIo::new(GuardedIo {
        io: conn,
        state: state.clone(),
        _registration: registration,
        stall_after: settings.write_stall,
        stall: None,
    });
    let service = {
        let state = state.clone();
        let body_timeout = settings.body_timeout;
        hyper::service::service_fn(move |request: Request<Incoming>| {
            state.begin_request();
            let mut request = request.map(|body| DeadlineBody::new(body, body_timeout));
            // Who is asking, for the audit lines.
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer.clone()));
            let response = app.clone().oneshot(request);
            let state = state.clone();
            let connections = connections.clone();
            async move {
                let response = match response.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    state.upgraded();
                    return Ok::<_, Infallible>(response);
                }
                Ok(response.map(|body| {
                    Body::new(EndOfResponse {
                        body,
                        state,
                        connections,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let connection = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(connection);
    let mut phase_open = true;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended");
                }
                return;
            }
            _ = state.displaced.notified() => return,
            changed = phase.changed(), if phase_open => {
                if changed.is_err() {
                    phase_open = false;
                    continue;
                }
                let now = *phase.borrow_and_update();
                match now {
                    Phase::Serving => {}
                    Phase::Draining if state.is(WAITING) => return,
                    Phase::Draining => connection.as_mut().graceful_shutdown(),
                    Phase::Closing => return,
                }
            }
        }
    }
}

/// Marks the connection as waiting for its next request once the response
/// body has been sent (hyper drops it then) or abandoned.
struct EndOfResponse {
    body: Body,
    state: Arc<ConnState>,
    connections: Arc<Connections>,
}

impl Drop for EndOfResponse {
    fn drop(&mut self) {
        self.state.end_request(self.connections.now_ms());
    }
}

impl HttpBody for EndOfResponse {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that must arrive in full within the body timeout of its
/// head.
pub struct DeadlineBody {
    inner: Incoming,
    deadline: tokio::time::Instant,
    timeout: Duration,
    /// Armed on the first poll that has to wait, so a request without a
    /// body costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: tokio::time::Instant::now() + timeout,
            timeout,
            sleep: None,
        }
    }
}

/// The error a body that took longer than the body timeout ends with.
#[derive(Debug, thiserror::Error)]
#[error("request body did not arrive within {0:?} (--body-timeout-ms)")]
pub struct BodyTimedOut(pub Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// True when a body error (at any depth of its sources) is the body
/// timeout.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<BodyTimedOut>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// The connection's socket: holds its registration (so it counts until the
/// socket is closed, upgraded or not), and fails a write that has stalled
/// for the send timeout before the upgrade.
struct GuardedIo {
    io: Conn,
    state: Arc<ConnState>,
    _registration: Registration,
    stall_after: Duration,
    stall: Option<Pin<Box<Sleep>>>,
}

impl GuardedIo {
    /// Called when a write could not proceed: true once it has waited the
    /// whole send timeout.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        if self.state.is(UPGRADED) {
            self.stall = None;
            return false;
        }
        let after = self.stall_after;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(after)));
        stall.as_mut().poll(cx).is_ready()
    }

    fn write_result<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no response bytes for the send timeout",
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.stall = None;
                ready
            }
        }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.write_result(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.write_result(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.write_result(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Interactive traffic must not wait for Nagle's algorithm. And the kernel
/// should hold little output that is not yet sent: what it holds cannot be
/// overtaken by another stream or evicted with a `dropped` notice, so a big
/// socket buffer would add latency to stderr behind a stdout flood.
fn tune_socket(tcp: &TcpStream) {
    let _ = tcp.set_nodelay(true);
    let lowat: libc::c_int = NOTSENT_LOWAT;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local;
    // the fd is a connected TCP socket owned by `tcp`.
    let _ = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(tcp),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&lowat as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Unsent bytes the kernel may hold per connection before the socket stops
/// being writable.
const NOTSENT_LOWAT: libc::c_int = 256 * 1024;
