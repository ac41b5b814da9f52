//! One WebSocket attachment: the last leg of the data path.
//!
//! process output -> retained buffer -> this attachment's per-stream cursor
//! -> socket. The writer loop below alone writes to the socket; a separate
//! reader task decodes client frames (stdin, signals, credit) and acts on
//! them at once, so input and keepalive never wait behind output. A slow
//! socket holds back only its own attachment: capture never waits for it
//! (drop mode) or waits at most the send timeout (block mode).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tether_protocol::signal::parse_signal;
use tether_protocol::{ClientFrame, Overflow, ServerFrame, StreamName, PROTOCOL_VERSION};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout, MissedTickBehavior};

use crate::error::{ApiError, AttachError};
use crate::metrics::Metrics;
use crate::process::Process;
use crate::retained::{Next, ReaderId};
use crate::table::ProcessTable;

/// How a client attaches (from the query string).
#[derive(Debug, Clone, Copy)]
pub struct AttachOptions {
    /// First offset of stdout and stderr to send.
    pub start: [u64; 2],
    /// Credit window per stream, if flow control is on.
    pub window: Option<u64>,
    /// May not write stdin, signal or resize.
    pub readonly: bool,
}

/// Credit granted by the client, per stream. The reader adds to it the
/// moment a `credit` frame arrives; the writer reads it, so credit never
/// queues behind anything.
#[derive(Default)]
struct Credit {
    granted: [AtomicU64; 2],
    changed: Notify,
}

impl Credit {
    fn grant(&self, stream: StreamName, bytes: u64) {
        let _ =
            self.granted[stream.index()].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                Some(g.saturating_add(bytes))
            });
        self.changed.notify_one();
    }

    fn granted(&self, stream: StreamName) -> u64 {
        self.granted[stream.index()].load(Ordering::Relaxed)
    }
}

/// Whether the client answers: the oldest ping it has not answered with
/// anything (a pong or any message). Silence alone is no fault: a client
/// that is only reading, or that was never pinged because output kept the
/// socket busy, is alive.
struct Liveness {
    epoch: Instant,
    /// When the oldest unanswered ping was sent (ms since epoch + 1), or 0.
    unanswered_since: AtomicU64,
    /// The reader is waiting for the process (stdin queue full), not for
    /// the client: pongs sit unread behind it.
    waiting: std::sync::atomic::AtomicBool,
}

impl Liveness {
    fn new() -> Liveness {
        Liveness {
            epoch: Instant::now(),
            unanswered_since: AtomicU64::new(0),
            waiting: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn heard(&self) {
        self.unanswered_since.store(0, Ordering::Relaxed);
    }

    fn waiting_on_process(&self, waiting: bool) {
        self.waiting.store(waiting, Ordering::Relaxed);
        if !waiting {
            self.heard();
        }
    }

    fn pinged(&self) {
        let now = self.now();
        let _ =
            self.unanswered_since
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// How long the oldest unanswered ping has waited.
    fn unanswered_for(&self) -> Duration {
        if self.waiting.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        match self.unanswered_since.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(self.now().saturating_sub(since)),
        }
    }
}

/// What the reader task tells the writer loop (rare events only).
enum ReaderEvent {
    /// A request failed; report it and carry on.
    Rejected(ApiError),
    /// A protocol error: report it and close with its code.
    Fatal(AttachError),
    /// The client closed or the connection broke.
    Gone,
}

/// Per-stream progress of this attachment.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// Next offset to send.
    next: u64,
    /// Data bytes sent (credit counts these, never `dropped` notices).
    sent: u64,
}

/// Flush after this many bytes of feed()s, so big bursts go out in few
/// syscalls and small ones promptly.
const FLUSH_BYTES: usize = 256 * 1024;

/// An attachment slot, taken before the upgrade (so a refusal is an HTTP
/// error rather than a closed socket) and given back on drop, on every path:
/// a failed upgrade, a broken socket, or the end of the attachment.
pub struct Admission {
    process: Arc<Process>,
    table: Arc<ProcessTable>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.process.attachments.fetch_sub(1, Ordering::SeqCst);
        self.table.attachments.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Removes the block-mode registration when the attachment ends; a capture
/// waiting for room re-checks, since the slowest reader may be gone.
struct Registration {
    process: Arc<Process>,
    reader: ReaderId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.process.output().unregister(self.reader);
        for stream in StreamName::ALL {
            self.process.notify_space(stream);
        }
    }
}

/// Reserves an attachment slot (per process and in total).
pub fn admit(table: &Arc<ProcessTable>, process: &Arc<Process>) -> Result<Admission, ApiError> {
    let config = table.config();
    if process.attachments.fetch_add(1, Ordering::SeqCst) >= config.max_attachments_per_process {
        process.attachments.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::TooManyAttachments(format!(
            "process {} has {} (limit --max-attachments-per-process)",
            process.id, config.max_attachments_per_process
        )));
    }
    if table.attachments.fetch_add(1, Ordering::SeqCst) >= config.max_attachments {
        table.attachments.fetch_sub(1, Ordering::SeqCst);
        process.attachments.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::TooManyAttachments(format!(
            "{} in total (limit --max-attachments)",
            config.max_attachments
        )));
    }
    Ok(Admission {
        process: process.clone(),
        table: table.clone(),
    })
}

