//! Scoped tokens: [`Client::mint_token`] and what it answers.

use std::time::Duration;

use reqwest::Method;

use crate::base_url::path_segment;
use crate::client::Client;
use crate::error::{Error, Result};

/// A scoped token minted by [`Client::mint_token`].
#[derive(Debug, Clone, serde::Deserialize)]
pub struct MintedToken {
    /// The bearer token.
    pub token: String,
    /// Its id, as the server's audit lines name it.
    pub token_id: String,
    /// The process it reaches.
    pub process: String,
    /// Its rights.
    pub rights: Vec<String>,
    /// Expiry, ms since the epoch.
    pub expires_at_ms: u64,
}

impl Client {
    /// `POST /v1/processes/{id}/tokens`: mints a token for this one process
    /// with `rights` (any of `read`, `write`, `kill`; read is implied),
    /// valid for `ttl` (operator only). Not retried.
    pub async fn mint_token(
        &self,
        id: &str,
        rights: &[&str],
        ttl: Duration,
    ) -> Result<MintedToken> {
        let body = serde_json::to_vec(&serde_json::json!({
            "rights": rights,
            "ttl_ms": ttl.as_millis() as u64,
        }))
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.request(
            Method::POST,
            &format!("/v1/processes/{}/tokens", path_segment(id)),
            Some(body),
            None,
            self.request_timeout(),
        )
        .await
    }
}
