//! The accept loop: a connection is registered and served in a task of
//! its own, or, past the cap with none to displace, refused with a 503.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::connection::serve_connection;
use super::{Connections, Phase, Settings};
use crate::error::ApiError;
use crate::transport::{Raw, Transport};

/// Refused connections that may linger at once to drain the request they
/// sent (so the kernel does not reset the 503 away); past it a refused
/// connection is closed at once.
const MAX_LINGERING: usize = 64;
/// How long a refused connection may linger.
const LINGER: Duration = Duration::from_millis(200);
/// After a resource error from accept (EMFILE and the like), wait this long
/// before the next accept, so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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
    let (_, code) = error.status_and_code();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         {}: {code}\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        tether_protocol::api::ERROR_CODE_HEADER,
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
