//! [`Attachment`]: one process's output, input and exit over `tether.v1`,
//! with credit flow control and automatic resume.
//!
//! Design: one background task owns the WebSocket. It pushes each output
//! frame into the queue of its stream; the application takes bytes from
//! each queue through an [`OutputReader`]. Credit is granted to the server
//! for a stream only as the application consumes that stream, so each queue
//! holds at most `window` bytes and unread output waits on the server. The
//! task also forwards stdin, resize and signal commands from one bounded
//! channel, and reconnects with the next offset of each stream when the
//! connection drops. A second task long-polls `wait`, so a reader reaches
//! end of file as soon as the process has exited and that stream is
//! complete, even while the other stream is still unread.

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tether_protocol::api::MAX_TERMINAL_SIZE;
use tether_protocol::signal::parse_signal;
use tether_protocol::{ClientFrame, ProcessInfo, ServerFrame, StreamName, SUBPROTOCOL};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::{CancellationToken, PollSender};

use crate::client::{path_segment, Backoff, Client, RetryPolicy};
use crate::error::{Error, Result};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Largest stdin payload per frame (the server accepts frames up to 1 MiB).
const MAX_STDIN_FRAME: usize = 64 << 10;
/// Commands (stdin chunks, resizes, signals) waiting for the socket.
const COMMAND_QUEUE: usize = 16;
/// Small data frames are merged in the queue up to this size.
const COALESCE_BYTES: usize = 16 << 10;
/// Largest credit window accepted.
const MAX_WINDOW: u64 = 1 << 40;

/// How to attach. The defaults suit most uses.
///
/// ```
/// use tether_client::AttachOptions;
///
/// let options = AttachOptions { window: 64 * 1024, readonly: true, ..AttachOptions::default() };
/// assert_eq!(options.stdout_offset, 0);
/// ```
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// Credit window per stream, in bytes: at most this much of each
    /// stream is buffered in the client (default 256 KiB).
    pub window: u64,
    /// Read-only attachment (`readonly=1`): stdin, signals and resizes
    /// are refused.
    pub readonly: bool,
    /// First stdout offset to receive (default 0: everything retained).
    pub stdout_offset: u64,
    /// First stderr offset to receive (default 0).
    pub stderr_offset: u64,
    /// Retry budget for connecting and for reconnecting after the
    /// connection drops (default: 30 s, backoff up to 2 s).
    pub reconnect: RetryPolicy,
    /// A connection that brings no message (the server pings every 20 s by
    /// default) for this long is taken as lost and resumed (default 90 s).
    pub idle_timeout: Duration,
    /// Timeout of one connection attempt, handshake and `hello` included
    /// (default 10 s).
    pub connect_timeout: Duration,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            window: 256 << 10,
            readonly: false,
            stdout_offset: 0,
            stderr_offset: 0,
            reconnect: RetryPolicy::default(),
            idle_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// One item of an output stream, from [`OutputReader::chunk`].
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
}

impl Chunk {
    /// The offset just past this chunk.
    pub fn end(&self) -> u64 {
        match self {
            Chunk::Data { offset, data } => offset + data.len() as u64,
            Chunk::Dropped { offset, length } => offset + length,
        }
    }
}

/// Per-stream state shared by the connection task and the reader.
#[derive(Debug, Default)]
struct StreamState {
    queue: VecDeque<Chunk>,
    /// Data bytes in `queue`.
    queued: u64,
    /// Offset just past the last item received: where a resume starts.
    next: u64,
    /// The stream's final length, once the process has exited.
    total: Option<u64>,
    /// The exit frame has arrived: nothing more will come.
    finished: bool,
    /// Fatal failure, reported after the queued items.
    failure: Option<Error>,
    /// The reader was dropped: data is credited and thrown away.
    discard: bool,
    /// Credit to grant on the current connection (negative: a debt).
    owed: i64,
    /// Bytes skipped by `AsyncRead` because they were dropped.
    dropped: u64,
    waker: Option<Waker>,
}

