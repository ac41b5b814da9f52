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
//!
//! Here: the phases, the bounds, and the registry of open connections that
//! the cap, displacement and shutdown read. `accept.rs` is the accept loop
//! and the refusal past the cap, `connection.rs` serves one connection
//! through the phases, `deadline.rs` holds the body and write time bounds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::metrics::Metrics;
use crate::options::ServerOptions;
use crate::sync::LockExt;

mod accept;
mod connection;
mod deadline;

pub use accept::serve;
pub use deadline::{is_body_timeout, BodyTimedOut, DeadlineBody};

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
    pub fn from_config(config: &ServerOptions) -> Settings {
        Settings {
            max_connections: config.capacity.max_connections.max(1),
            header_timeout: config.header_timeout(),
            body_timeout: config.body_timeout(),
            write_stall: config.send_timeout().max(Duration::from_millis(1)),
        }
    }
}

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
    /// Set when a read finds the end of the client's stream: it shut down
    /// its writing side (a half-close, legal after a complete request) or
    /// closed altogether, which only a write can tell apart.
    client_finished: watch::Sender<bool>,
    /// The current request's body has been read whole (or it had none).
    request_read_whole: AtomicBool,
    /// hyper's read, parked on an end of stream held back while an answer
    /// is owed; woken when the request ends.
    parked_read: Mutex<Option<Waker>>,
}

/// A request's view of whether its client has finished sending:
/// a handler that would answer late (`POST /v1/exec`) starts its answer
/// once the client has finished sending, so that a client that closed
/// altogether is noticed by a write within moments, while one that only
/// half-closed still gets its answer.
#[derive(Clone)]
pub struct ClientFinished(watch::Receiver<bool>);

impl ClientFinished {
    /// Resolves once the client has finished sending (never, if the
    /// connection ends first: its handler is dropped then anyway).
    pub async fn wait(&mut self) {
        if self.0.wait_for(|finished| *finished).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
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
        self.open.lock_or_recover()
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
            client_finished: watch::Sender::new(false),
            request_read_whole: AtomicBool::new(false),
            parked_read: Mutex::new(None),
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
        self.request_read_whole.store(false, Ordering::Release);
        let _ = self
            .state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Relaxed);
    }

    fn end_request(&self, now_ms: u64) {
        self.waiting_since.store(now_ms, Ordering::Relaxed);
        let _ = self
            .state
            .compare_exchange(BUSY, WAITING, Ordering::AcqRel, Ordering::Relaxed);
        // A read parked on a held-back end of stream now sees it.
        if let Some(parked) = self.parked_read.lock_or_recover().take() {
            parked.wake();
        }
    }

    fn request_read_whole(&self) {
        self.request_read_whole.store(true, Ordering::Release);
    }

    /// True (and `waker` parked until the request ends) while an answer
    /// is owed for a request read whole: the end of the client's stream
    /// is then a half-close, not a reason to drop the request.
    fn hold_end_of_stream(&self, waker: &Waker) -> bool {
        let owed = || self.is(BUSY) && self.request_read_whole.load(Ordering::Acquire);
        if !owed() {
            return false;
        }
        *self.parked_read.lock_or_recover() = Some(waker.clone());
        // Checked again after parking: an answer that ended meanwhile has
        // already woken (or will find) the parked read.
        owed()
    }

    /// A read found the end of the client's stream.
    fn client_finished(&self) {
        self.client_finished
            .send_if_modified(|finished| !std::mem::replace(finished, true));
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
