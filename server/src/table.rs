//! The table of known processes: spawn admission (limits, retention budget,
//! idempotency keys), lookup, and forgetting exited processes after their
//! time-to-live.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tether_protocol::api::{SpawnRequest, MAX_NAME_LEN};
use tether_protocol::{ExitReason, KubernetesNames, TermSize};
use tokio::sync::Notify;

use crate::config::Config;
use crate::datadir::DataDir;
use crate::error::ApiError;
use crate::metrics::{Gauges, Metrics};
use crate::process::{spawn, Process, SpawnPlan};
use crate::slots::Slots;

#[derive(Default)]
struct Entries {
    processes: HashMap<String, Arc<Process>>,
    /// Idempotency key -> (canonical request body, process id).
    idempotency: HashMap<String, (String, String)>,
    /// Retention reserved by known processes and by those being started.
    reserved: u64,
    /// The same on disk (`--retain-disk-total`).
    reserved_disk: u64,
    /// Ids reserved by spawns under way (the table lock is not held while
    /// the OS process is created).
    starting: HashSet<String>,
    /// Name -> id, for known processes and spawns under way.
    names: HashMap<String, String>,
}

/// Every process the server knows, running or exited.
pub struct ProcessTable {
    config: Arc<Config>,
    entries: Mutex<Entries>,
    /// Attachment slots across all processes (`--max-attachments`).
    pub attachment_slots: Slots,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
    /// Set by SIGTERM before the shutdown: no new spawns.
    draining: AtomicBool,
    /// Woken whenever a spawn under way has finished (or failed).
    spawned: Notify,
    /// Where the disk logs go; memory only without.
    data_dir: Option<Arc<DataDir>>,
}

/// What the table answers a spawn request with, under its lock.
enum Admission {
    /// An earlier request with the same idempotency key settles it.
    Replay(Arc<Process>),
    /// The same key is being started right now: wait for it.
    Wait,
    /// Nothing to replay: validate the request, then ask again with a plan.
    Validate,
    /// Start it: this id, a running slot and the retention are reserved.
    Start(String),
}

impl ProcessTable {
    /// An empty table that retains output in memory only.
    pub fn new(config: Arc<Config>) -> Arc<ProcessTable> {
        ProcessTable::with_data_dir(config, None)
    }

    /// An empty table whose processes retain output on disk in `data_dir`.
    pub fn with_data_dir(config: Arc<Config>, data_dir: Option<Arc<DataDir>>) -> Arc<ProcessTable> {
        Arc::new(ProcessTable {
            data_dir,
            attachment_slots: Slots::new(config.max_attachments),
            config,
            entries: Mutex::new(Entries::default()),
            metrics: Arc::new(Metrics::default()),
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            spawned: Notify::new(),
        })
    }

    /// Held for a few lines, never across an await or a process creation.
    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Looks a process up by id, or by the name it was given. An id of
    /// another node is a misrouted request (421), not a process that does
    /// not exist.
    pub fn get(&self, id_or_name: &str) -> Result<Arc<Process>, ApiError> {
        let entries = self.entries();
        let id = entries
            .names
            .get(id_or_name)
            .map(String::as_str)
            .unwrap_or(id_or_name);
        if let Some(process) = entries.processes.get(id) {
            return Ok(process.clone());
        }
        match crate::process::node_of(id_or_name) {
            Some(node) if self.config.node.as_deref() != Some(node) => Err(ApiError::WrongNode(
                id_or_name.to_string(),
                node.to_string(),
            )),
            _ => Err(ApiError::NotFound(id_or_name.to_string())),
        }
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
    /// Whether SIGTERM has started a drain (or the shutdown itself).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst) || self.shutting_down.load(Ordering::SeqCst)
    }

