//! `POST /v1/exec`: a command's whole result in one request, for the
//! simplest clients (an agent's tool call, a shell script with curl). The
//! body is a spawn request plus two fields of its own; the answer, once the
//! process has exited, is its process object with `stdout` and `stderr`
//! beside it: text when the bytes are valid UTF-8, base64 otherwise, each
//! the first `max_output_bytes` of its stream (the cap is in the answer).
//!
//! Output is read while the process runs (from offset 0, as an attachment
//! would), so the first bytes are kept however much follows. A deadline
//! (`timeout_ms`) answers reason `timeout` with what was printed before it.
//!
//! Inside the budgets: `max_output_bytes` is at most
//! `--max-exec-output-bytes`, and three times it per stream (the bytes
//! kept, their encoding, the answer's body) is reserved against
//! `--retain-total` before the command starts (503 `retention_exhausted`
//! when it does not fit). Output that is not clean text (invalid UTF-8, or
//! a control character JSON would spell as a six-byte `\u00XX`) is sent as
//! base64, so the answer is at most 4/3 of the bytes.
//!
//! `input` (text) or `input_base64` is written to the command's stdin, which
//! is then closed (bounded by `--max-body-bytes`, as the whole body is).
//!
//! A client that goes away kills the command (`kill_on_disconnect`, default
//! true): an interrupted `curl` or a cancelled tool call should not leave
//! work running that nobody will read. `kill_on_disconnect: false` leaves it
//! running (listed, readable through `output` until the exited TTL).
//!
//! A command still running after `--ping-interval-ms` is answered at once
//! (200, the body to come) and its connection kept busy with a space every
//! ping interval until the document follows (JSON allows whitespace before
//! it): a reverse proxy's read timeout (nginx: 60 s of silence) would
//! otherwise cut the request, and with it kill the command. A quicker one
//! is answered whole, with a `Content-Length`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Serialize;
use tether_protocol::api::SpawnRequest;
use tether_protocol::{ExitReason, ProcessInfo, StreamName};
use tokio::sync::oneshot;
use tokio::time::{Interval, MissedTickBehavior};

use super::follow::{Chunk, Follower};
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::listen::ClientFinished;
use crate::process::Process;
use crate::table::ProcessTable;

/// Default of `max_output_bytes`.
pub const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;

/// The answer.
#[derive(Debug, Serialize)]
pub struct ExecResponse {
    /// The exited process object.
    #[serde(flatten)]
    pub process: ProcessInfo,
    /// Its stdout (up to the cap).
    pub stdout: CapturedOutput,
    /// Its stderr (up to the cap; empty on a PTY).
    pub stderr: CapturedOutput,
    /// The cap that applied to each stream.
    pub max_output_bytes: u64,
}

/// One stream's captured output.
#[derive(Debug, Default, Serialize)]
pub struct CapturedOutput {
    /// The bytes: as text, or base64 (see `encoding`).
    pub data: String,
    /// `utf8` or `base64`.
    pub encoding: &'static str,
    /// Bytes in `data` (before encoding).
    pub bytes: u64,
    /// True when the stream has more than the cap (see `stdout_bytes` or
    /// `stderr_bytes` of the process object for its total).
    pub truncated: bool,
    /// Bytes within the cap that were evicted before they could be read
    /// (only with a `retain_bytes` smaller than the output).
    pub dropped: u64,
}

/// How often an answer is kept busy once the client has finished sending:
/// a client that closed altogether is noticed at the second write, so
/// its command ends within moments, as it did before half-closes were
/// answered.
const HALF_CLOSED_PROBE: Duration = Duration::from_millis(250);

