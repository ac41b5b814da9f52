//! Builders for [`SpawnRequest`].

use std::time::Duration;

use tether_protocol::api::SpawnRequest;
use tether_protocol::{Limits, Overflow};

/// Convenience constructors and builder methods for [`SpawnRequest`] (the
/// protocol crate's type, used as is). Bring the trait into scope to use
/// them.
///
/// ```
/// use std::time::Duration;
/// use tether_client::{SpawnRequest, SpawnSpec};
///
/// let spec = SpawnRequest::argv(["ls", "-l"])
///     .env("LANG", "C")
///     .cwd("/tmp")
///     .timeout(Duration::from_secs(5));
/// assert_eq!(spec.timeout_ms, Some(5000));
/// assert_eq!(SpawnRequest::command("echo hi").command.as_deref(), Some("echo hi"));
/// ```
pub trait SpawnSpec: Sized {
    /// Runs `text` with `/bin/sh -c`.
    fn command(text: impl Into<String>) -> Self;
    /// Runs a program with arguments (PATH is searched).
    fn argv<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>;
    /// Adds an environment variable.
    fn env(self, key: impl Into<String>, value: impl Into<String>) -> Self;
    /// Sets the working directory.
    fn cwd(self, dir: impl Into<String>) -> Self;
    /// Sets the server-side deadline (reason `timeout`, exit code 124).
    fn timeout(self, limit: Duration) -> Self;
    /// Gives the process a stdin pipe.
    fn with_stdin(self) -> Self;
    /// Runs it on a PTY of this size.
    fn tty(self, cols: u16, rows: u16) -> Self;
    /// Sets the overflow mode.
    fn overflow(self, overflow: Overflow) -> Self;
    /// Sets the per-stream retention in bytes.
    fn retain_bytes(self, bytes: u64) -> Self;
    /// Names the process (unique among the server's known processes);
    /// the name works wherever the id does.
    fn name(self, name: impl Into<String>) -> Self;
    /// Ends the process (reason `unattached`) once it has had no
    /// attachment for `limit`.
    fn unattached_timeout(self, limit: Duration) -> Self;
    /// Runs the process as this user (name or uid) on a server running as
    /// root; any other server refuses it (403 `user_unavailable`).
    fn user(self, user: impl Into<String>) -> Self;
    /// With [`SpawnSpec::user`]: runs with this group (name or gid) instead
    /// of the user's primary group.
    fn group(self, group: impl Into<String>) -> Self;
    /// Sets resource limits (memory, CPUs, tasks) of the process and
    /// everything it forks.
    fn limits(self, limits: Limits) -> Self;
    /// Records what is written to its stdin as the `i` events of its
    /// recording. Off by default: keystrokes include passwords.
    fn record_input(self) -> Self;
}

impl SpawnSpec for SpawnRequest {
    fn command(text: impl Into<String>) -> Self {
        SpawnRequest {
            command: Some(text.into()),
            ..SpawnRequest::default()
        }
    }

    fn argv<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SpawnRequest {
            argv: Some(args.into_iter().map(Into::into).collect()),
            ..SpawnRequest::default()
        }
    }

    fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    fn timeout(mut self, limit: Duration) -> Self {
        // Round up, so that a sub-millisecond deadline is not "none".
        let ms = limit.as_nanos().div_ceil(1_000_000);
        self.timeout_ms = Some(u64::try_from(ms).unwrap_or(u64::MAX));
        self
    }

    fn with_stdin(mut self) -> Self {
        self.stdin = true;
        self
    }

    fn tty(mut self, cols: u16, rows: u16) -> Self {
        self.tty = true;
        self.cols = Some(cols);
        self.rows = Some(rows);
        self
    }

    fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    fn retain_bytes(mut self, bytes: u64) -> Self {
        self.retain_bytes = Some(bytes);
        self
    }

    fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    fn unattached_timeout(mut self, limit: Duration) -> Self {
        let ms = limit.as_nanos().div_ceil(1_000_000).max(1);
        self.unattached_timeout_ms = Some(u64::try_from(ms).unwrap_or(u64::MAX));
        self
    }

    fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    fn record_input(mut self) -> Self {
        self.record_input = true;
        self
    }
}
