//! [`Client`]: the HTTP API, with retries where they are safe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tether_protocol::api::{ProcessUpdate, SignalRequest, SpawnRequest};
use tether_protocol::ProcessInfo;

use crate::answer::read_answer;
use crate::base_url::{base_url_of, path_segment};
use crate::error::{Error, Result};
use crate::local_token::local_token_for;
use crate::retry::{Backoff, RetryPolicy};
use crate::tls::Trust;
use tokio_tungstenite::Connector;

/// The HTTP client for `base`, and for an `https://` base the rustls
/// config it uses (which the WebSockets share). A plain `http://` client
/// never reads the system's certificate store.
fn http_client(
    base: &str,
    trust: &Trust,
) -> Result<(reqwest::Client, Option<Arc<rustls::ClientConfig>>)> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    let (builder, tls) = if base.starts_with("https://") {
        let config = trust.config()?;
        (
            builder.use_preconfigured_tls((*config).clone()),
            Some(config),
        )
    } else {
        (builder, None)
    };
    let http = builder
        .build()
        .map_err(|e| Error::InvalidArgument(format!("cannot build an HTTP client: {e}")))?;
    Ok((http, tls))
}

/// How long `wait` asks the server to hold each long-poll.
const LONG_POLL: Duration = Duration::from_secs(25);

/// A connection to one `tetherd`. Cheap to clone; clones share the HTTP
/// connection pool.
///
/// ```no_run
/// # async fn demo() -> Result<(), tether_client::Error> {
/// use tether_client::{Client, SpawnRequest, SpawnSpec};
///
/// let client = Client::new("http://127.0.0.1:7420")?.with_token("secret");
/// let process = client.spawn(SpawnRequest::command("echo hi")).await?;
/// let done = client.wait(&process.id).await?;
/// println!("exit code {:?}", done.exit_code);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: String,
    token: Option<String>,
    /// Where the token was guessed from (or looked for in vain) when the
    /// caller gave none: said with a 401.
    guessed: Option<String>,
    http: reqwest::Client,
    /// What an `https://` server's certificate is checked against.
    trust: Trust,
    /// The rustls config built from `trust`, for `https://` only.
    tls: Option<Arc<rustls::ClientConfig>>,
    retry: RetryPolicy,
    request_timeout: Duration,
    /// Whether the server has ever answered this client (any status): until
    /// it has, a refused connection is retried only briefly (see
    /// [`crate::retry`]).
    answered: Arc<std::sync::atomic::AtomicBool>,
    /// The largest answer body read ([`Client::with_max_answer_bytes`]).
    max_answer_bytes: usize,
}

/// The largest HTTP answer body a client reads by default.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 64 << 20;