impl StreamState {
    fn at_end(&self) -> bool {
        self.finished || self.total.is_some_and(|t| self.next >= t)
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

type ExitState = Option<Result<ProcessInfo>>;

#[derive(Debug)]
struct Shared {
    streams: [Mutex<StreamState>; 2],
    /// Wakes the connection task: credit is owed.
    credit: Notify,
    window: u64,
    threshold: i64,
    exit: watch::Sender<ExitState>,
    /// The last `error` frame the server sent without closing (a rejected
    /// stdin, signal or resize).
    rejection: Mutex<Option<(String, String)>>,
    /// Connections opened so far (1 + successful resumes).
    connections: AtomicU64,
}

impl Shared {
    fn stream(&self, stream: StreamName) -> MutexGuard<'_, StreamState> {
        // A panic while holding this lock cannot leave the state invalid in
        // a way that matters more than losing the attachment would.
        self.streams[stream.index()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records what the process object says about the final totals.
    fn learn(&self, info: &ProcessInfo) {
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

    fn fail(&self, error: Error) {
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
}

/// Cancels the connection task once every handle is gone.
#[derive(Debug)]
struct Guard(CancellationToken);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What the handles ask the connection task to send, in order.
#[derive(Debug)]
enum Command {
    Stdin(Bytes),
    Eof,
    Resize(u32, u32),
    Signal(String),
}

/// An attachment to a process: independent handles for each stream, stdin,
/// control and the exit. Move each where it is needed; the connection lives
/// until the process has exited and its output has been delivered, or all
/// handles are dropped. A dropped reader stops buffering its stream (its
/// output is credited and discarded).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tokio::io::AsyncReadExt;
/// use tether_client::{AttachOptions, Client, SpawnRequest};
///
/// let client = Client::new("http://127.0.0.1:7420")?;
/// let mut spec = SpawnRequest::default();
/// spec.command = Some("cat; echo done >&2".into());
/// spec.stdin = true;
/// let process = client.spawn(spec).await?;
/// let attachment = client.attach(&process.id, AttachOptions::default()).await?;
/// let tether_client::Attachment { mut stdout, mut stderr, mut stdin, exit, .. } = attachment;
/// stdin.write(b"hello\n").await?;
/// stdin.close().await?;
/// let mut out = String::new();
/// stdout.read_to_string(&mut out).await?;
/// let mut err = String::new();
/// stderr.read_to_string(&mut err).await?;
/// let info = exit.await?;
/// assert_eq!((out.as_str(), err.as_str(), info.exit_code), ("hello\n", "done\n", Some(0)));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Attachment {
    /// The process's stdout (the whole output of a PTY).
    pub stdout: OutputReader,
    /// The process's stderr (empty for a PTY).
    pub stderr: OutputReader,
    /// Writes to the process's stdin.
    pub stdin: StdinWriter,
    /// Resize and signal.
    pub control: Control,
    /// The exit: resolves once the process has exited.
    pub exit: ExitHandle,
    process: ProcessInfo,
}

impl Attachment {
    /// The process object from the first `hello` frame.
    pub fn process(&self) -> &ProcessInfo {
        &self.process
    }
}

/// Reads one output stream of an [`Attachment`], as bytes
/// ([`AsyncRead`], which skips `dropped` gaps and counts them in
/// [`OutputReader::dropped`]) or as chunks ([`OutputReader::chunk`], or the
/// [`futures_util::Stream`] of them, which report them). End of file comes once the process has exited and every
/// byte of this stream has been read, whatever happens to the other stream.
///
/// ```no_run
/// # async fn demo(mut reader: tether_client::OutputReader) -> Result<(), tether_client::Error> {
/// use tether_client::Chunk;
///
/// while let Some(chunk) = reader.chunk().await {
///     match chunk? {
///         Chunk::Data { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
///         Chunk::Dropped { length, .. } => eprintln!("[{length} bytes lost]"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct OutputReader {
    stream: StreamName,
    shared: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl OutputReader {
    /// Which stream this reads.
    pub fn stream(&self) -> StreamName {
        self.stream
    }

    /// The next chunk: data or a `dropped` notice. `None` at the end of the
    /// stream; an error once if the attachment failed (after every chunk
    /// received before the failure).
    pub async fn chunk(&mut self) -> Option<Result<Chunk>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// Poll form of [`OutputReader::chunk`].
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Chunk>>> {
        let mut s = self.shared.stream(self.stream);
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

    /// Bytes of this stream buffered in the client, waiting to be read.
    /// Never more than the attachment's window.
    pub fn buffered(&self) -> u64 {
        self.shared.stream(self.stream).queued
    }

    /// The offset of the next byte this reader will return (or the stream's
    /// end once everything is read).
    pub fn offset(&self) -> u64 {
        let s = self.shared.stream(self.stream);
        match s.queue.front() {
            Some(Chunk::Data { offset, .. } | Chunk::Dropped { offset, .. }) => *offset,
            None => s.next,
        }
    }

    /// Bytes that `AsyncRead` skipped because the server had dropped them.
    pub fn dropped(&self) -> u64 {
        self.shared.stream(self.stream).dropped
    }

    /// Accounts for `n` bytes taken by the application and asks the
    /// connection task for a credit grant when one is due.
    fn consumed(&self, s: &mut StreamState, n: u64) {
        s.queued -= n;
        s.owed += n as i64;
        if s.owed > 0 && (s.owed >= self.shared.threshold || s.queue.is_empty()) {
            self.shared.credit.notify_one();
        }
    }
}

impl AsyncRead for OutputReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let mut s = this.shared.stream(this.stream);
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
                    this.consumed(&mut s, n as u64);
                    return Poll::Ready(Ok(()));
                }
                Some(Chunk::Dropped { length, .. }) => {
                    s.dropped += length;
                    continue;
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
}

/// The chunk stream: the same items as [`OutputReader::chunk`].
impl futures_util::Stream for OutputReader {
    type Item = Result<Chunk>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Chunk>>> {
        self.get_mut().poll_chunk(cx)
    }
}

impl Drop for OutputReader {
    fn drop(&mut self) {
        let mut s = self.shared.stream(self.stream);
        s.discard = true;
        s.owed += s.queued as i64;
        s.queued = 0;
        s.queue.clear();
        self.shared.credit.notify_one();
    }
}

/// Writes to the process's stdin: [`StdinWriter::write`], or [`AsyncWrite`]
/// (whose shutdown closes stdin). Bytes written while the connection is
/// being resumed wait in a small bounded queue; a write already handed to a
/// connection that then broke may be lost (stdin is sent at most once,
/// never twice). [`StdinWriter::close`] sends end of file, and is repeated
/// after a reconnect if its delivery is in doubt.
///
/// ```no_run
/// # async fn demo(attachment: tether_client::Attachment) -> Result<(), tether_client::Error> {
/// let mut stdin = attachment.stdin;
/// stdin.write(b"quit\n").await?;
/// stdin.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct StdinWriter {
    tx: PollSender<Command>,
    readonly: bool,
    closed: bool,
    _guard: Arc<Guard>,
}

impl StdinWriter {
    /// Queues `data` for the process's stdin.
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        for piece in data.chunks(MAX_STDIN_FRAME) {
            let command = Command::Stdin(Bytes::copy_from_slice(piece));
            std::future::poll_fn(|cx| self.poll_send(cx, || command_clone(&command))).await?;
        }
        Ok(())
    }

    /// Closes the process's stdin (on a PTY: sends the EOF character).
    pub async fn close(mut self) -> Result<()> {
        self.shutdown_inner().await
    }

    async fn shutdown_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        std::future::poll_fn(|cx| self.poll_send(cx, || Command::Eof)).await?;
        self.closed = true;
        Ok(())
    }

    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        command: impl FnOnce() -> Command,
    ) -> Poll<Result<()>> {
        if self.readonly {
            return Poll::Ready(Err(Error::InvalidArgument(
                "this attachment is read-only".into(),
            )));
        }
        if self.closed {
            return Poll::Ready(Err(Error::Closed("stdin was closed".into())));
        }
        match self.tx.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => {
                Poll::Ready(Err(Error::Closed("the attachment has ended".into())))
            }
            Poll::Ready(Ok(())) => Poll::Ready(
                self.tx
                    .send_item(command())
                    .map_err(|_| Error::Closed("the attachment has ended".into())),
            ),
        }
    }
}

