//! [`AttachOptions`]: how to attach, apart from the attachment that runs
//! with them, so that the connection and the attachment both read them
//! without importing each other.

use std::time::Duration;

use crate::retry::RetryPolicy;

/// How to attach. The defaults suit most uses.
///
/// ```
/// use tether_client::AttachOptions;
///
/// let options = AttachOptions { window: 64 * 1024, readonly: true, ..AttachOptions::default() };
/// assert_eq!(options.stdout_offset, 0);
/// ```
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// Credit window per stream, in bytes: at most this much of each
    /// stream is buffered in the client (default 256 KiB).
    pub window: u64,
    /// Read-only attachment (`readonly=1`): stdin, signals and resizes
    /// are refused.
    pub readonly: bool,
    /// First stdout offset to receive (default 0: everything retained).
    pub stdout_offset: u64,
    /// First stderr offset to receive (default 0).
    pub stderr_offset: u64,
    /// PTY only (a pipe process refuses it): start from the terminal
    /// screen (`screen=1`, `stdout_offset` is then ignored) and, on a
    /// resume whose saved offset was evicted, take the screen instead of a
    /// `dropped` gap (`screen=evicted`). stdout then yields a
    /// [`Chunk::Screen`](super::Chunk::Screen) first (default off).
    pub screen: bool,
    /// Retry budget for reconnecting after the connection drops, and for
    /// the first connection unless `first_connect` is set (default: 30 s,
    /// backoff up to 2 s).
    pub reconnect: RetryPolicy,
    /// Retry budget of the first connection alone, when it should differ
    /// from `reconnect` (default `None`: `reconnect`). A command-line
    /// client sets a short one, so that a server that is not there fails
    /// fast, while a connection that drops once the process runs is still
    /// resumed with the full `reconnect` budget.
    pub first_connect: Option<RetryPolicy>,
    /// A connection that brings no message (the server pings every 20 s by
    /// default) for this long is taken as lost and resumed (default 90 s).
    pub idle_timeout: Duration,
    /// Timeout of one connection attempt, handshake and `hello` included
    /// (default 10 s).
    pub connect_timeout: Duration,
    /// Number the input (default on; `input=ID`, docs/PROTOCOL.md): every
    /// stdin write, close, resize and signal is applied by the server
    /// exactly once, in order, however often the connection drops and is
    /// resumed. A resume after the server forgot the input stream (its
    /// connection was down longer than `--input-ttl-ms`) fails the
    /// attachment with the error code `input_expired`. Off: input is sent
    /// at most once (what a broken connection carried may be lost), for
    /// servers older than numbered input. Read-only attachments send none.
    pub numbered_input: bool,
    /// The largest WebSocket message taken from the server, its fragments
    /// together (default 16 MiB, [`DEFAULT_MAX_MESSAGE_BYTES`]): data
    /// frames are 256 KiB at most by default (`--max-data-frame-bytes`),
    /// and a screen's snapshot must fit. Past it the attachment ends with
    /// an error.
    pub max_message_bytes: usize,
}

/// The default [`AttachOptions::max_message_bytes`].
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            window: 256 << 10,
            readonly: false,
            stdout_offset: 0,
            stderr_offset: 0,
            screen: false,
            reconnect: RetryPolicy::default(),
            first_connect: None,
            idle_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(10),
            numbered_input: true,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}
