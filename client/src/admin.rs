//! The operator's calls on the server itself: an in-place handover to a
//! new binary (issue 43) and what the server runs now.

use std::time::Duration;

use reqwest::Method;
use tether_protocol::api::{ServerRun, UpgradeRequest, UpgradeStarted};

use crate::client::Client;
use crate::error::{Error, Result};

/// How long a handover may take, from the answer to the new binary
/// serving, before [`Client::upgrade_and_wait`] gives up waiting.
pub const UPGRADE_WAIT: Duration = Duration::from_secs(60);

impl Client {
    /// `POST /v1/admin/upgrade`: asks the server to hand over in place to
    /// `request.binary` (by default the file it was started from), with
    /// its flags plus `request.flags`. Answers once the new binary passed
    /// the preflight; a refused one is an [`Error::Http`] 409
    /// `upgrade_refused` that says why. Not retried.
    pub async fn upgrade(&self, request: &UpgradeRequest) -> Result<UpgradeStarted> {
        let body = serde_json::to_vec(request)
            .map_err(|e| Error::Protocol(format!("cannot encode the request: {e}")))?;
        self.request(
            Method::POST,
            "/v1/admin/upgrade",
            Some(body),
            None,
            self.request_timeout(),
        )
        .await
    }

    /// `GET /v1/admin/server`: the pid, version and handover count of the
    /// server now.
    pub async fn server_run(&self) -> Result<ServerRun> {
        self.request(
            Method::GET,
            "/v1/admin/server",
            None,
            None,
            self.request_timeout(),
        )
        .await
    }

    /// [`Client::upgrade`], then waits (at most [`UPGRADE_WAIT`]) until
    /// the new binary serves: the server's handover count has passed the
    /// one it answered with. While the handover runs, a call may find the
    /// connection closed or queued; it is asked again.
    pub async fn upgrade_and_wait(
        &self,
        request: &UpgradeRequest,
    ) -> Result<(UpgradeStarted, ServerRun)> {
        let started = self.upgrade(request).await?;
        let deadline = tokio::time::Instant::now() + UPGRADE_WAIT;
        let mut pause = Duration::from_millis(10);
        loop {
            match self.server_run().await {
                Ok(run) if run.handovers > started.handovers => return Ok((started, run)),
                Ok(_) | Err(Error::Transport { .. }) | Err(Error::Http { status: 503, .. }) => {}
                Err(other) => return Err(other),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Protocol(format!(
                    "the server did not serve from the new binary within {UPGRADE_WAIT:?}"
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}