fn command_clone(command: &Command) -> Command {
    match command {
        Command::Stdin(b) => Command::Stdin(b.clone()),
        Command::Eof => Command::Eof,
        Command::Resize(c, r) => Command::Resize(*c, *r),
        Command::Signal(s) => Command::Signal(s.clone()),
    }
}

fn io_error(error: Error) -> std::io::Error {
    let kind = match &error {
        Error::Closed(_) => std::io::ErrorKind::BrokenPipe,
        Error::InvalidArgument(_) => std::io::ErrorKind::PermissionDenied,
        _ => std::io::ErrorKind::Other,
    };
    std::io::Error::new(kind, error)
}

impl AsyncWrite for StdinWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let n = buf.len().min(MAX_STDIN_FRAME);
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        this.poll_send(cx, || Command::Stdin(Bytes::copy_from_slice(&buf[..n])))
            .map(|r| r.map(|()| n).map_err(io_error))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.closed {
            return Poll::Ready(Ok(()));
        }
        match this.poll_send(cx, || Command::Eof) {
            Poll::Ready(Ok(())) => {
                this.closed = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(io_error(e))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Resize and signal, sent over the attachment in order with stdin.
/// Cloneable. A request the server refuses (say, a signal to a process that
/// has just exited) does not end the attachment; the refusal is kept in
/// [`Control::last_rejection`].
///
/// ```no_run
/// # async fn demo(control: tether_client::Control) -> Result<(), tether_client::Error> {
/// control.resize(120, 40).await?;
/// control.signal("INT").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Control {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    readonly: bool,
    _guard: Arc<Guard>,
}

impl Control {
    /// Sets the PTY window size (ignored by the server for pipes). Both
    /// must be 1 to 4096.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<()> {
        let (cols, rows) = (u32::from(cols), u32::from(rows));
        if !(1..=MAX_TERMINAL_SIZE).contains(&cols) || !(1..=MAX_TERMINAL_SIZE).contains(&rows) {
            return Err(Error::InvalidArgument(format!(
                "terminal size {cols}x{rows} is out of range 1..={MAX_TERMINAL_SIZE}"
            )));
        }
        self.send(Command::Resize(cols, rows)).await
    }

    /// Sends a signal by name (`"INT"`, `"TERM"`, `"SIGHUP"`, `"9"`...) to
    /// the process group.
    pub async fn signal(&self, signal: &str) -> Result<()> {
        let (name, _) = parse_signal(signal)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown signal {signal:?}")))?;
        self.send(Command::Signal(name.to_string())).await
    }

    /// The code and message of the last request the server refused.
    pub fn last_rejection(&self) -> Option<(String, String)> {
        self.shared
            .rejection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many WebSocket connections this attachment has opened: 1, plus
    /// one per automatic resume after a dropped connection.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    async fn send(&self, command: Command) -> Result<()> {
        if self.readonly {
            return Err(Error::InvalidArgument(
                "this attachment is read-only".into(),
            ));
        }
        self.tx
            .send(command)
            .await
            .map_err(|_| Error::Closed("the attachment has ended".into()))
    }
}

