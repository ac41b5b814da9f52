//! The attachment's state, shared by the connection task and the handles:
//! one [`StreamState`] per stream (its queue of chunks, resume offset,
//! credit ledger and end), the exit, and the last refusal. Server frames
//! are applied here ([`Shared::apply`]); the connection only moves them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use tether_protocol::{ProcessInfo, ServerFrame, StreamName};
use tokio::io::ReadBuf;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::credit::{CreditLedger, Receipt};
use crate::error::{Error, Result};

/// Small data frames are merged in the queue up to this size.
const COALESCE_BYTES: usize = 16 << 10;

/// One item of an output stream, from [`OutputReader::chunk`](super::OutputReader::chunk).
///
/// ```
/// use tether_client::Chunk;
///
/// let chunk = Chunk::Dropped { offset: 10, length: 5 };
/// assert_eq!(chunk.end(), 15);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Bytes of the stream; `offset` is that of `data[0]` since spawn.
    Data {
        /// Absolute offset of the first byte.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes `offset..offset+length` were evicted on the server (drop mode)
    /// before this attachment got them.
    Dropped {
        /// First lost offset.
        offset: u64,
        /// Number of lost bytes.
        length: u64,
    },
    /// The terminal screen of a PTY at stdout offset `offset` (only with
    /// [`AttachOptions::screen`](super::AttachOptions::screen)): reset the
    /// terminal and write `data` to it; the data that follows starts at
    /// `offset`. It replaces whatever of the stream was queued before it.
    Screen {
        /// The stdout offset the screen reflects every byte before.
        offset: u64,
        /// Columns of the terminal the screen was taken from.
        cols: u32,
        /// Rows.
        rows: u32,
        /// Bytes that reproduce the screen on a fresh terminal of
        /// `cols x rows`; they contain no terminal query.
        data: Bytes,
    },
}

impl Chunk {
    /// The offset just past this chunk (a screen's own offset).
    pub fn end(&self) -> u64 {
        match self {
            Chunk::Data { offset, data } => offset.saturating_add(data.len() as u64),
            Chunk::Dropped { offset, length } => offset.saturating_add(*length),
            Chunk::Screen { offset, .. } => *offset,
        }
    }

    /// The offset of the first byte this chunk stands for.
    pub fn offset(&self) -> u64 {
        match self {
            Chunk::Data { offset, .. }
            | Chunk::Dropped { offset, .. }
            | Chunk::Screen { offset, .. } => *offset,
        }
    }
}

/// One stream's state.
#[derive(Debug)]
struct StreamState {
    pub queue: VecDeque<Chunk>,
    /// Offset just past the last item received: where a resume starts.
    pub next: u64,
    /// The stream's final length, once the process has exited.
    pub total: Option<u64>,
    /// The exit frame has arrived: nothing more will come.
    pub finished: bool,
    /// Fatal failure, reported after the queued items.
    pub failure: Option<Error>,
    /// What the client holds and what the server may still send.
    pub credit: CreditLedger,
    /// Bytes skipped by `AsyncRead` because they were dropped.
    pub dropped: u64,
    /// The current connection's `hello` announced a `screen` frame (its
    /// stdout offset moved to the screen's): the next frame of stdout.
    pub screen_due: bool,
    pub waker: Option<Waker>,
}

impl StreamState {
    pub fn new(next: u64, window: u64) -> StreamState {
        StreamState {
            queue: VecDeque::new(),
            next,
            total: None,
            finished: false,
            failure: None,
            credit: CreditLedger::new(window),
            dropped: 0,
            screen_due: false,
            waker: None,
        }
    }

    /// Nothing more will arrive for this stream.
    pub fn at_end(&self) -> bool {
        self.finished || self.total.is_some_and(|t| self.next >= t)
    }

    pub fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Appends a `dropped` range, merged with a `dropped` just before it.
    fn push_dropped(&mut self, offset: u64, length: u64) {
        if let Some(Chunk::Dropped {
            offset: o,
            length: l,
        }) = self.queue.back_mut()
        {
            if *o + *l == offset {
                *l += length;
                return;
            }
        }
        self.queue.push_back(Chunk::Dropped { offset, length });
    }

