//! HTTP routes under `/v1`, plus `/healthz` and the web demo at `/`.
//! Handlers parse and validate, then call the table or the process; every
//! failure is an [`ApiError`] with a JSON body.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use tether_protocol::api::{ResizeRequest, SignalRequest, SpawnRequest};
use tether_protocol::{ExitReason, ProcessInfo, Signal, StreamName, SUBPROTOCOL};

use crate::attach::{self, AttachOptions, ScreenStart};
use crate::error::ApiError;
use crate::table::ProcessTable;

type AppState = Arc<ProcessTable>;
type ApiResult<T> = Result<T, ApiError>;

/// The whole HTTP surface.
pub fn router(table: Arc<ProcessTable>) -> Router {
    let config = table.config().clone();
    let v1 = Router::new()
        .route("/processes", post(spawn).get(list))
        .route("/processes/{id}", get(status).delete(delete))
        .route("/processes/{id}/wait", get(wait))
        .route("/processes/{id}/signal", post(signal))
        .route("/processes/{id}/stdin", post(stdin))
        .route("/processes/{id}/stdin/close", post(stdin_close))
        .route("/processes/{id}/resize", post(resize))
        .route("/processes/{id}/attach", get(attach))
        .route("/processes/{id}/screen", get(screen))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            table.clone(),
            crate::access::check,
        ))
        .layer(DefaultBodyLimit::max(config.max_body_bytes));
    let mut app = Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics));
    app = match &config.web_root {
        Some(root) => app.fallback_service(tower_http::services::ServeDir::new(root)),
        None => app.fallback(no_route),
    };
    app.layer(middleware::from_fn(trace_errors))
        .with_state(table)
}

async fn metrics(State(table): State<AppState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        table.metrics.render(table.gauges()),
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
    let error = ApiError::NoRoute(format!("{} {}", request.method(), full_path(&request)));
    let mut response = error.into_response();
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}

/// Parses a JSON body with a message that says what is wrong.
fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>, max: usize) -> ApiResult<T> {
    let body = body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(_) => ApiError::BodyTooLarge(max),
        other => ApiError::InvalidRequest(other.body_text()),
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))
}

async fn spawn(
    State(table): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<ProcessInfo>)> {
    let request: SpawnRequest = json_body(body, table.config().max_body_bytes)?;
    let key = match headers.get("idempotency-key") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ApiError::InvalidRequest("Idempotency-Key must be ASCII".into()))?
                .to_string(),
        ),
        None => None,
    };
    let (process, new) = table.spawn(request, key).await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(process.info())))
}

async fn list(State(table): State<AppState>) -> Json<Vec<ProcessInfo>> {
    Json(table.list().iter().map(|p| p.info()).collect())
}

async fn status(
    State(table): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProcessInfo>> {
    Ok(Json(table.get(&id)?.info()))
}

/// The terminal screen now: plain text (default) or, with `format=ansi`,
/// the snapshot bytes; headers give the offset and size.
async fn screen(
    State(table): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let process = table.get(&id)?;
    let ansi = match query.get("format").map(String::as_str) {
        None | Some("text") => false,
        Some("ansi") => true,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "format={other:?}: expected text or ansi"
            )))
        }
    };
    let no_screen = || ApiError::NoTerminal(process.id.clone());
    let (offset, cols, rows, content_type, body) = if ansi {
        let snapshot = process.output().screen_snapshot().ok_or_else(no_screen)?;
        (
            snapshot.offset,
            snapshot.cols,
            snapshot.rows,
            "application/octet-stream",
            snapshot.data,
        )
    } else {
        let text = process.output().screen_text().ok_or_else(no_screen)?;
        (
            text.offset,
            text.cols,
            text.rows,
            "text/plain; charset=utf-8",
            text.text.into_bytes(),
        )
    };
    Ok((
        [
            ("content-type", content_type.to_string()),
            ("tether-offset", offset.to_string()),
            ("tether-cols", cols.to_string()),
            ("tether-rows", rows.to_string()),
        ],
        body,
    )
        .into_response())
}

