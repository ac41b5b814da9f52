//! Validation of a spawn request: a [`SpawnPlan`] or a 400 that says what
//! is wrong.

use std::time::Duration;

use tether_protocol::api::{SpawnRequest, MAX_NAME_LEN};
use tether_protocol::TermSize;

use super::ProcessTable;
use crate::error::ApiError;
use crate::process::SpawnPlan;

impl ProcessTable {
    /// Turns a request into a plan, or a 400 that says what is wrong.
    pub fn plan(&self, request: SpawnRequest) -> Result<SpawnPlan, ApiError> {
        let bad = |m: String| Err(ApiError::InvalidRequest(m));
        let argv = match (request.argv, request.command) {
            (Some(_), Some(_)) => return bad("give either argv or command, not both".into()),
            (None, None) => return bad("argv or command is required".into()),
            (Some(argv), None) => argv,
            (None, Some(command)) => vec!["/bin/sh".into(), "-c".into(), command],
        };
        if argv.is_empty() || argv[0].is_empty() {
            return bad("argv must name a program".into());
        }
        if argv.iter().any(|a| a.contains('\0')) {
            return bad("argv must not contain NUL bytes".into());
        }
        for (key, value) in &request.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
                return bad(format!(
                    "env {key:?}: names must be non-empty without '=' or NUL, values without NUL"
                ));
            }
        }
        if request.cwd.as_deref().is_some_and(|c| c.contains('\0')) {
            return bad("cwd must not contain NUL bytes".into());
        }
        let tty = if request.tty {
            let cols = request.cols.unwrap_or(TermSize::DEFAULT.cols());
            let rows = request.rows.unwrap_or(TermSize::DEFAULT.rows());
            Some(TermSize::new(cols.into(), rows.into())?)
        } else {
            if request.cols.is_some() || request.rows.is_some() {
                return bad("cols and rows need \"tty\": true".into());
            }
            None
        };
        let screen_bytes = match tty {
            Some(size) => self.screen_bytes(size)?,
            None => 0,
        };
        let retain = request.retain_bytes.unwrap_or(self.config.retain_bytes);
        if retain == 0 {
            return bad("retain_bytes must be at least 1".into());
        }
        let retain = retain.min(self.config.max_retain_bytes);
        let window = retain.min(self.config.retain_memory_bytes.max(1));
        // Memory only, the window is all of the retention.
        let retain = if self.data_dir.is_some() {
            retain
        } else {
            window
        };
        let limits = self.config.limits.resolve(request.limits.as_ref())?;
        if let Some(why) = crate::contain::current().limits_refusal(&limits) {
            return Err(ApiError::LimitsUnavailable(why));
        }
        let metadata_bytes = SpawnPlan::metadata_of(&argv, request.record_input);
        if let Some(name) = &request.name {
            check_name(name)?;
        }
        let (identity, cwd) =
            match request.beside.as_deref() {
                Some(_) if request.user.is_some() || request.group.is_some() => return bad(
                    "beside runs as that process's user and group: give no user or group with it"
                        .into(),
                ),
                Some(beside) => {
                    let (identity, dir) = self.beside(beside)?;
                    (identity, request.cwd.or(dir))
                }
                None => (
                    self.identity(request.user.as_deref(), request.group.as_deref())?,
                    request.cwd,
                ),
            };
        Ok(SpawnPlan {
            metadata_bytes,
            screen_bytes,
            argv,
            env: request.env,
            cwd,
            timeout: request
                .timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            tty,
            stdin: request.stdin,
            overflow: request.overflow,
            retain_bytes: usize::try_from(retain).unwrap_or(usize::MAX),
            retain_memory_bytes: usize::try_from(window).unwrap_or(usize::MAX),
            data_dir: self.data_dir.clone(),
            kubernetes: None,
            limits,
            name: request.name,
            unattached_timeout: request
                .unattached_timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            identity,
            record_input: request.record_input,
        })
    }

    /// The user and group a spawn asks for, resolved.
    fn identity(
        &self,
        user: Option<&str>,
        group: Option<&str>,
    ) -> Result<Option<crate::secret::Identity>, ApiError> {
        Ok(match (user, group) {
            (Some(user), group) => Some(spawn_user(user, group, &self.config.denied_groups)?),
            (None, Some(group)) => {
                return Err(ApiError::InvalidRequest(format!(
                    "group {group:?} needs a user: give \"user\" too"
                )))
            }
            (None, None) => None,
        })
    }

    /// Where a spawn `beside` a known process runs: that process's user
    /// and group, and its working directory. Only the operator spawns, and
    /// the operator may read every process, so no other right is asked.
    fn beside(
        &self,
        id_or_name: &str,
    ) -> Result<(Option<crate::secret::Identity>, Option<String>), ApiError> {
        let process = self.get(id_or_name)?;
        if process.recovered {
            return Err(ApiError::InvalidRequest(format!(
                "{id_or_name:?} was read back after a restart: its user and directory are not known, so nothing runs beside it"
            )));
        }
        let dir = match process.working_dir() {
            Some(dir) => Some(dir.into_os_string().into_string().map_err(|dir| {
                ApiError::CannotExecute(format!(
                    "the working directory of {id_or_name:?} is not UTF-8: {dir:?}"
                ))
            })?),
            None => None,
        };
        Ok((process.identity.clone(), dir))
    }
}

