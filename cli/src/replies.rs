//! Dropping the local terminal's replies to replayed output, so that
//! re-attaching never types into the session.
//!
//! Retained output still holds the program's old terminal queries (vim asks
//! for the cursor position, device attributes, colours...). Written to the
//! local terminal again, they are answered again, and the answers arrive on
//! stdin as if typed. So while `tether attach` renders what was written
//! before it attached (a `screen` chunk, and stdout below the end offset the
//! `hello` reported), local input is discarded; once the replayed bytes are
//! written, the output side writes one query of its own, a cursor position
//! report request (DSR `ESC[6n`, which every terminal answers), and input is
//! discarded until its answer. A terminal answers in order, so every reply
//! to a replayed query comes before ours; the replayed `ESC[6n` queries are
//! counted so that their answers (the same shape as ours) are not taken for
//! it. Input after our answer is forwarded: replies to live output belong to
//! the program that asked.
//!
//! Bounded: if no answer comes within [`FENCE_TIMEOUT`] of the fence's
//! write (a terminal that does not answer DSR, a query the terminal
//! ignored), input is forwarded again. Measured in tmux 3.3 on a loaded
//! 2-core machine (load 6.5): the answer arrives 0.1 ms after the write of
//! a lone query returns, 0.7 ms (median, max 1.1) after a 64 KiB write and
//! 0.7 ms (max 17) after a 1 MiB one (whose write itself takes 78 ms: the
//! clock starts once it is written). Half a second leaves room for a slow
//! link (ssh) and costs, with a terminal that never answers, what is typed
//! in that half second. The fence goes out in the same write as the last
//! replayed bytes, so the terminal shows the end of the replay and answers
//! in one go: what is typed after the replay shows is rarely dropped.
//!
//! A typed key that reads like a cursor report (xterm sends `ESC[1;2R` for
//! Shift-F3) while replies are dropped counts as one: input may then go live
//! before a late reply (bounded by the same half second).
//!
//! `tether run` does not use this: nothing was written before it attached
//! that anybody answered, so the program's first queries are live.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The query written after the replayed bytes: DSR, cursor position.
const FENCE: &[u8] = b"\x1b[6n";
/// How long input is discarded waiting for the answer to [`FENCE`].
pub const FENCE_TIMEOUT: Duration = Duration::from_millis(500);

/// Where the session is, shared by the output relay and the input forwarder.
#[derive(Debug)]
enum State {
    /// Replayed bytes are being written: all input is a reply (or typed
    /// while the screen was not there yet) and is discarded.
    Replaying,
    /// The fence is written: discard until `wanted` cursor reports came.
    Fenced {
        wanted: u64,
        seen: u64,
        since: Instant,
    },
    /// Input is forwarded.
    Live,
}

/// The shared switch between discarding and forwarding input.
#[derive(Debug)]
pub struct Replies(Mutex<State>);

impl Replies {
    /// Starts discarding (a session whose replayed output is still to come).
    pub fn replaying() -> Arc<Replies> {
        Arc::new(Replies(Mutex::new(State::Replaying)))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fenced(&self, wanted: u64) {
        *self.state() = State::Fenced {
            wanted,
            seen: 0,
            since: Instant::now(),
        };
    }

    /// The fence has been written: its answer is due from now.
    pub fn sent(&self) {
        if let State::Fenced { since, .. } = &mut *self.state() {
            *since = Instant::now();
        }
    }

    fn live(&self) {
        *self.state() = State::Live;
    }
}

/// Counts the exact sequence `ESC [ 6 n` in a byte stream, across chunks.
#[derive(Debug, Default)]
struct QueryCounter {
    matched: usize,
    count: u64,
}

impl QueryCounter {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.matched = if b == FENCE[self.matched] {
                self.matched + 1
            } else if b == FENCE[0] {
                1
            } else {
                0
            };
            if self.matched == FENCE.len() {
                self.count += 1;
                self.matched = 0;
            }
        }
    }
}

/// The output side: tells replayed bytes from live ones and writes the
/// fence between them.
#[derive(Debug)]
pub struct OutputFence {
    replies: Arc<Replies>,
    /// stdout below this offset was written before the attachment.
    until: u64,
    /// A `screen` chunk is still to come (it is replayed output too).
    screen_pending: bool,
    /// Something replayed was written (else no fence is needed).
    wrote: bool,
    queries: QueryCounter,
    done: bool,
}

impl OutputFence {
    pub fn new(replies: Arc<Replies>, until: u64, screen_pending: bool) -> OutputFence {
        OutputFence {
            replies,
            until,
            screen_pending,
            wrote: false,
            queries: QueryCounter::default(),
            done: false,
        }
    }

