//! HTTP routes under `/v1`, plus `/healthz` and the web demo at `/`.
//! Handlers parse and validate, then call the table or the process; every
//! failure is an [`ApiError`] with a JSON body.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tether_protocol::api::{ProcessUpdate, ResizeRequest, SignalRequest, SpawnRequest};
use tether_protocol::{ExitReason, ProcessInfo, Signal};

use super::params::{body_bytes, idempotency_key, json_body, query_u64};
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::process::input_once::{Fingerprint, FirstAttempt, IdempotencyKey, Once};
use crate::process::Process;
use crate::table::ProcessTable;

type AppState = Arc<ProcessTable>;
type ApiResult<T> = Result<T, ApiError>;

/// The whole HTTP surface.
pub fn router(table: Arc<ProcessTable>) -> Router {
    let config = table.config().clone();
    let v1 = Router::new()
        .route("/processes", post(spawn).get(list))
        .route("/processes/{id}", get(status).delete(delete).patch(update))
        .route("/processes/{id}/wait", get(wait))
        .route("/processes/{id}/kill", post(kill))
        .route("/processes/{id}/signal", post(signal))
        .route("/processes/{id}/stdin", post(stdin))
        .route("/processes/{id}/stdin/close", post(stdin_close))
        .route("/processes/{id}/resize", post(resize))
        .route("/processes/{id}/attach", get(super::attach::attach))
        .route("/run", get(super::attach::run))
        .route("/processes/{id}/tokens", post(super::mint::mint))
        .route("/processes/{id}/output", get(super::output::output))
        .route("/exec", post(super::exec::exec))
        .route("/admin/upgrade", post(super::admin::upgrade))
        .route("/admin/server", get(super::admin::server))
        .route("/processes/{id}/screen", get(super::screen::screen))
        .route(
            "/processes/{id}/recording",
            get(super::recording::recording),
        )
        .route("/processes/{id}/offsets", get(super::recording::offsets))
        .route("/processes/{id}/times", get(super::recording::times))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            table.clone(),
            crate::access::check,
        ))
        .layer(DefaultBodyLimit::max(config.max_body_bytes));
    let mut app = Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .merge(crate::kube::router(table.clone()));
    app = match &config.web_root {
        Some(root) => {
            let files = super::web::StaticFiles::new(root);
            app.fallback(move |request: Request| files.clone().serve(request))
        }
        None => app.fallback(no_route),
    };
    app.layer(middleware::from_fn(trace_errors))
        .with_state(table)
}

/// Readiness: 200 while this host takes new processes; 503 `draining` from
/// SIGTERM on (a proxy or Kubernetes takes it out of rotation while its
/// running processes finish), `shutting down` once it kills them (so a
/// client whose process was killed can tell a shutdown from a kill request).
async fn healthz(State(table): State<AppState>) -> (StatusCode, &'static str) {
    if table.is_shutting_down() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if table.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

async fn metrics(State(table): State<AppState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        table
            .metrics
            .render(table.gauges(), table.config().node.as_deref()),
    )
}

async fn trace_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let uri = request.uri().path().to_string();
    let response = next.run(request).await;
    if response.status().is_server_error() {
        tracing::warn!(%method, %uri, status = %response.status(), "request failed");
    }
    response
}

/// The path as the client sent it (a nested router sees it without `/v1`).
fn full_path(request: &Request) -> String {
    match request.extensions().get::<axum::extract::OriginalUri>() {
        Some(original) => original.path().to_string(),
        None => request.uri().path().to_string(),
    }
}

async fn no_route(request: Request) -> ApiError {
    ApiError::NoRoute(format!("{} {}", request.method(), full_path(&request)))
}

async fn method_not_allowed(request: Request) -> Response {
    ApiError::MethodNotAllowed(format!("{} {}", request.method(), full_path(&request)))
        .into_response()
}

