//! JSON bodies of the HTTP API under `/v1`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::process::Overflow;

/// `POST /v1/processes`. Exactly one of `argv` and `command` is required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnRequest {
    /// Program and arguments, executed directly (PATH is searched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Shell text, run as `/bin/sh -c TEXT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Variables added to (or replacing those of) the server's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory; the server's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Deadline in milliseconds; 0 or absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Run on a PTY (one output stream, `stdout`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tty: bool,
    /// PTY width in columns (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    /// PTY height in rows (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    /// Per-stream retention in bytes, capped by the server's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_bytes: Option<u64>,
    /// Give the process a stdin pipe that stays open until a client closes
    /// it. Default false: stdin is `/dev/null`. Always true with `tty`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin: bool,
    /// What to do when a stream's retention is full.
    #[serde(default)]
    pub overflow: Overflow,
    /// A name, unique among the server's known processes, usable wherever
    /// the id is: 1 to 64 of `A-Z a-z 0-9 . _ -`, not 32 hex digits (an id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// End the process (its whole session, reason `unattached`) once it
    /// has had no attachment for this many milliseconds, counted from the
    /// spawn and afresh from each time its last attachment closes; an
    /// attached process is never ended by it. 0 or absent means never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattached_timeout_ms: Option<u64>,
    /// Run as this user (name or uid; its primary group), not root. Only
    /// a server running as root can switch user: any other refuses it with
    /// 403 `user_unavailable`. Overrides the server's `--user` for this
    /// process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// With `user`: run with this group (name or gid) instead of the
    /// user's primary group. Without `user` it is refused (400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Resource limits of the process and everything it forks; each
    /// absent one is the server's default (`--default-memory-bytes`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::resources::Limits>,
    /// Run beside this process (an id or a name): in its working directory
    /// (its current one while it runs, else the one it started in), as its
    /// user and group. `cwd` still wins over the directory; `user` and
    /// `group` are refused with it. What `tether cp` runs its `tar` with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<String>,
    /// Record what is typed or written to its stdin, as the `i` events of
    /// its recording (`GET .../recording`): the newest 64 KiB, kept as its
    /// output is. Default false, and it should stay so for anything a
    /// person types into: keystrokes include passwords, and whoever may
    /// read the process may read its recording.
    #[serde(default, skip_serializing_if = "is_false")]
    pub record_input: bool,
}

/// Longest process name.
pub const MAX_NAME_LEN: usize = 64;

/// True for anything that reads as a process id: 32 hex digits, alone or
/// after a `.` (`NODE.HEX32`). A process name never does (the server
/// refuses it), so names and ids are two namespaces a lookup never
/// confuses.
pub fn looks_like_process_id(s: &str) -> bool {
    let random = s.rsplit_once('.').map_or(s, |(_, random)| random);
    random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// `POST /v1/processes/{id}/signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A name such as `TERM` or `INT` (see [`crate::signal::SIGNALS`]).
    pub signal: String,
}

/// `POST /v1/processes/{id}/resize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    /// Columns, 1 to [`MAX_TERMINAL_SIZE`].
    pub cols: u32,
    /// Rows, 1 to [`MAX_TERMINAL_SIZE`].
    pub rows: u32,
}

/// `PATCH /v1/processes/{id}`: what may change while a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessUpdate {
    /// The new `unattached_timeout_ms` (0: never), counted afresh from this
    /// change while nobody is attached; as at spawn.
    pub unattached_timeout_ms: u64,
}

/// `POST /v1/admin/upgrade`: hand over to a new binary in place (issue
/// 43). The operator's right only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The new binary; by default the file tetherd was started from (as a
    /// package upgrade or `install` replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Flags for the new binary, after the server's own (the last of a
    /// flag wins): limits, capacities, timeouts, `--token-file`... A flag
    /// that names what a handover cannot change (where it listens, its
    /// data directory, `--memory-only`, `--node`, containment, TLS on or
    /// off, the screen on or off) or a token on the command line is
    /// refused with 409 `upgrade_refused`, before anything stops.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// The answer to an [`UpgradeRequest`] whose new binary passed the
/// preflight: the handover has begun. The server answers, then closes
/// every attachment with 1012 and executes the new binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeStarted {
    /// The binary being executed.
    pub binary: String,
    /// Its version, as it reports it.
    pub version: String,
    /// The version handing over.
    pub from_version: String,
    /// The server's pid, the same after the handover.
    pub pid: u32,
    /// Handovers this server has made so far (before this one): once
    /// [`ServerRun::handovers`] is past it, the new binary serves.
    pub handovers: u64,
}

/// `GET /v1/admin/server`: the server as it runs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRun {
    pub pid: u32,
    /// The version of the binary serving.
    pub version: String,
    /// Handovers since the server was first started.
    pub handovers: u64,
}

/// The largest accepted terminal width or height.
pub const MAX_TERMINAL_SIZE: u32 = 4096;

/// A terminal size that is in range: 1 to [`MAX_TERMINAL_SIZE`] columns and
/// rows. Built only by [`TermSize::new`], the one check of a size, whether it
/// came with a spawn request, a resize request or a `resize` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    cols: u16,
    rows: u16,
}

/// A terminal size out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "terminal size {cols}x{rows} is out of range: cols and rows must be 1 to {MAX_TERMINAL_SIZE}"
)]
pub struct BadTermSize {
    /// The columns asked for.
    pub cols: u32,
    /// The rows asked for.
    pub rows: u32,
}

impl TermSize {
    /// The size a PTY gets when the spawn request names none.
    pub const DEFAULT: TermSize = TermSize { cols: 80, rows: 24 };

    /// Checks a size.
    pub fn new(cols: u32, rows: u32) -> Result<TermSize, BadTermSize> {
        let fits = |n: u32| (1..=MAX_TERMINAL_SIZE).contains(&n);
        if !fits(cols) || !fits(rows) {
            return Err(BadTermSize { cols, rows });
        }
        // Both fit in u16: MAX_TERMINAL_SIZE is 4096.
        Ok(TermSize {
            cols: cols as u16,
            rows: rows as u16,
        })
    }

    /// Columns.
    pub fn cols(self) -> u16 {
        self.cols
    }

    /// Rows.
    pub fn rows(self) -> u16 {
        self.rows
    }
}

impl ResizeRequest {
    /// The size asked for, checked.
    pub fn size(self) -> Result<TermSize, BadTermSize> {
        TermSize::new(self.cols, self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_size_is_one_to_the_maximum_each_way() {
        assert!(TermSize::new(1, 1).is_ok());
        assert!(TermSize::new(MAX_TERMINAL_SIZE, MAX_TERMINAL_SIZE).is_ok());
        for (cols, rows) in [(0, 10), (10, 0), (MAX_TERMINAL_SIZE + 1, 10), (u32::MAX, 1)] {
            let error = TermSize::new(cols, rows).unwrap_err();
            assert!(error.to_string().contains("out of range"), "{error}");
        }
        let size = TermSize::new(120, 40).unwrap();
        assert_eq!((size.cols(), size.rows()), (120, 40));
    }
}

/// The response header that carries an error's code beside its JSON body,
/// for a client that may get only the response head (a WebSocket client
/// refused at the upgrade keeps just the bytes that came with it).
pub const ERROR_CODE_HEADER: &str = "tether-error-code";

/// Every error response: `{"error": {"code": "...", "message": "..."}}`,
/// its code also in [`ERROR_CODE_HEADER`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The code (stable, for programs) and message (for people) of an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable machine-readable code, such as `not_found`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}
