//! `GET /v1/processes/{id}/output`: retained output over plain HTTP, for
//! clients that cannot open a WebSocket (curl, shell scripts, HTTP-only
//! gateways) and for EventSource.
//!
//! - Raw (default): the bytes of one stream from `offset` as the body;
//!   with `follow=1` it stays open for live output and ends at the exit.
//!   Evicted ranges are skipped; the `Tether-Offset` header is the first
//!   offset asked for, and the trailers (sent when the request carries
//!   `TE: trailers`) give the next offset, the bytes skipped, and the final
//!   status and totals.
//! - `Accept: text/event-stream`: Server-Sent Events, one per chunk
//!   (`stdout`, `stderr`: base64 data; `dropped`; `exit` last), each with
//!   `id: STDOUT,STDERR` (the next offsets), so a reconnecting EventSource
//!   resumes from `Last-Event-ID` with no gap and no repeat. The exit's id
//!   ends in `,exit`; a reconnection with it is answered 204, which stops
//!   an EventSource.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, Query, State};
use axum::http::header::{HeaderName, HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures_util::StreamExt;
use http_body::Frame;
use tether_protocol::{ProcessInfo, StreamName};

use super::follow::{Chunk, Follower};
use super::params::{query_bool, query_time, query_u64};
use crate::attach;
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::table::ProcessTable;

/// Trailer names of a raw response.
const TRAILERS: [&str; 7] = [
    "tether-next-offset",
    "tether-dropped-bytes",
    "tether-status",
    "tether-exit-code",
    "tether-reason",
    "tether-stdout-bytes",
    "tether-stderr-bytes",
];

/// The handler.
pub async fn output(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let process = grant.process(&table, Need::Read, &id)?;
    let sse = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    // Strict like every boolean: `follow=yes` is a 400, not a silent 0.
    let follow = query_bool(&query, "follow")?.unwrap_or(false);
    let streams = match query.get("stream").map(String::as_str) {
        Some("stdout") => vec![StreamName::Stdout],
        Some("stderr") => vec![StreamName::Stderr],
        Some("both") if sse => StreamName::ALL.to_vec(),
        None if sse => StreamName::ALL.to_vec(),
        None => vec![StreamName::Stdout],
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "stream must be stdout or stderr{}, got {other:?}",
                if sse { " or both" } else { "" }
            )))
        }
    };
    let mut starts = [0u64; 2];
    if streams.len() == 1 {
        starts[streams[0].index()] = query_u64(&query, "offset")?.unwrap_or(0);
    }
    for stream in StreamName::ALL {
        if let Some(offset) = query_u64(&query, stream.as_str())? {
            starts[stream.index()] = offset;
        }
    }
    // A time instead of offsets: where the output written from then on
    // starts (the time index, `retained/times.rs`).
    if let Some(since) = query_time(&query, "since")? {
        if query.contains_key("offset")
            || StreamName::ALL
                .iter()
                .any(|s| query.contains_key(s.as_str()))
        {
            return Err(ApiError::InvalidRequest(
                "give since or offsets, not both".into(),
            ));
        }
        starts = process.output().offsets_since(since);
    }
    if sse {
        if let Some(last) = headers.get("last-event-id") {
            let last = last.to_str().unwrap_or_default();
            let (resumed, after_exit) = parse_event_id(last).ok_or_else(|| {
                ApiError::InvalidRequest(format!(
                    "Last-Event-ID must be STDOUT,STDERR offsets (as sent), got {last:?}"
                ))
            })?;
            if after_exit {
                // The client has seen the exit: tell its EventSource to stop.
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            starts = resumed;
        }
    }
    let totals = process.output().totals();
    for stream in StreamName::ALL {
        let (start, end) = (starts[stream.index()], totals[stream.index()]);
        if start > end {
            return Err(ApiError::InvalidRequest(format!(
                "{} offset {start} is past the end of the stream ({end} bytes so far)",
                stream.as_str()
            )));
        }
    }
    let admission = attach::admit(&table, &process, false)?;
    let max = table.config().max_data_frame_bytes;
    let keepalive = table.config().ping_interval();
    let follower = Follower::new(process, streams, starts, max, Some(admission));
    let body = if sse {
        sse_body(follower, follow, keepalive)
    } else {
        raw_body(follower, follow)
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx: stream it, do not buffer.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if sse {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    } else {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        let start = starts[0].max(starts[1]);
        if let Ok(value) = HeaderValue::from_str(&start.to_string()) {
            headers.insert("tether-offset", value);
        }
        headers.insert(
            "trailer",
            HeaderValue::from_static(
                "tether-next-offset, tether-dropped-bytes, tether-status, tether-exit-code, tether-reason, tether-stdout-bytes, tether-stderr-bytes",
            ),
        );
    }
    Ok(response)
}

/// `STDOUT,STDERR` or `STDOUT,STDERR,exit`.
fn parse_event_id(id: &str) -> Option<([u64; 2], bool)> {
    let mut parts = id.trim().split(',');
    let stdout = parts.next()?.parse().ok()?;
    let stderr = parts.next()?.parse().ok()?;
    let after_exit = match parts.next() {
        None => false,
        Some("exit") => true,
        Some(_) => return None,
    };
    parts
        .next()
        .is_none()
        .then_some(([stdout, stderr], after_exit))
}

fn raw_body(follower: Follower, follow: bool) -> Body {
    struct State {
        follower: Follower,
        dropped: u64,
        exit: Option<ProcessInfo>,
        done: bool,
    }
    let state = State {
        follower,
        dropped: 0,
        exit: None,
        done: false,
    };
    let frames = futures_util::stream::unfold(state, move |mut state| async move {
        if state.done {
            return None;
        }
        loop {
            match state.follower.next(follow).await {
                Some(Chunk::Data { bytes, .. }) => {
                    return Some((Ok::<_, Infallible>(Frame::data(bytes)), state))
                }
                Some(Chunk::Dropped { length, .. }) => state.dropped += length,
                Some(Chunk::Exit(info)) => state.exit = Some(*info),
                None => break,
            }
        }
        state.done = true;
        let trailers = trailers(&state.follower, state.dropped, state.exit.as_ref());
        Some((Ok(Frame::trailers(trailers)), state))
    });
    Body::new(http_body_util::StreamBody::new(frames))
}

fn trailers(follower: &Follower, dropped: u64, exit: Option<&ProcessInfo>) -> HeaderMap {
    let info = exit.cloned().unwrap_or_else(|| follower.process().info());
    let next = follower.offsets().into_iter().max().unwrap_or(0);
    let reason = info
        .reason
        .and_then(|r| serde_json::to_value(r).ok())
        .and_then(|v| v.as_str().map(str::to_string));
    let values = [
        Some(next.to_string()),
        Some(dropped.to_string()),
        Some(if exit.is_some() { "exited" } else { "running" }.to_string()),
        info.exit_code.map(|c| c.to_string()),
        reason,
        Some(info.stdout_bytes.to_string()),
        Some(info.stderr_bytes.to_string()),
    ];
    let mut map = HeaderMap::new();
    for (name, value) in TRAILERS.iter().zip(values) {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            map.insert(HeaderName::from_static(name), value);
        }
    }
    map
}

