//! The input handles: [`StdinWriter`] and [`Control`]. Both queue
//! [`Command`]s for the connection task on one bounded channel, so stdin,
//! resizes and signals reach the process in the order they were made.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tether_protocol::api::MAX_TERMINAL_SIZE;
use tether_protocol::signal::parse_signal;
use tether_protocol::{ClientFrame, InputAction};
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

use super::state::{Guard, Shared};
use crate::error::{Error, Result};

/// Largest stdin payload per frame (the server accepts frames up to 1 MiB).
const MAX_STDIN_FRAME: usize = 64 << 10;

/// What the handles ask the connection task to send, in order.
#[derive(Debug)]
pub(crate) enum Command {
    Stdin(Bytes),
    Eof,
    Resize(u32, u32),
    Signal(String),
}

impl Command {
    /// The numbered action that carries it.
    pub fn into_action(self) -> InputAction {
        match self {
            Command::Stdin(data) => InputAction::Stdin {
                data: data.to_vec(),
            },
            Command::Eof => InputAction::StdinEof,
            Command::Resize(cols, rows) => InputAction::Resize { cols, rows },
            Command::Signal(signal) => InputAction::Signal { signal },
        }
    }

    /// The unnumbered frame that carries it.
    pub fn into_frame(self) -> ClientFrame {
        match self {
            Command::Stdin(data) => ClientFrame::Stdin {
                data: data.to_vec(),
            },
            Command::Eof => ClientFrame::StdinEof,
            Command::Resize(cols, rows) => ClientFrame::Resize { cols, rows },
            Command::Signal(signal) => ClientFrame::Signal { signal },
        }
    }
}

/// Writes to the process's stdin: [`StdinWriter::write`], or [`AsyncWrite`]
/// (whose shutdown closes stdin). Input is numbered (the default,
/// [`AttachOptions::numbered_input`](super::AttachOptions::numbered_input)):
/// each write, close, resize and signal reaches the process exactly once,
/// in order, across reconnects; bytes written while the connection is
/// being resumed wait and are sent when it returns. At most 1 MiB may wait
/// unacknowledged by the server: past it a write waits (back-pressure).
/// Without numbering, a write handed to a connection that then broke may
/// be lost (sent at most once, never twice).
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
    pub(crate) fn new(tx: mpsc::Sender<Command>, readonly: bool, guard: Arc<Guard>) -> Self {
        StdinWriter {
            tx: PollSender::new(tx),
            readonly,
            closed: false,
            _guard: guard,
        }
    }

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
    pub(crate) fn new(
        tx: mpsc::Sender<Command>,
        shared: Arc<Shared>,
        readonly: bool,
        guard: Arc<Guard>,
    ) -> Self {
        Control {
            tx,
            shared,
            readonly,
            _guard: guard,
        }
    }

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
        self.shared.rejection()
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
