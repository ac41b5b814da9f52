//! The attachment's writer: the only task that writes to the socket. Its
//! opening ([`super::opening`]) says who the process is and where the
//! attachment starts; its pump ([`super::pump`]) then sends output, credit
//! permitting, until the exit frame or the end of the attachment. Here is
//! what both write with: the socket, fed and flushed within the send
//! timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use tether_protocol::ServerFrame;
use tokio::sync::watch;
use tokio::time::timeout;

use super::close::SocketGone;
use super::state::Credit;
use crate::error::ApiError;
use crate::process::Process;
use crate::retained::{Cursor, Reader};
use crate::screen::Snapshot;
use crate::wire::framing::Framing;

/// The writer of one attachment.
pub struct Writer {
    /// The socket's outgoing half.
    pub sink: SplitSink<WebSocket, Message>,
    /// The process attached to.
    pub process: Arc<Process>,
    /// This attachment's registration with the retained output.
    pub output: Reader,
    /// `--send-timeout-ms`: a socket that takes nothing this long is dead.
    pub send_timeout: Duration,
    /// `--max-data-frame-bytes`.
    pub max_data: usize,
    /// Credit window per stream, if flow control is on.
    pub window: Option<u64>,
    /// Per-stream progress.
    pub cursors: [Cursor; 2],
    /// Credit the client granted.
    pub credit: Arc<Credit>,
    /// Bytes fed since the last flush.
    pub unflushed: usize,
    /// The wire format.
    pub framing: Framing,
    /// `screen=1`: the snapshot to send right after `hello`.
    pub screen: Option<Snapshot>,
    /// The snapshot's room in the memory budget, given back once sent.
    pub screen_reserved: Option<crate::table::SnapshotRoom>,
    /// With `input=ID`: how far the input stream has been applied, sent
    /// as `input_ack` right after `hello` and whenever it moves.
    pub acknowledged: Option<watch::Receiver<u64>>,
    /// Refused after `hello`: the error frame to send, then
    /// [`Close::Policy`](super::close::Close::Policy).
    pub refusal: Option<ApiError>,
    /// An `input_ack` is due by then (sent earlier with output).
    pub ack_due: Option<tokio::time::Instant>,
    /// Changes to true when the server hands over to a new binary.
    pub restarting: watch::Receiver<bool>,
}

impl Writer {
    /// Feeds and flushes one message.
    pub async fn send(&mut self, message: Message) -> Result<(), SocketGone> {
        self.feed(message).await?;
        self.flush().await
    }

    /// Queues a message in the sink, to go out with the next flush.
    pub(super) async fn feed(&mut self, message: Message) -> Result<(), SocketGone> {
        self.unflushed += match &message {
            Message::Binary(bytes) => bytes.len(),
            Message::Text(text) => text.len(),
            _ => 0,
        };
        match timeout(self.send_timeout, self.sink.feed(message)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(SocketGone),
        }
    }

    /// Writes out what was fed. Once sent, those bytes may be released.
    pub(super) async fn flush(&mut self) -> Result<(), SocketGone> {
        self.unflushed = 0;
        match timeout(self.send_timeout, self.sink.flush()).await {
            Ok(Ok(())) => {
                self.release_sent();
                Ok(())
            }
            _ => {
                tracing::info!(id = %self.process.id, "attachment socket took nothing for the send timeout; closing it");
                Err(SocketGone)
            }
        }
    }

    /// Block mode: tells capture which bytes this attachment no longer
    /// needs (see [`Reader::release`]).
    pub(super) fn release_sent(&self) {
        let credited = self.window.map(|_| self.credit.granted());
        self.output.release(&self.cursors, credited);
    }

    /// Sends `input_ack` with where the input stream stands now.
    pub(super) async fn acknowledge(&mut self) -> Result<(), SocketGone> {
        match self.input_ack() {
            Some(ack) => self.send(ack).await,
            None => Ok(()),
        }
    }

    /// `input_ack` with where the input stream stands now, if the
    /// attachment numbers its input.
    pub(super) fn input_ack(&mut self) -> Option<Message> {
        let applied = *self.acknowledged.as_mut()?.borrow_and_update();
        let frame = ServerFrame::InputAck { applied }.encode();
        Some(Message::Binary(frame.into()))
    }
}
