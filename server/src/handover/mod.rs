//! The in-place handover (issue 43): a running tetherd becomes a new
//! binary under the same pid and ends nothing. Every process stays its
//! child (an exec keeps children), every listening socket and descriptor
//! it needs is kept open across the exec, and the rest of its state is
//! described in one versioned document (`document.rs`) that the new
//! binary reads before it serves.
//!
//! The steps, on SIGUSR2 or `POST /v1/admin/upgrade`:
//! 1. **Preflight** ([`preflight`]): the new binary is run with its whole
//!    command line (the server's flags, then the request's: `flags.rs`)
//!    and `--handover-check`, and must name this state's format and, when
//!    flags change, report the same listen address, data directory and
//!    the rest a handover cannot change. A binary that is missing, not
//!    executable, not tetherd, corrupt, of another format, or that
//!    refuses the flags is refused: the server serves on, unchanged, and
//!    says why.
//! 2. **Quiesce** (`give.rs`): spawns are refused (503 `restarting`),
//!    attachments close with 1012, waits answer, followers end; accepting
//!    stops (connections queue in the kernel on the kept socket); requests
//!    in flight get a few seconds to finish.
//! 3. **Carry**: queued stdin is written, each process's capture stops
//!    between two reads (what it did not read stays in its pipe or
//!    terminal), and the table, retention, screens, input streams, keys
//!    and descriptors go into the document.
//! 4. **Exec** the new binary with that command line and `--handover-fd N`.
//!    Should that exec fail, the old binary is executed again instead with
//!    the same state: past step 3 the server never serves half-stopped.
//!
//! What is carried and what is not is the "handover" column of
//! docs/STATE.md.

mod document;
mod flags;
mod give;
mod state;
mod take;

pub use document::{DocumentReader, DocumentWriter};
pub use flags::{identity, keeps_generated_token, next_args};
pub use give::{check_descriptors, give, preflight, Preflight};
pub use state::{Lifetime, State};
pub use take::{read, TakenFds};

/// The state format this binary writes. Raised whenever a carried type
/// changes (the versioning rule is in docs/DEPLOY.md; each format's
/// fields in docs/STATE.md). Format 2 added the input log (`SavedTimes`'s
/// `input`, `ProcessInfo`'s `records_input`).
pub const FORMAT: u32 = 2;

/// The formats this binary reads: its own and the older ones, whose
/// missing fields take their defaults (format 1: no input log).
pub const READS: &[u32] = &[1, FORMAT];

/// What `tetherd --handover-check` prints: the formats this binary reads,
/// and what the flags it was given say a handover cannot change
/// ([`identity`]).
pub fn check_report(config: &crate::config::Config) -> String {
    serde_json::json!({
        "program": "tetherd",
        "version": env!("CARGO_PKG_VERSION"),
        "handover_formats": READS,
        "config": identity(config),
    })
    .to_string()
}
