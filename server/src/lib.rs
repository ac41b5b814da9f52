//! `tetherd`: starts processes on pipes or a PTY, captures their output from
//! the first byte, and lets WebSocket clients attach to them.
//!
//! A map of the crate, in the order data flows:
//! - [`process`]: [`process::Process`], one known process and the one
//!   policy for each operation on it; its life in [`process::spawn`](mod@process::spawn),
//!   [`process::capture`], [`process::stdin`], [`process::supervise`].
//! - [`pty`]: the PTY master on tokio's reactor (no thread per session).
//! - [`session`]: signalling and killing a whole session via /proc.
//! - [`retained`]: [`retained::RetainedOutput`], the one owner of a
//!   process's retained output, its lock and its wake-ups; the pure ring
//!   inside it.
//! - [`screen`]: [`screen::Screen`], the terminal emulator of a PTY process,
//!   fed by capture; snapshots `{offset, cols, rows, data}` and plain text.
//! - [`table`]: [`table::ProcessTable`], admission, limits, idempotency,
//!   forgetting exited processes.
//! - [`attach`]: one WebSocket attachment: writer, reader, input queue.
//! - [`http`], [`access`]: routes, token and Origin checks.
//! - [`slots`]: bounded counts of attachments.
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
pub mod screen;
pub mod server;
pub mod session;
pub mod slots;
pub mod table;

pub use config::Config;
pub use server::run;
