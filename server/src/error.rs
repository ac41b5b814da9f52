//! The server's errors, and the one place that maps each to an HTTP status
//! and an error code. The close code an attachment ends with after an
//! error is chosen with the attachment's other closes, in `attach::close`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tether_protocol::api::{BadTermSize, ErrorBody, ErrorDetail};
use tether_protocol::signal::UnknownSignal;

/// Everything a request can fail with. Each variant says what the caller
/// can do about it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or its arguments are invalid: fix it.
    #[error("{0}")]
    InvalidRequest(String),
    /// A resource limit above the server's maximum (`--max-memory-bytes`,
    /// `--max-cpus`, `--max-pids`): ask for less, or raise the flag.
    #[error("{0}")]
    LimitAboveMaximum(String),
    /// The request has resource limits and this server cannot apply them
    /// (no cgroup controllers, `--containment session`): it is refused
    /// rather than run unlimited. Spawn without limits, or run tetherd
    /// where cgroups are writable.
    #[error("{0}")]
    LimitsUnavailable(String),
    /// A signal name or number the API does not accept.
    #[error(transparent)]
    UnknownSignal(#[from] UnknownSignal),
    /// A terminal size out of range.
    #[error(transparent)]
    BadTermSize(#[from] BadTermSize),
    /// A terminal of more cells than `--max-term-cells` (at spawn or a
    /// resize): ask for a smaller one.
    #[error(
        "terminal size {cols}x{rows} is more than this server's {max} cells (--max-term-cells)"
    )]
    TerminalTooLarge { cols: u16, rows: u16, max: u64 },
    /// Resize of a process that runs on pipes.
    #[error("process {0} has no terminal (tty: false)")]
    NoTerminal(String),
    /// An attachment opened with `readonly=1` asked to act on the process.
    #[error("this attachment is read-only (readonly=1)")]
    ReadOnly,
    /// No process with that id (it never existed or has been forgotten).
    #[error("no process with id {0:?}")]
    NotFound(String),
    /// No process with that id any more, and why (the server remembers
    /// the last forgotten ones).
    #[error("no process with id {0:?}: {1}")]
    Forgotten(String, String),
    /// No such route: check the URL.
    #[error("no route for {0}")]
    NoRoute(String),
    /// The route exists, but not with this method.
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    /// `DELETE` of a process that still runs, without `force=1`: kill it
    /// first (`POST .../kill`), or force.
    #[error("process {0} is still running; kill it first, or DELETE with ?force=1")]
    StillRunning(String),
    /// Another known process already has this name.
    #[error("the name {0:?} is taken by another known process")]
    NameTaken(String),
    /// The process has exited; it cannot be signalled or written to.
    #[error("process {0} is not running")]
    NotRunning(String),
    /// The program could not be started: not found, or another OS failure
    /// (the reason is in the message). A shell would say 127.
    #[error("{0}")]
    SpawnFailed(String),
    /// The program was found but cannot be run: not executable, a
    /// directory, not a format the kernel runs, or a cwd that is missing or
    /// not a directory. A shell would say 126.
    #[error("{0}")]
    CannotExecute(String),
    /// The same `Idempotency-Key` was used with a different request body.
    #[error("Idempotency-Key {0:?} was already used with a different request")]
    IdempotencyConflict(String),
    /// No room for another idempotency record: the server's
    /// `--idempotency-total` is full (records go `--input-ttl-ms` after
    /// their request), or this process has as many requests with keys of
    /// this token in flight as it keeps records. Retry later, or without
    /// a key.
    #[error("{0}")]
    IdempotencyExhausted(String),
    /// The process has no stdin pipe (spawned without `"stdin": true`), or
    /// it was closed.
    #[error("process {0} has no open stdin (spawn it with \"stdin\": true)")]
    StdinUnavailable(String),
    /// Too many running processes: wait for some to exit, or raise
    /// `--max-processes`.
    #[error("too many running processes (limit {0})")]
    TooManyProcesses(usize),
    /// The total retention budget is spent: let exited processes expire,
    /// ask for a smaller `retain_bytes`, or raise `--retain-total`.
    #[error("retention budget exhausted: {0}")]
    RetentionExhausted(String),
    /// Too many attachments (per process or in total).
    #[error("too many attachments: {0}")]
    TooManyAttachments(String),
    /// A resume (`input_resume=1`) of an input stream this process does
    /// not know: it expired, so what was applied before is unknown. Nothing
    /// is applied twice; the client reports its unacknowledged input lost.
    #[error("input stream {0:?} is not known here: it expired ({1} ms after its last attachment went away, --input-ttl-ms) or never reached this server; its unacknowledged input was not applied by this attachment")]
    InputExpired(String, u128),
    /// The process has `--max-input-streams` input streams already.
    #[error("too many input streams for this process (limit {0}, --max-input-streams)")]
    TooManyInputStreams(usize),
    /// A numbered input that starts past where its stream stands: dropped.
    #[error("input at {got} is out of order: the stream stands at {expected}; dropped")]
    InputOutOfOrder {
        /// Where the stream stands.
        expected: u64,
        /// Where the dropped input started.
        got: u64,
    },
    /// Missing or wrong bearer token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// A scoped token past its expiry: ask for a new one.
    #[error("this token has expired")]
    TokenExpired,
    /// A scoped token whose process has been forgotten: it died with it.
    #[error("the process this token was for is gone; the token died with it")]
    TokenProcessGone,
    /// A valid scoped token used outside its one process, or for spawn,
    /// list or minting.
    #[error("{0}")]
    OutOfScope(String),
    /// A spawn asked for a `user` and the server cannot switch user (it
    /// does not run as root).
    #[error("{0}")]
    UserUnavailable(String),
    /// A valid scoped token without the right the request needs.
    #[error("this token lacks the {0} right")]
    MissingRight(&'static str),
    /// A `Host` that could be a rebound DNS name, without a token: use an
    /// IP address or `localhost`, or set `--token`.
    #[error("Host {0:?} is not an IP address or localhost; name hosts need --token (protection against DNS rebinding)")]
    ForbiddenHost(String),
    /// A browser request from an origin that is not allowed.
    #[error("origin {0:?} is not allowed (see --allow-origin)")]
    ForbiddenOrigin(String),
    /// The request body is larger than `--max-body-bytes`.
    #[error("request body too large (limit {0} bytes)")]
    BodyTooLarge(usize),
    /// The process already has its HTTP stdin budget queued (it is not
    /// reading): retry once it has read some.
    #[error("process {0} has {1} bytes of stdin queued over HTTP already (the limit); retry when it reads")]
    StdinBusy(String, usize),
    /// The request body did not arrive within `--body-timeout-ms`.
    #[error("request body did not arrive within {0} ms (--body-timeout-ms)")]
    BodyTimeout(u64),
    /// Every connection slot is busy (`--max-connections`): retry shortly.
    #[error("too many open connections (limit {0}, --max-connections)")]
    TooManyConnections(usize),
    /// The server is shutting down.
    #[error("server is shutting down")]
    ShuttingDown,
    /// The server is draining (SIGTERM with `--drain-grace-ms`): it serves
    /// its running processes but starts no new one. Retry, through a proxy
    /// that sends the spawn to another host.
    #[error("this host is draining and starts no new process; retry on another host")]
    Draining,
    /// The server is handing over to a new binary in place (issue 43):
    /// nothing ends; retry in a moment, on the same address.
    #[error("the server is restarting in place (a handover); retry in a moment")]
    Restarting,
    /// A `POST /v1/exec` whose process was still running when a handover
    /// began: the message says whether it was killed (`kill_on_disconnect`)
    /// or runs on, and where to wait for it.
    #[error("{0}")]
    ExecInterrupted(String),
    /// A handover was refused (its new binary failed the preflight, or
    /// one is under way): the server serves on, unchanged.
    #[error("handover refused: {0}")]
    UpgradeRefused(String),
    /// The process id names another host of the fleet (`--node`): the
    /// request reached the wrong server, a proxy misroutes.
    #[error("process {0:?} belongs to node {1:?}, not to this one")]
    WrongNode(String, String),
    /// A bug or an OS failure on the server side.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// HTTP status and stable error code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::InvalidRequest(_)
            | ApiError::UnknownSignal(_)
            | ApiError::BadTermSize(_)
            | ApiError::TerminalTooLarge { .. }
            | ApiError::NoTerminal(_)
            | ApiError::ReadOnly => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::LimitAboveMaximum(_) => (StatusCode::BAD_REQUEST, "limit_above_maximum"),
            ApiError::LimitsUnavailable(_) => (StatusCode::BAD_REQUEST, "limits_unavailable"),
            ApiError::NotFound(_) | ApiError::Forgotten(..) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::StillRunning(_) => (StatusCode::CONFLICT, "still_running"),
            ApiError::NameTaken(_) => (StatusCode::CONFLICT, "name_taken"),
            ApiError::NotRunning(_) => (StatusCode::CONFLICT, "not_running"),
            ApiError::SpawnFailed(_) => (StatusCode::UNPROCESSABLE_ENTITY, "spawn_failed"),
            ApiError::CannotExecute(_) => (StatusCode::UNPROCESSABLE_ENTITY, "cannot_execute"),
            ApiError::IdempotencyConflict(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_conflict")
            }
            ApiError::IdempotencyExhausted(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "idempotency_exhausted")
            }
            ApiError::StdinUnavailable(_) => (StatusCode::CONFLICT, "stdin_unavailable"),
            ApiError::TooManyProcesses(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "too_many_processes")
            }
            ApiError::RetentionExhausted(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "retention_exhausted")
            }
            ApiError::TooManyAttachments(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_attachments")
            }
            ApiError::InputExpired(..) => (StatusCode::CONFLICT, "input_expired"),
            ApiError::TooManyInputStreams(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_input_streams")
            }
            ApiError::InputOutOfOrder { .. } => (StatusCode::CONFLICT, "input_out_of_order"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::TokenExpired => (StatusCode::UNAUTHORIZED, "token_expired"),
            ApiError::TokenProcessGone => (StatusCode::UNAUTHORIZED, "token_process_gone"),
            ApiError::OutOfScope(_) => (StatusCode::FORBIDDEN, "out_of_scope"),
            ApiError::UserUnavailable(_) => (StatusCode::FORBIDDEN, "user_unavailable"),
            ApiError::MissingRight(_) => (StatusCode::FORBIDDEN, "missing_right"),
            ApiError::ForbiddenOrigin(_) => (StatusCode::FORBIDDEN, "forbidden_origin"),
            ApiError::ForbiddenHost(_) => (StatusCode::FORBIDDEN, "forbidden_host"),
            ApiError::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::StdinBusy(..) => (StatusCode::TOO_MANY_REQUESTS, "stdin_busy"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::TooManyConnections(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "too_many_connections")
            }
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            ApiError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
            ApiError::Restarting | ApiError::ExecInterrupted(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "restarting")
            }
            ApiError::UpgradeRefused(_) => (StatusCode::CONFLICT, "upgrade_refused"),
            ApiError::WrongNode(..) => (StatusCode::MISDIRECTED_REQUEST, "wrong_node"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The JSON error body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.status_and_code().1.to_string(),
                message: self.to_string(),
            },
        }
    }
}