async fn spawn(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<ProcessInfo>)> {
    grant.require(&table, Need::Spawn)?;
    let key = idempotency_key(&headers, grant.identity())?;
    let request: SpawnRequest = json_body(body, table.config())?;
    let (process, new) = table.spawn(request, key).await?;
    if new {
        grant.audit("spawn", &process.id);
    }
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(process.info())))
}

/// Most processes in one `GET /v1/processes` answer, and the default.
pub const LIST_MAX_ITEMS: usize = 1000;
/// An answer stops growing past this many bytes of JSON (it always holds
/// at least one process), so its size is bounded whatever the argv.
pub const LIST_MAX_BYTES: usize = 4 << 20;
/// Names the last process of a page that is not the last one: pass it as
/// `after=` for the next page.
pub const NEXT_PAGE_HEADER: &str = "tether-next-after";

/// Known processes, oldest first, a page at a time: `limit` (1 to
/// [`LIST_MAX_ITEMS`]) and `after=ID` (the processes started after that
/// one). A page cut short by the count or the byte bound carries
/// [`NEXT_PAGE_HEADER`].
async fn list(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    grant.require(&table, Need::List)?;
    let limit = match query_u64(&query, "limit")? {
        None => LIST_MAX_ITEMS,
        Some(n) if (1..=LIST_MAX_ITEMS as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::InvalidRequest(format!(
                "limit must be 1 to {LIST_MAX_ITEMS}, got {n}"
            )))
        }
    };
    let all = table.list();
    let start = match query.get("after") {
        None => 0,
        Some(id) => match all.iter().position(|p| &p.id == id) {
            Some(i) => i + 1,
            None => return Err(ApiError::NotFound(id.clone())),
        },
    };
    let mut body = Vec::from(*b"[");
    let mut last = None;
    let mut listed = 0;
    for process in &all[start..] {
        if listed == limit || (listed > 0 && body.len() >= LIST_MAX_BYTES) {
            break;
        }
        if listed > 0 {
            body.push(b',');
        }
        serde_json::to_writer(&mut body, &process.info())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        last = Some(process.id.clone());
        listed += 1;
    }
    body.push(b']');
    let mut response = (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if start + listed < all.len() {
        if let Some(value) = last.and_then(|id| id.parse().ok()) {
            response.headers_mut().insert(NEXT_PAGE_HEADER, value);
        }
    }
    Ok(response)
}

async fn status(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProcessInfo>> {
    Ok(Json(grant.process(&table, Need::Read, &id)?.info()))
}

/// Largest `grace_ms` of a kill (10 minutes): the request waits that long.
const MAX_KILL_GRACE_MS: u64 = 600_000;

/// How long a kill with this grace may take to end a process: the grace
/// (then SIGKILL), the drain bound after the reap, and a margin.
fn kill_bound(table: &ProcessTable, grace: Duration) -> Duration {
    grace + table.config().drain_timeout() + Duration::from_secs(1)
}

/// Kills and waits (bounded) until the process counts as exited.
async fn kill_and_wait(table: &ProcessTable, process: &Process, grace: Duration) {
    process.kill_with_grace(ExitReason::Killed, grace).await;
    let mut exit = process.watch_exit();
    let _ = tokio::time::timeout(kill_bound(table, grace), exit.wait_for(|e| e.is_some())).await;
}

/// `POST .../kill[?grace_ms=N]`: kills the whole session (reason `killed`)
/// and keeps the process, like any exited one, until its TTL or DELETE.
/// Answers once it has exited (bounded). Killing an exited process is a
/// no-op that answers its object.
async fn kill(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<ProcessInfo>> {
    let process = grant.process(&table, Need::Kill, &id)?;
    let grace = match query_u64(&query, "grace_ms")? {
        Some(ms) if ms > MAX_KILL_GRACE_MS => {
            return Err(ApiError::InvalidRequest(format!(
                "grace_ms must be at most {MAX_KILL_GRACE_MS}, got {ms}"
            )))
        }
        Some(ms) => Duration::from_millis(ms),
        None => table.config().kill_grace(),
    };
    if process.is_running() {
        grant.audit("kill", &process.id);
        kill_and_wait(&table, &process, grace).await;
    }
    Ok(Json(process.info()))
}

/// `DELETE ...[?force=1]`: forgets a process, its output and its exit. A
/// running one is refused (409 `still_running`) unless forced: then it is
/// killed first, and forgotten once it has exited (until then it still
/// counts against the process limit and the retention budget).
async fn delete(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<ProcessInfo>> {
    let force = match query.get("force").map(String::as_str) {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "force must be 1 or 0, got {other:?}"
            )))
        }
    };
    // Forgetting destroys the output: the kill right, even for an exited
    // process.
    let process = grant.process(&table, Need::Kill, &id)?;
    if process.is_running() {
        if !force {
            return Err(ApiError::StillRunning(process.id.clone()));
        }
        grant.audit("kill", &process.id);
        kill_and_wait(&table, &process, table.config().kill_grace()).await;
    }
    grant.audit("forget", &process.id);
    table.forget_when_exited(&process);
    Ok(Json(process.info()))
}

