//! `POST /v1/processes/{id}/tokens`: the operator mints a token scoped to
//! one process, with some rights, for a while. The answer is the only
//! place the token appears; audit lines name its id.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::table::ProcessTable;
use crate::token::{instance_of, new_token_id, now_ms, Claims, Rights};

/// Lifetime of a token when the request does not say: one hour.
pub const DEFAULT_TTL_MS: u64 = 3_600_000;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintRequest {
    /// Any of `read`, `write`, `kill`; `read` is always included.
    #[serde(default)]
    pub rights: Vec<String>,
    /// Lifetime in ms (default one hour, at most `--max-token-ttl-ms`).
    pub ttl_ms: Option<u64>,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct MintedToken {
    /// The bearer token: give it to whoever should have these rights.
    pub token: String,
    /// Its id, as audit lines name it.
    pub token_id: String,
    pub process: String,
    pub rights: Vec<&'static str>,
    /// Expiry, ms since the epoch.
    pub expires_at_ms: u64,
}

/// Mints a scoped token (operator only: a scoped token can never mint).
pub async fn mint(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<MintedToken>), ApiError> {
    grant.require(&table, Need::Mint)?;
    let process = grant.process(&table, Need::Read, &id)?;
    let config = table.config();
    let body = body.map_err(|_| ApiError::BodyTooLarge(config.max_body_bytes))?;
    let request: MintRequest = if body.is_empty() {
        MintRequest {
            rights: Vec::new(),
            ttl_ms: None,
        }
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))?
    };
    let rights = Rights::from_names(&request.rights).map_err(ApiError::InvalidRequest)?;
    let ttl = request.ttl_ms.unwrap_or(DEFAULT_TTL_MS);
    if ttl == 0 || ttl > config.max_token_ttl_ms {
        return Err(ApiError::InvalidRequest(format!(
            "ttl_ms must be between 1 and {} (--max-token-ttl-ms), got {ttl}",
            config.max_token_ttl_ms
        )));
    }
    let claims = Claims {
        token_id: new_token_id(),
        process: process.id.clone(),
        instance: instance_of(process.started_at),
        rights,
        expires_ms: now_ms().saturating_add(ttl),
    };
    let token = config.signing_key.sign(&claims);
    tracing::info!(
        target: "audit",
        event = "mint",
        identity = %grant.identity(),
        process = %process.id,
        peer = %grant.peer,
        rights = %grant.rights(),
        token_id = %claims.token_id,
        granted = %rights.names().join(","),
        ttl_ms = ttl,
        "mint"
    );
    Ok((
        StatusCode::CREATED,
        Json(MintedToken {
            token,
            token_id: claims.token_id,
            process: claims.process,
            rights: rights.names(),
            expires_at_ms: claims.expires_ms,
        }),
    ))
}
