//! `tetherd`: starts processes on pipes or a PTY, captures their output from
//! the first byte, and lets WebSocket clients attach to them.
//!
//! A map of the crate, in the order data flows:
//! - [`process`]: [`process::Process`], one known process and the one
//!   policy for each operation on it; its life in [`process::spawn`](mod@process::spawn),
//!   [`process::capture`], [`process::stdin`], [`process::supervise`].
//! - [`pty`]: the PTY master on tokio's reactor (no thread per session).
//! - [`launch`]: process creation without copying the server
//!   (`clone(CLONE_VM | CLONE_VFORK)`), into the process's cgroup.
//! - [`contain`]: a cgroup per process, pidfds, the guard that ends
//!   everything if the server dies, the orphan reaper as PID 1, and
//!   signalling a whole Unix session via /proc (the fallback).
//! - [`retained`]: [`retained::RetainedOutput`], the one owner of a
//!   process's retained output, its lock and its wake-ups; the pure ring
//!   inside it.
//! - [`screen`]: [`screen::Screen`], the terminal emulator of a PTY process,
//!   fed from retention behind capture; snapshots `{offset, cols, rows,
//!   data}` and plain text.
//! - [`datadir`]: `--data-dir`, the disk logs' directory and the process
//!   records a restart reads back.
//! - [`table`]: [`table::ProcessTable`], admission, limits, idempotency,
//!   forgetting exited processes.
//! - [`wire`]: what an attachment's messages look like (`tether.v1` frames
//!   or Kubernetes channels), no IO.
//! - [`attach`]: one WebSocket attachment: writer, reader, input queue.
//! - [`listen`]: the accept loop; every connection bounded in number and
//!   time, and shutdown's drain.
//! - [`transport`]: what it listens on (TCP, TLS, a Unix socket), and the
//!   peer a request came from.
//! - [`http`]: every route (attach and run upgrades, output and
//!   Server-Sent Events, exec, token minting, the web root), and the
//!   follower that output and exec read through; [`access`]: token and
//!   Origin checks; [`grant`]: the one decision of what a request may do,
//!   and the audit lines; [`token`]: operator and scoped tokens.
//! - [`kube`]: the Kubernetes exec/attach routes and the documents kubectl
//!   reads first.
//! - [`slots`]: bounded counts of attachments.
//! - [`secret`]: the token kept from children; [`limits`]: the open-file
//!   limit and the defaults sized to it.
//! - [`metrics`]: counters for `/metrics`.
//! - [`error`]: every error with its status and code.
//! - [`sync`]: the one way through a poisoned lock.
//! - [`config`]: flags and limits; [`options`]: what the server runs with,
//!   built from them once; [`server::run`] ties it together.

pub mod access;
pub mod attach;
pub mod budget;
pub mod config;
pub mod contain;
pub mod datadir;
pub mod error;
pub mod grant;
pub mod handover;
pub mod http;
pub mod kube;
pub mod launch;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod options;
pub mod process;
pub mod pty;
pub mod retained;
pub mod screen;
pub mod secret;
pub mod server;
pub mod slots;
pub mod sync;
pub mod table;
pub mod token;
pub mod transport;
pub mod wire;

pub use config::Config;
pub use options::ServerOptions;
pub use server::{run, Ready};
