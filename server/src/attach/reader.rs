//! The attachment's socket reader: decodes client frames and acts on them
//! at once. Credit it applies itself (the writer reads it); stdin it writes
//! to the process itself when nothing is queued ahead of it; other frames
//! for the process it hands to the [`ProcessQueue`]; protocol errors it
//! reports to the writer, which sends the `error` frame and closes.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket};
use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use tether_protocol::ClientFrame;
use tokio::sync::mpsc;

use super::input::{ForProcess, Now, ProcessQueue};
use super::state::{Credit, Liveness, ReaderEvent};
use crate::error::AttachError;
use crate::wire::framing::Decoder;

/// Everything the reader task works with.
pub struct SocketReader {
    /// The socket's incoming half.
    pub stream: SplitStream<WebSocket>,
    /// Where frames for the process go.
    pub queue: ProcessQueue,
    /// Where protocol errors and the end go.
    pub events: mpsc::Sender<ReaderEvent>,
    /// Where credit goes.
    pub credit: Arc<Credit>,
    /// `--max-frame-bytes`.
    pub max_frame: usize,
    /// Told about every message.
    pub liveness: Arc<Liveness>,
    /// The wire format of client messages.
    pub decoder: Decoder,
    /// A message read while a push waited for the process, handled next.
    pub held: Option<Incoming>,
    /// The client's pings in the current second.
    pub pings: PingCount,
}

/// Most pings a client may send in one second. tungstenite queues a pong
/// for each ping it reads, and a client that pings without reading would
/// have those pile up in the server's write buffer: past this rate the
/// attachment is closed (1008 `ping_flood`). A client's pings are also not
/// taken as a sign of life (its pongs and frames are): one that pings but
/// never reads answers none of the server's pings and is closed at the
/// idle timeout, with at most this rate's pongs queued until then.
pub const MAX_PINGS_PER_SECOND: u32 = 64;

/// The client's pings counted per second.
#[derive(Debug)]
pub struct PingCount {
    since: tokio::time::Instant,
    count: u32,
}

impl Default for PingCount {
    fn default() -> Self {
        PingCount {
            since: tokio::time::Instant::now(),
            count: 0,
        }
    }
}

impl PingCount {
    /// Counts one ping; false past [`MAX_PINGS_PER_SECOND`].
    fn allows_one_more(&mut self) -> bool {
        if self.since.elapsed() >= std::time::Duration::from_secs(1) {
            *self = PingCount::default();
        }
        self.count += 1;
        self.count <= MAX_PINGS_PER_SECOND
    }
}

/// A client's ping is no sign that it reads what the server sends.
fn is_ping(message: &Incoming) -> bool {
    matches!(message, Some(Ok(Message::Ping(_))))
}

/// A message read from the socket (`None`: the socket ended).
pub type Incoming = Option<Result<Message, axum::Error>>;

/// What the reader did with a message.
enum Handled {
    /// Acted on, or nothing to do (refusals are reported on the way).
    Done,
    /// It broke the protocol: the writer reports it and closes.
    Fatal(AttachError),
    /// The input queue or the writer is gone: the attachment is ending.
    Ended,
}

impl SocketReader {
    /// Reads until the client closes or the connection breaks.
    pub async fn run(mut self) {
        let mut failed = false;
        loop {
            let message = match self.held.take() {
                Some(message) => message,
                None => {
                    let message = self.stream.next().await;
                    if !is_ping(&message) {
                        self.liveness.heard();
                    }
                    message
                }
            };
            let Some(message) = message else { break };
            let handled = match message {
                // After a protocol error, only the client's Close matters.
                Ok(Message::Close(_)) => break,
                Ok(_) if failed => continue,
                Ok(Message::Binary(bytes)) if bytes.len() > self.max_frame => {
                    Handled::Fatal(AttachError::TooLarge(self.max_frame))
                }
                Ok(Message::Binary(bytes)) => self.handle(&bytes, false).await,
                Ok(Message::Text(text)) => self.handle(text.as_bytes(), true).await,
                Ok(Message::Ping(_)) if !self.pings.allows_one_more() => {
                    Handled::Fatal(AttachError::PingFlood(MAX_PINGS_PER_SECOND))
                }
                Ok(Message::Ping(_) | Message::Pong(_)) => Handled::Done,
                Err(e) => {
                    let error = socket_error(e, self.max_frame);
                    let _ = self.events.send(ReaderEvent::Fatal(error)).await;
                    return;
                }
            };
            match handled {
                Handled::Done => {}
                Handled::Fatal(error) => {
                    failed = true;
                    if self.events.send(ReaderEvent::Fatal(error)).await.is_err() {
                        return;
                    }
                }
                Handled::Ended => return,
            }
        }
        let _ = self.events.send(ReaderEvent::Gone).await;
    }
}

