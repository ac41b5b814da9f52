//! What an attachment's reader, input queue and writer share: the credit
//! the client granted, whether the client answers pings, and the rare
//! events the reader side reports to the writer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tether_protocol::StreamName;
use tokio::sync::Notify;

use crate::error::{ApiError, AttachError};

/// Credit granted by the client, per stream. The reader adds to it the
/// moment a `credit` frame arrives; the writer reads it, so credit never
/// queues behind anything.
#[derive(Default)]
pub struct Credit {
    granted: [AtomicU64; 2],
    /// Notified on every grant.
    pub changed: Notify,
}

impl Credit {
    /// Adds `bytes` of credit for `stream`.
    pub fn grant(&self, stream: StreamName, bytes: u64) {
        let _ =
            self.granted[stream.index()].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                Some(g.saturating_add(bytes))
            });
        self.changed.notify_one();
    }

    /// Credit granted so far, per stream.
    pub fn granted(&self) -> [u64; 2] {
        StreamName::ALL.map(|s| self.granted[s.index()].load(Ordering::Relaxed))
    }
}

/// Whether the client answers: the oldest ping it has not answered with
/// anything (a pong or any message). Silence alone is no fault: a client
/// that is only reading, or that was never pinged because output kept the
/// socket busy, is alive. The reader goes on reading pongs while the
/// process is slow to take stdin, so a full stdin budget is no excuse for a
/// client that has gone silent; only a message held for the process (the
/// client's pongs wait behind it) is.
pub struct Liveness {
    epoch: Instant,
    /// When the oldest unanswered ping was sent (ms since epoch + 1), or 0.
    unanswered_since: AtomicU64,
    /// The reader holds a message for the process and has stopped reading:
    /// pongs sit unread behind it.
    waiting: AtomicBool,
}

impl Liveness {
    /// A client heard from just now.
    pub fn new() -> Liveness {
        Liveness {
            epoch: Instant::now(),
            unanswered_since: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// The client sent something.
    pub fn heard(&self) {
        self.unanswered_since.store(0, Ordering::Relaxed);
    }

    /// The reader holds a message for the process (or no longer does).
    pub fn waiting_on_process(&self, waiting: bool) {
        self.waiting.store(waiting, Ordering::Relaxed);
        if !waiting {
            self.heard();
        }
    }

    /// A ping was sent.
    pub fn pinged(&self) {
        let now = self.now();
        let _ =
            self.unanswered_since
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// How long the oldest unanswered ping has waited.
    pub fn unanswered_for(&self) -> Duration {
        if self.waiting.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        match self.unanswered_since.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(self.now().saturating_sub(since)),
        }
    }
}

/// What the reader side tells the writer loop (rare events only).
pub enum ReaderEvent {
    /// A request failed; report it and carry on.
    Rejected(ApiError),
    /// A protocol error: report it and close with its code.
    Fatal(AttachError),
    /// The client closed or the connection broke.
    Gone,
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness::new()
    }
}
