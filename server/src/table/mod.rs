//! The table of known processes: spawn admission (limits, retention budget,
//! idempotency keys), lookup, and forgetting exited processes after their
//! time-to-live.
//!
//! Here: the table itself, lookup, listing, forgetting, recovery and the
//! drain and shutdown. `admit.rs` is spawn admission (idempotency, limits,
//! the retention budget; reserved under the lock, started outside it),
//! `plan.rs` turns a request into a plan or a 400.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tether_protocol::ExitReason;
use tokio::sync::Notify;

use crate::budget::{Budget, Bytes, Quota};
use crate::datadir::DataDir;
use crate::error::ApiError;
use crate::metrics::{Gauges, Metrics};
use crate::options::ServerOptions;
use crate::process::input_once::IdempotencyKey;
use crate::process::{Process, Reservation};
use crate::slots::Slots;
use crate::sync::LockExt;
use forgotten::Why;

mod admit;
mod carry;
pub use carry::{CarriedTable, HandoverRequest};
mod forgotten;
pub use admit::MemoryReservation;

pub use terminal::SnapshotRoom;
mod plan;
mod terminal;

#[derive(Default)]
struct Entries {
    processes: HashMap<String, Arc<Process>>,
    /// Idempotency key (its sender's) -> (canonical request body, process
    /// id).
    idempotency: HashMap<Arc<IdempotencyKey>, (String, String)>,
    /// Process id -> its idempotency key (the same allocation): forgetting
    /// a process removes its key without looking at every key.
    keys: HashMap<String, Arc<IdempotencyKey>>,
    /// Ids reserved by spawns under way (the table lock is not held while
    /// the OS process is created).
    starting: HashSet<String>,
    /// Name -> id, for known processes and spawns under way.
    names: HashMap<String, String>,
    /// Known processes that have exited, oldest exit first (as `retire`
    /// saw each exit): the budget forgets from the front without looking
    /// at every process, so a spawn into a full table costs the same
    /// whether it holds ten exited processes or four thousand.
    exited: BTreeSet<(SystemTime, String)>,
    /// What the processes in `exited` hold of the budget (settled before
    /// their exits were published, so it no longer changes): all that
    /// forgetting them could free.
    exited_held: Bytes,
    /// Why the last forgotten processes are gone, for a 404 to say.
    forgotten: forgotten::Forgotten,
}

impl Entries {
    /// Removes the idempotency key of process `id`, if it had one.
    fn forget_key(&mut self, id: &str) {
        if let Some(key) = self.keys.remove(id) {
            self.idempotency.remove(&key);
        }
    }
}

/// Every process the server knows, running or exited.
pub struct ProcessTable {
    config: Arc<ServerOptions>,
    entries: Mutex<Entries>,
    /// Attachment slots across all processes (`--max-attachments`).
    pub attachment_slots: Slots,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
    /// Set by SIGTERM before the shutdown: no new spawns.
    draining: AtomicBool,
    /// Set for a handover (issue 43): no new spawns, 503 `restarting`.
    handing_over: AtomicBool,
    /// Told when a handover begins: attachments close with 1012, waits
    /// and followers answer so that their clients retry.
    restarting: tokio::sync::watch::Sender<bool>,
    /// Handovers since the first binary started (carried).
    pub handovers: std::sync::atomic::AtomicU64,
    /// Handover requests, and the server's end of them until taken.
    handover_channel: (
        tokio::sync::mpsc::Sender<carry::HandoverRequest>,
        Mutex<Option<tokio::sync::mpsc::Receiver<carry::HandoverRequest>>>,
    ),
    /// Woken whenever a spawn under way has finished (or failed).
    spawned: Notify,
    /// Where the disk logs go; memory only without.
    data_dir: Option<Arc<DataDir>>,
    /// Retention reserved by known processes, spawns under way and execs
    /// in flight. Shares of it are taken under the table lock only.
    budget: Arc<Budget>,
    /// What the idempotency records of HTTP input hold, across all
    /// processes (`--idempotency-total`).
    idempotency_records: Arc<Quota>,
}

impl ProcessTable {
    /// An empty table that retains output in memory only.
    pub fn new(config: Arc<ServerOptions>) -> Arc<ProcessTable> {
        ProcessTable::with_data_dir(config, None)
    }

    /// An empty table whose processes retain output on disk in `data_dir`.
    pub fn with_data_dir(
        config: Arc<ServerOptions>,
        data_dir: Option<Arc<DataDir>>,
    ) -> Arc<ProcessTable> {
        Arc::new(ProcessTable {
            data_dir,
            idempotency_records: Quota::new(config.idempotency_total),
            attachment_slots: Slots::new(config.capacity.max_attachments),
            config,
            entries: Mutex::new(Entries::default()),
            metrics: Arc::new(Metrics::default()),
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            handing_over: AtomicBool::new(false),
            restarting: tokio::sync::watch::Sender::new(false),
            handovers: std::sync::atomic::AtomicU64::new(0),
            handover_channel: {
                let (sender, receiver) = tokio::sync::mpsc::channel(1);
                (sender, Mutex::new(Some(receiver)))
            },
            spawned: Notify::new(),
            budget: Arc::new(Budget::default()),
        })
    }

    /// Held for a few lines, never across an await or a process creation.
    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock_or_recover()
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<ServerOptions> {
        &self.config
    }

    /// The bound every process's HTTP input idempotency records are
    /// charged to (`--idempotency-total`).
    pub fn idempotency_records(&self) -> &Arc<Quota> {
        &self.idempotency_records
    }

