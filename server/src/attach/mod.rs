//! One WebSocket attachment: the last leg of the data path.
//!
//! process output -> retained output -> this attachment's per-stream
//! cursor -> socket. Its parts are apart: [`writer`] alone writes to the
//! socket, first its [`opening`], then its [`pump`]; [`reader`] decodes
//! client frames and applies credit at once; [`input`] carries out frames
//! for the process in order, with a stdin budget of its own; [`state`] is
//! what they share; [`close`] is how the attachment ends. A slow socket
//! holds back only its own attachment: capture never waits for it (drop
//! mode) or waits at most the send timeout (block mode).

pub mod close;
pub mod input;
pub mod opening;
pub mod pump;
pub mod reader;
pub mod state;
pub mod writer;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::ws::{Message, OnFailedUpgrade, WebSocket, WebSocketUpgrade};
use futures_util::StreamExt;
use tether_protocol::StreamName;
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::config::Config;
use crate::error::ApiError;
use crate::grant::Grant;
use crate::process::input_streams::InputClaim;
use crate::process::Process;
use crate::retained::Cursor;
use crate::slots::Slot;
use crate::table::{ProcessTable, SnapshotRoom};
use crate::wire::framing::{Decoder, Framing};
use input::{ProcessQueue, STDIN_BUDGET};
use pump::Keepalive;
use reader::SocketReader;
use state::{Credit, Liveness};
use writer::Writer;

/// How a client attaches (from the query string).
#[derive(Debug, Clone, Copy)]
pub struct AttachOptions {
    /// First offset of stdout and stderr to send.
    pub start: [u64; 2],
    /// Credit window per stream, if flow control is on.
    pub window: Option<u64>,
    /// May not write stdin, signal or resize.
    pub readonly: bool,
    /// Whether to start from the terminal screen (`screen=`, PTY only).
    pub screen: ScreenStart,
}

/// `screen=` of the attach query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenStart {
    /// Absent: start from the requested offsets.
    Never,
    /// `screen=1`: a `screen` frame, then stdout from its offset.
    Always,
    /// `screen=evicted`: as `Always` if the requested stdout offset was
    /// evicted, else as `Never` (a resume that would otherwise see `dropped`).
    IfEvicted,
}

pub use pump::until_restarting;

/// An attachment slot, taken before the upgrade (so a refusal is an HTTP
/// error rather than a closed socket) and given back on drop, on every path:
/// a failed upgrade, a broken socket, or the end of the attachment.
pub struct Admission {
    process: Arc<Process>,
    table: Arc<ProcessTable>,
    _slots: (Slot, Slot),
    /// The attachment's numbered input stream (`input=ID`), if any.
    input: Option<InputClaim>,
    /// Why the attachment ends right after `hello` (an expired input
    /// stream), if it does.
    refusal: Option<ApiError>,
}

impl Admission {
    /// The attachment numbers its input on this stream.
    pub fn with_input(mut self, claim: InputClaim) -> Admission {
        self.input = Some(claim);
        self
    }

    /// Changes to true when the server begins a handover (issue 43).
    pub fn restarting(&self) -> tokio::sync::watch::Receiver<bool> {
        self.table.restarting()
    }

    /// The attachment sends `hello`, then `error` with this, then
    /// [`Close::Policy`](close::Close::Policy).
    pub fn refused(mut self, error: ApiError) -> Admission {
        self.refusal = Some(error);
        self
    }
}

/// The WebSocket every attachment route accepts (`tether.v1` and the
/// Kubernetes protocols alike): `protocol`, messages and frames up to
/// `--max-frame-bytes`, and a small read buffer. Client frames are small,
/// and tungstenite zero-fills the whole buffer before every read, so a small
/// one keeps an idle attachment cheap.
pub fn configure_upgrade(
    upgrade: WebSocketUpgrade,
    config: &Config,
    protocol: &'static str,
) -> WebSocketUpgrade<impl OnFailedUpgrade> {
    upgrade
        .protocols([protocol])
        .max_message_size(config.max_frame_bytes)
        .max_frame_size(config.max_frame_bytes)
        .read_buffer_size(8 << 10)
        .on_failed_upgrade(|e| tracing::info!(error = %e, "websocket upgrade failed"))
}

