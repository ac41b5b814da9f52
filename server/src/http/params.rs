//! Request parameters that several HTTP routes read the same way: query
//! integers and booleans, and a spawn's `Idempotency-Key` header. Kept apart
//! from the routes (`http.rs`, `http_attach.rs`, `http_output.rs`) so that
//! none of them imports another.

use std::collections::HashMap;

use axum::http::HeaderMap;

use crate::error::ApiError;

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

/// The `Idempotency-Key` header of a spawn, if any.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    headers
        .get("idempotency-key")
        .map(|value| {
            value
                .to_str()
                .map(str::to_string)
                .map_err(|_| ApiError::InvalidRequest("Idempotency-Key must be ASCII".into()))
        })
        .transpose()
}
