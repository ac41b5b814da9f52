//! The WebSocket routes: `GET /v1/processes/{id}/attach` (an attachment
//! from saved offsets, or from the screen) and `GET /v1/run` (spawn and
//! attach in one round trip). Both check the upgrade and every parameter
//! before anything happens, then hand the upgrade to the one attach path,
//! [`attach::serve`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use tether_protocol::api::SpawnRequest;
use tether_protocol::{StreamName, SUBPROTOCOL};

use super::params::{idempotency_key, query_bool, query_u64};
use crate::attach::{self, AttachOptions, ScreenStart};
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::process::Process;
use crate::table::ProcessTable;

type ApiResult<T> = Result<T, ApiError>;

/// `GET /v1/processes/{id}/attach?stdout=O&stderr=O&window=N&readonly=1&screen=1`.
pub async fn attach(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let process = grant.process(&table, Need::Read, &id)?;
    let upgrade = websocket(upgrade, "attach")?;
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
    let window = query_window(&query)?;
    let readonly = query_bool(&query, "readonly")?.unwrap_or(false);
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
    let options = AttachOptions {
        start,
        window,
        readonly,
        screen,
    };
    let input = query_input(&query)?;
    upgrade_to_attachment(&table, grant, process, options, input, upgrade)
}

/// `GET /v1/run?request=JSON`: spawns the process of `request` (a spawn
/// request, URL-encoded; the `Idempotency-Key` header as for `POST
/// /v1/processes`) and attaches this WebSocket to it from its first byte:
/// one round trip where a spawn and an attach take two. `hello` carries the
/// new process, so its id is known for a later reattach. `window` as for
/// attach. The upgrade is checked before anything is spawned.
pub async fn run(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    grant.require(&table, Need::Spawn)?;
    let upgrade = websocket(upgrade, "run")?;
    let request = query.get("request").ok_or_else(|| {
        ApiError::InvalidRequest("run needs request=, a URL-encoded spawn request".into())
    })?;
    let request: SpawnRequest = serde_json::from_str(request)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON in request=: {e}")))?;
    let window = query_window(&query)?;
    let input = query_input(&query)?;
    if input.as_ref().is_some_and(|(_, resume)| *resume) {
        return Err(ApiError::InvalidRequest(
            "input_resume on run: a new process has no input stream to resume (resume through attach)".into(),
        ));
    }
    let key = idempotency_key(&headers, grant.identity())?;
    let (process, new) = table.spawn(request, key).await?;
    if new {
        grant.audit("spawn", &process.id);
    }
    let options = AttachOptions {
        start: [0, 0],
        window,
        readonly: false,
        screen: ScreenStart::Never,
    };
    upgrade_to_attachment(&table, grant, process, options, input, upgrade)
}

/// Admits an attachment to `process` and answers the upgrade with it.
fn upgrade_to_attachment(
    table: &Arc<ProcessTable>,
    grant: Grant,
    process: Arc<Process>,
    options: AttachOptions,
    input: Option<(String, bool)>,
    upgrade: WebSocketUpgrade,
) -> ApiResult<Response> {
    let writer = !options.readonly && grant.may_write();
    let mut admission = attach::admit(table, &process, writer)?;
    if let Some((id, resume)) = input {
        let config = table.config();
        let claim = process.inputs.claim(
            &grant.identity(),
            &id,
            resume,
            Duration::from_millis(config.input_ttl_ms),
            config.max_input_streams,
        );
        admission = match claim {
            Ok(claim) => admission.with_input(claim),
            // Told after the upgrade, in an `error` frame: a browser cannot
            // read the answer to a refused upgrade, and must not retry.
            Err(error @ ApiError::InputExpired(..)) => admission.refused(error),
            Err(error) => return Err(error),
        };
    }
    let mode = if !writer { "read" } else { "read,write" };
    Ok(attach::configure_upgrade(upgrade, table.config(), SUBPROTOCOL)
        // No span around the attachment: one would be entered and left at
        // every poll of its writer (every keystroke's echo); its events
        // carry the process id instead.
        .on_upgrade(move |socket| async move {
            tracing::info!(target: "audit", event = "attach", identity = %grant.identity(),
                process = %process.id, peer = %grant.peer, rights = %grant.rights(), mode, "attach");
            attach::serve(socket, admission, options, grant.clone()).await;
            grant.audit("detach", &process.id);
        }))
}

/// The upgrade, or a 400 saying that `route` needs one.
fn websocket(
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    route: &str,
) -> ApiResult<WebSocketUpgrade> {
    upgrade.map_err(|e| {
        ApiError::InvalidRequest(format!(
            "{route} needs a WebSocket upgrade: {}",
            e.body_text()
        ))
    })
}

/// `input=ID` (numbered input, [`crate::process::input_streams`]) and `input_resume=1`
/// (the client has sent input under this id before).
fn query_input(query: &HashMap<String, String>) -> ApiResult<Option<(String, bool)>> {
    let resume = query_bool(query, "input_resume")?.unwrap_or(false);
    match query.get("input") {
        Some(id) => {
            crate::process::input_streams::check_id(id)?;
            Ok(Some((id.clone(), resume)))
        }
        None if resume => Err(ApiError::InvalidRequest(
            "input_resume needs input=ID".into(),
        )),
        None => Ok(None),
    }
}

/// `window=N`: credit flow control, at least 1 byte; absent, none.
fn query_window(query: &HashMap<String, String>) -> ApiResult<Option<u64>> {
    let window = query_u64(query, "window")?;
    if window == Some(0) {
        return Err(ApiError::InvalidRequest(
            "window must be at least 1 (omit it to turn flow control off)".into(),
        ));
    }
    Ok(window)
}