    /// Refuses new spawns from now on and waits, at most `grace`, for every
    /// running process to exit on its own. The shutdown kills the rest.
    pub async fn drain(&self, grace: Duration) {
        self.draining.store(true, Ordering::SeqCst);
        if grace.is_zero() {
            return;
        }
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "draining: no new processes"
        );
        let all = self.list();
        let wait_all = async {
            for process in &all {
                let _ = process.watch_exit().wait_for(|e| e.is_some()).await;
            }
        };
        let _ = tokio::time::timeout(grace, wait_all).await;
    }

    /// All known processes, oldest first.
    pub fn list(&self) -> Vec<Arc<Process>> {
        let mut all: Vec<_> = self.entries().processes.values().cloned().collect();
        all.sort_by_key(|p| p.started_at);
        all
    }

    /// The gauges of `/metrics`, counted now.
    pub fn gauges(&self) -> Gauges {
        let entries = self.entries();
        let running = Self::running_locked(&entries);
        Gauges {
            running: running as u64,
            exited: (entries.processes.len() - running) as u64,
            attachments: self.attachment_slots.in_use() as u64,
        }
    }

    /// Running processes (counted from the processes themselves, so it is
    /// right the moment an exit is published).
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
    pub async fn spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<String>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        self.spawn_named(request, idempotency_key, None).await
    }

    /// [`ProcessTable::spawn`], recording the Kubernetes names of an exec
    /// on the process (`server/src/kube/`).
    pub async fn spawn_named(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<String>,
        kubernetes: Option<KubernetesNames>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        let result = self
            .admit_and_spawn(request, idempotency_key, kubernetes)
            .await;
        match &result {
            Ok((_, true)) => self.metrics.spawns.fetch_add(1, Ordering::Relaxed),
            Ok((_, false)) => 0,
            Err(_) => self.metrics.spawn_failures.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    async fn admit_and_spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        key: Option<String>,
        kubernetes: Option<KubernetesNames>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        let canonical = serde_json::to_string(&request).unwrap_or_default();
        // A replay answers before the request is even validated.
        let mut plan = None;
        let id = loop {
            let spawned = self.spawned.notified();
            match self.admit(&key, &canonical, plan.as_ref())? {
                Admission::Replay(process) => return Ok((process, false)),
                Admission::Wait => spawned.await,
                Admission::Validate => {
                    let mut planned = SpawnPlan {
                        kubernetes: kubernetes.clone(),
                        ..self.plan(request.clone())?
                    };
                    // With a key, the table keeps the key and the request it
                    // answers for as long as the process is known.
                    if let Some(key) = &key {
                        planned.metadata_bytes += (key.len() + canonical.len()) as u64;
                    }
                    plan = Some(planned);
                }
                Admission::Start(id) => break id,
            }
        };
        let Some(plan) = plan else {
            return Err(ApiError::Internal("spawn admitted without a plan".into()));
        };
        let reserved = plan.reserved_bytes();
        let reserved_disk = plan.reserved_disk_bytes();
        let name = plan.name.clone();
        let started = spawn(id.clone(), plan, &self.config, self.metrics.clone());
        {
            let mut entries = self.entries();
            entries.starting.remove(&id);
            match &started {
                Ok(process) => {
                    entries.processes.insert(id.clone(), process.clone());
                }
                Err(_) => {
                    entries.reserved = entries.reserved.saturating_sub(reserved);
                    entries.reserved_disk = entries.reserved_disk.saturating_sub(reserved_disk);
                    entries.idempotency.retain(|_, (_, pid)| *pid != id);
                    if let Some(name) = &name {
                        entries.names.remove(name);
                    }
                }
            }
        }
        self.spawned.notify_waiters();
        let process = started?;
        tracing::info!(id = %process.id, pid = process.pid, argv = ?process.argv, "spawned");
        tokio::spawn(self.clone().retire(process.clone()));
        Ok((process, true))
    }

    /// Under the table lock: replays an idempotency key, or, given a plan,
    /// reserves an id, a running slot and the retention for it, so two
    /// requests cannot both take the last slot.
    fn admit(
        &self,
        key: &Option<String>,
        canonical: &str,
        plan: Option<&SpawnPlan>,
    ) -> Result<Admission, ApiError> {
        let mut entries = self.entries();
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(ApiError::ShuttingDown);
        }
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::Draining);
        }
        if let Some(key) = key {
            if let Some((body, id)) = entries.idempotency.get(key) {
                if body != canonical {
                    return Err(ApiError::IdempotencyConflict(key.clone()));
                }
                if entries.starting.contains(id) {
                    return Ok(Admission::Wait);
                }
                if let Some(process) = entries.processes.get(id) {
                    return Ok(Admission::Replay(process.clone()));
                }
            }
        }
        let Some(plan) = plan else {
            return Ok(Admission::Validate);
        };
        if let Some(name) = &plan.name {
            if entries.names.contains_key(name) {
                return Err(ApiError::NameTaken(name.clone()));
            }
        }
        let running = Self::running_locked(&entries) + entries.starting.len();
        if running >= self.config.max_processes {
            return Err(ApiError::TooManyProcesses(self.config.max_processes));
        }
        self.make_room(
            &mut entries,
            plan.reserved_bytes(),
            plan.reserved_disk_bytes(),
        )?;
        let random = uuid::Uuid::new_v4().simple();
        let id = match &self.config.node {
            Some(node) => format!("{node}.{random}"),
            None => random.to_string(),
        };
        entries.reserved += plan.reserved_bytes();
        entries.reserved_disk += plan.reserved_disk_bytes();
        entries.starting.insert(id.clone());
        if let Some(name) = &plan.name {
            entries.names.insert(name.clone(), id.clone());
        }
        if let Some(key) = key {
            entries
                .idempotency
                .insert(key.clone(), (canonical.to_string(), id.clone()));
        }
        Ok(Admission::Start(id))
    }

    /// Frees retention and known-process slots by forgetting the oldest
    /// exited processes early, if that is what it takes.
    fn make_room(&self, entries: &mut Entries, want: u64, want_disk: u64) -> Result<(), ApiError> {
        let known = |e: &Entries| e.processes.len() + e.starting.len();
        let over = |e: &Entries| {
            e.reserved + want > self.config.retain_total
                || e.reserved_disk + want_disk > self.config.retain_disk_total
                || known(e) >= self.config.max_known_processes
        };
        if !over(entries) {
            return Ok(());
        }
        let mut exited: Vec<_> = entries
            .processes
            .values()
            .filter_map(|p| p.finished_at().map(|at| (at, p.id.clone())))
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
        if entries.reserved_disk + want_disk > self.config.retain_disk_total {
            return Err(ApiError::RetentionExhausted(format!(
                "{want_disk} bytes of disk wanted, {} of {} (--retain-disk-total) reserved by running processes",
                entries.reserved_disk, self.config.retain_disk_total
            )));
        }
        if known(entries) >= self.config.max_known_processes {
            return Err(ApiError::TooManyProcesses(self.config.max_known_processes));
        }
        Ok(())
    }

    /// The budget counts a forgotten process's retention free, so its
    /// buffers are freed here too, whoever still holds the process (an
    /// attachment withholding credit, a pending wait): they learn the bytes
    /// they had not been sent as dropped.
    fn forget_locked(entries: &mut Entries, id: &str) {
        if let Some(process) = entries.processes.remove(id) {
            entries.reserved = entries.reserved.saturating_sub(process.reserved_bytes);
            entries.reserved_disk = entries
                .reserved_disk
                .saturating_sub(process.reserved_disk_bytes);
            entries.idempotency.retain(|_, (_, pid)| pid != id);
            if !process.is_running() {
                process.output().discard();
            }
            if let Some(name) = &process.name {
                entries.names.remove(name);
            }
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

    /// Lists the processes an earlier run left in the data directory, as
    /// exited, and forgets them after the exited TTL.
    pub fn recover(self: &Arc<Self>) {
        let Some(dir) = &self.data_dir else { return };
        for recovered in dir.recover() {
            let process = Process::recovered(recovered, &self.config, self.metrics.clone());
            let age = process
                .finished_at()
                .and_then(|at| at.elapsed().ok())
                .unwrap_or_default();
            if age >= self.config.exited_ttl() {
                // Its time to be forgotten passed while no server ran:
                // dropping it removes its files.
                continue;
            }
            tracing::info!(id = %process.id, reason = ?process.info().reason, "recovered from the data directory");
            {
                let mut entries = self.entries();
                entries.reserved_disk += process.reserved_disk_bytes;
                entries
                    .processes
                    .insert(process.id.clone(), process.clone());
            }
            tokio::spawn(self.clone().retire(process));
        }
    }

    /// Kills every running process (reason `killed`) and waits, at most
    /// `bound`, for all of them to count as exited.
    pub async fn shutdown(&self, bound: Duration) {
        self.shutting_down.store(true, Ordering::SeqCst);
        // No spawn starts now; wait for those under way, so none escapes.
        loop {
            let spawned = self.spawned.notified();
            if self.entries().starting.is_empty() {
                break;
            }
            spawned.await;
        }
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
            let cols = request.cols.unwrap_or(TermSize::DEFAULT.cols());
            let rows = request.rows.unwrap_or(TermSize::DEFAULT.rows());
            Some(TermSize::new(cols.into(), rows.into())?)
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
        let window = retain.min(self.config.retain_memory_bytes.max(1));
        // Memory only, the window is all of the retention.
        let retain = if self.data_dir.is_some() {
            retain
        } else {
            window
        };
        let metadata_bytes = SpawnPlan::metadata_of(&argv);
        if let Some(name) = &request.name {
            check_name(name)?;
        }
        Ok(SpawnPlan {
            metadata_bytes,
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
            retain_memory_bytes: usize::try_from(window).unwrap_or(usize::MAX),
            data_dir: self.data_dir.clone(),
            kubernetes: None,
            name: request.name,
            unattached_timeout: request
                .unattached_timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        })
    }
}

/// A process name: 1 to [`MAX_NAME_LEN`] of `A-Z a-z 0-9 . _ -`, and not
/// something that reads as an id (32 hex digits), so a lookup is never
/// ambiguous.
fn check_name(name: &str) -> Result<(), ApiError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(allowed) {
        return Err(ApiError::InvalidRequest(format!(
            "name {name:?} must be 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ -"
        )));
    }
    if name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::InvalidRequest(format!(
            "name {name:?} looks like a process id; choose another"
        )));
    }
    Ok(())
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