    /// Forgets, in every process, the idempotency records older than `ttl`
    /// (each process forgets its own only when it is next used): what a
    /// refusal for a full `--idempotency-total` tries first.
    pub fn expire_idempotency_records(&self, ttl: std::time::Duration) {
        let processes: Vec<_> = self.entries().processes.values().cloned().collect();
        for process in processes {
            process.inputs.http.expire(ttl);
        }
    }

    /// Looks a process up by id, or by the name it was given. Names never
    /// look like ids, so what looks like one is looked up only among ids,
    /// anything else only among names. An id of another node is a
    /// misrouted request (421), not a process that does not exist.
    pub fn get(&self, id_or_name: &str) -> Result<Arc<Process>, ApiError> {
        let entries = self.entries();
        let id = if tether_protocol::api::looks_like_process_id(id_or_name) {
            Some(id_or_name)
        } else {
            entries.names.get(id_or_name).map(String::as_str)
        };
        if let Some(process) = id.and_then(|id| entries.processes.get(id)) {
            return Ok(process.clone());
        }
        match crate::process::node_of(id_or_name) {
            Some(node) if self.config.node.as_deref() != Some(node) => Err(ApiError::WrongNode(
                id_or_name.to_string(),
                node.to_string(),
            )),
            _ => Err(match entries.forgotten.why(id_or_name) {
                Some(why) => ApiError::Forgotten(id_or_name.to_string(), why),
                None => ApiError::NotFound(id_or_name.to_string()),
            }),
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
            idempotency_record_bytes: self.idempotency_records.used(),
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
    /// The budget counts a forgotten process's retention free, so its
    /// buffers are freed here too, whoever still holds the process (an
    /// attachment withholding credit, a pending wait): they learn the bytes
    /// they had not been sent as dropped.
    fn forget_locked(entries: &mut Entries, id: &str, why: Why) {
        if let Some(process) = entries.processes.remove(id) {
            entries.forgotten.note(id, process.name.as_deref(), why);
            let noted = process
                .finished_at()
                .is_some_and(|at| entries.exited.remove(&(at, id.to_string())));
            if noted {
                entries.exited_held = entries
                    .exited_held
                    .saturating_sub(process.reservation.held());
            }
            process.reservation.release();
            process.inputs.http.clear();
            entries.forget_key(id);
            if !process.is_running() {
                process.output().discard();
            }
            if let Some(name) = &process.name {
                entries.names.remove(name);
            }
        }
    }

    /// Removes a process from the table (it keeps running if it was).
    pub fn forget(&self, id: &str, why: Why) {
        Self::forget_locked(&mut self.entries(), id, why);
    }

    /// Forgets a process now if it has exited, else as soon as it does.
    pub fn forget_when_exited(self: &Arc<Self>, process: &Arc<Process>) {
        if !process.is_running() {
            self.forget(&process.id, Why::Removed);
            return;
        }
        let table = self.clone();
        let mut exit = process.watch_exit();
        let id = process.id.clone();
        tokio::spawn(async move {
            let _ = exit.wait_for(|e| e.is_some()).await;
            table.forget(&id, Why::Removed);
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
        let finished_at = exit.borrow().as_ref().map(|e| e.finished_at);
        drop(exit);
        if let Some(at) = finished_at {
            let mut entries = self.entries();
            // Not if it was forgotten meanwhile (DELETE, the budget).
            if let Some(held) = entries.processes.get(&id).map(|p| p.reservation.held()) {
                if entries.exited.insert((at, id.clone())) {
                    entries.exited_held += held;
                }
            }
        }
        // Without a time to live, an exit is kept until it is removed or
        // its room is needed.
        let Some(ttl) = self.config.exited_ttl() else {
            return;
        };
        tokio::time::sleep(ttl).await;
        self.forget(&id, Why::Expired);
    }

    /// Lists the processes an earlier run left in the data directory, as
    /// exited, and forgets them after the exited TTL.
    pub fn recover(self: &Arc<Self>) {
        let Some(dir) = &self.data_dir else { return };
        for mut recovered in dir.recover() {
            // A name read back is checked like a new one, and kept only
            // while unique (records are files anyone with the directory
            // could have edited).
            if let Some(name) = recovered.info.name.take() {
                let taken = self.entries().names.contains_key(&name);
                match plan::check_name(&name) {
                    Ok(()) if !taken => recovered.info.name = Some(name),
                    _ => {
                        tracing::warn!(id = %recovered.info.id, name, "a recovered process's name is invalid or taken: dropped")
                    }
                }
            }
            let reservation = Reservation {
                output: self.budget.share(Bytes {
                    memory: 0,
                    disk: recovered.disk_bytes,
                }),
                screen: self.budget.share(Bytes::default()),
                metadata: 0,
            };
            let process =
                Process::recovered(recovered, reservation, &self.config, self.metrics.clone());
            let age = process
                .finished_at()
                .and_then(|at| at.elapsed().ok())
                .unwrap_or_default();
            if self.config.exited_ttl().is_some_and(|ttl| age >= ttl) {
                // Its time to be forgotten passed while no server ran:
                // dropping it removes its files.
                continue;
            }
            tracing::info!(id = %process.id, reason = ?process.info().reason, "recovered from the data directory");
            {
                let mut entries = self.entries();
                if let Some(name) = &process.name {
                    entries.names.insert(name.clone(), process.id.clone());
                }
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
}