    /// Appends data, merged with small data just before it.
    fn push_data(&mut self, offset: u64, data: Vec<u8>) {
        if let Some(Chunk::Data { offset: o, data: d }) = self.queue.back_mut() {
            if *o + d.len() as u64 == offset && d.len() + data.len() <= COALESCE_BYTES {
                let mut merged = Vec::with_capacity(d.len() + data.len());
                merged.extend_from_slice(d);
                merged.extend_from_slice(&data);
                *d = Bytes::from(merged);
                return;
            }
        }
        self.queue.push_back(Chunk::Data {
            offset,
            data: Bytes::from(data),
        });
    }
}

pub(crate) type ExitState = Option<Result<ProcessInfo>>;

/// What a server frame meant for the connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Carry on.
    More,
    /// The exit frame: the attachment is complete.
    Exited,
}

/// Everything the connection task and the handles share.
#[derive(Debug)]
pub(crate) struct Shared {
    streams: [Mutex<StreamState>; 2],
    /// Wakes the connection task: credit is due.
    pub credit: Notify,
    pub exit: watch::Sender<ExitState>,
    /// The last `error` frame the server sent without closing (a rejected
    /// stdin, signal or resize).
    rejection: Mutex<Option<(String, String)>>,
    /// Connections opened so far (1 + successful resumes).
    pub connections: AtomicU64,
    /// A stream has used up its credit at least once: the server may hold
    /// its output, and with it the exit frame, until the reader reads.
    pub held_back: AtomicBool,
}

impl Shared {
    /// State for streams starting at `offsets`, each buffered up to `window`.
    pub fn new(offsets: [u64; 2], window: u64, exit: watch::Sender<ExitState>) -> Shared {
        Shared {
            streams: offsets.map(|next| Mutex::new(StreamState::new(next, window))),
            credit: Notify::new(),
            exit,
            rejection: Mutex::new(None),
            connections: AtomicU64::new(0),
            held_back: AtomicBool::new(false),
        }
    }