fn sse_body(follower: Follower, follow: bool, keepalive: std::time::Duration) -> Body {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Reconnect soon after a cut.
    let first = futures_util::stream::once(async { Bytes::from_static(b"retry: 1000\n\n") });
    let events = futures_util::stream::unfold(
        (follower, ticks),
        move |(mut follower, mut ticks)| async move {
            let chunk = tokio::select! {
                chunk = follower.next(follow) => chunk?,
                _ = ticks.tick() => return Some((Bytes::from_static(b": keepalive\n\n"), (follower, ticks))),
            };
            let event = sse_event(&chunk, follower.offsets());
            Some((Bytes::from(event), (follower, ticks)))
        },
    );
    Body::from_stream(first.chain(events).map(Ok::<_, Infallible>))
}

/// One event: `event:`, `id:` with the offsets after it, `data:`.
fn sse_event(chunk: &Chunk, [stdout, stderr]: [u64; 2]) -> String {
    let (event, data, id) = match chunk {
        Chunk::Data { stream, bytes, .. } => (
            stream.as_str(),
            base64::engine::general_purpose::STANDARD.encode(bytes),
            format!("{stdout},{stderr}"),
        ),
        Chunk::Dropped {
            stream,
            offset,
            length,
        } => (
            "dropped",
            serde_json::json!({"stream": stream.as_str(), "offset": offset, "length": length})
                .to_string(),
            format!("{stdout},{stderr}"),
        ),
        Chunk::Exit(info) => (
            "exit",
            serde_json::to_string(info).unwrap_or_default(),
            format!("{stdout},{stderr},exit"),
        ),
    };
    format!("event: {event}\nid: {id}\ndata: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_round_trip_and_junk_is_refused() {
        assert_eq!(parse_event_id("5,7"), Some(([5, 7], false)));
        assert_eq!(parse_event_id("5,7,exit"), Some(([5, 7], true)));
        for junk in ["", "5", "5,x", "5,7,8", "5,7,exit,1", "-1,2"] {
            assert_eq!(parse_event_id(junk), None, "{junk:?}");
        }
    }
}
