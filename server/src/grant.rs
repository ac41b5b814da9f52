//! What a request may do: the [`Grant`] its token earned (the operator, or
//! a scoped token for one process with some rights), and the one decision
//! every route makes through it: HTTP routes (status, wait, output and its
//! Server-Sent Events, screen, stdin, resize, signal, kill, DELETE, spawn,
//! exec, the list's pages), the WebSocket attach (with or without
//! `screen=1`) and each frame an attachment sends, the mint route, the
//! Kubernetes routes, and any route added later. Refusals and the actions that matter are written as audit lines
//! (tracing target `audit`), naming the identity (`operator` or
//! `token:ID`, never the secret), the process, the peer and the rights.

use std::sync::Arc;

use crate::error::ApiError;
use crate::process::Process;
use crate::table::ProcessTable;
use crate::token::{instance_of, now_ms, Claims};
use crate::transport::Peer;

/// Who holds the request's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// The operator token (or no token on a `--no-token` server).
    Operator,
    /// A scoped token, verified.
    Scoped(Claims),
}

/// What one request was granted, fixed by its token when it arrived.
#[derive(Debug, Clone)]
pub struct Grant {
    pub holder: Holder,
    pub peer: Peer,
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Start a process (`POST /v1/processes`, `/v1/exec`, Kubernetes exec).
    Spawn,
    /// List every process (any page).
    List,
    /// Mint a scoped token.
    Mint,
    /// Read a process: status, wait, attach, output, screen.
    Read,
    /// Act on it: stdin, resize, signal.
    Write,
    /// Kill it (`kill`, `DELETE ?force=1`) and forget it (DELETE).
    Kill,
    /// Hand the server over to a new binary (`POST /v1/admin/upgrade`).
    Upgrade,
}

impl Need {
    fn as_str(self) -> &'static str {
        match self {
            Need::Spawn => "spawn",
            Need::List => "list",
            Need::Mint => "mint",
            Need::Read => "read",
            Need::Write => "write",
            Need::Kill => "kill",
            Need::Upgrade => "upgrade",
        }
    }
}

impl Grant {
    /// The identity for audit lines: `operator` or `token:ID`.
    pub fn identity(&self) -> String {
        match &self.holder {
            Holder::Operator => "operator".to_string(),
            Holder::Scoped(claims) => format!("token:{}", claims.token_id),
        }
    }

    /// The rights held, for audit lines.
    pub fn rights(&self) -> String {
        match &self.holder {
            Holder::Operator => "operator".to_string(),
            Holder::Scoped(claims) => claims.rights.names().join(","),
        }
    }

    /// True when this grant may act on (not only read) its process.
    pub fn may_write(&self) -> bool {
        match &self.holder {
            Holder::Operator => true,
            Holder::Scoped(claims) => claims.rights.write,
        }
    }

    /// When the grant ends (ms since the epoch), if it does.
    pub fn expires_ms(&self) -> Option<u64> {
        match &self.holder {
            Holder::Operator => None,
            Holder::Scoped(claims) => Some(claims.expires_ms),
        }
    }

    /// The decision for a route that names no process (spawn, list).
    pub fn require(&self, table: &ProcessTable, need: Need) -> Result<(), ApiError> {
        let decision = decide(&self.holder, need, None);
        self.refused_if(table, need, None, decision)
    }

    /// The decision for a route on process `id` (an id or a name), which it
    /// returns. For a scoped token, anything that does not name its own
    /// process is the same refusal, whether it names another process, a
    /// process of another node or nothing at all: it learns nothing about
    /// other processes, not even whether they exist.
    pub fn process(
        &self,
        table: &ProcessTable,
        need: Need,
        id: &str,
    ) -> Result<Arc<Process>, ApiError> {
        let process = match &self.holder {
            Holder::Operator => table.get(id)?,
            Holder::Scoped(claims) => match table.get(id) {
                Ok(process) if process.id == claims.process => process,
                _ => {
                    let error = ApiError::OutOfScope(format!(
                        "this token is for process {} only",
                        claims.process
                    ));
                    refused(
                        table,
                        &self.identity(),
                        &self.peer,
                        need.as_str(),
                        Some(id),
                        &error,
                    );
                    return Err(error);
                }
            },
        };
        self.act_on(table, need, &process)?;
        Ok(process)
    }

    /// The decision for an action on a process already in hand (the frames
    /// of an attachment, decided again for each: a token may have expired
    /// since the attach).
    pub fn act_on(
        &self,
        table: &ProcessTable,
        need: Need,
        process: &Process,
    ) -> Result<(), ApiError> {
        let decision = decide(&self.holder, need, Some(process));
        self.refused_if(table, need, Some(&process.id), decision)
    }

    /// The same decision as [`Grant::act_on`] without a refusal's audit
    /// line and metric: for a fast path that hands refusals to the way that
    /// reports them.
    pub fn allows(&self, need: Need, process: &Process) -> bool {
        decide(&self.holder, need, Some(process)).is_ok()
    }

    fn refused_if(
        &self,
        table: &ProcessTable,
        need: Need,
        process: Option<&str>,
        decision: Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        if let Err(error) = &decision {
            refused(
                table,
                &self.identity(),
                &self.peer,
                need.as_str(),
                process,
                error,
            );
        }
        decision
    }

    /// Writes the audit line of an action that happened.
    pub fn audit(&self, event: &str, process: &str) {
        tracing::info!(
            target: "audit",
            event,
            identity = %self.identity(),
            process,
            peer = %self.peer,
            rights = %self.rights(),
            "{event}"
        );
    }
}

/// The one rule. The operator may do everything. A scoped token may only
/// read or act on the one process instance it names, with the rights it
/// carries, until it expires; never spawn, list or mint.
fn decide(holder: &Holder, need: Need, process: Option<&Process>) -> Result<(), ApiError> {
    let claims = match holder {
        Holder::Operator => return Ok(()),
        Holder::Scoped(claims) => claims,
    };
    if now_ms() >= claims.expires_ms {
        return Err(ApiError::TokenExpired);
    }
    let Some(process) = process else {
        return Err(ApiError::OutOfScope(format!(
            "a token scoped to process {} cannot {}",
            claims.process,
            need.as_str()
        )));
    };
    if process.id != claims.process || instance_of(process.started_at) != claims.instance {
        return Err(ApiError::OutOfScope(format!(
            "this token is for process {} only",
            claims.process
        )));
    }
    let held = match need {
        Need::Read => claims.rights.read,
        Need::Write => claims.rights.write,
        Need::Kill => claims.rights.kill,
        Need::Spawn | Need::List | Need::Mint | Need::Upgrade => false,
    };
    if held {
        Ok(())
    } else {
        Err(ApiError::MissingRight(need.as_str()))
    }
}

/// Counts a refused request by reason (its error code) and writes its
/// audit line.
pub fn refused(
    table: &ProcessTable,
    identity: &str,
    peer: &Peer,
    need: &str,
    process: Option<&str>,
    error: &ApiError,
) {
    let (status, code) = error.status_and_code();
    table.metrics.refused(code);
    tracing::info!(
        target: "audit",
        event = "refused",
        identity,
        process = process.unwrap_or(""),
        peer = %peer,
        need,
        status = status.as_u16(),
        reason = code,
        "refused"
    );
}