/// Serves one admitted attachment until the exit frame has been sent and
/// the connection closed, or the client goes away.
pub async fn serve(socket: WebSocket, admission: Admission, options: AttachOptions) {
    let process = admission.process.clone();
    let config = admission.table.config().clone();
    process.metrics.attaches.fetch_add(1, Ordering::Relaxed);
    let reader = process.output().register(options.start);
    let _registration = Registration {
        process: process.clone(),
        reader,
    };
    let (sink, stream) = socket.split();
    let (events_tx, events) = mpsc::channel(16);
    let credit = Arc::new(Credit::default());
    let liveness = Arc::new(Liveness::new());
    let queue = ProcessQueue::start(
        process.clone(),
        events_tx.clone(),
        options.readonly,
        STDIN_BUDGET.max(config.max_frame_bytes),
    );
    let mut reader_task = tokio::spawn(read_client(
        stream,
        queue,
        events_tx,
        credit.clone(),
        config.max_frame_bytes,
        liveness.clone(),
    ));
    let mut writer = Writer {
        sink,
        process,
        reader,
        send_timeout: config.send_timeout(),
        max_data: config.max_data_frame_bytes.max(1),
        window: options.window,
        cursors: options.start.map(|next| Cursor { next, sent: 0 }),
        credit,
        unflushed: 0,
    };
    let close = writer
        .run(
            events,
            liveness,
            config.ping_interval(),
            config.idle_timeout(),
        )
        .await;
    if let Some((code, reason)) = close {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        if writer.send(Message::Close(Some(frame))).await.is_ok() {
            // Wait, bounded, for the client's Close so the kernel never
            // resets a connection with output still unread; then shut it.
            let _ = timeout(config.close_timeout(), &mut reader_task).await;
        }
    }
    reader_task.abort();
    drop(admission);
}

struct Writer {
    sink: SplitSink<WebSocket, Message>,
    process: Arc<Process>,
    reader: ReaderId,
    send_timeout: Duration,
    max_data: usize,
    window: Option<u64>,
    cursors: [Cursor; 2],
    credit: Arc<Credit>,
    unflushed: usize,
}

/// What [`Writer::send_available`] left behind.
enum Progress {
    /// Every stream is complete and fully sent: the exit frame may follow.
    Complete,
    /// Nothing more may be sent now (no output yet, or no credit).
    Waiting,
    /// More is ready; events were given a turn first.
    More,
}

/// Why the writer stopped: `Some((close code, reason))` to close politely,
/// `None` when the socket is already unusable.
type Close = Option<(u16, String)>;