async fn delete(
    State(table): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProcessInfo>> {
    let process = table.get(&id)?;
    process.kill(ExitReason::Killed).await;
    // Forget it only once it has exited: until then it still counts against
    // the process limit and the retention budget. Bounded by the kill grace
    // (after which it is SIGKILLed) plus the drain bound.
    let config = table.config();
    let bound = config.kill_grace() + config.drain_timeout() + Duration::from_secs(1);
    let mut exit = process.watch_exit();
    let _ = tokio::time::timeout(bound, exit.wait_for(|e| e.is_some())).await;
    table.forget_when_exited(&process);
    Ok(Json(process.info()))
}

/// Parses an optional unsigned integer query parameter.
fn query_u64(query: &HashMap<String, String>, name: &str) -> ApiResult<Option<u64>> {
    query
        .get(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::InvalidRequest(format!(
                    "{name} must be a non-negative integer, got {v:?}"
                ))
            })
        })
        .transpose()
}

async fn wait(
    State(table): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<ProcessInfo>> {
    let config = table.config();
    let ms = query_u64(&query, "timeout_ms")?
        .unwrap_or(config.default_wait_ms)
        .min(config.max_wait_ms);
    table.metrics.wait_requests.fetch_add(1, Ordering::Relaxed);
    let process = table.get(&id)?;
    let mut exit = process.watch_exit();
    let _ = tokio::time::timeout(Duration::from_millis(ms), exit.wait_for(|e| e.is_some())).await;
    Ok(Json(process.info()))
}

async fn signal(
    State(table): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ProcessInfo>> {
    let request: SignalRequest = json_body(body, table.config().max_body_bytes)?;
    let process = table.get(&id)?;
    process.signal(Signal::parse(&request.signal)?).await?;
    Ok(Json(process.info()))
}

async fn stdin(
    State(table): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let max = table.config().max_body_bytes;
    let body = body.map_err(|_| ApiError::BodyTooLarge(max))?;
    table.get(&id)?.write_stdin(body.to_vec()).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn stdin_close(
    State(table): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    table.get(&id)?.close_stdin().await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resize(
    State(table): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let request: ResizeRequest = json_body(body, table.config().max_body_bytes)?;
    table.get(&id)?.resize(request.cols, request.rows)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn attach(
    State(table): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let process = table.get(&id)?;
    let upgrade = upgrade.map_err(|e| {
        ApiError::InvalidRequest(format!(
            "attach needs a WebSocket upgrade: {}",
            e.body_text()
        ))
    })?;
    let mut start = [0u64; 2];
    {
        let totals = process.output().totals();
        for stream in StreamName::ALL {
            if let Some(offset) = query_u64(&query, stream.as_str())? {
                let end = totals[stream.index()];
                if offset > end {
                    return Err(ApiError::InvalidRequest(format!(
                        "{} offset {offset} is past the end of the stream ({end} bytes so far)",
                        stream.as_str()
                    )));
                }
                start[stream.index()] = offset;
            }
        }
    }
    let window = query_u64(&query, "window")?;
    if window == Some(0) {
        return Err(ApiError::InvalidRequest(
            "window must be at least 1 (omit it to turn flow control off)".into(),
        ));
    }
    let readonly = matches!(
        query.get("readonly").map(String::as_str),
        Some("1" | "true")
    );
    let screen = match query.get("screen").map(String::as_str) {
        None | Some("0" | "false") => ScreenStart::Never,
        Some("1" | "true") => ScreenStart::Always,
        Some("evicted") => ScreenStart::IfEvicted,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "screen={other:?}: expected 1 or evicted"
            )))
        }
    };
    if screen != ScreenStart::Never && !process.output().has_screen() {
        return Err(ApiError::InvalidRequest(format!(
            "screen needs a terminal: process {} runs on pipes (tty: false) or the server runs with --no-screen",
            process.id
        )));
    }
    let admission = attach::admit(&table, &process)?;
    let options = AttachOptions {
        start,
        window,
        readonly,
        screen,
    };
    let config = table.config().clone();
    Ok(upgrade
        .protocols([SUBPROTOCOL])
        .max_message_size(config.max_frame_bytes)
        .max_frame_size(config.max_frame_bytes)
        // Client frames are small; a small read buffer keeps an idle
        // attachment cheap (tungstenite zero-fills the whole buffer).
        .read_buffer_size(8 << 10)
        .on_failed_upgrade(|e| tracing::info!(error = %e, "websocket upgrade failed"))
        .on_upgrade(move |socket| {
            use tracing::Instrument;
            let span = tracing::info_span!("attach", id = %process.id);
            attach::serve(socket, admission, options).instrument(span)
        }))
}
