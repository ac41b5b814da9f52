//! `GET /v1/processes/{id}/screen`: the terminal screen now, as text or
//! as the snapshot bytes that redraw it, each answer holding room for
//! itself in the memory budget until it is sent.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::table::{ProcessTable, SnapshotRoom};

/// The terminal screen now: plain text (default) or, with `format=ansi`,
/// the snapshot bytes; headers give the offset and size. Each answer
/// holds room for itself until it is sent (see [`SnapshotRoom`]).
pub async fn screen(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let process = grant.process(&table, Need::Read, &id)?;
    let ansi = match query.get("format").map(String::as_str) {
        None | Some("text") => false,
        Some("ansi") => true,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "format={other:?}: expected text or ansi"
            )))
        }
    };
    if !process.output().has_screen() {
        return Err(ApiError::NoTerminal(process.id.clone()));
    }
    // The emulator may first catch up with the output (bounded, 100 ms of
    // parsing): off the async workers. Each request reserves the most its
    // answer can take until the answer is sent, or is refused (503) when
    // the budget has no room: concurrent requests cannot pile up snapshots.
    let output = process.output().clone();
    let table_for_build = table.clone();
    let screen = tokio::task::spawn_blocking(move || {
        let reserved = match SnapshotRoom::take(&output, &table_for_build)? {
            Ok(reserved) => reserved,
            Err(refused) => return Some(Err(refused)),
        };
        let built = if ansi {
            output.screen_snapshot().map(|(snapshot, stale)| {
                (
                    snapshot.offset,
                    snapshot.cols,
                    snapshot.rows,
                    stale,
                    "application/octet-stream",
                    snapshot.data,
                )
            })
        } else {
            output.screen_text().map(|text| {
                (
                    text.offset,
                    text.cols,
                    text.rows,
                    text.stale,
                    "text/plain; charset=utf-8",
                    text.text.into_bytes(),
                )
            })
        };
        built.map(|built| Ok((built, reserved)))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("reading the screen failed: {e}")))?;
    let ((offset, cols, rows, stale, content_type, body), reserved) =
        screen.ok_or_else(|| ApiError::NoTerminal(process.id.clone()))??;
    let length = body.len();
    // The reservation goes with the body: given back when hyper asks for
    // more after taking it whole (it asks once its buffer has room again),
    // or when the client is gone.
    let body = axum::body::Body::from_stream(futures_util::stream::unfold(
        Some((Some(body), reserved)),
        |state| async move {
            let (bytes, reserved) = state?;
            let bytes = bytes?;
            Some((
                Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(bytes)),
                Some((None, reserved)),
            ))
        },
    ));
    Ok((
        [
            ("content-type", content_type.to_string()),
            ("content-length", length.to_string()),
            ("tether-offset", offset.to_string()),
            ("tether-cols", cols.to_string()),
            ("tether-rows", rows.to_string()),
            ("tether-screen-stale", stale.to_string()),
        ],
        body,
    )
        .into_response())
}