impl Writer {
    async fn run(
        &mut self,
        mut events: mpsc::Receiver<ReaderEvent>,
        liveness: Arc<Liveness>,
        ping_every: Duration,
        idle_timeout: Duration,
    ) -> Close {
        let mut output = self.process.watch_output();
        let mut exit = self.process.watch_exit();
        let hello = ServerFrame::Hello {
            version: PROTOCOL_VERSION,
            process: self.process.info(),
            stdout: self.cursors[0].next,
            stderr: self.cursors[1].next,
        };
        if self
            .send(Message::Binary(hello.encode().into()))
            .await
            .is_err()
        {
            return None;
        }
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            output.borrow_and_update();
            let exited = exit.borrow_and_update().is_some();
            let sent = self.send_available().await;
            match sent {
                Err(()) => return None,
                Ok(Progress::Complete) if exited => {
                    let frame = ServerFrame::Exit {
                        process: self.process.info(),
                    };
                    if self
                        .send(Message::Binary(frame.encode().into()))
                        .await
                        .is_err()
                    {
                        return None;
                    }
                    return Some((1000, "process exited".into()));
                }
                Ok(_) => {}
            }
            // Biased: error frames, closes and pings go before more output;
            // with output still waiting, loop straight back to it.
            let more = matches!(sent, Ok(Progress::More));
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Some(ReaderEvent::Rejected(error)) => {
                        let (_, code) = error.status_and_code();
                        if self.send_error(code, &error.to_string()).await.is_err() {
                            return None;
                        }
                    }
                    Some(ReaderEvent::Fatal(error)) => {
                        if self.send_error(error.code(), &error.to_string()).await.is_err() {
                            return None;
                        }
                        return Some((error.close_code(), error.code().into()));
                    }
                    Some(ReaderEvent::Gone) | None => return None,
                },
                _ = ping.tick() => {
                    if liveness.unanswered_for() > idle_timeout {
                        return Some((1001, "idle timeout".into()));
                    }
                    if self.send(Message::Ping(Default::default())).await.is_err() {
                        return None;
                    }
                    liveness.pinged();
                }
                _ = output.changed() => {}
                _ = exit.changed() => {}
                _ = self.credit.changed.notified() => {
                    // Credit acknowledges bytes already sent: block-mode
                    // capture may reuse their room now.
                    self.release_sent();
                }
                _ = std::future::ready(()), if more => {}
            }
        }
    }

    /// Sends what output this attachment may be sent now, batching frames
    /// between flushes, and returns after one flush's worth so that events
    /// get their turn.
    async fn send_available(&mut self) -> Result<Progress, ()> {
        loop {
            let mut sent_any = false;
            let mut done = true;
            // One frame per stream per round: neither stream starves.
            for stream in StreamName::ALL {
                let i = stream.index();
                let allowance = match self.window {
                    Some(window) => {
                        let granted = self.credit.granted(stream);
                        (window.saturating_add(granted)).saturating_sub(self.cursors[i].sent)
                    }
                    None => u64::MAX,
                };
                let max = usize::try_from(allowance)
                    .unwrap_or(usize::MAX)
                    .min(self.max_data);
                let next = self.process.output().stream(stream).next(
                    self.cursors[i].next,
                    max,
                    |offset, parts| ServerFrame::encode_data_parts(stream, offset, parts),
                );
                let frame = match next {
                    Next::End => continue,
                    Next::Pending => {
                        done = false;
                        continue;
                    }
                    Next::Dropped { offset, length } => {
                        self.cursors[i].next = offset + length;
                        Metrics::add(&self.process.metrics.dropped, stream, length);
                        ServerFrame::Dropped {
                            stream,
                            offset,
                            length,
                        }
                        .encode()
                    }
                    Next::Data {
                        offset,
                        length,
                        frame,
                    } => {
                        self.cursors[i].next = offset + length;
                        self.cursors[i].sent += length;
                        Metrics::add(&self.process.metrics.sent, stream, length);
                        frame
                    }
                };
                done = false;
                sent_any = true;
                self.unflushed += frame.len();
                self.feed(Message::Binary(frame.into())).await?;
                if self.unflushed >= FLUSH_BYTES {
                    self.flush().await?;
                    return Ok(Progress::More);
                }
            }
            if !sent_any {
                if self.unflushed > 0 {
                    self.flush().await?;
                }
                return Ok(if done {
                    Progress::Complete
                } else {
                    Progress::Waiting
                });
            }
            self.release_sent();
        }
    }

    /// Block mode: tells capture which bytes this attachment no longer
    /// needs. With a window, bytes not yet acknowledged by credit stay, so
    /// a client that reconnects after a blip loses nothing.
    fn release_sent(&self) {
        if self.process.overflow != Overflow::Block {
            return;
        }
        {
            let mut out = self.process.output();
            for stream in StreamName::ALL {
                let c = self.cursors[stream.index()];
                let unacked = match self.window {
                    Some(_) => c.sent.saturating_sub(self.credit.granted(stream)),
                    None => 0,
                };
                out.stream_mut(stream)
                    .advance(self.reader, c.next.saturating_sub(unacked));
            }
        }
        for stream in StreamName::ALL {
            self.process.notify_space(stream);
        }
    }

    async fn send_error(&mut self, code: &str, message: &str) -> Result<(), ()> {
        let frame = ServerFrame::Error {
            code: code.to_string(),
            message: message.to_string(),
        };
        self.send(Message::Binary(frame.encode().into())).await
    }

    async fn feed(&mut self, message: Message) -> Result<(), ()> {
        match timeout(self.send_timeout, self.sink.feed(message)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    async fn flush(&mut self) -> Result<(), ()> {
        self.unflushed = 0;
        match timeout(self.send_timeout, self.sink.flush()).await {
            Ok(Ok(())) => {
                self.release_sent();
                Ok(())
            }
            _ => {
                tracing::info!(id = %self.process.id, "attachment socket took nothing for the send timeout; closing it");
                Err(())
            }
        }
    }

    async fn send(&mut self, message: Message) -> Result<(), ()> {
        self.feed(message).await?;
        self.flush().await
    }
}

/// Reads client frames and acts on them at once. Runs apart from the writer
/// so stdin, signals and credit are never stuck behind output.
/// Frames for the process (stdin, stdin_eof, signal, resize), in the order
/// the client sent them, carried out by a task of their own. The reader
/// hands them over and goes on reading, so credit is never stuck behind
/// stdin that the process is not reading yet; only when the attachment has
/// [`STDIN_BUDGET`] bytes queued does the reader wait.
struct ProcessQueue {
    frames: mpsc::Sender<(ClientFrame, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    largest: usize,
}

/// Bytes of stdin one attachment may have queued for its process.
const STDIN_BUDGET: usize = 4 << 20;

impl ProcessQueue {
    fn start(
        process: Arc<Process>,
        events: mpsc::Sender<ReaderEvent>,
        readonly: bool,
        budget: usize,
    ) -> ProcessQueue {
        let budget = budget.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        let (frames, mut queued) = mpsc::channel::<(ClientFrame, OwnedSemaphorePermit)>(1024);
        // Ends when the reader is gone and the queue is empty; a process
        // that never reads stdin makes its writes fail once it exits.
        tokio::spawn(async move {
            while let Some((frame, permit)) = queued.recv().await {
                let event = act(&process, frame, readonly).await;
                drop(permit);
                if let Some(event) = event {
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
            }
        });
        ProcessQueue {
            frames,
            budget: Arc::new(Semaphore::new(budget)),
            largest: budget,
        }
    }

    /// Queues a frame, waiting only while the budget is spent. False when
    /// the queue is gone.
    async fn push(&self, frame: ClientFrame) -> bool {
        let cost = match &frame {
            ClientFrame::Stdin { data } => data.len().clamp(1, self.largest),
            _ => 1,
        };
        let Ok(permit) = self.budget.clone().acquire_many_owned(cost as u32).await else {
            return false;
        };
        self.frames.send((frame, permit)).await.is_ok()
    }
}

async fn read_client(
    mut stream: SplitStream<WebSocket>,
    queue: ProcessQueue,
    events: mpsc::Sender<ReaderEvent>,
    credit: Arc<Credit>,
    max_frame: usize,
    liveness: Arc<Liveness>,
) {
    let mut failed = false;
    while let Some(message) = stream.next().await {
        liveness.heard();
        let event = match message {
            // After a protocol error, only the client's Close matters.
            Ok(Message::Close(_)) => break,
            Ok(_) if failed => continue,
            Ok(Message::Binary(bytes)) if bytes.len() > max_frame => {
                Some(ReaderEvent::Fatal(AttachError::TooLarge(max_frame)))
            }
            Ok(Message::Binary(bytes)) => match ClientFrame::decode(&bytes) {
                Ok(ClientFrame::Credit { stream, bytes }) => {
                    credit.grant(stream, bytes);
                    None
                }
                Ok(frame) => {
                    // With the budget spent we wait for the process; the
                    // client is not silent then, we are not listening.
                    liveness.waiting_on_process(true);
                    let queued = queue.push(frame).await;
                    liveness.waiting_on_process(false);
                    if !queued {
                        return;
                    }
                    None
                }
                Err(e) => Some(ReaderEvent::Fatal(e.into())),
            },
            Ok(Message::Text(_)) => Some(ReaderEvent::Fatal(AttachError::TextMessage)),
            Ok(Message::Ping(_) | Message::Pong(_)) => None,
            Err(e) => {
                let error = socket_error(e, max_frame);
                let _ = events.send(ReaderEvent::Fatal(error)).await;
                return;
            }
        };
        if let Some(event) = event {
            failed |= matches!(event, ReaderEvent::Fatal(_));
            if events.send(event).await.is_err() {
                return;
            }
        }
    }
    let _ = events.send(ReaderEvent::Gone).await;
}

fn socket_error(error: axum::Error, max_frame: usize) -> AttachError {
    let inner = error.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(_)) => AttachError::TooLarge(max_frame),
        _ => AttachError::Socket(inner.to_string()),
    }
}

/// Carries out one client frame. Failures that are not protocol errors
/// (stdin closed, read-only, bad signal name) are reported and the
/// attachment carries on.
async fn act(process: &Process, frame: ClientFrame, readonly: bool) -> Option<ReaderEvent> {
    let read_only = || {
        Some(ReaderEvent::Rejected(ApiError::InvalidRequest(
            "this attachment is read-only (readonly=1)".into(),
        )))
    };
    let result = match frame {
        // Handled by the reader itself.
        ClientFrame::Credit { .. } => return None,
        ClientFrame::Stdin { .. } | ClientFrame::StdinEof | ClientFrame::Signal { .. }
            if readonly =>
        {
            return read_only()
        }
        ClientFrame::Resize { .. } if readonly => return read_only(),
        ClientFrame::Stdin { data } => process.write_stdin(data).await,
        ClientFrame::StdinEof => process.close_stdin().await,
        ClientFrame::Signal { signal } => match parse_signal(&signal) {
            Some((_, number)) => match nix::sys::signal::Signal::try_from(number) {
                Ok(signal) => process.signal(signal).await,
                Err(_) => Err(ApiError::InvalidRequest(format!(
                    "unknown signal {signal:?}"
                ))),
            },
            None => Err(ApiError::InvalidRequest(format!(
                "unknown signal {signal:?}; use a name such as TERM, INT, KILL, HUP"
            ))),
        },
        ClientFrame::Resize { cols, rows } => process.resize(cols, rows),
    };
    result.err().map(ReaderEvent::Rejected)
}