impl Client {
    /// A client for the server at `base_url` (such as
    /// `http://127.0.0.1:7420`). Fails for a URL that is not `http://` or
    /// `https://`. Nothing is sent until the first call.
    pub fn new(base_url: &str) -> Result<Client> {
        let base = base_url_of(base_url)?;
        let trust = Trust::default();
        let (http, tls) = http_client(&base, &trust)?;
        // A server on this machine that generated its token wrote it where
        // we can read it; never sent to any other host.
        let found = local_token_for(&base);
        let token = found.as_ref().and_then(|f| f.token.clone());
        let guessed = found.map(|f| f.looked);
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                token,
                guessed,
                http,
                trust,
                tls,
                retry: RetryPolicy::default(),
                request_timeout: Duration::from_secs(30),
                answered: Arc::default(),
                max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            }),
        })
    }

    /// Sends `Authorization: Bearer TOKEN` on every request. Without it, a
    /// client of a server on this machine uses the token that server
    /// generated, from its runtime entry (see [`local_token_for`](crate::local_token_for)).
    pub fn with_token(self, token: impl Into<String>) -> Client {
        self.map(|inner| {
            inner.token = Some(token.into());
            inner.guessed = None;
        })
    }

    /// Also trusts the CA certificates in the PEM file `path` for an
    /// `https://` server (beside the system's roots), as `curl --cacert`:
    /// for a server whose certificate a private CA signed, or a
    /// self-signed one (then the file is the certificate itself). Fails
    /// when the file cannot be read or holds no certificate.
    pub fn with_ca_file(self, path: impl AsRef<std::path::Path>) -> Result<Client> {
        let mut trust = self.inner.trust.clone();
        trust.add_pem_file(path.as_ref())?;
        self.with_trust(trust)
    }

    /// Accepts any certificate from an `https://` server: the connection
    /// is encrypted but the server is not authenticated, so anyone on the
    /// path can read and change it. For tests against a self-signed
    /// certificate; prefer [`Client::with_ca_file`].
    pub fn with_insecure_tls(self) -> Result<Client> {
        let mut trust = self.inner.trust.clone();
        trust.set_insecure();
        self.with_trust(trust)
    }

    fn with_trust(self, trust: Trust) -> Result<Client> {
        let (http, tls) = http_client(&self.inner.base, &trust)?;
        Ok(self.map(|inner| {
            inner.http = http;
            inner.tls = tls;
            inner.trust = trust;
        }))
    }

    /// Sends no token, not even one found in a runtime entry.
    pub fn without_token(self) -> Client {
        self.map(|inner| {
            inner.token = None;
            inner.guessed = None;
        })
    }

    /// Sets the retry policy of `spawn`, `wait` and the other calls that
    /// are safe to retry (default: [`RetryPolicy::default`], a 30 s budget).
    pub fn with_retry(self, retry: RetryPolicy) -> Client {
        self.map(|inner| inner.retry = retry)
    }

    /// Sets the timeout of each ordinary request (default 30 s). Long-polls
    /// of `wait` get their own, longer one.
    pub fn with_request_timeout(self, timeout: Duration) -> Client {
        self.map(|inner| inner.request_timeout = timeout)
    }

    /// Sets the largest HTTP answer body read (default
    /// [`DEFAULT_MAX_ANSWER_BYTES`], 64 MiB: tetherd's largest answers, a
    /// page of the process list, are 4 MiB). A longer answer is an error
    /// (`Error::Protocol`), read no further: a server cannot make the
    /// client hold more.
    pub fn with_max_answer_bytes(self, bytes: usize) -> Client {
        self.map(|inner| inner.max_answer_bytes = bytes)
    }

    fn map(self, f: impl FnOnce(&mut Inner)) -> Client {
        let mut inner = Inner {
            base: self.inner.base.clone(),
            token: self.inner.token.clone(),
            guessed: self.inner.guessed.clone(),
            http: self.inner.http.clone(),
            trust: self.inner.trust.clone(),
            tls: self.inner.tls.clone(),
            retry: self.inner.retry,
            request_timeout: self.inner.request_timeout,
            max_answer_bytes: self.inner.max_answer_bytes,
            answered: self.inner.answered.clone(),
        };
        f(&mut inner);
        Client {
            inner: Arc::new(inner),
        }
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The retry policy in force.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.inner.token.as_deref()
    }

    /// How the WebSocket connects: TLS with the same trust as the HTTP
    /// requests for `https://`, plain otherwise.
    pub(crate) fn ws_connector(&self) -> Connector {
        match &self.inner.tls {
            Some(config) => Connector::Rustls(config.clone()),
            None => Connector::Plain,
        }
    }

    /// `ws://` or `wss://` URL of an API path.
    pub(crate) fn ws_url(&self, path: &str) -> String {
        let base = &self.inner.base;
        let ws = match base.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            None => format!("ws://{}", base.strip_prefix("http://").unwrap_or(base)),
        };
        format!("{ws}{path}")
    }

    /// Starts a process. The request carries a random `Idempotency-Key`,
    /// and transient failures are retried with the same key, so the
    /// command starts at most once however often it is retried.
    pub async fn spawn(&self, spec: SpawnRequest) -> Result<ProcessInfo> {
        let key = uuid::Uuid::new_v4().to_string();
        let body = serde_json::to_vec(&spec)
            .map_err(|e| Error::InvalidArgument(format!("cannot encode the request: {e}")))?;
        let mut backoff = self.backoff(self.inner.retry);
        loop {
            let result = self
                .request::<ProcessInfo>(
                    Method::POST,
                    "/v1/processes",
                    Some(body.clone()),
                    Some(&key),
                    backoff.attempt_timeout(self.inner.request_timeout),
                )
                .await;
            match result {
                Ok(info) => return Ok(info),
                Err(e) => backoff.failed(e).await?,
            }
        }
    }

    /// `GET /v1/processes/{id}` (retried when transient).
    pub async fn get(&self, id: &str) -> Result<ProcessInfo> {
        self.retried(Method::GET, &format!("/v1/processes/{}", path_segment(id)))
            .await
    }

    /// `GET /v1/processes/{id}/screen`: a PTY process's terminal screen now,
    /// as plain text (one line per row) or, with `ansi`, as the escape
    /// sequences that redraw it on a fresh terminal of its size.
    pub async fn screen(&self, id: &str, ansi: bool) -> Result<Vec<u8>> {
        let format = if ansi { "ansi" } else { "text" };
        let path = format!("/v1/processes/{}/screen?format={format}", path_segment(id));
        let (_, body) = self
            .send(Method::GET, &path, None, None, self.inner.request_timeout)
            .await?;
        Ok(body.to_vec())
    }

    /// `GET /healthz` within `timeout`, once: the HTTP status (200 while
    /// the server serves, 503 while it shuts down). Over the client's own
    /// TLS trust, so an `https://` server is asked like any other call.
    pub async fn health(&self, timeout: Duration) -> Result<u16> {
        let url = format!("{}/healthz", self.inner.base);
        let response = self
            .inner
            .http
            .get(&url)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| Error::transport(&url, &e))?;
        Ok(response.status().as_u16())
    }

    /// `GET /v1/processes`: every process the server knows (retried when
    /// transient).
    pub async fn list(&self) -> Result<Vec<ProcessInfo>> {
        self.retried(Method::GET, "/v1/processes").await
    }

    /// Sends a signal (`"TERM"`, `"INT"`, `"KILL"`, ...) to the process
    /// group. Not retried: a signal must not be delivered twice.
    pub async fn signal(&self, id: &str, signal: &str) -> Result<ProcessInfo> {
        let body = serde_json::to_vec(&SignalRequest {
            signal: signal.to_string(),
        })
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.request(
            Method::POST,
            &format!("/v1/processes/{}/signal", path_segment(id)),
            Some(body),
            None,
            self.inner.request_timeout,
        )
        .await
    }

    /// `POST /v1/processes/{id}/kill`: kills the whole session (TERM, then
    /// KILL after the server's `--kill-grace-ms`), reason `killed`, and
    /// returns the process object once it has exited. The process stays
    /// known (its output, exit code and `wait`) until its exited TTL, or
    /// [`Client::remove`]. Not retried.
    pub async fn kill(&self, id: &str) -> Result<ProcessInfo> {
        self.kill_path(id, "").await
    }

    /// Like [`Client::kill`] with this grace between TERM and KILL
    /// (zero: KILL at once, as `docker kill` does).
    pub async fn kill_with_grace(&self, id: &str, grace: Duration) -> Result<ProcessInfo> {
        self.kill_path(id, &format!("?grace_ms={}", grace.as_millis()))
            .await
    }

    async fn kill_path(&self, id: &str, query: &str) -> Result<ProcessInfo> {
        self.request(
            Method::POST,
            &format!("/v1/processes/{}/kill{query}", path_segment(id)),
            None,
            None,
            self.inner.request_timeout,
        )
        .await
    }

    /// `DELETE /v1/processes/{id}`: forgets an exited process (its output
    /// and exit are gone) and returns its last object. A running process is
    /// refused with 409 `still_running`, unless `force`: then it is killed
    /// first. Not retried.
    pub async fn remove(&self, id: &str, force: bool) -> Result<ProcessInfo> {
        let query = if force { "?force=1" } else { "" };
        self.request(
            Method::DELETE,
            &format!("/v1/processes/{}{query}", path_segment(id)),
            None,
            None,
            self.inner.request_timeout,
        )
        .await
    }

    /// `PATCH /v1/processes/{id}`: sets the unattached timeout of a running
    /// process (`None`: never), counted from now while nobody is attached;
    /// needs the `kill` right. Not retried.
    pub async fn set_unattached_timeout(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<ProcessInfo> {
        let ms = timeout.map_or(0, |t| {
            u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        let body = serde_json::to_vec(&ProcessUpdate {
            unattached_timeout_ms: ms,
        })
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let path = format!("/v1/processes/{}", path_segment(id));
        let timeout = self.inner.request_timeout;
        self.request(Method::PATCH, &path, Some(body), None, timeout)
            .await
    }

    /// Writes raw bytes to the process's stdin over HTTP (the process must
    /// have been spawned with `stdin: true`). Not retried.
    pub async fn write_stdin(&self, id: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        self.request_empty(
            Method::POST,
            &format!("/v1/processes/{}/stdin", path_segment(id)),
            Some(data.into()),
        )
        .await
    }

    /// Closes the process's stdin over HTTP.
    pub async fn close_stdin(&self, id: &str) -> Result<()> {
        self.request_empty(
            Method::POST,
            &format!("/v1/processes/{}/stdin/close", path_segment(id)),
            None,
        )
        .await
    }

    /// Waits until the process has exited and returns its final object.
    ///
    /// Long-polls the server, and retries transient failures (connection
    /// refused or reset, timeouts, 429/502/503/504) with capped backoff
    /// within the retry budget, which starts afresh after every answer. It
    /// fails at once on other errors (such as 404 for an unknown process),
    /// and never reports a failure as the process's exit: the result is
    /// either an exited process object or an error.
    pub async fn wait(&self, id: &str) -> Result<ProcessInfo> {
        loop {
            let info = self.wait_timeout(id, LONG_POLL).await?;
            if info.is_exited() {
                return Ok(info);
            }
        }
    }

    /// Like [`Client::wait`], but returns the process object, with
    /// `status: running`, once about `limit` has passed without an exit.
    pub async fn wait_timeout(&self, id: &str, limit: Duration) -> Result<ProcessInfo> {
        let deadline = Instant::now() + limit;
        let mut backoff = self.backoff(self.inner.retry);
        let path = format!("/v1/processes/{}/wait", path_segment(id));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let poll = left.min(LONG_POLL);
            let ms = poll.as_millis();
            let result = self
                .request::<ProcessInfo>(
                    Method::GET,
                    &format!("{path}?timeout_ms={ms}"),
                    None,
                    None,
                    backoff.attempt_timeout(poll + self.inner.request_timeout),
                )
                .await;
            match result {
                Ok(info) if info.is_exited() || Instant::now() >= deadline => return Ok(info),
                Ok(_) => backoff.reset(),
                Err(e) => backoff.failed(e).await?,
            }
        }
    }

    pub(crate) async fn retried<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<T> {
        let mut backoff = self.backoff(self.inner.retry);
        loop {
            match self
                .request(
                    method.clone(),
                    path,
                    None,
                    None,
                    backoff.attempt_timeout(self.inner.request_timeout),
                )
                .await
            {
                Ok(value) => return Ok(value),
                Err(e) => backoff.failed(e).await?,
            }
        }
    }

    async fn request_empty(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<()> {
        self.send(method, path, body, None, self.inner.request_timeout)
            .await
            .map(|_| ())
    }

    pub(crate) async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency_key: Option<&str>,
        timeout: Duration,
    ) -> Result<T> {
        let (url, bytes) = self
            .send(method, path, body, idempotency_key, timeout)
            .await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("unexpected response from {url}: {e}")))
    }

    /// One request; a success status gives the body, anything else an error.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency_key: Option<&str>,
        timeout: Duration,
    ) -> Result<(String, bytes::Bytes)> {
        let url = format!("{}{}", self.inner.base, path);
        let mut request = self.inner.http.request(method, &url).timeout(timeout);
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            let kind = if path.ends_with("/stdin") {
                "application/octet-stream"
            } else {
                "application/json"
            };
            request = request
                .header(reqwest::header::CONTENT_TYPE, kind)
                .body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Error::transport(&url, &e))?;
        self.inner
            .answered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let status = response.status();
        let bytes = read_answer(&url, response, self.inner.max_answer_bytes).await?;
        if status.is_success() {
            Ok((url, bytes.into()))
        } else {
            Err(self.explained(http_error(status, &bytes)))
        }
    }
}

