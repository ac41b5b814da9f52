//! The table of known processes: spawn admission (limits, retention budget,
//! idempotency keys), lookup, and forgetting exited processes after their
//! time-to-live.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_protocol::api::SpawnRequest;
use tether_protocol::ExitReason;

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::process::Process;
use crate::spawn::{spawn, SpawnPlan};

#[derive(Default)]
struct Entries {
    processes: HashMap<String, Arc<Process>>,
    /// Idempotency key -> (canonical request body, process id).
    idempotency: HashMap<String, (String, String)>,
    /// Retention reserved by known processes.
    reserved: u64,
}

/// Every process the server knows, running or exited.
pub struct ProcessTable {
    config: Arc<Config>,
    entries: Mutex<Entries>,
    /// Live attachments across all processes.
    pub attachments: AtomicUsize,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
}

impl ProcessTable {
    /// An empty table.
    pub fn new(config: Arc<Config>) -> Arc<ProcessTable> {
        Arc::new(ProcessTable {
            config,
            entries: Mutex::new(Entries::default()),
            attachments: AtomicUsize::new(0),
            metrics: Arc::new(Metrics::default()),
            shutting_down: AtomicBool::new(false),
        })
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Looks a process up by id.
    pub fn get(&self, id: &str) -> Result<Arc<Process>, ApiError> {
        self.entries()
            .processes
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(id.to_string()))
    }

    /// All known processes, oldest first.
    pub fn list(&self) -> Vec<Arc<Process>> {
        let mut all: Vec<_> = self.entries().processes.values().cloned().collect();
        all.sort_by_key(|p| p.started_at);
        all
    }

    /// Running processes now (counted from the processes themselves, so it
    /// is right the moment an exit is published).
    pub fn running(&self) -> usize {
        Self::running_locked(&self.entries())
    }

    fn running_locked(entries: &Entries) -> usize {
        entries
            .processes
            .values()
            .filter(|p| p.is_running())
            .count()
    }

    /// Validates and starts a process. With an idempotency key already used
    /// for the same request, returns the process it started (`false`: not
    /// new) and starts nothing.
    pub fn spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<String>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        let result = self.admit_and_spawn(request, idempotency_key);
        match &result {
            Ok((_, true)) => self.metrics.spawns.fetch_add(1, Ordering::Relaxed),
            Ok((_, false)) => 0,
            Err(_) => self.metrics.spawn_failures.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    fn admit_and_spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<String>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(ApiError::ShuttingDown);
        }
        let canonical = serde_json::to_string(&request).unwrap_or_default();
        // A replay answers before the request is even validated.
        if let Some(replayed) = Self::replay(&self.entries(), &idempotency_key, &canonical) {
            return replayed;
        }
        let mut plan = self.plan(request)?;
        let streams = if plan.tty.is_some() { 1 } else { 2 };
        // Block mode may grow each stream by the exit slack once the program
        // has exited; reserve that too, so the budget bounds real memory.
        let slack = match plan.overflow {
            tether_protocol::Overflow::Block => crate::spawn::EXIT_SLACK as u64,
            tether_protocol::Overflow::Drop => 0,
        };
        plan.reserved_bytes = (plan.retain_bytes as u64 + slack) * streams;

