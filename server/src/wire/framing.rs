//! What an attachment's messages look like on the wire: `tether.v1`
//! MessagePack frames, or Kubernetes channels (`super::kube::framing`). The
//! writer, reader and input queue are the same for both; only this
//! differs, so both kinds of client get one flow control, one stdin,
//! signal and resize policy, one keepalive and one end of session.

use axum::extract::ws::Message;
use tether_protocol::{ClientFrame, ProcessInfo, ServerFrame, StreamName, PROTOCOL_VERSION};

use super::kube::channel::WireMessage;
use super::kube::framing::KubeFraming;
use crate::error::{ApiError, AttachError, KubeError};

/// The wire format of one attachment.
#[derive(Debug)]
pub enum Framing {
    /// `tether.v1`: MessagePack frames, `hello` first, `exit` last, an
    /// `error` frame for each refusal.
    Tether,
    /// A Kubernetes subprotocol: channel-prefixed bytes, one status last.
    Kube(KubeFraming),
}

fn wire(message: WireMessage) -> Message {
    match message {
        WireMessage::Binary(bytes) => Message::Binary(bytes.into()),
        WireMessage::Text(text) => Message::Text(text.into()),
    }
}

impl Framing {
    /// The first message: `hello`, or the Kubernetes opening.
    pub fn hello(&self, process: ProcessInfo, start: [u64; 2]) -> Option<Message> {
        match self {
            Framing::Tether => Some(Message::Binary(
                ServerFrame::Hello {
                    version: PROTOCOL_VERSION,
                    process,
                    stdout: start[0],
                    stderr: start[1],
                }
                .encode()
                .into(),
            )),
            Framing::Kube(kube) => kube.opening().map(wire),
        }
    }

    /// The `screen` frame of `screen=1` (tether.v1 only: Kubernetes
    /// attachments never ask for one): `data` redraws a `cols x rows`
    /// terminal as it was at output offset `offset`.
    pub fn screen(&self, offset: u64, cols: u16, rows: u16, data: Vec<u8>) -> Option<Message> {
        match self {
            Framing::Tether => Some(Message::Binary(
                ServerFrame::Screen {
                    offset,
                    cols: u32::from(cols),
                    rows: u32::from(rows),
                    data,
                }
                .encode()
                .into(),
            )),
            Framing::Kube(_) => None,
        }
    }

    /// Whether the client reads `stream` at all; the writer still moves
    /// through a stream it does not read, so it paces nothing.
    pub fn wants(&self, stream: StreamName) -> bool {
        match self {
            Framing::Tether => true,
            Framing::Kube(kube) => kube.wants(stream),
        }
    }

    /// Encodes output bytes (in slices, from the retained ring).
    pub fn data(&self, stream: StreamName, offset: u64, parts: &[&[u8]]) -> Message {
        match self {
            Framing::Tether => {
                Message::Binary(ServerFrame::encode_data_parts(stream, offset, parts).into())
            }
            Framing::Kube(kube) => wire(kube.data(stream, parts)),
        }
    }

    /// Reports bytes evicted before they could be sent.
    pub fn dropped(&self, stream: StreamName, offset: u64, length: u64) -> Option<Message> {
        match self {
            Framing::Tether => Some(Message::Binary(
                ServerFrame::Dropped {
                    stream,
                    offset,
                    length,
                }
                .encode()
                .into(),
            )),
            Framing::Kube(kube) => kube.dropped(stream, offset, length).map(wire),
        }
    }

    /// The last message before Close 1000.
    pub fn exit(&self, process: ProcessInfo) -> Option<Message> {
        match self {
            Framing::Tether => Some(Message::Binary(
                ServerFrame::Exit { process }.encode().into(),
            )),
            Framing::Kube(kube) => kube.exit(&process).map(wire),
        }
    }

    /// A refused request (the attachment carries on). Kubernetes has no
    /// message for it (its one status ends the session), so it is only
    /// logged there, as the kubelet does.
    pub fn rejected(&self, error: &ApiError) -> Option<Message> {
        match self {
            Framing::Tether => Some(error_frame(error.status_and_code().1, &error.to_string())),
            Framing::Kube(_) => {
                tracing::debug!(%error, "kubernetes session: request refused");
                None
            }
        }
    }

    /// A protocol error, sent before the close.
    pub fn fatal(&self, error: &AttachError) -> Option<Message> {
        match self {
            Framing::Tether => Some(error_frame(error.code(), &error.to_string())),
            Framing::Kube(kube) => {
                let owned;
                let error = match error {
                    AttachError::Kube(e) => e,
                    AttachError::TooLarge(max) => {
                        owned = KubeError::TooLarge(*max);
                        &owned
                    }
                    other => {
                        owned = KubeError::Malformed(other.to_string());
                        &owned
                    }
                };
                kube.fatal(error).map(wire)
            }
        }
    }
}

fn error_frame(code: &str, message: &str) -> Message {
    Message::Binary(
        ServerFrame::Error {
            code: code.to_string(),
            message: message.to_string(),
        }
        .encode()
        .into(),
    )
}

/// The reader's half: turns a client message into frames for the process.
#[derive(Debug)]
pub enum Decoder {
    /// One MessagePack frame per binary message; text is an error.
    Tether,
    /// Kubernetes channels (the resize channel keeps state).
    Kube(KubeFraming),
}

impl Decoder {
    /// Frames in one client message (binary or text), in order.
    pub fn decode(&mut self, payload: &[u8], text: bool) -> Result<Vec<ClientFrame>, AttachError> {
        match self {
            Decoder::Tether if text => Err(AttachError::TextMessage),
            Decoder::Tether => Ok(vec![ClientFrame::decode(payload)?]),
            Decoder::Kube(kube) => Ok(kube.decode(payload)?),
        }
    }
}
