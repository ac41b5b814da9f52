//! `tetherd`: starts processes on pipes or a PTY, captures their output from
//! the first byte, and lets WebSocket clients attach to them.
//!
//! A map of the crate, in the order data flows:
//! - [`spawn`]: spawn a process, capture each output fd into its retained
//!   buffer, write stdin, enforce the deadline, reap, publish the exit.
//! - [`pty`]: the PTY master on tokio's reactor (no thread per session).
//! - [`session`]: killing a whole session via /proc.
//! - [`retained`]: [`retained::RetainedOutput`], per-stream bounded buffers
//!   addressed by absolute offset, with block-mode floors.
//! - [`process`]: [`process::Process`], one known process and its handles.
//! - [`table`]: [`table::ProcessTable`], admission, limits, idempotency,
//!   forgetting exited processes.
//! - [`attach`]: one WebSocket attachment, cursor per stream -> socket.
//! - [`http`], [`access`]: routes, token and Origin checks.
//! - [`metrics`]: counters for `/metrics`.
//! - [`error`]: every error with its status, code and close code.
//! - [`config`]: flags and limits; [`server::run`] ties it together.

pub mod access;
pub mod attach;
pub mod config;
pub mod error;
pub mod http;
pub mod metrics;
pub mod process;
pub mod pty;
pub mod retained;
pub mod server;
pub mod session;
pub mod spawn;
pub mod table;

pub use config::Config;
pub use server::run;