/// The exit of an attached process: `.await` it (it is cloneable) for the
/// exited process object. It resolves as soon as the server reports the
/// exit, whether or not the output has been read, and fails only if the
/// attachment itself failed (for instance when the retry budget of a
/// reconnect ran out).
///
/// ```no_run
/// # async fn demo(attachment: tether_client::Attachment) -> Result<(), tether_client::Error> {
/// let info = attachment.exit.await?;
/// println!("{:?} {:?}", info.reason, info.exit_code);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ExitHandle {
    rx: watch::Receiver<ExitState>,
    _guard: Arc<Guard>,
}

impl ExitHandle {
    /// Waits for the exit.
    pub async fn wait(&mut self) -> Result<ProcessInfo> {
        match self.rx.wait_for(Option::is_some).await {
            Ok(state) => match state.as_ref() {
                Some(result) => result.clone(),
                None => Err(Error::Closed("the attachment ended without an exit".into())),
            },
            Err(_) => Err(Error::Closed("the attachment ended without an exit".into())),
        }
    }

    /// The exit if it is already known.
    pub fn get(&self) -> Option<Result<ProcessInfo>> {
        self.rx.borrow().clone()
    }
}

impl IntoFuture for ExitHandle {
    type Output = Result<ProcessInfo>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<ProcessInfo>> + Send>>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move { self.wait().await })
    }
}