/// `PATCH /v1/processes/{id}`: changes what may change while it runs (its
/// unattached timeout). The `kill` right: a shorter timeout ends it.
async fn update(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ProcessInfo>> {
    let process = grant.process(&table, Need::Kill, &id)?;
    let request: ProcessUpdate = json_body(body, table.config())?;
    let timeout = Some(request.unattached_timeout_ms)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    grant.audit("update", &process.id);
    process.set_unattached_timeout(timeout).await?;
    Ok(Json(process.info()))
}

async fn wait(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<ProcessInfo>> {
    let config = table.config();
    let ms = query_u64(&query, "timeout_ms")?
        .unwrap_or(config.default_wait_ms)
        .min(config.max_wait_ms);
    table.metrics.wait_requests.fetch_add(1, Ordering::Relaxed);
    let process = grant.process(&table, Need::Read, &id)?;
    let mut exit = process.watch_exit();
    // A handover answers at once with the process as it stands (running):
    // the client's next wait reaches the new binary.
    let mut restarting = table.restarting();
    tokio::select! {
        _ = tokio::time::timeout(Duration::from_millis(ms), exit.wait_for(|e| e.is_some())) => {}
        true = crate::attach::until_restarting(&mut restarting) => {}
    }
    Ok(Json(process.info()))
}

async fn signal(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ProcessInfo>> {
    let process = grant.process(&table, Need::Write, &id)?;
    let key = idempotency_key(&headers, grant.identity())?;
    let body = body_bytes(body, table.config())?;
    // A request that cannot be carried out is refused before it is
    // recorded: it leaves nothing behind.
    let request: SignalRequest = json_body(Ok(body.clone()), table.config())?;
    let signal = Signal::parse(&request.signal)?;
    let Some(attempt) = once(&table, &process, key, "signal", &body).await? else {
        return Ok(Json(process.info()));
    };
    grant.audit("signal", &process.id);
    process.signal(signal).await?;
    attempt.succeeded();
    Ok(Json(process.info()))
}

/// With an `Idempotency-Key` (its sender's): `None` when a request with
/// this key succeeded before (answer success, do nothing), else the
/// attempt to carry out and mark, whose provisional record goes if it is
/// dropped unmarked. Without one, an attempt that records nothing.
async fn once(
    table: &ProcessTable,
    process: &Process,
    key: Option<IdempotencyKey>,
    route: &str,
    body: &[u8],
) -> ApiResult<Option<Attempt>> {
    let Some(key) = key else {
        return Ok(Some(Attempt(None)));
    };
    let ttl = Duration::from_millis(table.config().input_ttl_ms);
    let fingerprint = Fingerprint::of(route, body);
    let records = table.idempotency_records();
    let begun = match process
        .inputs
        .http
        .begin(&key, fingerprint, ttl, records)
        .await
    {
        // Full: records of other processes may have outlived their TTL
        // unseen (they expire when their process is next used); forget
        // those, then ask once more.
        Err(ApiError::IdempotencyExhausted(_)) => {
            table.expire_idempotency_records(ttl);
            process
                .inputs
                .http
                .begin(&key, fingerprint, ttl, records)
                .await
        }
        begun => begun,
    };
    match begun? {
        Once::Done => Ok(None),
        Once::First(first) => Ok(Some(Attempt(Some(first)))),
    }
}

/// A request being carried out, keyed or not.
struct Attempt(Option<FirstAttempt>);

impl Attempt {
    fn succeeded(self) {
        if let Some(first) = self.0 {
            first.succeeded();
        }
    }
}

/// Raw bytes for stdin. The process's HTTP stdin budget is reserved for
/// the declared length before the body is read, so requests parked on a
/// process that does not read hold at most that budget (429 past it).
async fn stdin(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<StatusCode> {
    let config = table.config();
    let process = grant.process(&table, Need::Write, &id)?;
    let key = match idempotency_key(&headers, grant.identity()) {
        Ok(key) => key,
        Err(bad) => {
            discard_refused_body(body, config.max_body_bytes).await;
            return Err(bad);
        }
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > config.max_body_bytes) {
        return Err(ApiError::BodyTooLarge(config.max_body_bytes));
    }
    let permit = match process.reserve_http_stdin(declared.unwrap_or(config.max_body_bytes)) {
        Ok(permit) => permit,
        Err(busy) => {
            discard_refused_body(body, config.max_body_bytes).await;
            return Err(busy);
        }
    };
    let body = axum::body::to_bytes(body, config.max_body_bytes)
        .await
        .map_err(|e| {
            if crate::listen::is_body_timeout(&e) {
                ApiError::BodyTimeout(config.body_timeout_ms)
            } else {
                ApiError::BodyTooLarge(config.max_body_bytes)
            }
        })?;
    let Some(attempt) = once(&table, &process, key, "stdin", &body).await? else {
        return Ok(StatusCode::NO_CONTENT);
    };
    process.write_http_stdin(body.to_vec(), permit).await?;
    attempt.succeeded();
    Ok(StatusCode::NO_CONTENT)
}

/// How long a refused body is read and dropped before the refusal goes.
const REFUSED_BODY_DRAIN: Duration = Duration::from_secs(1);

/// Reads and drops what a client is still sending of a body refused before
/// it was read (at most `limit` bytes and [`REFUSED_BODY_DRAIN`], nothing
/// kept): the answer closes the connection, and a client still writing
/// into a closed socket gets EPIPE instead of the answer that says why.
async fn discard_refused_body(body: axum::body::Body, limit: usize) {
    use http_body_util::BodyExt;
    let drain = async move {
        let mut body = body;
        let mut seen = 0usize;
        while seen < limit {
            match body.frame().await {
                Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |d| d.len()),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(REFUSED_BODY_DRAIN, drain).await;
}

async fn stdin_close(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let process = grant.process(&table, Need::Write, &id)?;
    let key = idempotency_key(&headers, grant.identity())?;
    let Some(attempt) = once(&table, &process, key, "stdin_close", &[]).await? else {
        return Ok(StatusCode::NO_CONTENT);
    };
    process.close_stdin().await?;
    attempt.succeeded();
    Ok(StatusCode::NO_CONTENT)
}

async fn resize(
    State(table): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let process = grant.process(&table, Need::Write, &id)?;
    let key = idempotency_key(&headers, grant.identity())?;
    let body = body_bytes(body, table.config())?;
    let request: ResizeRequest = json_body(Ok(body.clone()), table.config())?;
    let Some(attempt) = once(&table, &process, key, "resize", &body).await? else {
        return Ok(StatusCode::NO_CONTENT);
    };
    table.resize(&process, request.cols, request.rows)?;
    attempt.succeeded();
    Ok(StatusCode::NO_CONTENT)
}