        // Admission: running limit and retention budget, then spawn while
        // holding the table so two requests cannot both take the last slot.
        let mut entries = self.entries();
        // A concurrent request with the same key may have spawned since the
        // check above: look again under the lock that spawns.
        if let Some(replayed) = Self::replay(&entries, &idempotency_key, &canonical) {
            return replayed;
        }
        if Self::running_locked(&entries) >= self.config.max_processes {
            return Err(ApiError::TooManyProcesses(self.config.max_processes));
        }
        self.make_room(&mut entries, plan.reserved_bytes)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let process = spawn(id.clone(), plan, self.config.clone(), self.metrics.clone())?;
        entries.reserved += process.reserved_bytes;
        entries.processes.insert(id.clone(), process.clone());
        if let Some(key) = idempotency_key {
            entries.idempotency.insert(key, (canonical, id));
        }
        drop(entries);
        tracing::info!(id = %process.id, pid = process.pid, argv = ?process.argv, "spawned");
        tokio::spawn(self.clone().retire(process.clone()));
        Ok((process, true))
    }

    /// What an earlier request with this idempotency key settles: the same
    /// process for the same body, a conflict for another; `None` when the key
    /// is new (or its process forgotten).
    fn replay(
        entries: &Entries,
        key: &Option<String>,
        canonical: &str,
    ) -> Option<Result<(Arc<Process>, bool), ApiError>> {
        let key = key.as_ref()?;
        let (body, id) = entries.idempotency.get(key)?;
        if body != canonical {
            return Some(Err(ApiError::IdempotencyConflict(key.clone())));
        }
        entries.processes.get(id).map(|p| Ok((p.clone(), false)))
    }

    /// Frees retention and known-process slots by forgetting the oldest
    /// exited processes early, if that is what it takes.
    fn make_room(&self, entries: &mut Entries, want: u64) -> Result<(), ApiError> {
        let over = |e: &Entries| {
            e.reserved + want > self.config.retain_total
                || e.processes.len() >= self.config.max_known_processes
        };
        if !over(entries) {
            return Ok(());
        }
        let mut exited: Vec<_> = entries
            .processes
            .values()
            .filter_map(|p| p.exit_info().map(|e| (e.finished_at, p.id.clone())))
            .collect();
        exited.sort();
        for (_, id) in exited {
            if !over(entries) {
                break;
            }
            Self::forget_locked(entries, &id);
        }
        if entries.reserved + want > self.config.retain_total {
            return Err(ApiError::RetentionExhausted(format!(
                "{want} bytes wanted, {} of {} reserved by running processes",
                entries.reserved, self.config.retain_total
            )));
        }
        if entries.processes.len() >= self.config.max_known_processes {
            return Err(ApiError::TooManyProcesses(self.config.max_known_processes));
        }
        Ok(())
    }

    fn forget_locked(entries: &mut Entries, id: &str) {
        if let Some(process) = entries.processes.remove(id) {
            entries.reserved = entries.reserved.saturating_sub(process.reserved_bytes);
            entries.idempotency.retain(|_, (_, pid)| pid != id);
        }
    }

    /// Removes a process from the table (it keeps running if it was).
    pub fn forget(&self, id: &str) {
        Self::forget_locked(&mut self.entries(), id);
    }

    /// Forgets a process now if it has exited, else as soon as it does.
    pub fn forget_when_exited(self: &Arc<Self>, process: &Arc<Process>) {
        if !process.is_running() {
            self.forget(&process.id);
            return;
        }
        let table = self.clone();
        let mut exit = process.watch_exit();
        let id = process.id.clone();
        tokio::spawn(async move {
            let _ = exit.wait_for(|e| e.is_some()).await;
            table.forget(&id);
        });
    }

    /// Waits for the exit, then forgets the process after its time-to-live.
    /// Holds only the id while it sleeps, so a process forgotten early
    /// (DELETE, budget) frees its memory at once.
    async fn retire(self: Arc<Self>, process: Arc<Process>) {
        let mut exit = process.watch_exit();
        let id = process.id.clone();
        drop(process);
        let _ = exit.wait_for(|e| e.is_some()).await;
        drop(exit);
        tokio::time::sleep(self.config.exited_ttl()).await;
        self.forget(&id);
    }

    /// Kills every running process (reason `killed`) and waits, at most
    /// `bound`, for all of them to count as exited.
    pub async fn shutdown(&self, bound: Duration) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let all = self.list();
        for process in &all {
            process.kill(ExitReason::Killed).await;
        }
        let wait_all = async {
            for process in &all {
                let _ = process.watch_exit().wait_for(|e| e.is_some()).await;
            }
        };
        let _ = tokio::time::timeout(bound, wait_all).await;
    }

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
            let cols = u32::from(request.cols.unwrap_or(80));
            let rows = u32::from(request.rows.unwrap_or(24));
            crate::pty::validate_size(cols, rows)?;
            Some((cols as u16, rows as u16))
        } else {
            if request.cols.is_some() || request.rows.is_some() {
                return bad("cols and rows need \"tty\": true".into());
            }
            None
        };
        let retain = request.retain_bytes.unwrap_or(self.config.retain_bytes);
        if retain == 0 {
            return bad("retain_bytes must be at least 1".into());
        }
        let retain = retain.min(self.config.max_retain_bytes);
        Ok(SpawnPlan {
            argv,
            env: request.env,
            cwd: request.cwd,
            timeout: request
                .timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            tty,
            stdin: request.stdin,
            overflow: request.overflow,
            retain_bytes: usize::try_from(retain).unwrap_or(usize::MAX),
            reserved_bytes: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table() -> Arc<ProcessTable> {
        ProcessTable::new(Arc::new(Config::defaults()))
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