impl Client {
    /// Attaches to a process over WebSocket (`tether.v1`) and returns its
    /// handles. Connection failures that are transient are retried within
    /// `options.reconnect`; a 404 fails at once.
    pub async fn attach(&self, id: &str, options: AttachOptions) -> Result<Attachment> {
        if options.window == 0 || options.window > MAX_WINDOW {
            return Err(Error::InvalidArgument(format!(
                "window must be 1 to {MAX_WINDOW} bytes"
            )));
        }
        let (exit_tx, exit_rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            streams: [
                Mutex::new(StreamState {
                    next: options.stdout_offset,
                    ..StreamState::default()
                }),
                Mutex::new(StreamState {
                    next: options.stderr_offset,
                    ..StreamState::default()
                }),
            ],
            credit: Notify::new(),
            window: options.window,
            threshold: ((options.window / 4).max(1)).min(i64::MAX as u64) as i64,
            exit: exit_tx,
            rejection: Mutex::new(None),
            connections: AtomicU64::new(0),
        });
        let mut conn = Conn {
            client: self.clone(),
            id: id.to_string(),
            options,
            shared: shared.clone(),
            eof_in_doubt: false,
            eof_sent: false,
            tty: false,
        };
        let mut backoff = Backoff::new(conn.options.reconnect);
        let (ws, process) = loop {
            match conn.connect().await {
                Ok(pair) => break pair,
                Err(e) => backoff.failed(e).await?,
            }
        };
        shared.learn(&process);
        conn.tty = process.tty;
        let cancel = CancellationToken::new();
        let guard = Arc::new(Guard(cancel.clone()));
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let readonly = conn.options.readonly;
        tokio::spawn(conn.run(ws, rx, cancel));
        Ok(Attachment {
            stdout: OutputReader {
                stream: StreamName::Stdout,
                shared: shared.clone(),
                _guard: guard.clone(),
            },
            stderr: OutputReader {
                stream: StreamName::Stderr,
                shared: shared.clone(),
                _guard: guard.clone(),
            },
            stdin: StdinWriter {
                tx: PollSender::new(tx.clone()),
                readonly,
                closed: false,
                _guard: guard.clone(),
            },
            control: Control {
                tx,
                shared,
                readonly,
                _guard: guard.clone(),
            },
            exit: ExitHandle {
                rx: exit_rx,
                _guard: guard,
            },
            process,
        })
    }
}

/// How one connection ended.
enum Outcome {
    /// The exit frame arrived.
    Exited,
    /// Every handle was dropped.
    Cancelled,
    /// The connection broke; resume.
    Lost(Error),
    /// Unrecoverable.
    Fatal(Error),
}

struct Conn {
    client: Client,
    id: String,
    options: AttachOptions,
    shared: Arc<Shared>,
    /// An `stdin_eof` was handed to a connection that then broke.
    eof_in_doubt: bool,
    /// An `stdin_eof` has been sent.
    eof_sent: bool,
    /// The process runs on a PTY.
    tty: bool,
}