impl SocketReader {
    /// Decodes one message and acts on its frames: credit at once, the
    /// rest through the queue.
    async fn handle(&mut self, payload: &[u8], text: bool) -> Handled {
        let frames = match self.decoder.decode(payload, text) {
            Ok(frames) => frames,
            Err(e) => return Handled::Fatal(e),
        };
        for frame in frames {
            if let ClientFrame::Credit { stream, bytes } = frame {
                self.credit.grant(stream, bytes);
                continue;
            }
            let frame = match self.queue.accept(frame) {
                Ok(frame) => frame,
                Err(error) => {
                    if self
                        .events
                        .send(ReaderEvent::Rejected(error))
                        .await
                        .is_err()
                    {
                        return Handled::Ended;
                    }
                    continue;
                }
            };
            let frame = match self.queue.try_now(frame) {
                Now::Done => continue,
                Now::Rejected(error) => {
                    if self
                        .events
                        .send(ReaderEvent::Rejected(error))
                        .await
                        .is_err()
                    {
                        return Handled::Ended;
                    }
                    continue;
                }
                Now::Later(frame) => frame,
            };
            let queued = if self.held.is_none() {
                self.push_listening(frame).await
            } else {
                self.queue.push(frame).await
            };
            if !queued {
                return Handled::Ended;
            }
        }
        Handled::Done
    }

    /// Queues a frame for the process. While the stdin budget is spent it
    /// goes on reading what needs no queue (pings, pongs, credit), so a
    /// live client is heard, credit flows, and a client that has gone
    /// silent is closed for idleness all the same. The first message that
    /// does need the queue (or ends the socket) is held in `self.held`, and
    /// reading stops there, so what waits for the process is bounded by one
    /// message; while one is held the client is not taken for dead (it has
    /// said more than the process takes, and its pongs wait behind that).
    async fn push_listening(&mut self, frame: ForProcess) -> bool {
        let push = self.queue.push(frame);
        tokio::pin!(push);
        let mut held: Option<Incoming> = None;
        let queued = loop {
            tokio::select! {
                queued = &mut push => break queued,
                message = self.stream.next(), if held.is_none() => {
                    if !is_ping(&message) {
                        self.liveness.heard();
                    }
                    match &message {
                        Some(Ok(Message::Ping(_))) if !self.pings.allows_one_more() => {
                            held = Some(Some(Ok(Message::Ping(Default::default()))));
                            // Counted past the bound: handled as a flood next.
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                        // tether.v1 frames decode alone: credit goes at once.
                        Some(Ok(Message::Binary(bytes)))
                            if matches!(self.decoder, Decoder::Tether)
                                && bytes.len() <= self.max_frame =>
                        {
                            match ClientFrame::decode(bytes) {
                                Ok(ClientFrame::Credit { stream, bytes }) => {
                                    self.credit.grant(stream, bytes);
                                }
                                _ => held = Some(message),
                            }
                        }
                        _ => held = Some(message),
                    }
                    if held.is_some() {
                        self.liveness.waiting_on_process(true);
                    }
                }
            }
        };
        if held.is_some() {
            self.liveness.waiting_on_process(false);
        }
        self.held = held;
        queued
    }
}

fn socket_error(error: axum::Error, max_frame: usize) -> AttachError {
    let inner = error.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(_)) => AttachError::TooLarge(max_frame),
        _ => AttachError::Socket(inner.to_string()),
    }
}