    /// One stream's state, locked. The lock never leaves this file: the
    /// connection and the readers say what they mean through the methods
    /// below.
    fn stream(&self, stream: StreamName) -> MutexGuard<'_, StreamState> {
        // A panic while holding this lock cannot leave the state invalid in
        // a way that matters more than losing the attachment would.
        self.streams[stream.index()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Before a connection: the offsets to resume from and the credit
    /// window to ask for, sized so that with what is still queued each
    /// stream's buffer stays within `window` (the server counts the window
    /// afresh on each attach); each ledger starts the new connection.
    pub fn connection_start(&self) -> ([u64; 2], u64) {
        let mut states = [
            self.stream(StreamName::Stdout),
            self.stream(StreamName::Stderr),
        ];
        let conn_window = CreditLedger::connection_window([&states[0].credit, &states[1].credit]);
        for s in states.iter_mut() {
            s.credit.connected(conn_window);
        }
        ([states[0].next, states[1].next], conn_window)
    }

    /// The connection's `hello` starts stdout at `offset` (a screen's
    /// offset with `screen=`); `screen_due`: a `screen` frame comes next.
    pub fn stdout_starts_at(&self, offset: u64, screen_due: bool) {
        let mut stdout = self.stream(StreamName::Stdout);
        stdout.screen_due = screen_due;
        stdout.next = offset;
    }

    /// The credit to grant `stream` now, if a grant is wanted (or whatever
    /// is due, with `force`).
    pub fn take_grant(&self, stream: StreamName, force: bool) -> Option<u64> {
        self.stream(stream).credit.take_grant(force)
    }

    /// The reader's next chunk of `stream` (see `OutputReader::poll_chunk`).
    pub fn poll_chunk(
        &self,
        stream: StreamName,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Chunk>>> {
        let mut s = self.stream(stream);
        if let Some(chunk) = s.queue.pop_front() {
            if let Chunk::Data { data, .. } = &chunk {
                self.consumed(&mut s, data.len() as u64);
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        if let Some(error) = s.failure.take() {
            return Poll::Ready(Some(Err(error)));
        }
        if s.at_end() {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The reader's next bytes of `stream` (see `OutputReader`'s
    /// `AsyncRead`): `dropped` gaps skipped and counted, a screen's bytes
    /// in place of the output before it.
    pub fn poll_read(
        &self,
        stream: StreamName,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut s = self.stream(stream);
        loop {
            match s.queue.pop_front() {
                Some(Chunk::Data { offset, mut data }) => {
                    let n = data.len().min(buf.remaining());
                    buf.put_slice(&data[..n]);
                    if n < data.len() {
                        let rest = data.split_off(n);
                        s.queue.push_front(Chunk::Data {
                            offset: offset + n as u64,
                            data: rest,
                        });
                    }
                    self.consumed(&mut s, n as u64);
                    return Poll::Ready(Ok(()));
                }
                Some(Chunk::Dropped { length, .. }) => {
                    s.dropped += length;
                    continue;
                }
                Some(Chunk::Screen {
                    offset,
                    cols,
                    rows,
                    data,
                }) => {
                    // Read as bytes (never credited: the server sends a
                    // screen outside the window). An empty one is no end.
                    if data.is_empty() {
                        continue;
                    }
                    let n = data.len().min(buf.remaining());
                    buf.put_slice(&data[..n]);
                    if n < data.len() {
                        s.queue.push_front(Chunk::Screen {
                            offset,
                            cols,
                            rows,
                            data: data.slice(n..),
                        });
                    }
                    return Poll::Ready(Ok(()));
                }
                None => {}
            }
            if let Some(error) = s.failure.take() {
                return Poll::Ready(Err(std::io::Error::other(error)));
            }
            if s.at_end() {
                return Poll::Ready(Ok(()));
            }
            s.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
    }

    /// Bytes of `stream` buffered, waiting to be read.
    pub fn buffered(&self, stream: StreamName) -> u64 {
        self.stream(stream).credit.queued()
    }

    /// The offset of the next byte a reader of `stream` gets (or its end
    /// once everything is read).
    pub fn read_offset(&self, stream: StreamName) -> u64 {
        let s = self.stream(stream);
        match s.queue.front() {
            Some(chunk) => chunk.offset(),
            None => s.next,
        }
    }

    /// Bytes of `stream` that `AsyncRead` skipped as dropped.
    pub fn dropped(&self, stream: StreamName) -> u64 {
        self.stream(stream).dropped
    }

    /// The reader of `stream` is gone: its output is credited and
    /// discarded from now on.
    pub fn discard(&self, stream: StreamName) {
        let mut s = self.stream(stream);
        s.credit.discard();
        s.queue.clear();
        self.credit.notify_one();
    }

    /// Accounts for `n` bytes taken by the application and wakes the
    /// connection task when a credit grant is due.
    fn consumed(&self, s: &mut StreamState, n: u64) {
        s.credit.consumed(n);
        if s.credit.grant_wanted() {
            self.credit.notify_one();
        }
    }

    pub fn rejection(&self) -> Option<(String, String)> {
        self.rejection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// True when the process has exited and both streams are complete, so
    /// no reconnect is needed.
    pub fn complete(&self) -> bool {
        StreamName::ALL.iter().all(|s| self.stream(*s).at_end())
    }

    /// Records what the process object says about the final totals.
    pub fn learn(&self, info: &ProcessInfo) {
        if !info.is_exited() {
            return;
        }
        // The exit first: a reader that reaches its end can count on it.
        self.exit.send_if_modified(|exit| {
            if exit.is_none() {
                *exit = Some(Ok(info.clone()));
                true
            } else {
                false
            }
        });
        for (stream, total) in [
            (StreamName::Stdout, info.stdout_bytes),
            (StreamName::Stderr, info.stderr_bytes),
        ] {
            let mut s = self.stream(stream);
            s.total = Some(total);
            s.wake();
        }
    }

    /// Ends the attachment with `error`: readers get it after what they
    /// hold, unless their stream was already complete.
    pub fn fail(&self, error: Error) {
        for stream in StreamName::ALL {
            let mut s = self.stream(stream);
            if !s.at_end() {
                s.failure = Some(error.clone());
            }
            s.finished = true;
            s.wake();
        }
        self.exit.send_if_modified(|exit| {
            if exit.is_none() {
                *exit = Some(Err(error));
                true
            } else {
                false
            }
        });
    }

    /// Applies one server frame (after `hello`) to the state.
    pub fn apply(&self, frame: ServerFrame) -> Result<Applied> {
        match frame {
            ServerFrame::Stdout { offset, data } => self.data(StreamName::Stdout, offset, data)?,
            ServerFrame::Stderr { offset, data } => self.data(StreamName::Stderr, offset, data)?,
            ServerFrame::Dropped {
                stream,
                offset,
                length,
            } => {
                let mut s = self.stream(stream);
                if offset != s.next {
                    return Err(Error::Protocol(format!(
                        "dropped range of {} starts at {offset}, expected {}",
                        stream.as_str(),
                        s.next
                    )));
                }
                // A range past 2^64 is no range a server can have sent.
                s.next = offset.checked_add(length).ok_or_else(|| {
                    Error::Protocol(format!(
                        "dropped range of {} at {offset} of {length} bytes ends past 2^64",
                        stream.as_str()
                    ))
                })?;
                if !s.credit.is_discarding() {
                    s.push_dropped(offset, length);
                    s.wake();
                }
            }
            ServerFrame::Exit { process } => {
                self.learn(&process);
                for stream in StreamName::ALL {
                    let mut s = self.stream(stream);
                    s.finished = true;
                    s.wake();
                }
                return Ok(Applied::Exited);
            }
            ServerFrame::Error { code, message } => {
                *self.rejection.lock().unwrap_or_else(|p| p.into_inner()) = Some((code, message));
            }
            ServerFrame::Hello { .. } => {
                return Err(Error::Protocol("a second hello frame".into()));
            }
            // The connection takes these for its numbered input.
            ServerFrame::InputAck { .. } => {}
            ServerFrame::Screen {
                offset,
                cols,
                rows,
                data,
            } => {
                let mut s = self.stream(StreamName::Stdout);
                if !s.screen_due {
                    return Err(Error::Protocol(
                        "a screen frame this client did not ask for".into(),
                    ));
                }
                s.screen_due = false;
                if offset != s.next {
                    return Err(Error::Protocol(format!(
                        "screen at stdout offset {offset}, expected {}",
                        s.next
                    )));
                }
                if !s.credit.is_discarding() {
                    // The screen reflects everything queued before it: what
                    // is dropped here counts as read, so credit flows on.
                    let queued: u64 = s
                        .queue
                        .drain(..)
                        .map(|chunk| match chunk {
                            Chunk::Data { data, .. } => data.len() as u64,
                            _ => 0,
                        })
                        .sum();
                    s.credit.consumed(queued);
                    if s.credit.grant_wanted() {
                        self.credit.notify_one();
                    }
                    s.queue.push_back(Chunk::Screen {
                        offset,
                        cols,
                        rows,
                        data: Bytes::from(data),
                    });
                    s.wake();
                }
            }
        }
        Ok(Applied::More)
    }

    fn data(&self, stream: StreamName, offset: u64, data: Vec<u8>) -> Result<()> {
        let mut s = self.stream(stream);
        if s.screen_due {
            return Err(Error::Protocol(
                "stdout data before the announced screen frame".into(),
            ));
        }
        if offset != s.next {
            return Err(Error::Protocol(format!(
                "{} data at offset {offset}, expected {}",
                stream.as_str(),
                s.next
            )));
        }
        let len = data.len() as u64;
        s.next = s.next.checked_add(len).ok_or_else(|| {
            Error::Protocol(format!(
                "{} data at offset {offset} ends past 2^64",
                stream.as_str()
            ))
        })?;
        if len == 0 {
            return Ok(());
        }
        match s.credit.received(len) {
            Err(overrun) => Err(Error::Protocol(format!(
                "the server sent {} bytes of {} with credit for {} (window {})",
                overrun.received,
                stream.as_str(),
                overrun.allowance,
                s.credit.window()
            ))),
            Ok(Receipt::Discard) => Ok(()),
            Ok(Receipt::Keep) => {
                if s.credit.is_exhausted() {
                    self.held_back.store(true, Ordering::Relaxed);
                }
                s.push_data(offset, data);
                s.wake();
                Ok(())
            }
        }
    }
}

/// Cancels the connection task once every handle is gone.
#[derive(Debug)]
pub(crate) struct Guard(pub CancellationToken);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