impl Conn {
    /// Opens a connection from the saved offsets. The credit window of the
    /// new connection is sized so that, with what is still queued, each
    /// stream's buffer stays within `window` bytes: the server counts the
    /// window afresh from each attach.
    async fn connect(&mut self) -> Result<(Ws, ProcessInfo)> {
        let window = self.shared.window;
        let (offsets, conn_window) = {
            let mut states = [
                self.shared.stream(StreamName::Stdout),
                self.shared.stream(StreamName::Stderr),
            ];
            let max_queued = states.iter().map(|s| s.queued).max().unwrap_or(0);
            let conn_window = window.saturating_sub(max_queued).max(1);
            for s in states.iter_mut() {
                // Allowance of this stream = conn_window + owed; it should
                // be window - queued.
                s.owed = window as i64 - s.queued as i64 - conn_window as i64;
            }
            ([states[0].next, states[1].next], conn_window)
        };
        let mut url = self.client.ws_url(&format!(
            "/v1/processes/{}/attach?stdout={}&stderr={}&window={}",
            path_segment(&self.id),
            offsets[0],
            offsets[1],
            conn_window
        ));
        if self.options.readonly {
            url.push_str("&readonly=1");
        }
        let fut = open(&url, self.client.token());
        let (mut ws, process) = match tokio::time::timeout(self.options.connect_timeout, fut).await
        {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::Transport {
                    url,
                    message: "attach timed out".into(),
                    timeout: true,
                })
            }
        }
        .check_offsets(offsets)?;
        // Grant at once the credit that sizes each stream's allowance.
        self.grant(&mut ws, true).await?;
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        Ok((ws, process))
    }

    /// Sends the credit owed on each stream, when it is due (or always,
    /// with `force`).
    async fn grant(&mut self, ws: &mut Ws, force: bool) -> Result<()> {
        for stream in StreamName::ALL {
            let bytes = {
                let mut s = self.shared.stream(stream);
                let due = s.owed > 0
                    && (force
                        || s.discard
                        || s.owed >= self.shared.threshold
                        || s.queue.is_empty());
                if !due {
                    continue;
                }
                std::mem::take(&mut s.owed) as u64
            };
            let frame = ClientFrame::Credit { stream, bytes };
            send(ws, frame).await?;
        }
        Ok(())
    }

    async fn run(
        mut self,
        ws: Ws,
        mut commands: mpsc::Receiver<Command>,
        cancel: CancellationToken,
    ) {
        let poller = tokio::spawn(poll_exit(
            self.client.clone(),
            self.id.clone(),
            self.shared.clone(),
        ));
        let mut ws = Some(ws);
        let mut backoff = Backoff::new(self.options.reconnect);
        loop {
            let Some(mut current) = ws.take() else {
                if self.complete() {
                    break;
                }
                let attempt = tokio::select! {
                    _ = cancel.cancelled() => break,
                    attempt = self.connect() => attempt,
                };
                match attempt {
                    Ok((socket, process)) => {
                        self.shared.learn(&process);
                        ws = Some(socket);
                    }
                    Err(e) => {
                        if e.is_not_found() {
                            self.shared.fail(e);
                            break;
                        }
                        let retry = tokio::select! {
                            _ = cancel.cancelled() => break,
                            retry = backoff.failed(e) => retry,
                        };
                        if let Err(e) = retry {
                            self.shared.fail(e);
                            break;
                        }
                    }
                }
                continue;
            };
            let started = Instant::now();
            let (outcome, progressed) = self.session(&mut current, &mut commands, &cancel).await;
            match outcome {
                Outcome::Exited | Outcome::Cancelled => {
                    close(current).await;
                    break;
                }
                Outcome::Fatal(e) => {
                    self.shared.fail(e);
                    break;
                }
                Outcome::Lost(e) => {
                    drop(current);
                    if progressed || started.elapsed() > Duration::from_secs(1) {
                        backoff.reset();
                    }
                    let retry = tokio::select! {
                        _ = cancel.cancelled() => break,
                        retry = backoff.failed(e) => retry,
                    };
                    if let Err(e) = retry {
                        self.shared.fail(e);
                        break;
                    }
                }
            }
        }
        poller.abort();
        // Whatever happened, nobody waits forever.
        self.shared
            .fail(Error::Closed("the attachment was dropped".into()));
    }

    /// True when the process has exited and both streams are complete, so
    /// no reconnect is needed.
    fn complete(&self) -> bool {
        StreamName::ALL
            .iter()
            .all(|s| self.shared.stream(*s).at_end())
    }

    /// Serves one connection. Returns how it ended and whether any frame
    /// arrived.
    async fn session(
        &mut self,
        ws: &mut Ws,
        commands: &mut mpsc::Receiver<Command>,
        cancel: &CancellationToken,
    ) -> (Outcome, bool) {
        let mut progressed = false;
        let mut commands_open = true;
        // A lost `stdin_eof` would leave the process waiting for input
        // forever. On pipes closing twice is harmless (the server answers
        // the second with a non-fatal error), so it is repeated on every
        // resume; on a PTY it types ^D, so only when its sending failed.
        if self.eof_in_doubt || (self.eof_sent && !self.tty) {
            match send(ws, ClientFrame::StdinEof).await {
                Ok(()) => self.eof_in_doubt = false,
                Err(e) => return (Outcome::Lost(e), progressed),
            }
        }
        let idle = self.options.idle_timeout;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return (Outcome::Cancelled, progressed),
                message = tokio::time::timeout(idle, ws.next()) => {
                    let message = match message {
                        Err(_) => return (Outcome::Lost(self.lost(format!("no message for {idle:?}"))), progressed),
                        Ok(None) => return (Outcome::Lost(self.lost("connection closed".into())), progressed),
                        Ok(Some(Err(e))) => return (Outcome::Lost(self.lost(e.to_string())), progressed),
                        Ok(Some(Ok(message))) => message,
                    };
                    match message {
                        Message::Binary(bytes) => {
                            progressed = true;
                            match self.frame(&bytes) {
                                Ok(true) => return (Outcome::Exited, progressed),
                                Ok(false) => {}
                                Err(e) => return (Outcome::Fatal(e), progressed),
                            }
                            if let Err(e) = self.grant(ws, false).await {
                                return (Outcome::Lost(e), progressed);
                            }
                        }
                        Message::Close(frame) => {
                            let code = frame.as_ref().map(|f| f.code);
                            return match code {
                                Some(CloseCode::Normal | CloseCode::Away) | None => {
                                    (Outcome::Lost(self.lost(format!("server closed the connection ({code:?})"))), progressed)
                                }
                                Some(other) => {
                                    let detail = self
                                        .shared
                                        .rejection
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .clone()
                                        .map(|(c, m)| format!("{c}: {m}"))
                                        .unwrap_or_else(|| "no error frame".into());
                                    (Outcome::Fatal(Error::Protocol(format!(
                                        "server closed the attachment with code {} ({detail})",
                                        u16::from(other)
                                    ))), progressed)
                                }
                            };
                        }
                        _ => {}
                    }
                }
                command = commands.recv(), if commands_open => {
                    let Some(command) = command else {
                        commands_open = false;
                        continue;
                    };
                    let is_eof = matches!(command, Command::Eof);
                    let frame = match command {
                        Command::Stdin(data) => ClientFrame::Stdin { data: data.to_vec() },
                        Command::Eof => ClientFrame::StdinEof,
                        Command::Resize(cols, rows) => ClientFrame::Resize { cols, rows },
                        Command::Signal(signal) => ClientFrame::Signal { signal },
                    };
                    if let Err(e) = send(ws, frame).await {
                        self.eof_in_doubt |= is_eof;
                        return (Outcome::Lost(e), progressed);
                    }
                    self.eof_sent |= is_eof;
                }
                _ = self.shared.credit.notified() => {
                    if let Err(e) = self.grant(ws, false).await {
                        return (Outcome::Lost(e), progressed);
                    }
                }
            }
        }
    }

    fn lost(&self, message: String) -> Error {
        Error::Transport {
            url: format!("{}/v1/processes/{}/attach", self.client.base_url(), self.id),
            message,
            timeout: false,
        }
    }

    /// Handles one server frame. `Ok(true)` for the exit frame.
    fn frame(&self, bytes: &[u8]) -> Result<bool> {
        let frame = ServerFrame::decode(bytes)
            .map_err(|e| Error::Protocol(format!("bad frame from the server: {e}")))?;
        match frame {
            ServerFrame::Stdout { offset, data } => self.data(StreamName::Stdout, offset, data)?,
            ServerFrame::Stderr { offset, data } => self.data(StreamName::Stderr, offset, data)?,
            ServerFrame::Dropped {
                stream,
                offset,
                length,
            } => {
                let mut s = self.shared.stream(stream);
                if offset != s.next {
                    return Err(Error::Protocol(format!(
                        "dropped range of {} starts at {offset}, expected {}",
                        stream.as_str(),
                        s.next
                    )));
                }
                s.next = offset.saturating_add(length);
                if s.discard {
                    return Ok(false);
                }
                if let Some(Chunk::Dropped {
                    offset: o,
                    length: l,
                }) = s.queue.back_mut()
                {
                    if *o + *l == offset {
                        *l += length;
                        s.wake();
                        return Ok(false);
                    }
                }
                s.queue.push_back(Chunk::Dropped { offset, length });
                s.wake();
            }
            ServerFrame::Exit { process } => {
                self.shared.learn(&process);
                for stream in StreamName::ALL {
                    let mut s = self.shared.stream(stream);
                    s.finished = true;
                    s.wake();
                }
                return Ok(true);
            }
            ServerFrame::Error { code, message } => {
                *self
                    .shared
                    .rejection
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some((code, message));
            }
            ServerFrame::Hello { .. } => {
                return Err(Error::Protocol("a second hello frame".into()));
            }
            ServerFrame::Screen { .. } => {
                return Err(Error::Protocol(
                    "a screen frame this client did not ask for".into(),
                ));
            }
        }
        Ok(false)
    }

    fn data(&self, stream: StreamName, offset: u64, data: Vec<u8>) -> Result<()> {
        let mut s = self.shared.stream(stream);
        if offset != s.next {
            return Err(Error::Protocol(format!(
                "{} data at offset {offset}, expected {}",
                stream.as_str(),
                s.next
            )));
        }
        let len = data.len() as u64;
        s.next += len;
        if len == 0 {
            return Ok(());
        }
        if s.discard {
            s.owed += len as i64;
            return Ok(());
        }
        s.queued += len;
        if s.queued > self.shared.window {
            return Err(Error::Protocol(format!(
                "the server sent more {} than the credit window of {} bytes",
                stream.as_str(),
                self.shared.window
            )));
        }
        if let Some(Chunk::Data { offset: o, data: d }) = s.queue.back_mut() {
            if *o + d.len() as u64 == offset && d.len() + data.len() <= COALESCE_BYTES {
                let mut merged = Vec::with_capacity(d.len() + data.len());
                merged.extend_from_slice(d);
                merged.extend_from_slice(&data);
                *d = Bytes::from(merged);
                s.wake();
                return Ok(());
            }
        }
        s.queue.push_back(Chunk::Data {
            offset,
            data: Bytes::from(data),
        });
        s.wake();
        Ok(())
    }
}

