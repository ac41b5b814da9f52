//! `tether-client`: an async Rust client for `tetherd`, so that programs
//! never hand-roll the HTTP API or the `tether.v1` WebSocket protocol.
//!
//! - [`Client`]: spawn, get, list, signal, kill, remove and wait, with an
//!   `Idempotency-Key` on spawn and bounded retries of transient failures.
//! - [`Client::attach`] gives an [`Attachment`]: independent stdout and
//!   stderr readers (each with its own credit-controlled, bounded buffer,
//!   so unread output waits on the server), a stdin writer, resize and
//!   signal, and the exit. A dropped connection is resumed from the saved
//!   offsets: every byte is seen once, in order, and a loss only as an
//!   explicit `dropped` notice.
//! - [`Client::run`] starts a process and attaches to it in one WebSocket
//!   (`GET /v1/run`, one round trip instead of a spawn and an attach); the
//!   same [`Attachment`], resumed by the new process's id.
//! - [`Client::exec`] runs a command to completion and collects its output.
//! - [`Utf8Decoder`] turns one stream's chunks into text.
//!
//! ```no_run
//! use tether_client::{Client, SpawnRequest, SpawnSpec};
//!
//! # async fn demo() -> Result<(), tether_client::Error> {
//! let client = Client::new("http://127.0.0.1:7420")?;
//! let out = client.exec(SpawnRequest::command("echo hello; echo oops >&2; exit 3")).await?;
//! assert_eq!(out.stdout, b"hello\n");
//! assert_eq!(out.stderr, b"oops\n");
//! assert_eq!(out.exit_code, 3);
//! # Ok(()) }
//! ```
//!
//! The `tether` binary of this crate is a command-line client built on it
//! (`tether run -- PROG ARGS`, `tether run -t -- bash`, `tether ps`...);
//! see the crate's README.

mod admin;
mod answer;
mod attach;
mod base_url;
mod client;
mod error;
mod exec;
mod local_token;
mod recording;
mod retry;
mod spec;
mod tls;
mod tokens;
mod utf8;

pub use admin::UPGRADE_WAIT;
pub use attach::{
    AttachOptions, Attachment, Chunk, Control, ExitHandle, OutputReader, StdinWriter,
    DEFAULT_MAX_MESSAGE_BYTES,
};
pub use client::{Client, DEFAULT_MAX_ANSWER_BYTES};
pub use error::{Error, Result, TransportKind};
pub use exec::ExecOutput;
pub use local_token::{is_local_url, local_token_for, local_token_path, runtime_dir, LocalToken};
pub use recording::RecordingOptions;
pub use retry::RetryPolicy;
pub use spec::SpawnSpec;
pub use tokens::MintedToken;
pub use utf8::Utf8Decoder;

/// The protocol crate, for its other types.
pub use tether_protocol;
pub use tether_protocol::api::SpawnRequest;
pub use tether_protocol::{
    ExitReason, Limits, Overflow, ProcessInfo, ProcessStatus, StreamName, Usage,
};
