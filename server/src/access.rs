//! Who may use the API: the bearer token, and the Origin of WebSocket
//! upgrades (against cross-site WebSocket hijacking).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::table::ProcessTable;

/// Middleware for `/v1`: 401 without the right token, 403 for a WebSocket
/// upgrade from a foreign origin. Runs before any upgrade.
pub async fn check(
    State(table): State<Arc<ProcessTable>>,
    request: Request,
    next: Next,
) -> Response {
    let config = table.config();
    if let Some(token) = &config.token {
        if !presented_token(&request)
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
        {
            return ApiError::Unauthorized.into_response();
        }
    }
    let upgrade = request
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if upgrade {
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let host = request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            let same = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|rest| rest.eq_ignore_ascii_case(host));
            if !same && !config.allow_origins.iter().any(|o| o == origin) {
                return ApiError::ForbiddenOrigin(origin.to_string()).into_response();
            }
        }
    }
    next.run(request).await
}

/// The token from `Authorization: Bearer`, else from `access_token=` in the
/// query (browsers cannot set headers on a WebSocket).
fn presented_token(request: &Request) -> Option<String> {
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        return value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
    }
    let query = request.uri().query()?;
    query.split('&').find_map(|pair| {
        let value = pair.strip_prefix("access_token=")?;
        Some(percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Compares without an early exit, so timing does not reveal how much of a
/// guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%2Fb%3d"), "a/b=");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
