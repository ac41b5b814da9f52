//! [`Attachment`]: one process's output, input and exit over `tether.v1`,
//! with credit flow control and automatic resume.
//!
//! Design: one background task owns the WebSocket (`connection.rs`; each
//! connection is opened by `handshake.rs`). It applies each output frame to
//! the shared state (`state.rs`, the one owner of each stream's queue, whose
//! lock never leaves it), which queues it for its stream; the application
//! takes bytes from each queue through an [`OutputReader`] (`reader.rs`). Credit is granted to the server for a
//! stream only as the application consumes that stream (`credit.rs`, one
//! ledger per stream), so each queue holds at most `window` bytes and unread
//! output waits on the server. The task also forwards stdin, resize and
//! signal commands from one bounded channel (`input.rs`), numbered and kept
//! until the server acknowledges them (`outbox.rs`), and reconnects with the
//! next offset of each stream when the connection drops, resending only the
//! input the server has not applied. Once a
//! stream has used up its credit (its reader is behind, so the server may
//! hold the exit frame back), a second task long-polls `wait`, so a reader
//! reaches end of file as soon as the process has exited and that stream
//! is complete, even while the other stream is still unread.

mod connection;
mod credit;
mod handshake;
mod input;
mod options;
mod outbox;
mod reader;
mod state;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;

use tether_protocol::api::SpawnRequest;
use tether_protocol::{ProcessInfo, StreamName};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use input::{Control, StdinWriter};
pub use options::{AttachOptions, DEFAULT_MAX_MESSAGE_BYTES};
pub use reader::OutputReader;
pub use state::Chunk;

use crate::client::Client;
use crate::error::{Error, Result};
use connection::Conn;
use state::{ExitState, Guard, Shared};

/// Commands (stdin chunks, resizes, signals) waiting for the socket.
const COMMAND_QUEUE: usize = 16;
/// Largest credit window accepted.
const MAX_WINDOW: u64 = 1 << 40;
/// Longest query [`Client::run`] sends as `GET /v1/run`: with the path and
/// `HTTP/1.1`, the request line stays within the 8 KiB that proxies such
/// as nginx accept by default.
const MAX_RUN_QUERY: usize = 6 << 10;

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
    /// `options.first_connect` (else `options.reconnect`); a 404 fails at
    /// once.
    pub async fn attach(&self, id: &str, options: AttachOptions) -> Result<Attachment> {
        self.attach_to(Target::Id(id), options).await
    }

    /// Starts a process and attaches to it in one WebSocket (`GET
    /// /v1/run`): one round trip where [`Client::spawn`] and then
    /// [`Client::attach`] take two. Output is read from the first byte;
    /// `attachment.process` is the new process, and reconnects attach to
    /// it by its id. The first connection carries a random
    /// `Idempotency-Key`, so a retry after a lost answer never starts the
    /// command twice. `screen` and `readonly` do not apply (a new process
    /// has no screen to start from, and a read-only run could not type).
    ///
    /// A refused spawn is the same [`Error::Http`] as [`Client::spawn`]'s
    /// (the server answers the upgrade request with it): `code()` is
    /// `spawn_failed`, `cannot_execute`, `name_taken`, ...
    ///
    /// The request rides in the URL. One whose URL-encoded query would
    /// pass 6 KiB (proxies refuse request lines over 8 KiB: nginx's
    /// default), or that a proxy refuses as too long (414, 431), is sent as
    /// [`Client::spawn`] and then [`Client::attach`] instead: two round
    /// trips, the same attachment. A proxy's access log may record the URL,
    /// the spawn request (argv, env) with it.
    pub async fn run(&self, spec: SpawnRequest, options: AttachOptions) -> Result<Attachment> {
        if options.screen || options.readonly {
            return Err(Error::InvalidArgument(
                "run starts a new process: screen and readonly do not apply".into(),
            ));
        }
        let request = serde_json::to_string(&spec)
            .map_err(|e| Error::InvalidArgument(format!("cannot encode the request: {e}")))?;
        if connection::run_query(&request, options.window)?.len() > MAX_RUN_QUERY {
            return self.spawn_then_attach(spec, options).await;
        }
        match self.attach_to(Target::Run(request), options.clone()).await {
            // Refused before it reached the server: nothing was started.
            Err(e) if matches!(e.status(), Some(414 | 431)) => {
                self.spawn_then_attach(spec, options).await
            }
            other => other,
        }
    }

    /// [`Client::run`] in two round trips, each first contact within the
    /// first connection's budget.
    async fn spawn_then_attach(
        &self,
        spec: SpawnRequest,
        options: AttachOptions,
    ) -> Result<Attachment> {
        let policy = options.first_connect.unwrap_or(options.reconnect);
        let process = self.clone().with_retry(policy).spawn(spec).await?;
        self.attach(&process.id, options).await
    }

    async fn attach_to(&self, target: Target<'_>, options: AttachOptions) -> Result<Attachment> {
        if options.window == 0 || options.window > MAX_WINDOW {
            return Err(Error::InvalidArgument(format!(
                "window must be 1 to {MAX_WINDOW} bytes"
            )));
        }
        let (exit_tx, exit_rx) = watch::channel(None);
        let shared = Arc::new(Shared::new(
            [options.stdout_offset, options.stderr_offset],
            options.window,
            exit_tx,
        ));
        let readonly = options.readonly;
        let (conn, ws, process) = match target {
            Target::Id(id) => Conn::open(self.clone(), id, options, shared.clone()).await?,
            Target::Run(request) => {
                Conn::open_run(self.clone(), request, options, shared.clone()).await?
            }
        };
        let cancel = CancellationToken::new();
        let guard = Arc::new(Guard(cancel.clone()));
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        tokio::spawn(conn.run(ws, rx, cancel));
        Ok(Attachment {
            stdout: OutputReader::new(StreamName::Stdout, shared.clone(), guard.clone()),
            stderr: OutputReader::new(StreamName::Stderr, shared.clone(), guard.clone()),
            stdin: StdinWriter::new(tx.clone(), readonly, guard.clone()),
            control: Control::new(tx, shared, readonly, guard.clone()),
            exit: ExitHandle {
                rx: exit_rx,
                _guard: guard,
            },
            process,
        })
    }
}

/// What an attachment opens: a process by id, or a new one.
enum Target<'a> {
    Id(&'a str),
    Run(String),
}
