//! The one error type of the crate.

use std::time::Duration;

/// Everything a call can fail with. Each variant says what a caller can do
/// about it: retry ([`Error::is_transient`]), fix the request
/// ([`Error::Http`] with a 4xx status), or give up.
///
/// ```
/// use tether_client::Error;
///
/// let e = Error::Http { status: 404, code: "not_found".into(), message: "no process".into() };
/// assert!(e.is_not_found());
/// assert!(!e.is_transient());
/// assert_eq!(e.code(), Some("not_found"));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with an error status. `code` and `message` come
    /// from its JSON body `{"error": {"code", "message"}}` (for a body that
    /// is not one, `code` is `http_<status>` and `message` the raw text).
    #[error("server answered {status} {code}: {message}")]
    Http {
        /// HTTP status, such as 404.
        status: u16,
        /// Stable machine-readable code, such as `not_found`.
        code: String,
        /// Human-readable explanation.
        message: String,
    },
    /// The server could not be reached or the connection broke: connection
    /// refused or reset, DNS failure, a failed TLS handshake, a timeout.
    /// Usually transient. `kind` says which.
    #[error("cannot reach tetherd at {url}: {kind}: {message}")]
    Transport {
        /// The URL that was being requested.
        url: String,
        /// What went wrong, in the words of the layer that failed.
        message: String,
        /// Which step failed.
        kind: TransportKind,
    },
    /// The server sent something that does not follow the protocol (a bad
    /// frame, an offset out of order, more data than the credit window, a
    /// body that is not the expected JSON), or closed an attachment with an
    /// `error` frame.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Transient failures went on for longer than the retry budget.
    #[error("gave up after {attempts} attempts over {elapsed:?}: {last}")]
    BudgetExhausted {
        /// Attempts made (including the first).
        attempts: u32,
        /// Time from the first failure to giving up.
        elapsed: Duration,
        /// The last failure.
        last: Box<Error>,
    },
    /// An argument was rejected before anything was sent (a bad URL, a
    /// zero terminal size, an unknown signal name).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The attachment has ended (the process exited, or the attachment
    /// failed), so the operation cannot be carried out.
    #[error("attachment closed: {0}")]
    Closed(String),
}

/// Which step of reaching the server failed, so that a message can say
/// what happened rather than guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// The host name has no address (DNS).
    Dns,
    /// Nothing listens at the address: connection refused.
    Refused,
    /// The TLS handshake failed: a certificate not trusted or not for
    /// this name, or a server that does not speak TLS there.
    Tls,
    /// No answer within the time allowed.
    Timeout,
    /// The connection failed or broke in another way (reset, closed).
    Connection,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportKind::Dns => "DNS lookup failed",
            TransportKind::Refused => "connection refused",
            TransportKind::Tls => "TLS handshake failed",
            TransportKind::Timeout => "timed out",
            TransportKind::Connection => "connection failed",
        })
    }
}

impl TransportKind {
    /// Classifies an error by its chain of causes: a rustls error
    /// anywhere is TLS; an I/O error says refused or timed out; the
    /// resolver's words ("failed to lookup address", hyper's "dns error")
    /// say DNS. An I/O error's `source()` skips the error it wraps (TLS
    /// connectors wrap rustls's error in one, or two), so those are
    /// unwrapped by hand.
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> TransportKind {
        let mut kind = TransportKind::Connection;
        let mut next = Some(error);
        while let Some(e) = next {
            if e.downcast_ref::<rustls::Error>().is_some() {
                return TransportKind::Tls;
            }
            let text = e.to_string();
            if text.starts_with("dns error") || text.starts_with("failed to lookup address") {
                return TransportKind::Dns;
            }
            next = e.source();
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => return TransportKind::Refused,
                    std::io::ErrorKind::TimedOut => kind = TransportKind::Timeout,
                    _ => {}
                }
                if let Some(inner) = io.get_ref() {
                    next = Some(inner as &(dyn std::error::Error + 'static));
                }
            }
        }
        kind
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True for failures that may succeed when retried: transport errors
    /// (refused, reset, timeouts) and HTTP 429, 502, 503 and 504.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport { .. } => true,
            Error::Http { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            _ => false,
        }
    }

