//! WebSocket frames of `tether.v1`.
//!
//! Every binary WebSocket message is one MessagePack map with a string field
//! `type`. Bytes travel as MessagePack `bin`; offsets and counts are
//! unsigned 64-bit. [`ServerFrame`] goes from server to client,
//! [`ClientFrame`] from client to server; each side decodes the other's with
//! the same two-step decoder, which tells malformed MessagePack, an unknown
//! `type` and a bad field apart so that each gets its own error code.

use serde::{Deserialize, Serialize};

use crate::process::ProcessInfo;

/// An output stream of a process. A PTY has only `stdout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamName {
    /// Standard output (and the whole PTY output).
    Stdout,
    /// Standard error (always empty on a PTY).
    Stderr,
}

impl StreamName {
    /// Both streams, in the order the server serves them.
    pub const ALL: [StreamName; 2] = [StreamName::Stdout, StreamName::Stderr];

    /// 0 for stdout, 1 for stderr: the index used in per-stream arrays.
    pub fn index(self) -> usize {
        match self {
            StreamName::Stdout => 0,
            StreamName::Stderr => 1,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamName::Stdout => "stdout",
            StreamName::Stderr => "stderr",
        }
    }
}

/// Frames the server sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// First frame of every attachment: the process as it is now and the
    /// offsets this attachment starts from.
    Hello {
        /// Protocol version, [`crate::PROTOCOL_VERSION`].
        version: u32,
        /// The process object.
        process: ProcessInfo,
        /// Offset of the first stdout byte this attachment will be sent.
        stdout: u64,
        /// Offset of the first stderr byte this attachment will be sent.
        stderr: u64,
    },
    /// Bytes of stdout; `offset` is that of `data[0]` since spawn.
    Stdout {
        /// Absolute offset of the first byte.
        offset: u64,
        /// The bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Bytes of stderr; `offset` is that of `data[0]` since spawn.
    Stderr {
        /// Absolute offset of the first byte.
        offset: u64,
        /// The bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Bytes `offset..offset+length` of `stream` were evicted before this
    /// attachment was sent them.
    Dropped {
        /// Which stream lost bytes.
        stream: StreamName,
        /// First lost offset.
        offset: u64,
        /// Number of lost bytes.
        length: u64,
    },
    /// The terminal screen of a PTY process at stdout offset `offset`: sent
    /// once, right after `hello`, to an attachment that asked for it
    /// (`screen=1`); the stdout frames that follow start at `offset`.
    Screen {
        /// The stdout offset the screen corresponds to: `data` reflects
        /// every byte before it and none after.
        offset: u64,
        /// Columns of the terminal at that offset.
        cols: u32,
        /// Rows of the terminal at that offset.
        rows: u32,
        /// Bytes that, written to a fresh terminal of `cols x rows`,
        /// reproduce the screen; they contain no terminal query.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The last frame: the exited process, sent after all of its output.
    Exit {
        /// The exited process object.
        process: ProcessInfo,
    },
    /// How far the server has applied this attachment's numbered input
    /// (only with `input=ID`): every unit before `applied` has been carried
    /// out (or refused) once and never will be again. Sent right after
    /// `hello` (where a resume stands), then whenever it moves.
    InputAck {
        /// The sequence position just past the last applied unit.
        applied: u64,
    },
    /// A protocol error; the server closes the connection after it.
    Error {
        /// Stable code such as `malformed_frame`.
        code: String,
        /// Human-readable explanation.
        message: String,
    },
}

/// Frames a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Bytes for the process's stdin.
    Stdin {
        /// The bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Close the process's stdin (on a PTY: send the EOF character).
    StdinEof,
    /// Send a signal (by name, such as `INT`) to the process group.
    Signal {
        /// Signal name.
        signal: String,
    },
    /// Set the PTY window size (refused with an `error` frame for pipes).
    Resize {
        /// Columns.
        cols: u32,
        /// Rows.
        rows: u32,
    },
    /// One numbered input (only on an attachment opened with `input=ID`):
    /// applied at most once, in order, by the stream's sequence.
    Input {
        /// The sequence position of the action's first unit: a stdin byte
        /// counts one, every other action one.
        seq: u64,
        /// What to do.
        action: InputAction,
    },
    /// Grant `bytes` more of `stream` (with `window=` flow control).
    Credit {
        /// The stream the credit is for.
        stream: StreamName,
        /// Additional bytes the server may send.
        bytes: u64,
    },
}

/// What an [`ClientFrame::Input`] does: the same as the unnumbered frames
/// of the same `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputAction {
    /// Bytes for stdin (`data.len()` units of the sequence).
    Stdin {
        /// The bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Close stdin (on a PTY: the EOF character).
    StdinEof,
    /// Send a signal by name.
    Signal {
        /// Signal name.
        signal: String,
    },
    /// Set the PTY window size.
    Resize {
        /// Columns.
        cols: u32,
        /// Rows.
        rows: u32,
    },
}

impl InputAction {
    /// Units of the sequence this action takes: its bytes for stdin, one
    /// for every other action.
    pub fn units(&self) -> u64 {
        match self {
            InputAction::Stdin { data } => data.len() as u64,
            _ => 1,
        }
    }

    /// The unnumbered frame that does the same.
    pub fn into_frame(self) -> ClientFrame {
        match self {
            InputAction::Stdin { data } => ClientFrame::Stdin { data },
            InputAction::StdinEof => ClientFrame::StdinEof,
            InputAction::Signal { signal } => ClientFrame::Signal { signal },
            InputAction::Resize { cols, rows } => ClientFrame::Resize { cols, rows },
        }
    }
}

/// Why a frame could not be decoded. Each maps to its own error code and
/// WebSocket close code, so a peer can tell what it did wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a MessagePack map with a string `type` field (close code 1007).
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A well-formed frame of a `type` this side does not know (1008).
    #[error("unknown frame type {0:?}")]
    UnknownType(String),
    /// A known `type` whose fields are missing or of the wrong kind (1008).
    #[error("invalid {kind} frame: {message}")]
    InvalidFields {
        /// The frame type.
        kind: String,
        /// What was wrong.
        message: String,
    },
}

impl DecodeError {
    /// Stable error code for the `error` frame.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::Malformed(_) => "malformed_frame",
            DecodeError::UnknownType(_) => "unknown_type",
            DecodeError::InvalidFields { .. } => "invalid_frame",
        }
    }

    /// WebSocket close code: 1007 (invalid payload) or 1008 (policy).
    pub fn close_code(&self) -> u16 {
        match self {
            DecodeError::Malformed(_) => 1007,
            DecodeError::UnknownType(_) | DecodeError::InvalidFields { .. } => 1008,
        }
    }
}