/// The handler.
pub async fn exec(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    client: Option<Extension<ClientFinished>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    grant.require(&table, Need::Spawn)?;
    let max_body = table.config().max_body_bytes;
    let body = body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(_) => ApiError::BodyTooLarge(max_body),
        other => ApiError::InvalidRequest(other.body_text()),
    })?;
    let mut fields: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))?;
    let most = table.config().max_exec_output_bytes;
    let cap = match fields.remove("max_output_bytes") {
        None => DEFAULT_MAX_OUTPUT.min(most),
        Some(value) => value.as_u64().ok_or_else(|| {
            ApiError::InvalidRequest("max_output_bytes must be a non-negative integer".into())
        })?,
    };
    if cap > most {
        return Err(ApiError::InvalidRequest(format!(
            "max_output_bytes {cap} is more than this server's --max-exec-output-bytes {most}"
        )));
    }
    let input = take_input(&mut fields)?;
    let kill_on_disconnect = match fields.remove("kill_on_disconnect") {
        None => true,
        Some(value) => value.as_bool().ok_or_else(|| {
            ApiError::InvalidRequest("kill_on_disconnect must be true or false".into())
        })?,
    };
    let mut request: SpawnRequest = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))?;
    if input.is_some() {
        request.stdin = true;
    }
    let budget = table.reserve_memory(cap.saturating_mul(3 * StreamName::ALL.len() as u64))?;
    let (process, _) = table.spawn(request, None).await?;
    let process_id = process.id.clone();
    grant.audit("spawn", &process.id);
    if let Some(input) = input {
        // Beside the reading below: a command that prints before it reads
        // never waits on us.
        let process = process.clone();
        tokio::spawn(async move {
            if !input.is_empty() {
                if let Err(e) = process.write_stdin(input).await {
                    tracing::debug!(id = %process.id, error = %e, "exec input not written whole");
                }
            }
            let _ = process.close_stdin().await;
        });
    }
    // Collected in a task of its own, which outlives this handler once the
    // answer has started (below). The receiver going away is the client
    // going away, before or after that.
    let (answer_tx, mut answer_rx) = oneshot::channel::<ExecResponse>();
    let max = table.config().max_data_frame_bytes;
    tokio::spawn(async move {
        let _budget = budget;
        let mut answer_tx = answer_tx;
        let outcome = tokio::select! {
            answer = collect(process.clone(), cap, max) => Some(answer),
            _ = answer_tx.closed() => None,
        };
        match outcome {
            Some(answer) => {
                let _ = answer_tx.send(answer);
            }
            None if kill_on_disconnect => {
                tracing::info!(id = %process.id, "exec client went away; killing (kill_on_disconnect)");
                process.kill(ExitReason::Killed).await;
            }
            None => {}
        }
    });
    // A handover interrupts the wait: answered at once, never cut.
    let interrupted = ApiError::ExecInterrupted(if kill_on_disconnect {
        format!(
            "the server is restarting in place (a handover): process {} was killed, as kill_on_disconnect asks; run the command again in a moment",
            process_id
        )
    } else {
        format!(
            "the server is restarting in place (a handover): process {id} runs on; wait for it with GET /v1/processes/{id}/wait and read GET /v1/processes/{id}/output",
            id = process_id
        )
    });
    let mut restarting = table.restarting();
    let mut ping = table.config().ping_interval();
    let mut client = client.map(|Extension(finished)| finished);
    let finished = async {
        match client.as_mut() {
            Some(finished) => finished.wait().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        answer = &mut answer_rx => {
            let answer = answer.map_err(|_| ApiError::Internal("exec ended without an answer".into()))?;
            return Ok(Json(answer).into_response());
        }
        _ = tokio::time::sleep(ping) => {}
        // The client finished sending: it half-closed, and is answered, or
        // it closed altogether, which only the answer's writes can tell,
        // so they start now and come often.
        () = finished => ping = ping.min(HALF_CLOSED_PROBE),
        true = crate::attach::until_restarting(&mut restarting) => return Err(interrupted),
    }
    let mut ticks = tokio::time::interval(ping);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let body = futures_util::stream::unfold(
        Some((answer_rx, ticks, restarting, interrupted.body())),
        keep_busy,
    );
    Ok((
        [(CONTENT_TYPE, "application/json")],
        Body::from_stream(body),
    )
        .into_response())
}

/// What the body of an answer that started keeps: the answer to come, the
/// ticks, the handover's news and what to say then.
type Busy = (
    oneshot::Receiver<ExecResponse>,
    Interval,
    tokio::sync::watch::Receiver<bool>,
    tether_protocol::api::ErrorBody,
);