impl Client {
    /// A `GET` whose answer is streamed, not held: the response once its
    /// status says success (an error answer is read, bounded, into the
    /// error). `timeout` bounds the whole exchange when given.
    pub(crate) async fn get_streamed(
        &self,
        path: &str,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response> {
        let url = format!("{}{}", self.inner.base, path);
        let mut request = self.inner.http.get(&url);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Error::transport(&url, &e))?;
        self.inner
            .answered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = read_answer(&url, response, self.inner.max_answer_bytes).await?;
        Err(self.explained(http_error(status, &bytes)))
    }

    /// The request timeout (`with_request_timeout`).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The backoff of one call under `policy`, knowing whether this server
    /// has ever answered.
    pub(crate) fn backoff(&self, policy: RetryPolicy) -> Backoff {
        Backoff::new(policy).first_contact(self.inner.answered.clone())
    }

    /// A 401 when the token was guessed says where it was looked for.
    fn explained(&self, mut error: Error) -> Error {
        if let (
            Error::Http {
                status: 401,
                message,
                ..
            },
            Some(looked),
        ) = (&mut error, &self.inner.guessed)
        {
            message.push_str(&format!(" (token guessed from {looked})"));
        }
        error
    }
}

fn http_error(status: StatusCode, body: &[u8]) -> Error {
    Error::from_body(status.as_u16(), body)
}
