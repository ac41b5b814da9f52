//! `Attachment`, a small `tether.v1` WebSocket client for tests, and what
//! it received.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ProcessInfo, ServerFrame, StreamName};
use tokio::net::TcpStream;
use tokio::time::error::Elapsed;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::WAIT;

/// Everything an attachment received until the exit frame.
#[derive(Debug, Default)]
pub struct Received {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// (stream, offset, length) of every `dropped` frame.
    pub dropped: Vec<(StreamName, u64, u64)>,
    pub exit: Option<ProcessInfo>,
}

/// A `tether.v1` WebSocket client for tests.
pub struct Attachment {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The process object and offsets of the `hello` frame.
    pub hello: (ProcessInfo, u64, u64),
    /// The `Sec-WebSocket-Protocol` the server answered with.
    pub protocol: Option<String>,
    /// Next expected offset per stream (checks contiguity).
    pub next: [u64; 2],
}

impl Attachment {
    /// Connects, offering `tether.v1`, and reads the hello frame.
    pub async fn connect(url: &str) -> Attachment {
        Attachment::connect_offering(url, "tether.v1").await
    }

    /// Connects offering these subprotocols (such as
    /// `tether.v1, tether.bearer.TOKEN`), and reads the hello frame.
    pub async fn connect_offering(url: &str, protocols: &str) -> Attachment {
        let mut request = url.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
        let (ws, response) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("connect timed out")
            .expect("connect failed");
        let protocol = response
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap().to_string());
        let mut attachment = Attachment {
            ws,
            hello: (placeholder(), 0, 0),
            protocol,
            next: [0, 0],
        };
        match attachment.frame().await {
            Some(ServerFrame::Hello {
                process,
                stdout,
                stderr,
                ..
            }) => {
                attachment.hello = (process, stdout, stderr);
                attachment.next = [stdout, stderr];
            }
            other => panic!("expected hello, got {other:?}"),
        }
        attachment
    }

    /// The next frame (None when the server closed), bounded by [`WAIT`]
    /// in all: the server's pings do not extend it.
    pub async fn frame(&mut self) -> Option<ServerFrame> {
        self.frame_within_bound()
            .await
            .expect("no frame within the bound")
    }

    /// The next frame (`Ok(None)` when the server closed), or `Err` when
    /// none came within [`WAIT`].
    async fn frame_within_bound(&mut self) -> Result<Option<ServerFrame>, Elapsed> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let Some(message) = tokio::time::timeout_at(deadline, self.ws.next()).await? else {
                return Ok(None);
            };
            match message {
                Ok(Message::Binary(bytes)) => {
                    return Ok(Some(
                        ServerFrame::decode(&bytes).expect("server sent a bad frame"),
                    ))
                }
                Ok(Message::Close(_)) | Err(_) => return Ok(None),
                Ok(_) => continue,
            }
        }
    }

    /// The next frame or the close code, whichever comes first.
    pub async fn frame_or_close(&mut self) -> Result<ServerFrame, Option<u16>> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let message = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("no frame within the bound");
            match message {
                Some(Ok(Message::Binary(bytes))) => {
                    return Ok(ServerFrame::decode(&bytes).expect("server sent a bad frame"))
                }
                Some(Ok(Message::Close(frame))) => {
                    return Err(frame.map(|f: CloseFrame| u16::from(f.code)))
                }
                Some(Ok(_)) => continue,
                _ => return Err(None),
            }
        }
    }

    /// Sends a client frame.
    pub async fn send(&mut self, frame: ClientFrame) {
        self.ws
            .send(Message::Binary(frame.encode().into()))
            .await
            .unwrap();
    }

    /// Grants credit.
    pub async fn credit(&mut self, stream: StreamName, bytes: u64) {
        self.send(ClientFrame::Credit { stream, bytes }).await;
    }

    /// Records a frame into `received`, checking offsets are contiguous.
    /// Returns true for the exit frame.
    pub fn record(&mut self, frame: ServerFrame, received: &mut Received) -> bool {
        match frame {
            ServerFrame::Stdout { offset, data } => {
                assert_eq!(offset, self.next[0], "stdout offsets must be contiguous");
                self.next[0] += data.len() as u64;
                received.stdout.extend_from_slice(&data);
            }
            ServerFrame::Stderr { offset, data } => {
                assert_eq!(offset, self.next[1], "stderr offsets must be contiguous");
                self.next[1] += data.len() as u64;
                received.stderr.extend_from_slice(&data);
            }
            ServerFrame::Dropped {
                stream,
                offset,
                length,
            } => {
                assert_eq!(
                    offset,
                    self.next[stream.index()],
                    "dropped range starts at the cursor"
                );
                self.next[stream.index()] += length;
                received.dropped.push((stream, offset, length));
            }
            ServerFrame::Exit { process } => {
                received.exit = Some(process);
                return true;
            }
            ServerFrame::Error { code, message } => panic!("error frame {code}: {message}"),
            ServerFrame::Hello { .. } => panic!("second hello"),
            ServerFrame::Screen { .. } => panic!("a screen frame after the first frames"),
            // Numbered input's acknowledgements (attach with `input=`).
            ServerFrame::InputAck { .. } => {}
        }
        false
    }

    /// Reads every frame until the exit frame.
    pub async fn until_exit(&mut self) -> Received {
        let mut received = Received::default();
        loop {
            let frame = self.frame().await.expect("closed before the exit frame");
            if self.record(frame, &mut received) {
                return received;
            }
        }
    }

    /// Reads frames until stdout contains `needle`, recording them into
    /// `received`.
    pub async fn until_stdout_contains(&mut self, needle: &str, received: &mut Received) {
        self.until_stdout_contains_from(0, needle, received).await
    }

    /// Reads frames until stdout from byte `from` on contains `needle`,
    /// recording them into `received`. A failure says what came.
    pub async fn until_stdout_contains_from(
        &mut self,
        from: usize,
        needle: &str,
        received: &mut Received,
    ) {
        let seen = |received: &Received| {
            String::from_utf8_lossy(received.stdout.get(from..).unwrap_or_default()).into_owned()
        };
        while !seen(received).contains(needle) {
            let frame = match self.frame_within_bound().await {
                Ok(Some(frame)) => frame,
                Ok(None) => panic!("closed before {needle:?} arrived: {:?}", seen(received)),
                Err(_) => panic!(
                    "no frame within the bound, waiting for {needle:?}; stdout since byte {from}: {:?}",
                    seen(received)
                ),
            };
            assert!(
                !self.record(frame, received),
                "exited before {needle:?} arrived: {:?}",
                seen(received)
            );
        }
    }
}

fn placeholder() -> ProcessInfo {
    serde_json::from_value(json!({
        "id": "", "pid": 0, "argv": [], "tty": false, "overflow": "drop", "status": "running",
        "started_at": "", "exit_code": null, "signal": null, "reason": null, "finished_at": null,
        "duration_ms": null, "stdout_bytes": 0, "stderr_bytes": 0, "output_incomplete": false
    }))
    .unwrap()
}

/// Tries to attach and expects a refusal before the upgrade: returns the
/// HTTP status and JSON body of the refusal.
pub async fn refused_attach(url: &str) -> (u16, Value) {
    use tokio_tungstenite::tungstenite::Error;
    match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("attach timed out")
    {
        Err(Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_ref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            (status, body)
        }
        Err(other) => panic!("attach failed without an HTTP answer: {other}"),
        Ok(_) => panic!("attach to {url} was accepted; expected a refusal"),
    }
}