/// The body of an answer that started before the exit: a space every tick
/// (the interval's first at once), then the document, then the end. At a
/// handover the document is the error body instead (the status went out
/// with the first space).
async fn keep_busy(state: Option<Busy>) -> Option<(std::io::Result<Bytes>, Option<Busy>)> {
    let (mut answer, mut ticks, mut restarting, interrupted) = state?;
    tokio::select! {
        true = crate::attach::until_restarting(&mut restarting) => {
            let document = serde_json::to_vec(&interrupted).map_err(std::io::Error::other).map(Bytes::from);
            Some((document, None))
        }
        done = &mut answer => {
            let document = done
                .map_err(|_| std::io::Error::other("exec ended without an answer"))
                .and_then(|answer| serde_json::to_vec(&answer).map_err(std::io::Error::other))
                .map(Bytes::from);
            Some((document, None))
        }
        _ = ticks.tick() => Some((Ok(Bytes::from_static(b" ")), Some((answer, ticks, restarting, interrupted)))),
    }
}

/// Reads both streams from offset 0 until the exit: the answer, the first
/// `cap` bytes of each kept.
async fn collect(process: Arc<Process>, cap: u64, max_frame: usize) -> ExecResponse {
    let mut follower = Follower::new(process, StreamName::ALL.to_vec(), [0, 0], max_frame, None);
    let mut kept: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut dropped = [0u64; 2];
    let info = loop {
        match follower.next(true).await {
            Some(Chunk::Data { stream, bytes, .. }) => {
                let kept = &mut kept[stream.index()];
                let room = (cap as usize).saturating_sub(kept.len());
                kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
            Some(Chunk::Dropped {
                stream,
                offset,
                length,
            }) => {
                let within = cap.saturating_sub(offset).min(length);
                dropped[stream.index()] += within;
            }
            Some(Chunk::Exit(info)) => break *info,
            None => break follower.process().info(),
        }
    };
    let totals = [info.stdout_bytes, info.stderr_bytes];
    let [stdout, stderr] = StreamName::ALL.map(|stream| {
        let i = stream.index();
        captured(std::mem::take(&mut kept[i]), totals[i] > cap, dropped[i])
    });
    ExecResponse {
        process: info,
        stdout,
        stderr,
        max_output_bytes: cap,
    }
}

/// `input` (text) or `input_base64` (not both): the bytes for stdin.
fn take_input(
    fields: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Option<Vec<u8>>, ApiError> {
    let text = fields.remove("input");
    let encoded = fields.remove("input_base64");
    let bad = |what: &str| ApiError::InvalidRequest(format!("{what} must be a string"));
    match (text, encoded) {
        (Some(_), Some(_)) => Err(ApiError::InvalidRequest(
            "give input or input_base64, not both".into(),
        )),
        (Some(text), None) => Ok(Some(
            text.as_str()
                .ok_or_else(|| bad("input"))?
                .as_bytes()
                .to_vec(),
        )),
        (None, Some(encoded)) => {
            let encoded = encoded.as_str().ok_or_else(|| bad("input_base64"))?;
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Some)
                .map_err(|e| ApiError::InvalidRequest(format!("input_base64 is not base64: {e}")))
        }
        (None, None) => Ok(None),
    }
}

/// Text JSON carries at no more than twice its size: valid UTF-8 without
/// the control characters JSON spells as six bytes (`\u0000`); tab,
/// newline, carriage return, backspace and form feed have two-byte escapes.
fn is_clean_text(text: &str) -> bool {
    text.bytes()
        .all(|b| b >= 0x20 || matches!(b, b'\t' | b'\n' | b'\r' | 0x08 | 0x0c))
}

fn captured(bytes: Vec<u8>, truncated: bool, dropped: u64) -> CapturedOutput {
    let length = bytes.len() as u64;
    let base64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let (data, encoding) = match String::from_utf8(bytes) {
        Ok(text) if is_clean_text(&text) => (text, "utf8"),
        Ok(text) => (base64(text.into_bytes()), "base64"),
        Err(e) => (base64(e.into_bytes()), "base64"),
    };
    CapturedOutput {
        data,
        encoding,
        bytes: length,
        truncated,
        dropped,
    }
}
