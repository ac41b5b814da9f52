//! Who may use the API: the bearer token, the Origin of browser requests
//! (against cross-site request forgery and WebSocket hijacking), and, when
//! no token is set, the Host (against DNS rebinding).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::Config;
use crate::error::ApiError;
use crate::table::ProcessTable;

/// Middleware for `/v1`, before any handler or upgrade:
/// - without a token, a `Host` that is neither an IP address nor
///   `localhost` is refused (403): a page on a rebound domain name must not
///   reach a loopback server;
/// - with a token, 401 unless it is presented;
/// - a request with an `Origin` that is neither the server's own origin nor
///   in `--allow-origin` is refused (403), so a web page elsewhere can
///   neither POST a command (a "simple" cross-site request needs no
///   preflight) nor open a WebSocket. Clients that send no Origin (programs)
///   are not browsers and pass.
pub async fn check(
    State(table): State<Arc<ProcessTable>>,
    request: Request,
    next: Next,
) -> Response {
    match admit(table.config(), &request) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The decision of [`check`], for routes that answer in another error
/// format (the Kubernetes routes answer with a `Status`).
pub fn admit(config: &Config, request: &Request) -> Result<(), ApiError> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    match &config.token {
        None if !host.is_empty() && !is_local_host(host) => {
            return Err(ApiError::ForbiddenHost(host.to_string()));
        }
        Some(token)
            if !presented_token(request)
                .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes())) =>
        {
            return Err(ApiError::Unauthorized);
        }
        _ => {}
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host));
        if !same && !config.allow_origins.iter().any(|o| o == origin) {
            return Err(ApiError::ForbiddenOrigin(origin.to_string()));
        }
    }
    Ok(())
}

/// True for an IP address or `localhost` (with or without a port): names
/// that DNS rebinding cannot point at this server.
fn is_local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(name, _)| name),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
            _ => host,
        },
    };
    let name = name.to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<IpAddr>().is_ok()
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

/// Compares in time that depends only on the length of the guess `a`,
/// never on the token `b` or on how much of the guess was right: every
/// byte of the guess is compared (with the token repeated, when lengths
/// differ), so neither an early exit nor the token's length shows.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if b.is_empty() {
        return a.is_empty();
    }
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b[i % b.len()];
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
        assert!(!constant_time_eq(b"secretsecret", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn only_addresses_and_localhost_are_local_hosts() {
        for host in [
            "127.0.0.1:7420",
            "localhost",
            "LOCALHOST:80",
            "[::1]:7420",
            "10.1.2.3",
            "app.localhost:1",
        ] {
            assert!(is_local_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7420",
            "127.0.0.1.evil.example",
            "[::1",
        ] {
            assert!(!is_local_host(host), "{host}");
        }
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%2Fb%3d"), "a/b=");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