/// A spawn's `user` (and `group`, else the user's primary one): its uid and
/// gid, when the server runs as root (only root can switch user); never
/// root itself, whose children could read the server's memory and token.
fn spawn_user(
    user: &str,
    group: Option<&str>,
    denied: &[String],
) -> Result<crate::secret::Identity, ApiError> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(ApiError::UserUnavailable(format!(
            "user {user:?}: tetherd runs as uid {} and can only start processes as itself; \
             switching user needs tetherd to run as root",
            nix::unistd::Uid::effective()
        )));
    }
    crate::secret::resolve_identity(user, group, denied)
        .map_err(|e| ApiError::InvalidRequest(format!("user {user:?}: {e}")))
}

/// A process name: 1 to [`MAX_NAME_LEN`] of `A-Z a-z 0-9 . _ -`, and not
/// something that reads as an id (32 hex digits, alone or after a `.` as
/// in `NODE.HEX32`), so names and ids are two namespaces a lookup never
/// confuses. Also checks names read back from a record.
pub(super) fn check_name(name: &str) -> Result<(), ApiError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(allowed) {
        return Err(ApiError::InvalidRequest(format!(
            "name {name:?} must be 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ -"
        )));
    }
    if tether_protocol::api::looks_like_process_id(name) {
        return Err(ApiError::InvalidRequest(format!(
            "name {name:?} looks like a process id (32 hex digits, alone or after a '.'); choose another"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn table() -> Arc<ProcessTable> {
        ProcessTable::new(Arc::new(crate::options::ServerOptions::from_flags(
            Config::defaults(),
        )))
    }

    proptest! {
        /// Whatever the bytes, parsing a spawn request and planning it
        /// gives a plan or an error, never a panic.
        #[test]
        fn spawn_request_parsing_never_panics(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(request) = serde_json::from_slice::<SpawnRequest>(&body) {
                let _ = table().plan(request);
            }
        }

        #[test]
        fn planning_arbitrary_requests_never_panics(
            argv in proptest::option::of(proptest::collection::vec(".{0,8}", 0..4)),
            command in proptest::option::of(".{0,16}"),
            timeout_ms in proptest::option::of(any::<u64>()),
            cols in proptest::option::of(any::<u16>()),
            rows in proptest::option::of(any::<u16>()),
            tty in any::<bool>(),
            retain in proptest::option::of(any::<u64>()),
        ) {
            let request = SpawnRequest {
                argv, command, timeout_ms, cols, rows, tty, retain_bytes: retain,
                ..SpawnRequest::default()
            };
            if let Ok(plan) = table().plan(request) {
                prop_assert!(!plan.argv.is_empty());
                prop_assert!(plan.retain_bytes as u64 <= Config::defaults().max_retain_bytes);
            }
        }
    }
}