/// Takes an attachment slot (per process and in total). A viewer (an
/// attachment that cannot write: read-only, or an output reader) leaves
/// the last slot free for a writer, so viewers can never lock the operator
/// out of a process (unless the limit is 1).
pub fn admit(
    table: &Arc<ProcessTable>,
    process: &Arc<Process>,
    writer: bool,
) -> Result<Admission, ApiError> {
    let keep = usize::from(!writer);
    let viewers = if writer {
        ""
    } else {
        "; the last is kept for a writer"
    };
    let per_process = process.attachment_slots.take_leaving(keep).ok_or_else(|| {
        ApiError::TooManyAttachments(format!(
            "process {} has {} (limit --max-attachments-per-process{viewers})",
            process.id,
            process.attachment_slots.limit()
        ))
    })?;
    let total = table.attachment_slots.take_leaving(keep).ok_or_else(|| {
        ApiError::TooManyAttachments(format!(
            "{} in total (limit --max-attachments{viewers})",
            table.attachment_slots.limit()
        ))
    })?;
    Ok(Admission {
        process: process.clone(),
        table: table.clone(),
        _slots: (per_process, total),
        input: None,
        refusal: None,
    })
}

/// Serves one admitted `tether.v1` attachment until the exit frame has
/// been sent and the connection closed, or the client goes away. Each
/// frame that acts on the process is decided by `grant` as it comes.
pub async fn serve(socket: WebSocket, admission: Admission, options: AttachOptions, grant: Grant) {
    serve_framed(
        socket,
        admission,
        options,
        grant,
        Framing::Tether,
        Decoder::Tether,
    )
    .await
}

/// Serves one admitted attachment in the given wire format (tether.v1 or
/// a Kubernetes subprotocol): the same writer, reader and input queue, the
/// same decision for each frame.
pub async fn serve_framed(
    socket: WebSocket,
    mut admission: Admission,
    options: AttachOptions,
    grant: Grant,
    framing: Framing,
    decoder: Decoder,
) {
    let input = admission.input.take();
    let acknowledged = input.as_ref().map(InputClaim::watch);
    let process = admission.process.clone();
    let config = admission.table.config().clone();
    process.metrics.attaches.fetch_add(1, Ordering::Relaxed);
    let evicted = options.start[0] < process.output().retained_start(StreamName::Stdout);
    let at_screen = match options.screen {
        ScreenStart::Always => true,
        ScreenStart::IfEvicted => evicted,
        ScreenStart::Never => false,
    };
    let at_screen = match at_screen {
        // The emulator may first catch up (bounded): off the async workers.
        // The snapshot is reserved in the memory budget until it is sent:
        // with no room, the attachment is refused (after `hello`).
        true => {
            let output = process.output().clone();
            let table = admission.table.clone();
            tokio::task::spawn_blocking(move || {
                let room = SnapshotRoom::take(&output, &table)?;
                Some(room.map(|room| (output.reader_at_screen(), room)))
            })
            .await
            .ok()
            .flatten()
        }
        false => None,
    };
    let (output, screen, screen_reserved) = match at_screen {
        Some(Ok((Some((reader, snapshot)), reserved))) => (reader, Some(snapshot), Some(reserved)),
        Some(Err(refused)) => {
            admission.refusal.get_or_insert(refused);
            (process.output().reader(options.start), None, None)
        }
        // A pipe process has no screen: refused before the upgrade.
        _ => (process.output().reader(options.start), None, None),
    };
    let start = match &screen {
        Some(snapshot) => [snapshot.offset, process.output().totals()[1]],
        None => options.start,
    };
    let (sink, stream) = socket.split();
    let (events_tx, events) = mpsc::channel(16);
    let credit = Arc::new(Credit::default());
    let liveness = Arc::new(Liveness::new());
    let queue = ProcessQueue::start(
        process.clone(),
        admission.table.clone(),
        grant,
        events_tx.clone(),
        options.readonly,
        STDIN_BUDGET.max(config.max_frame_bytes),
        input,
    );
    let reader = SocketReader {
        stream,
        queue,
        events: events_tx,
        credit: credit.clone(),
        max_frame: config.max_frame_bytes,
        liveness: liveness.clone(),
        decoder,
        held: None,
        pings: Default::default(),
    };
    let mut reader_task = tokio::spawn(reader.run());
    let mut writer = Writer {
        sink,
        process,
        output,
        send_timeout: config.send_timeout(),
        max_data: config.max_data_frame_bytes.max(1),
        window: options.window,
        cursors: start.map(Cursor::at),
        screen,
        screen_reserved,
        credit,
        unflushed: 0,
        framing,
        acknowledged,
        refusal: admission.refusal.take(),
        ack_due: None,
        restarting: admission.table.restarting(),
    };
    let keepalive = Keepalive {
        liveness,
        ping_every: config.ping_interval(),
        idle_timeout: config.idle_timeout(),
    };
    // A socket already gone gets no Close.
    if let Ok(close) = writer.run(events, keepalive).await {
        if writer
            .send(Message::Close(Some(close.frame())))
            .await
            .is_ok()
        {
            // Wait, bounded, for the client's Close so the kernel never
            // resets a connection with output still unread; then shut it.
            let _ = timeout(config.close_timeout(), &mut reader_task).await;
        }
    }
    reader_task.abort();
    drop(writer);
    drop(admission);
}