/// Long-polls `wait` so readers learn the final totals even while the exit
/// frame waits for output nobody reads.
async fn poll_exit(client: Client, id: String, shared: Arc<Shared>) {
    if let Ok(info) = client.wait(&id).await {
        shared.learn(&info);
    }
}

async fn send(ws: &mut Ws, frame: ClientFrame) -> Result<()> {
    ws.send(Message::Binary(frame.encode().into()))
        .await
        .map_err(|e| Error::Transport {
            url: String::new(),
            message: format!("sending to the attachment failed: {e}"),
            timeout: false,
        })
}

/// Completes the close handshake, bounded.
async fn close(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = ws.close(None).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

/// The result of opening an attachment: the socket and its hello.
struct Opened {
    ws: Ws,
    process: ProcessInfo,
    offsets: [u64; 2],
}

impl Opened {
    fn check_offsets(self, wanted: [u64; 2]) -> Result<(Ws, ProcessInfo)> {
        if self.offsets != wanted {
            return Err(Error::Protocol(format!(
                "the server resumed at offsets {:?}, asked for {:?}",
                self.offsets, wanted
            )));
        }
        Ok((self.ws, self.process))
    }
}

/// Connects, checks the subprotocol and reads `hello`.
async fn open(url: &str, token: Option<&str>) -> Result<Opened> {
    let mut request = url
        .into_client_request()
        .map_err(|e| Error::InvalidArgument(format!("bad attach URL {url}: {e}")))?;
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        SUBPROTOCOL
            .parse()
            .map_err(|_| Error::InvalidArgument("bad subprotocol".into()))?,
    );
    if let Some(token) = token {
        headers.insert(
            "Authorization",
            format!("Bearer {token}").parse().map_err(|_| {
                Error::InvalidArgument("the token is not a valid header value".into())
            })?,
        );
    }
    let (mut ws, response) = match tokio_tungstenite::connect_async(request).await {
        Ok(pair) => pair,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response.body().as_deref().unwrap_or_default();
            return Err(Error::from_body(status, body));
        }
        Err(e) => {
            return Err(Error::Transport {
                url: url.to_string(),
                message: e.to_string(),
                timeout: false,
            })
        }
    };
    if let Some(protocol) = response.headers().get("sec-websocket-protocol") {
        if protocol.as_bytes() != SUBPROTOCOL.as_bytes() {
            return Err(Error::Protocol(format!(
                "server chose subprotocol {protocol:?}, not {SUBPROTOCOL}"
            )));
        }
    }
    loop {
        let message = match ws.next().await {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: e.to_string(),
                    timeout: false,
                })
            }
            None => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: "closed before hello".into(),
                    timeout: false,
                })
            }
        };
        match message {
            Message::Binary(bytes) => {
                return match ServerFrame::decode(&bytes) {
                    Ok(ServerFrame::Hello {
                        process,
                        stdout,
                        stderr,
                        ..
                    }) => Ok(Opened {
                        ws,
                        process,
                        offsets: [stdout, stderr],
                    }),
                    Ok(ServerFrame::Error { code, message }) => Err(Error::Protocol(format!(
                        "attach refused: {code}: {message}"
                    ))),
                    Ok(other) => Err(Error::Protocol(format!("expected hello, got {other:?}"))),
                    Err(e) => Err(Error::Protocol(format!("bad hello frame: {e}"))),
                };
            }
            Message::Close(_) => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: "closed before hello".into(),
                    timeout: false,
                })
            }
            _ => continue,
        }
    }
}
