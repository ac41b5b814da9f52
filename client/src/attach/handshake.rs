//! Opening one connection of an attachment: the upgrade (token, a run's
//! `Idempotency-Key`), the subprotocol check, `hello` and, with numbered
//! input, the `input_ack` that follows it.

use futures_util::StreamExt;
use tether_protocol::{ProcessInfo, ServerFrame, SUBPROTOCOL};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::error::{Error, Result, TransportKind};

/// The WebSocket read buffer. tungstenite zero-fills this much before every
/// socket read, even one that finds nothing; its 128 KiB default cost a few
/// microseconds per keystroke echo. Larger frames still arrive whole (the
/// buffer grows for them), as the server's does (it uses the same size).
const READ_BUFFER: usize = 8 << 10;

/// The most the WebSocket's write buffer may hold. tungstenite queues the
/// pong of every ping it reads and, unbounded (its default), a server that
/// floods pings and never reads grows it without end (194 MiB in 5 s).
/// The client's own frames are small (stdin in 64 KiB frames, credit) and
/// are flushed before the buffer passes its 128 KiB write size, so this
/// bound is only ever reached by pongs: past it tungstenite keeps the
/// newest pong alone, as RFC 6455 allows.
const MAX_WRITE_BUFFER: usize = 1 << 20;

/// One connection's WebSocket.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The result of opening an attachment: the socket and its hello.
pub(crate) struct Opened {
    ws: Ws,
    process: ProcessInfo,
    offsets: [u64; 2],
    /// With numbered input: where the input stream stands.
    applied: Option<u64>,
}

impl Opened {
    /// Checks that the server starts where it was asked to: both offsets,
    /// or with `screen` stderr (stdout starts at the screen's offset, which
    /// the screen frame confirms). Returns the hello's stdout offset too.
    pub(crate) fn check_offsets(
        self,
        wanted: [u64; 2],
        screen: bool,
    ) -> Result<(Ws, ProcessInfo, u64, Option<u64>)> {
        let matches = if screen {
            self.offsets[1] == wanted[1]
        } else {
            self.offsets == wanted
        };
        if !matches {
            return Err(Error::Protocol(format!(
                "the server resumed at offsets {:?}, asked for {:?}",
                self.offsets, wanted
            )));
        }
        Ok((self.ws, self.process, self.offsets[0], self.applied))
    }
}

/// Connects, checks the subprotocol and reads `hello` (and, with
/// `numbered` input, the `input_ack` that follows it).
pub(crate) async fn open(
    url: &str,
    token: Option<&str>,
    connector: Connector,
    idempotency_key: Option<&str>,
    numbered: bool,
    max_message: usize,
) -> Result<Opened> {
    let mut request = url
        .into_client_request()
        .map_err(|e| Error::InvalidArgument(format!("bad attach URL {url}: {e}")))?;
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        SUBPROTOCOL
            .parse()
            .map_err(|_| Error::InvalidArgument("bad subprotocol".into()))?,
    );
    if let Some(key) = idempotency_key {
        headers.insert(
            "Idempotency-Key",
            key.parse()
                .map_err(|_| Error::InvalidArgument("bad idempotency key".into()))?,
        );
    }
    if let Some(token) = token {
        headers.insert(
            "Authorization",
            format!("Bearer {token}").parse().map_err(|_| {
                Error::InvalidArgument("the token is not a valid header value".into())
            })?,
        );
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_write_buffer_size(MAX_WRITE_BUFFER)
        // tungstenite holds a message's fragments until its end: this
        // bounds what an endless fragmented message costs (at its default,
        // 64 MiB, such a message cost 70 MiB).
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    // TCP_NODELAY: a keystroke typed while the previous one is unacknowledged
    // would otherwise wait for the server's delayed ACK (up to 40 ms).
    let (ws, response) = match tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(config),
        true,
        Some(connector),
    )
    .await
    {
        Ok(pair) => pair,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let code = response
                .headers()
                .get(tether_protocol::api::ERROR_CODE_HEADER)
                .and_then(|v| v.to_str().ok());
            let body = response.body().as_deref().unwrap_or_default();
            return Err(Error::from_response(status, code, body));
        }
        // The OS's words ("Connection refused (os error 111)"), as an
        // HTTP call reports them.
        Err(tokio_tungstenite::tungstenite::Error::Io(e)) => {
            return Err(Error::Transport {
                url: url.to_string(),
                message: e.to_string(),
                kind: TransportKind::of(&e),
            })
        }
        Err(tokio_tungstenite::tungstenite::Error::Tls(e)) => {
            return Err(Error::Transport {
                url: url.to_string(),
                message: e.to_string(),
                kind: TransportKind::Tls,
            })
        }
        Err(e) => {
            return Err(Error::Transport {
                url: url.to_string(),
                message: e.to_string(),
                kind: TransportKind::of(&e),
            })
        }
    };
    if let Some(protocol) = response.headers().get("sec-websocket-protocol") {
        if protocol.as_bytes() != SUBPROTOCOL.as_bytes() {
            return Err(Error::Protocol(format!(
                "server chose subprotocol {protocol:?}, not {SUBPROTOCOL}"
            )));
        }
    }
    let (ws, process, offsets) = read_hello(ws, url).await?;
    let mut opened = Opened {
        ws,
        process,
        offsets,
        applied: None,
    };
    if numbered {
        opened.applied = Some(read_input_ack(&mut opened.ws, url).await?);
    }
    Ok(opened)
}

