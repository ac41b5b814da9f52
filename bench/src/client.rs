//! A minimal `tether.v1` client: the HTTP calls the benchmarks need and a
//! WebSocket attachment that decodes frames with tether-protocol.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tether_protocol::api::SpawnRequest;
use tether_protocol::{ClientFrame, ProcessInfo, ServerFrame, StreamName, SUBPROTOCOL};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The measuring client's WebSocket read buffer. tungstenite zero-fills
/// this much before every socket read (including one that finds nothing),
/// so a large one is the instrument's own cost: 256 KiB added 12-29 us to
/// every measured echo with the client on the server's core. Frames larger
/// than this still arrive whole (the buffer grows); the throughput runs
/// did not change.
pub const READ_BUFFER: usize = 8 << 10;

/// The HTTP side of the API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str) -> Result<Api> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(120))
            .build()?;
        Ok(Api {
            base: base.to_string(),
            http,
        })
    }

    /// POST /v1/processes; errors unless 201.
    pub async fn spawn(&self, request: &SpawnRequest) -> Result<ProcessInfo> {
        let response = self
            .http
            .post(format!("{}/v1/processes", self.base))
            .json(request)
            .send()
            .await
            .context("POST /v1/processes")?;
        let status = response.status();
        if status.as_u16() != 201 {
            let body = response.text().await.unwrap_or_default();
            bail!("spawn failed: {status} {body}");
        }
        Ok(response.json().await?)
    }

    /// GET /v1/processes/{id}/wait?timeout_ms=N.
    pub async fn wait(&self, id: &str, timeout_ms: u64) -> Result<ProcessInfo> {
        let response = self
            .http
            .get(format!(
                "{}/v1/processes/{id}/wait?timeout_ms={timeout_ms}",
                self.base
            ))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("wait failed: {}", response.status());
        }
        Ok(response.json().await?)
    }

    /// Long-polls until exited, bounded by `bound`.
    pub async fn wait_exit(&self, id: &str, bound: Duration) -> Result<ProcessInfo> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let info = self.wait(id, 5000).await?;
            if info.is_exited() {
                return Ok(info);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("process {id} did not exit within {bound:?}");
            }
        }
    }

    /// Every process, following the pages (`tether-next-after`) of
    /// GET /v1/processes (at most 1000 a page).
    pub async fn list(&self) -> Result<Vec<ProcessInfo>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        // Bounded: a million processes at 1000 a page.
        for _ in 0..1000 {
            let mut url = format!("{}/v1/processes?limit=1000", self.base);
            if let Some(id) = &after {
                url.push_str(&format!("&after={id}"));
            }
            let response = self.http.get(url).send().await?;
            let next = response
                .headers()
                .get("tether-next-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let page: Vec<ProcessInfo> = response.json().await?;
            all.extend(page);
            match next {
                Some(id) => after = Some(id),
                None => return Ok(all),
            }
        }
        bail!("more than 1000 pages of processes")
    }

    /// DELETE /v1/processes/{id}?force=1 (kills it first if running).
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.http
            .delete(format!("{}/v1/processes/{id}?force=1", self.base))
            .send()
            .await?;
        Ok(())
    }

    /// `ws://.../v1/processes/{id}/attach?QUERY`.
    pub fn attach_url(&self, id: &str, query: &str) -> String {
        format!(
            "{}/v1/processes/{id}/attach?{query}",
            self.base.replacen("http://", "ws://", 1)
        )
    }

    /// Attaches and reads the `hello` frame.
    pub async fn attach(&self, id: &str, query: &str) -> Result<Conn> {
        Conn::connect(&self.attach_url(id, query)).await
    }

    /// Spawns and attaches in one WebSocket (`GET /v1/run`); `hello`
    /// carries the new process.
    pub async fn run(&self, request: &SpawnRequest) -> Result<Conn> {
        let mut url = reqwest::Url::parse(&format!("{}/v1/run", self.base))?;
        url.query_pairs_mut()
            .append_pair("request", &serde_json::to_string(request)?);
        let url = url.as_str().replacen("http://", "ws://", 1);
        Conn::connect(&url).await
    }
}

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One attachment.
pub struct Conn {
    pub ws: Ws,
    /// The process object and start offsets of `hello`.
    pub hello: (ProcessInfo, u64, u64),
}

impl Conn {
    pub async fn connect(url: &str) -> Result<Conn> {
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_static(SUBPROTOCOL),
        );
        let config = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .max_message_size(Some(64 << 20));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
            .await
            .with_context(|| format!("attach {url}"))?;
        let mut conn = Conn {
            ws,
            hello: (empty_info(), 0, 0),
        };
        match conn.next().await? {
            Some(ServerFrame::Hello {
                process,
                stdout,
                stderr,
                ..
            }) => conn.hello = (process, stdout, stderr),
            other => bail!("expected hello, got {other:?}"),
        }
        Ok(conn)
    }

    /// The next server frame; `None` once the server closed.
    pub async fn next(&mut self) -> Result<Option<ServerFrame>> {
        // Bounded: pings and pongs are skipped, at most this many in a row.
        for _ in 0..1_000_000 {
            match self.ws.next().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Message::Binary(bytes))) => return Ok(Some(ServerFrame::decode(&bytes)?)),
                Some(Ok(Message::Close(_))) => return Ok(None),
                Some(Ok(Message::Text(_))) => bail!("server sent a text message"),
                Some(Ok(_)) => continue,
            }
        }
        Err(anyhow!("no data frame in a million control frames"))
    }

    /// The next frame within `bound`, or an error.
    pub async fn next_within(&mut self, bound: Duration) -> Result<ServerFrame> {
        match tokio::time::timeout(bound, self.next()).await {
            Ok(Ok(Some(frame))) => Ok(frame),
            Ok(Ok(None)) => bail!("attachment closed"),
            Ok(Err(e)) => Err(e),
            Err(_) => bail!("no frame within {bound:?}"),
        }
    }

    pub async fn send(&mut self, frame: &ClientFrame) -> Result<()> {
        self.ws.send(Message::Binary(frame.encode().into())).await?;
        Ok(())
    }

    /// Grants `bytes` of credit on `stream`.
    pub async fn credit(&mut self, stream: StreamName, bytes: u64) -> Result<()> {
        self.send(&ClientFrame::Credit { stream, bytes }).await
    }

    /// Closes politely, bounded.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = self.ws.close(None).await;
            for _ in 0..10_000 {
                match self.ws.next().await {
                    Some(Ok(_)) => continue,
                    _ => break,
                }
            }
        })
        .await;
    }
}

fn empty_info() -> ProcessInfo {
    ProcessInfo {
        id: String::new(),
        name: None,
        pid: 0,
        argv: vec![],
        tty: false,
        overflow: Default::default(),
        status: tether_protocol::ProcessStatus::Running,
        started_at: String::new(),
        exit_code: None,
        signal: None,
        reason: None,
        finished_at: None,
        duration_ms: None,
        stdout_bytes: 0,
        stderr_bytes: 0,
        output_incomplete: false,
        first_retained_at: None,
        last_retained_at: None,
        records_input: false,
        kubernetes: None,
        node: None,
        containment: None,
        retention_error: None,
        limits: None,
        usage: None,
        pids_limit_hit: false,
    }
}

/// A spawn request for `argv`.
pub fn argv(args: &[&str]) -> SpawnRequest {
    SpawnRequest {
        argv: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

/// A spawn request for `sh -c TEXT`.
pub fn shell(text: &str) -> SpawnRequest {
    SpawnRequest {
        command: Some(text.to_string()),
        ..Default::default()
    }
}
