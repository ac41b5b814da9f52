//! Who may use the API: the token a request presents becomes its
//! [`Grant`] (the operator, or a scoped token for one process), checked by
//! every route through [`Grant`]'s one decision; the Origin of browser
//! requests (against cross-site request forgery and WebSocket hijacking);
//! and, when the server has no token, the Host (against DNS rebinding).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::grant::{refused, Grant, Holder};
use crate::table::ProcessTable;
use crate::token::{instance_of, now_ms, Invalid, SCOPED_PREFIX};
use crate::transport::Peer;

/// Middleware for `/v1`, before any handler or upgrade:
/// - without a server token, a `Host` that is neither an IP address nor
///   `localhost` is refused (403): a page on a rebound domain name must not
///   reach a loopback server;
/// - the presented token is authenticated into a [`Grant`] (401 unless it
///   is the operator token or a valid scoped token whose process is still
///   known; without a server token, no token is the operator);
/// - a request with an `Origin` that is neither the server's own origin nor
///   in `--allow-origin` is refused (403), so a web page elsewhere can
///   neither POST a command (a "simple" cross-site request needs no
///   preflight) nor open a WebSocket. Clients that send no Origin (programs)
///   are not browsers and pass.
///
/// Every refusal is counted and audited.
pub async fn check(
    State(table): State<Arc<ProcessTable>>,
    mut request: Request,
    next: Next,
) -> Response {
    match grant_for(&table, &request) {
        Ok(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

/// The decision of [`check`]: the request's [`Grant`], or its refusal
/// (counted and audited). For routes that answer in another error format
/// (the Kubernetes routes answer with a `Status`).
pub fn grant_for(table: &ProcessTable, request: &Request) -> Result<Grant, ApiError> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map_or(Peer::Unknown, |info| info.0.clone());
    match admit(table, request) {
        Ok(holder) => Ok(Grant { holder, peer }),
        Err((identity, error)) => {
            refused(table, &identity, &peer, "access", None, &error);
            Err(error)
        }
    }
}

/// The holder of the request's token, or the refusal with the identity it
/// claimed.
fn admit(table: &ProcessTable, request: &Request) -> Result<Holder, (String, ApiError)> {
    let config = table.config();
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let presented = presented_token(request);
    let anonymous = || ("anonymous".to_string(), ApiError::Unauthorized);
    if !config.token.is_some() && !host.is_empty() && !is_local_host(host) {
        return Err((
            "anonymous".into(),
            ApiError::ForbiddenHost(host.to_string()),
        ));
    }
    let operator = config.token.get();
    let holder = match (&presented, &operator) {
        (Some(token), _) if token.starts_with(SCOPED_PREFIX) => {
            let claims = match config.signing_key.verify(token, now_ms()) {
                Ok(claims) => claims,
                Err(Invalid::BadToken) => return Err(anonymous()),
                Err(Invalid::Expired) => {
                    return Err(("scoped".into(), ApiError::TokenExpired));
                }
            };
            let identity = format!("token:{}", claims.token_id);
            match table.get(&claims.process) {
                Ok(process) if instance_of(process.started_at) == claims.instance => {}
                _ => return Err((identity, ApiError::TokenProcessGone)),
            }
            Holder::Scoped(claims)
        }
        (Some(token), Some(operator))
            if constant_time_eq(token.as_bytes(), operator.as_bytes()) =>
        {
            Holder::Operator
        }
        (None, None) => Holder::Operator,
        // A server without a token takes any other token as no token.
        (Some(_), None) => Holder::Operator,
        _ => return Err(anonymous()),
    };
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host));
        if !same && !config.allow_origins.iter().any(|o| o == origin) {
            let identity = match &holder {
                Holder::Operator => "operator".to_string(),
                Holder::Scoped(c) => format!("token:{}", c.token_id),
            };
            return Err((identity, ApiError::ForbiddenOrigin(origin.to_string())));
        }
    }
    Ok(holder)
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

/// The WebSocket subprotocol that carries a token, as
/// `tether.bearer.TOKEN` next to `tether.v1`: browsers cannot set headers
/// on a WebSocket, and a query string ends up in proxies' logs.
pub const BEARER_PROTOCOL_PREFIX: &str = "tether.bearer.";

/// The token from `Authorization: Bearer`, else from a
/// `tether.bearer.TOKEN` WebSocket subprotocol, else from `access_token=`
/// in the query.
fn presented_token(request: &Request) -> Option<String> {
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        return value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
    }
    let offered = request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(BEARER_PROTOCOL_PREFIX));
    if let Some(token) = offered {
        return Some(token.to_string());
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
