//! Request parameters that several HTTP routes read the same way: query
//! integers and booleans, and the `Idempotency-Key` header. Kept apart
//! from the routes (`http.rs`, `http_attach.rs`, `http_output.rs`) so that
//! none of them imports another.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;

use crate::config::Config;
use crate::error::ApiError;
use crate::process::input_once::{IdempotencyKey, MAX_KEY_BYTES};

type ApiResult<T> = Result<T, ApiError>;

/// Parses an optional unsigned integer query parameter.
pub(crate) fn query_u64(query: &HashMap<String, String>, name: &str) -> ApiResult<Option<u64>> {
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

/// Parses an optional boolean query parameter: `1`/`true` or `0`/`false`,
/// anything else is a 400 (a misspelt `readonly=yes` must not silently mean
/// read-write).
pub(crate) fn query_bool(query: &HashMap<String, String>, name: &str) -> ApiResult<Option<bool>> {
    query
        .get(name)
        .map(|v| match v.as_str() {
            "1" | "true" => Ok(true),
            "0" | "false" => Ok(false),
            _ => Err(ApiError::InvalidRequest(format!(
                "{name} must be 1, 0, true or false, got {v:?}"
            ))),
        })
        .transpose()
}

/// The `Idempotency-Key` header, if any, as the key of `owner` (the
/// grant's identity): 1 to [`MAX_KEY_BYTES`] bytes of visible ASCII, else
/// a 400 naming the header and the bound, before anything is kept.
pub(crate) fn idempotency_key(
    headers: &HeaderMap,
    owner: String,
) -> ApiResult<Option<IdempotencyKey>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let len = value.len();
    if !(1..=MAX_KEY_BYTES).contains(&len) {
        return Err(ApiError::InvalidRequest(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_BYTES} bytes, got {len}"
        )));
    }
    let key = value
        .to_str()
        .map_err(|_| ApiError::InvalidRequest("Idempotency-Key must be ASCII".into()))?;
    Ok(Some(IdempotencyKey {
        owner,
        key: key.to_string(),
    }))
}

/// A time in the query (`since`): RFC 3339 (`2026-12-06T07:00:00Z`) or
/// milliseconds since the epoch; ms since the epoch, or 400.
pub fn query_time(query: &HashMap<String, String>, key: &str) -> Result<Option<u64>, ApiError> {
    let Some(text) = query.get(key) else {
        return Ok(None);
    };
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(Some(ms));
    }
    humantime::parse_rfc3339_weak(text)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| Some(d.as_millis() as u64))
        .ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "{key} must be an RFC 3339 time (2026-12-06T07:00:00Z) or milliseconds since the epoch, got {text:?}"
            ))
        })
}

/// The body, or why it could not be read: too large (413), too slow (408).
pub fn body_bytes(body: Result<Bytes, BytesRejection>, config: &Config) -> ApiResult<Bytes> {
    body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(e) if crate::listen::is_body_timeout(&e) => {
            ApiError::BodyTimeout(config.body_timeout_ms)
        }
        BytesRejection::FailedToBufferBody(_) => ApiError::BodyTooLarge(config.max_body_bytes),
        other => ApiError::InvalidRequest(other.body_text()),
    })
}

/// Parses a JSON body with a message that says what is wrong.
pub fn json_body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    config: &Config,
) -> ApiResult<T> {
    let body = body_bytes(body, config)?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))
}
