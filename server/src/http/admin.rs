//! `POST /v1/admin/upgrade`: hand the server over to a new binary in place
//! (issue 43, `server/src/handover/`). The operator's right only. The
//! answer comes once the new binary passed the preflight (202, the
//! handover has begun) or was refused (409 `upgrade_refused`, the server
//! serves on unchanged).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::Json;
use tether_protocol::api::{ServerRun, UpgradeRequest, UpgradeStarted};

use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::table::ProcessTable;

pub async fn upgrade(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<UpgradeStarted>), ApiError> {
    grant.require(&table, Need::Upgrade)?;
    let bytes = super::params::body_bytes(body, table.config())?;
    let request: UpgradeRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        UpgradeRequest::default()
    } else {
        super::params::json_body(Ok(bytes), table.config())?
    };
    grant.audit("upgrade", "-");
    let outcome = table.request_handover(request.binary.map(Into::into), request.flags)?;
    match outcome.await {
        Ok(Ok(started)) => Ok((StatusCode::ACCEPTED, Json(started))),
        Ok(Err(why)) => Err(ApiError::UpgradeRefused(why)),
        Err(_) => Err(ApiError::Internal(
            "the server did not answer the handover request".into(),
        )),
    }
}

/// `GET /v1/admin/server`: the pid, the version serving and how many
/// handovers the server has made (what `tether admin upgrade` waits on).
pub async fn server(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
) -> Result<Json<ServerRun>, ApiError> {
    grant.require(&table, Need::Upgrade)?;
    Ok(Json(ServerRun {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        handovers: table.handovers.load(std::sync::atomic::Ordering::SeqCst),
    }))
}