impl From<crate::contain::limits::LimitError> for ApiError {
    fn from(error: crate::contain::limits::LimitError) -> ApiError {
        use crate::contain::limits::LimitError;
        match error {
            LimitError::Invalid(m) => ApiError::InvalidRequest(m),
            LimitError::AboveMaximum(m) => ApiError::LimitAboveMaximum(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut response = (status, Json(self.body())).into_response();
        response.headers_mut().insert(
            tether_protocol::api::ERROR_CODE_HEADER,
            axum::http::HeaderValue::from_static(code),
        );
        // A client's retry through a proxy lands on another host (draining)
        // or finds room (stdin, connections).
        if matches!(
            self,
            ApiError::Draining
                | ApiError::Restarting
                | ApiError::ExecInterrupted(_)
                | ApiError::StdinBusy(..)
                | ApiError::TooManyConnections(_)
        ) {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        // Refused before its body was read (or all of it): the server closes
        // the connection after answering, and says so, so that a client does
        // not send its next request on it.
        if matches!(self, ApiError::StdinBusy(..) | ApiError::BodyTooLarge(_)) {
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// Why an attachment ends early; each has an `error` frame code (and a
/// close code, in `attach::close`).
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The client sent a frame that does not decode.
    #[error(transparent)]
    Decode(#[from] tether_protocol::DecodeError),
    /// The client sent a text message; the protocol is binary only.
    #[error("text messages are not part of tether.v1; send binary MessagePack frames")]
    TextMessage,
    /// The client sent a message over `--max-frame-bytes`.
    #[error("message exceeds the maximum frame size of {0} bytes")]
    TooLarge(usize),
    /// The client's messages could not be read (a broken WebSocket).
    #[error("websocket error: {0}")]
    Socket(String),
    /// A Kubernetes client message that does not decode.
    #[error(transparent)]
    Kube(#[from] KubeError),
    /// The client sent more pings in a second than liveness needs.
    #[error("more than {0} pings in a second: pings are for liveness, not a stream")]
    PingFlood(u32),
}

impl AttachError {
    /// Error frame code.
    pub fn code(&self) -> &'static str {
        match self {
            AttachError::Decode(e) => e.code(),
            AttachError::TextMessage => "text_message",
            AttachError::TooLarge(_) => "frame_too_large",
            AttachError::PingFlood(_) => "ping_flood",
            AttachError::Socket(_) | AttachError::Kube(_) => "protocol_error",
        }
    }
}

impl ApiError {
    /// The Kubernetes `Status` reason for this error, for the routes under
    /// `/api` (`server/src/kube/`), whose clients read `Status` documents.
    pub fn kube_reason(&self) -> &'static str {
        match self.status_and_code().0 {
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::CONFLICT => "Conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
            StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
            StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
            _ => "InternalError",
        }
    }
}

/// What goes wrong on the Kubernetes exec and attach routes
/// (`server/src/kube/`): before the upgrade an HTTP `Status` response,
/// after it a `Failure` status on channel 3 and a close code.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The client offered none of the subprotocols tetherd speaks.
    #[error("none of the offered WebSocket subprotocols ({0:?}) is spoken here; offer v5.channel.k8s.io, v4.channel.k8s.io, v4.base64.channel.k8s.io or channel.k8s.io")]
    NoSubprotocol(String),
    /// The request is not a WebSocket upgrade (SPDY is not served).
    #[error("{0}")]
    NotUpgrade(String),
    /// The query string is invalid (no command, no stream).
    #[error("{0}")]
    InvalidQuery(String),
    /// A method other than GET (SPDY's POST is not served).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A client message that does not decode (bad base64, channel byte,
    /// close message or resize JSON).
    #[error("{0}")]
    Malformed(String),
    /// A message over `--max-frame-bytes`.
    #[error("message exceeds the maximum frame size of {0} bytes")]
    TooLarge(usize),
    /// The same failure as on `/v1`.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl KubeError {
    /// HTTP status and Kubernetes `Status` reason, before the upgrade.
    pub fn status_and_reason(&self) -> (StatusCode, &'static str) {
        match self {
            KubeError::NoSubprotocol(_)
            | KubeError::NotUpgrade(_)
            | KubeError::InvalidQuery(_)
            | KubeError::Malformed(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            KubeError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            KubeError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            KubeError::Api(e) => (e.status_and_code().0, e.kube_reason()),
        }
    }
}
