//! The CLI's exit statuses, as `docker run` and a shell report them.

use tether_client::ProcessInfo;

/// Exit status when tether itself fails, as `docker run` does.
pub const TETHER_FAILED: i32 = 125;
/// Exit status of `run` when the program exists but cannot be run (not
/// executable, a bad cwd), as a shell (and `docker run`) reports it.
pub const NOT_EXECUTABLE: i32 = 126;
/// Exit status of `run` when the program is not found, as a shell reports
/// a command not found.
pub const NOT_FOUND: i32 = 127;

/// The exit status when the local stdout or stderr was closed: a shell's
/// for a program killed by SIGPIPE.
pub const CLOSED_OUTPUT: i32 = 128 + 13;

/// The status `tether` exits with for a process that ended: its own code,
/// or 125 when it has none.
pub fn exit_code(info: &ProcessInfo) -> i32 {
    info.exit_code
        .map(|c| c.clamp(0, 255))
        .unwrap_or(TETHER_FAILED)
}