    /// The HTTP status, for [`Error::Http`] (and the last failure of
    /// [`Error::BudgetExhausted`]).
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Http { status, .. } => Some(*status),
            Error::BudgetExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// The server's error code, such as `not_found` or `not_running`.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Http { code, .. } => Some(code),
            Error::BudgetExhausted { last, .. } => last.code(),
            _ => None,
        }
    }

    /// True when the process is unknown to the server (never existed, or
    /// forgotten after its retention time): 404 `not_found`.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404) && self.code() == Some("not_found")
    }

    /// True when the server could not be reached at all (directly, or as
    /// the last failure before the retry budget ran out).
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Transport { .. } => true,
            Error::BudgetExhausted { last, .. } => last.is_unreachable(),
            _ => false,
        }
    }

    pub(crate) fn transport(url: &str, error: &reqwest::Error) -> Error {
        // Redirects that never end are the server's doing, not the
        // network's: said as such, and not retried.
        if error.is_redirect() {
            return Error::Protocol(format!(
                "{url}: too many redirects (a redirect loop): {}",
                describe_reqwest(error)
            ));
        }
        Error::Transport {
            url: url.to_string(),
            message: describe_reqwest(error),
            kind: if error.is_timeout() {
                TransportKind::Timeout
            } else {
                TransportKind::of(error)
            },
        }
    }

    /// What failed, for [`Error::Transport`] (and the last failure of
    /// [`Error::BudgetExhausted`]).
    pub fn transport_kind(&self) -> Option<TransportKind> {
        match self {
            Error::Transport { kind, .. } => Some(*kind),
            Error::BudgetExhausted { last, .. } => last.transport_kind(),
            _ => None,
        }
    }

    /// As [`Error::from_body`], with the code the server also sends in a
    /// header ([`tether_protocol::api::ERROR_CODE_HEADER`]): the code when
    /// the body was not read whole (a WebSocket refused at its upgrade keeps
    /// only the bytes that came with the head).
    pub(crate) fn from_response(status: u16, code: Option<&str>, body: &[u8]) -> Error {
        let mut error = Error::from_body(status, body);
        if let (Error::Http { code: found, .. }, Some(code)) = (&mut error, code) {
            if *found == format!("http_{status}") {
                *found = code.to_string();
            }
        }
        error
    }

    /// Builds [`Error::Http`] from a status and a response body.
    pub(crate) fn from_body(status: u16, body: &[u8]) -> Error {
        match serde_json::from_slice::<tether_protocol::api::ErrorBody>(body) {
            Ok(b) => Error::Http {
                status,
                code: b.error.code,
                message: b.error.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                Error::Http {
                    status,
                    code: format!("http_{status}"),
                    message: if text.is_empty() {
                        "(empty body)".to_string()
                    } else {
                        text.chars().take(200).collect()
                    },
                }
            }
        }
    }
}

/// The innermost cause of a reqwest error, which says what happened
/// ("Connection refused (os error 111)") where the outer one does not.
fn describe_reqwest(error: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = error;
    while let Some(inner) = source.source() {
        source = inner;
    }
    if error.is_timeout() {
        "timed out".to_string()
    } else {
        source.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_comes_from_the_body_or_else_from_the_header() {
        let body = br#"{"error":{"code":"spawn_failed","message":"no such program"}}"#;
        let whole = Error::from_response(422, Some("other"), body);
        assert_eq!(whole.code(), Some("spawn_failed"), "the body wins");
        let cut = Error::from_response(422, Some("spawn_failed"), b"");
        assert_eq!(cut.code(), Some("spawn_failed"));
        assert_eq!(cut.status(), Some(422));
        let half = Error::from_response(422, Some("cannot_execute"), br#"{"error":{"co"#);
        assert_eq!(half.code(), Some("cannot_execute"));
        let neither = Error::from_response(502, None, b"Bad Gateway");
        assert_eq!(neither.code(), Some("http_502"));
    }
}