    /// How many bytes of a data chunk at `offset` are replayed.
    pub fn replayed_len(&self, offset: u64, len: usize) -> usize {
        if self.done {
            return 0;
        }
        usize::try_from(self.until.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(len)
    }

    /// Replayed bytes about to be written.
    pub fn replayed(&mut self, bytes: &[u8]) {
        self.wrote |= !bytes.is_empty();
        self.queries.feed(bytes);
    }

    /// A screen chunk about to be written (it has no query).
    pub fn screen(&mut self) {
        self.screen_pending = false;
        self.wrote = true;
    }

    /// Called before each chunk is taken and after each is written, with
    /// the reader's next offset: once replay is over, writes the fence (or,
    /// when nothing was replayed, just goes live).
    pub async fn reached(&mut self, next: u64, out: &mut (impl AsyncWrite + Unpin)) {
        if self.done || self.screen_pending || next < self.until {
            return;
        }
        self.done = true;
        if !self.wrote {
            self.replies.live();
            return;
        }
        // Marked before the write: the answer can only come after it.
        self.replies.fenced(self.queries.count + 1);
        if out.write_all(FENCE).await.is_err() || out.flush().await.is_err() {
            self.replies.live();
        }
        self.replies.sent();
    }

    /// `replayed`, followed by the fence when `next` (the offset after
    /// them) ends the replay: one write, so that a terminal shows the end
    /// of the replay and answers the fence in one go.
    pub fn with_fence<'a>(&mut self, replayed: &'a [u8], next: u64) -> Cow<'a, [u8]> {
        if self.done || self.screen_pending || next < self.until {
            return Cow::Borrowed(replayed);
        }
        self.done = true;
        self.replies.fenced(self.queries.count + 1);
        Cow::Owned([replayed, FENCE].concat())
    }

    /// The bytes from [`OutputFence::with_fence`] have been written.
    pub fn sent(&self) {
        self.replies.sent();
    }

    /// The stream ended (or failed) before its replay did.
    pub fn ended(&mut self) {
        if !self.done {
            self.done = true;
            self.replies.live();
        }
    }
}

/// The input side: strips input while replies are expected.
#[derive(Debug)]
pub struct InputFilter {
    replies: Arc<Replies>,
    /// Progress through a cursor position report `ESC [ digits ; digits R`.
    report: ReportParser,
}

impl InputFilter {
    pub fn new(replies: Arc<Replies>) -> InputFilter {
        InputFilter {
            replies,
            report: ReportParser::Idle,
        }
    }

    /// The part of `bytes` to forward.
    pub fn filter<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let mut state = self.replies.state();
        loop {
            match &mut *state {
                State::Live => return bytes,
                State::Replaying => return &[],
                State::Fenced {
                    wanted,
                    seen,
                    since,
                } => {
                    if since.elapsed() > FENCE_TIMEOUT {
                        *state = State::Live;
                        continue;
                    }
                    for (i, &b) in bytes.iter().enumerate() {
                        if self.report.feed(b) {
                            *seen += 1;
                            if *seen >= *wanted {
                                *state = State::Live;
                                return &bytes[i + 1..];
                            }
                        }
                    }
                    return &[];
                }
            }
        }
    }
}

/// Recognises `ESC [ row ; col R` byte by byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReportParser {
    Idle,
    Escape,
    Row,
    Col,
}

impl ReportParser {
    /// Feeds one byte; true when it completed a report.
    fn feed(&mut self, b: u8) -> bool {
        use ReportParser::*;
        let (next, done) = match (*self, b) {
            (_, 0x1b) => (Escape, false),
            (Escape, b'[') => (Row, false),
            (Row, b'0'..=b'9') => (Row, false),
            (Row, b';') => (Col, false),
            (Col, b'0'..=b'9') => (Col, false),
            (Col, b'R') => (Idle, true),
            _ => (Idle, false),
        };
        *self = next;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_counted_across_chunks() {
        let mut counter = QueryCounter::default();
        counter.feed(b"a\x1b[6nb\x1b");
        counter.feed(b"[6");
        counter.feed(b"n\x1b[?6n\x1b\x1b[6n");
        assert_eq!(counter.count, 3);
    }

    #[test]
    fn input_is_discarded_until_the_fence_is_answered_then_forwarded() {
        let replies = Replies::replaying();
        let mut filter = InputFilter::new(replies.clone());
        assert_eq!(filter.filter(b"\x1b[?1;2c"), b"");
        replies.fenced(2);
        // A reply to a replayed query, split, then ours, then typed keys.
        assert_eq!(filter.filter(b"\x1b]11;rgb:0/0/0\x07\x1b[3"), b"");
        assert_eq!(filter.filter(b";1R\x1b[24;80"), b"");
        assert_eq!(filter.filter(b"Rls\r"), b"ls\r");
        assert_eq!(filter.filter(b"\x1b[1;1R"), b"\x1b[1;1R");
    }

    #[test]
    fn an_unanswered_fence_stops_discarding_after_the_timeout() {
        let replies = Replies::replaying();
        let mut filter = InputFilter::new(replies.clone());
        *replies.state() = State::Fenced {
            wanted: 1,
            seen: 0,
            since: Instant::now() - FENCE_TIMEOUT - Duration::from_millis(1),
        };
        assert_eq!(filter.filter(b"x"), b"x");
    }
}