/// The next binary message, or why there is none.
async fn next_binary(ws: &mut Ws, url: &str, expected: &str) -> Result<Vec<u8>> {
    loop {
        let message = match ws.next().await {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: e.to_string(),
                    kind: TransportKind::Connection,
                })
            }
            None => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: format!("closed before {expected}"),
                    kind: TransportKind::Connection,
                })
            }
        };
        match message {
            Message::Binary(bytes) => return Ok(bytes.to_vec()),
            Message::Text(_) => {
                return Err(Error::Protocol(format!(
                    "the server sent a text message before {expected}: tether.v1 is binary MessagePack only"
                )))
            }
            Message::Close(_) => {
                return Err(Error::Transport {
                    url: url.to_string(),
                    message: format!("closed before {expected}"),
                    kind: TransportKind::Connection,
                })
            }
            _ => continue,
        }
    }
}

/// Reads the `input_ack` the server sends right after `hello` to an
/// attachment with numbered input.
async fn read_input_ack(ws: &mut Ws, url: &str) -> Result<u64> {
    let bytes = next_binary(ws, url, "input_ack").await?;
    match ServerFrame::decode(&bytes) {
        Ok(ServerFrame::InputAck { applied }) => Ok(applied),
        // The server refuses a resume of a stream it no longer knows after
        // the upgrade (so that browsers learn it too): the same error as a
        // refused upgrade would be, so that callers match on its code.
        Ok(ServerFrame::Error { code, message }) if code == "input_expired" => Err(Error::Http {
            status: 409,
            code,
            message,
        }),
        Ok(ServerFrame::Error { code, message }) => Err(Error::Protocol(format!(
            "attach refused: {code}: {message}"
        ))),
        Ok(other) => Err(Error::Protocol(format!(
            "expected input_ack after hello (numbered input), got a {} frame",
            other.kind()
        ))),
        Err(e) => Err(Error::Protocol(format!("bad input_ack frame: {e}"))),
    }
}

/// Reads `hello`.
async fn read_hello(mut ws: Ws, url: &str) -> Result<(Ws, ProcessInfo, [u64; 2])> {
    let bytes = next_binary(&mut ws, url, "hello").await?;
    match ServerFrame::decode(&bytes) {
        Ok(ServerFrame::Hello {
            process,
            stdout,
            stderr,
            ..
        }) => Ok((ws, process, [stdout, stderr])),
        Ok(ServerFrame::Error { code, message }) => Err(Error::Protocol(format!(
            "attach refused: {code}: {message}"
        ))),
        Ok(other) => Err(Error::Protocol(format!(
            "expected hello, got a {} frame",
            other.kind()
        ))),
        Err(e) => Err(Error::Protocol(format!("bad hello frame: {e}"))),
    }
}
