//! The `tether.v1` wire vocabulary, shared by `tetherd`, `tether-client` and
//! (by its own TypeScript twin, pinned by `protocol/vectors/`) the browser.
//!
//! This crate knows nothing of sockets or processes:
//! - [`frame`]: WebSocket frames, typed by direction ([`ClientFrame`],
//!   [`ServerFrame`]), with their MessagePack encoding and decoding.
//! - [`process`]: the process object ([`ProcessInfo`]) that HTTP responses,
//!   `hello` and `exit` frames carry.
//! - [`resources`]: resource limits and usage ([`Limits`], [`Usage`]).
//! - [`api`]: JSON bodies of the HTTP API (spawn request, error body).
//! - [`signal`]: the signal names the API accepts.
//!
//! `docs/PROTOCOL.md` is the prose reference for all of it.

pub mod api;
mod decode;
pub mod frame;
mod in_place;
pub mod process;
pub mod resources;
pub mod signal;

pub use api::TermSize;
pub use frame::{ClientFrame, DecodeError, InputAction, ServerFrame, StreamName};
pub use process::{Containment, ExitReason, KubernetesNames, Overflow, ProcessInfo, ProcessStatus};
pub use resources::{Limits, Usage};
pub use signal::Signal;

/// The WebSocket subprotocol name. Bump the suffix for incompatible changes.
pub const SUBPROTOCOL: &str = "tether.v1";

/// The protocol version carried in the `hello` frame.
pub const PROTOCOL_VERSION: u32 = 1;
