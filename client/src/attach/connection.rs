//! The connection task: it owns the WebSocket, opens it from the saved
//! offsets, moves server frames into the shared state and commands and
//! credit out to the server, and resumes when the connection drops.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tether_protocol::{ClientFrame, ProcessInfo, ServerFrame, StreamName};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::handshake::{open, Ws};
use super::input::Command;
use super::options::AttachOptions;
use super::outbox::Outbox;
use super::state::{Applied, Shared};
use crate::base_url::path_segment;
use crate::client::Client;
use crate::error::{Error, Result, TransportKind};
use crate::retry::Backoff;

/// How one connection ended.
enum Outcome {
    /// The exit frame arrived.
    Exited,
    /// Every handle was dropped.
    Cancelled,
    /// The connection broke; resume.
    Lost(Error),
    /// Unrecoverable.
    Fatal(Error),
}

/// The connection task's own state: what it needs to open (and reopen)
/// the WebSocket, and what it must remember across connections.
pub(crate) struct Conn {
    client: Client,
    /// The process; empty until the `hello` of a [`Conn::open_run`].
    id: String,
    /// For [`Conn::open_run`], until its first connection: the spawn
    /// request (JSON) and the idempotency key that makes a retried first
    /// connection attach to the process a lost answer started.
    run: Option<(String, String)>,
    options: AttachOptions,
    shared: Arc<Shared>,
    /// An `stdin_eof` was handed to a connection that then broke.
    eof_in_doubt: bool,
    /// An `stdin_eof` has been sent.
    eof_sent: bool,
    /// The process runs on a PTY.
    tty: bool,
    /// The `wait` long-poll, once started (see [`Conn::watch_exit`]).
    exit_poll: Option<tokio::task::JoinHandle<()>>,
    /// The input stream's id, when input is numbered (`input=ID`).
    input: Option<String>,
    /// Numbered input the server has not acknowledged yet.
    outbox: Outbox,
}

impl Conn {
    /// Opens the first connection, retrying transient failures within
    /// `options.first_connect` (else `options.reconnect`).
    pub async fn open(
        client: Client,
        id: &str,
        options: AttachOptions,
        shared: Arc<Shared>,
    ) -> Result<(Conn, Ws, ProcessInfo)> {
        Conn::open_first(client, id.to_string(), None, options, shared).await
    }

    /// Spawns `request` (JSON) and attaches in one WebSocket (`GET
    /// /v1/run`); later connections attach by the id `hello` gave.
    pub async fn open_run(
        client: Client,
        request: String,
        options: AttachOptions,
        shared: Arc<Shared>,
    ) -> Result<(Conn, Ws, ProcessInfo)> {
        let key = uuid::Uuid::new_v4().to_string();
        Conn::open_first(client, String::new(), Some((request, key)), options, shared).await
    }

    async fn open_first(
        client: Client,
        id: String,
        run: Option<(String, String)>,
        options: AttachOptions,
        shared: Arc<Shared>,
    ) -> Result<(Conn, Ws, ProcessInfo)> {
        let mut conn = Conn {
            client,
            id,
            run,
            options,
            shared,
            eof_in_doubt: false,
            eof_sent: false,
            tty: false,
            exit_poll: None,
            input: None,
            outbox: Outbox::default(),
        };
        if conn.options.numbered_input && !conn.options.readonly {
            conn.input = Some(uuid::Uuid::new_v4().simple().to_string());
        }
        let policy = conn.options.first_connect.unwrap_or(conn.options.reconnect);
        let mut backoff = conn.client.backoff(policy);
        let (ws, process) = loop {
            match conn.connect().await {
                Ok(pair) => break pair,
                Err(e) => backoff.failed(e).await?,
            }
        };
        conn.shared.learn(&process);
        conn.tty = process.tty;
        Ok((conn, ws, process))
    }