fn encode<T: Serialize>(frame: &T) -> Vec<u8> {
    // Serializing these plain structs into a Vec cannot fail: every field is
    // a string, integer, bool, byte array, option or nested struct.
    rmp_serde::to_vec_named(frame).unwrap_or_default()
}

impl ServerFrame {
    /// The frame's `type`, to name it in a message without printing its
    /// contents (which a server may make megabytes long).
    pub fn kind(&self) -> &'static str {
        match self {
            ServerFrame::Hello { .. } => "hello",
            ServerFrame::Stdout { .. } => "stdout",
            ServerFrame::Stderr { .. } => "stderr",
            ServerFrame::Dropped { .. } => "dropped",
            ServerFrame::Screen { .. } => "screen",
            ServerFrame::Exit { .. } => "exit",
            ServerFrame::InputAck { .. } => "input_ack",
            ServerFrame::Error { .. } => "error",
        }
    }

    /// MessagePack bytes of this frame (a map with named fields).
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Encodes a stdout or stderr data frame straight from a borrowed slice,
    /// without building a [`ServerFrame`] (the server's hot path).
    pub fn encode_data(stream: StreamName, offset: u64, data: &[u8]) -> Vec<u8> {
        Self::encode_data_parts(stream, offset, &[data])
    }

    /// Encodes a data frame whose bytes come in several slices (a ring
    /// buffer's two halves), copying each byte once. The bytes are those of
    /// [`ServerFrame::encode`] for the same frame, as the vectors check.
    pub fn encode_data_parts(stream: StreamName, offset: u64, parts: &[&[u8]]) -> Vec<u8> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(len + 40);
        // Writing into a Vec cannot fail.
        let _ = rmp::encode::write_map_len(&mut out, 3);
        let _ = rmp::encode::write_str(&mut out, "type");
        let _ = rmp::encode::write_str(&mut out, stream.as_str());
        let _ = rmp::encode::write_str(&mut out, "offset");
        let _ = rmp::encode::write_uint(&mut out, offset);
        let _ = rmp::encode::write_str(&mut out, "data");
        let _ = rmp::encode::write_bin_len(&mut out, len as u32);
        for part in parts {
            out.extend_from_slice(part);
        }
        out
    }

    /// Every `type` a server sends.
    pub(crate) const TYPES: &'static [&'static str] = &[
        "hello",
        "stdout",
        "stderr",
        "dropped",
        "screen",
        "input_ack",
        "exit",
        "error",
    ];
}

impl ClientFrame {
    /// MessagePack bytes of this frame (a map with named fields).
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Every `type` a client sends.
    pub(crate) const TYPES: &'static [&'static str] =
        &["stdin", "stdin_eof", "signal", "resize", "input", "credit"];
}