    /// Opens a connection from the saved offsets. The credit window of the
    /// new connection is sized so that, with what is still queued, each
    /// stream's buffer stays within `window` bytes: the server counts the
    /// window afresh from each attach.
    async fn connect(&mut self) -> Result<(Ws, ProcessInfo)> {
        let (offsets, conn_window) = self.shared.connection_start();
        let mut url = match &self.run {
            Some((request, _)) => self
                .client
                .ws_url(&format!("/v1/run?{}", run_query(request, conn_window)?)),
            None => self.client.ws_url(&format!(
                "/v1/processes/{}/attach?stdout={}&stderr={}&window={}",
                path_segment(&self.id),
                offsets[0],
                offsets[1],
                conn_window
            )),
        };
        if self.options.readonly {
            url.push_str("&readonly=1");
        }
        if let Some(input) = &self.input {
            url.push_str(&format!("&input={input}"));
            if self.outbox.started() {
                url.push_str("&input_resume=1");
            }
        }
        // The screen on the first connection; on a resume only if the
        // saved offset was evicted (otherwise the bytes from it, as usual).
        let first = self.shared.connections.load(Ordering::Relaxed) == 0;
        if self.options.screen {
            url.push_str(if first {
                "&screen=1"
            } else {
                "&screen=evicted"
            });
        }
        let key = self.run.as_ref().map(|(_, key)| key.as_str());
        let fut = open(
            &url,
            self.client.token(),
            self.client.ws_connector(),
            key,
            self.input.is_some(),
            self.options.max_message_bytes,
        );
        let (mut ws, process, hello_stdout, applied) =
            match tokio::time::timeout(self.options.connect_timeout, fut).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::Transport {
                        url,
                        message: "attach timed out".into(),
                        kind: TransportKind::Timeout,
                    })
                }
            }
            .check_offsets(offsets, self.options.screen)?;
        if self.options.screen {
            // With a screen, stdout starts at the screen's offset, which
            // the hello announces (`screen=evicted` moves it only when it
            // sends one); the screen frame comes next.
            self.shared
                .stdout_starts_at(hello_stdout, first || hello_stdout != offsets[0]);
        }
        if self.run.take().is_some() {
            self.id = process.id.clone();
        }
        if let Some(applied) = applied {
            self.outbox.acknowledge(applied);
        }
        // Grant at once the credit that sizes each stream's allowance.
        self.grant(&mut ws, true).await?;
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        Ok((ws, process))
    }

    /// Sends the credit due on each stream, when a grant is wanted (or
    /// whatever is due, with `force`).
    async fn grant(&mut self, ws: &mut Ws, force: bool) -> Result<()> {
        for stream in StreamName::ALL {
            let Some(bytes) = self.shared.take_grant(stream, force) else {
                continue;
            };
            send(ws, ClientFrame::Credit { stream, bytes }).await?;
        }
        Ok(())
    }

    pub async fn run(
        mut self,
        ws: Ws,
        mut commands: mpsc::Receiver<Command>,
        cancel: CancellationToken,
    ) {
        let mut ws = Some(ws);
        let mut backoff = Backoff::new(self.options.reconnect);
        loop {
            let Some(mut current) = ws.take() else {
                if self.shared.complete() {
                    break;
                }
                let attempt = tokio::select! {
                    _ = cancel.cancelled() => break,
                    attempt = self.connect() => attempt,
                };
                match attempt {
                    Ok((socket, process)) => {
                        self.shared.learn(&process);
                        ws = Some(socket);
                    }
                    Err(e) => {
                        if e.is_not_found() {
                            self.shared.fail(e);
                            break;
                        }
                        let retry = tokio::select! {
                            _ = cancel.cancelled() => break,
                            retry = backoff.failed(e) => retry,
                        };
                        if let Err(e) = retry {
                            self.shared.fail(e);
                            break;
                        }
                    }
                }
                continue;
            };
            let started = Instant::now();
            let (outcome, progressed) = self.session(&mut current, &mut commands, &cancel).await;
            match outcome {
                Outcome::Exited | Outcome::Cancelled => {
                    close(current).await;
                    break;
                }
                Outcome::Fatal(e) => {
                    self.shared.fail(e);
                    break;
                }
                Outcome::Lost(e) => {
                    drop(current);
                    if progressed || started.elapsed() > Duration::from_secs(1) {
                        backoff.reset();
                    }
                    let retry = tokio::select! {
                        _ = cancel.cancelled() => break,
                        retry = backoff.failed(e) => retry,
                    };
                    if let Err(e) = retry {
                        self.shared.fail(e);
                        break;
                    }
                }
            }
        }
        if let Some(poll) = self.exit_poll.take() {
            poll.abort();
        }
        // Whatever happened, nobody waits forever.
        self.shared
            .fail(Error::Closed("the attachment was dropped".into()));
    }

    /// Serves one connection. Returns how it ended and whether any frame
    /// arrived.
    async fn session(
        &mut self,
        ws: &mut Ws,
        commands: &mut mpsc::Receiver<Command>,
        cancel: &CancellationToken,
    ) -> (Outcome, bool) {
        let mut progressed = false;
        let mut commands_open = true;
        // A lost `stdin_eof` would leave the process waiting for input
        // forever. On pipes closing twice is harmless (the server answers
        // the second with a non-fatal error), so it is repeated on every
        // resume; on a PTY it types ^D, so only when its sending failed.
        if self.input.is_some() {
            // Only what the server has not applied (it said where it stands
            // right after hello); it drops anything it has seen anyway.
            let frames: Vec<ClientFrame> = self.outbox.unacknowledged().collect();
            for frame in frames {
                if let Err(e) = send(ws, frame).await {
                    return (Outcome::Lost(e), progressed);
                }
            }
        } else if self.eof_in_doubt || (self.eof_sent && !self.tty) {
            match send(ws, ClientFrame::StdinEof).await {
                Ok(()) => self.eof_in_doubt = false,
                Err(e) => return (Outcome::Lost(e), progressed),
            }
        }
        let idle = self.options.idle_timeout;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return (Outcome::Cancelled, progressed),
                message = tokio::time::timeout(idle, ws.next()) => {
                    let message = match message {
                        Err(_) => return (Outcome::Lost(self.lost(format!("no message for {idle:?}"))), progressed),
                        Ok(None) => return (Outcome::Lost(self.lost("connection closed".into())), progressed),
                        Ok(Some(Err(e))) => return (Outcome::Lost(self.lost(e.to_string())), progressed),
                        Ok(Some(Ok(message))) => message,
                    };
                    match message {
                        Message::Binary(bytes) => {
                            progressed = true;
                            let frame = ServerFrame::decode(&bytes);
                            if let Ok(ServerFrame::InputAck { applied }) = frame {
                                self.outbox.acknowledge(applied);
                                continue;
                            }
                            let applied = frame
                                .map_err(|e| Error::Protocol(format!("bad frame from the server: {e}")))
                                .and_then(|frame| self.shared.apply(frame));
                            match applied {
                                Ok(Applied::Exited) => return (Outcome::Exited, progressed),
                                Ok(Applied::More) => self.watch_exit(),
                                Err(e) => return (Outcome::Fatal(e), progressed),
                            }
                            if let Err(e) = self.grant(ws, false).await {
                                return (Outcome::Lost(e), progressed);
                            }
                        }
                        Message::Close(frame) => {
                            let code = frame.as_ref().map(|f| f.code);
                            return match code {
                                // 1012: the server restarts (a handover);
                                // 1013: try again later. Both resume.
                                Some(CloseCode::Normal | CloseCode::Away | CloseCode::Restart | CloseCode::Again) | None => {
                                    (Outcome::Lost(self.lost(format!("server closed the connection ({code:?})"))), progressed)
                                }
                                Some(other) => {
                                    let detail = self
                                        .shared
                                        .rejection()
                                        .map(|(c, m)| format!("{c}: {m}"))
                                        .unwrap_or_else(|| "no error frame".into());
                                    (Outcome::Fatal(Error::Protocol(format!(
                                        "server closed the attachment with code {} ({detail})",
                                        u16::from(other)
                                    ))), progressed)
                                }
                            };
                        }
                        Message::Text(_) => {
                            return (Outcome::Fatal(Error::Protocol(
                                "the server sent a text message: tether.v1 is binary MessagePack only".into(),
                            )), progressed);
                        }
                        _ => {}
                    }
                }
                // Numbered input waits while the unacknowledged bound is reached.
                command = commands.recv(), if commands_open && (self.input.is_none() || self.outbox.has_room()) => {
                    let Some(command) = command else {
                        commands_open = false;
                        continue;
                    };
                    let is_eof = matches!(command, Command::Eof);
                    let frame = match self.input {
                        Some(_) => self.outbox.push(command),
                        None => command.into_frame(),
                    };
                    if let Err(e) = send(ws, frame).await {
                        self.eof_in_doubt |= is_eof;
                        return (Outcome::Lost(e), progressed);
                    }
                    self.eof_sent |= is_eof;
                }
                _ = self.shared.credit.notified() => {
                    if let Err(e) = self.grant(ws, false).await {
                        return (Outcome::Lost(e), progressed);
                    }
                }
            }
        }
    }

    /// Starts the `wait` long-poll once a stream has used up its credit.
    /// Only then can the server be holding the exit frame back (it comes
    /// after the last byte of both streams): the exit and the final totals
    /// then still reach the handles, so the reader of the other stream
    /// ends at its end, and the exit resolves, while this stream waits
    /// unread. An attachment whose output flows freely makes no request
    /// besides its WebSocket.
    fn watch_exit(&mut self) {
        if self.exit_poll.is_none() && self.shared.held_back.load(Ordering::Relaxed) {
            self.exit_poll = Some(tokio::spawn(poll_exit(
                self.client.clone(),
                self.id.clone(),
                self.shared.clone(),
            )));
        }
    }

    fn lost(&self, message: String) -> Error {
        Error::Transport {
            url: format!("{}/v1/processes/{}/attach", self.client.base_url(), self.id),
            message,
            kind: TransportKind::Connection,
        }
    }
}

/// The query of `GET /v1/run`: the spawn request (JSON) and the window,
/// URL-encoded.
pub(crate) fn run_query(request: &str, window: u64) -> Result<String> {
    let mut url =
        reqwest::Url::parse("http://run/").map_err(|e| Error::InvalidArgument(e.to_string()))?;
    url.query_pairs_mut()
        .append_pair("request", request)
        .append_pair("window", &window.to_string());
    Ok(url.query().unwrap_or_default().to_string())
}

/// Long-polls `wait` so readers learn the final totals even while the exit
/// frame waits for output nobody reads.
async fn poll_exit(client: Client, id: String, shared: Arc<Shared>) {
    if let Ok(info) = client.wait(&id).await {
        shared.learn(&info);
    }
}

async fn send(ws: &mut Ws, frame: ClientFrame) -> Result<()> {
    ws.send(Message::Binary(frame.encode().into()))
        .await
        .map_err(|e| Error::Transport {
            url: String::new(),
            message: format!("sending to the attachment failed: {e}"),
            kind: TransportKind::Connection,
        })
}

/// Completes the close handshake, bounded.
async fn close(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = ws.close(None).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}
