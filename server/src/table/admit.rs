//! Spawn admission: idempotency keys, the running limit, the retention
//! budget and the known-process cap, decided under the table lock; the OS
//! process is created outside it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tether_protocol::api::SpawnRequest;
use tether_protocol::KubernetesNames;

use super::forgotten::Why;
use super::{Entries, ProcessTable};
use crate::budget::{Bytes, Share};
use crate::error::ApiError;
use crate::process::input_once::IdempotencyKey;
use crate::process::{spawn, Process, Reservation, SpawnPlan};

/// What the table answers a spawn request with, under its lock.
enum Admission {
    /// An earlier request with the same idempotency key settles it.
    Replay(Arc<Process>),
    /// The same key is being started right now: wait for it.
    Wait,
    /// Nothing to replay: validate the request, then ask again with a plan.
    Validate,
    /// Start it: this id, a running slot and the retention are reserved.
    Start(String, Reservation),
}

impl ProcessTable {
    /// Validates and starts a process. With an idempotency key its sender
    /// already used for the same request, returns the process it started
    /// (`false`: not new) and starts nothing. Keys are their sender's: the
    /// same key from another holder is another key.
    pub async fn spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        self.spawn_named(request, idempotency_key, None).await
    }

    /// [`ProcessTable::spawn`], recording the Kubernetes names of an exec
    /// on the process (`server/src/kube/`).
    pub async fn spawn_named(
        self: &Arc<Self>,
        request: SpawnRequest,
        idempotency_key: Option<IdempotencyKey>,
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
        key: Option<IdempotencyKey>,
        kubernetes: Option<KubernetesNames>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        let canonical = serde_json::to_string(&request).unwrap_or_default();
        // A replay answers before the request is even validated.
        let mut plan = None;
        let (id, reservation) = loop {
            let spawned = self.spawned.notified();
            match self.admit(&key, &canonical, plan.as_ref())? {
                Admission::Replay(process) => return Ok((process, false)),
                Admission::Wait => spawned.await,
                Admission::Validate => {
                    let mut planned = SpawnPlan {
                        kubernetes: kubernetes.clone(),
                        ..self.plan(request.clone())?
                    };
                    // With a key, the table keeps the key (with its
                    // sender) and the request it answers for as long as
                    // the process is known.
                    if let Some(key) = &key {
                        planned.metadata_bytes += (key.bytes() + canonical.len()) as u64;
                    }
                    plan = Some(planned);
                }
                Admission::Start(id, reservation) => break (id, reservation),
            }
        };
        let Some(plan) = plan else {
            return Err(ApiError::Internal("spawn admitted without a plan".into()));
        };
        let name = plan.name.clone();
        // A failed spawn drops the reservation, which gives it back.
        let started = spawn(
            id.clone(),
            plan,
            reservation,
            &self.config,
            self.metrics.clone(),
        );
        {
            let mut entries = self.entries();
            entries.starting.remove(&id);
            match &started {
                Ok(process) => {
                    entries.processes.insert(id.clone(), process.clone());
                }
                Err(_) => {
                    entries.forget_key(&id);
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
        key: &Option<IdempotencyKey>,
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
        if self.handing_over.load(Ordering::SeqCst) {
            return Err(ApiError::Restarting);
        }
        if let Some(key) = key {
            if let Some((body, id)) = entries.idempotency.get(key) {
                if body != canonical {
                    return Err(ApiError::IdempotencyConflict(key.key.clone()));
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
        // Known less noted exits is never below the running count (an exit
        // is noted just after it): under the bound it proves room without
        // looking at every process; at it, the processes are counted.
        let at_most = entries.processes.len().saturating_sub(entries.exited.len());
        let running = if at_most + entries.starting.len() < self.config.capacity.max_processes {
            at_most
        } else {
            Self::running_locked(&entries)
        } + entries.starting.len();
        if running >= self.config.capacity.max_processes {
            return Err(ApiError::TooManyProcesses(
                self.config.capacity.max_processes,
            ));
        }
        let want = Bytes {
            memory: plan.reserved_bytes(),
            disk: plan.reserved_disk_bytes(),
        };
        self.make_room(&mut entries, want)?;
        let random = uuid::Uuid::new_v4().simple();
        let id = match &self.config.node {
            Some(node) => format!("{node}.{random}"),
            None => random.to_string(),
        };
        let reservation = plan.reserve(&self.budget);
        entries.starting.insert(id.clone());
        if let Some(name) = &plan.name {
            entries.names.insert(name.clone(), id.clone());
        }
        if let Some(key) = key {
            let key = Arc::new(key.clone());
            entries
                .idempotency
                .insert(key.clone(), (canonical.to_string(), id.clone()));
            entries.keys.insert(id.clone(), key);
        }
        Ok(Admission::Start(id, reservation))
    }

    /// Frees retention and known-process slots by forgetting the oldest
    /// exited processes early, if that is what it takes.
    pub(super) fn make_room(&self, entries: &mut Entries, want: Bytes) -> Result<(), ApiError> {
        let total = Bytes {
            memory: self.config.retain_total,
            disk: self.config.retain_disk_total,
        };
        let known = |e: &Entries| e.processes.len() + e.starting.len();
        let over = |e: &Entries| {
            (self.budget.reserved() + want).exceeds(total)
                || known(e) >= self.config.capacity.max_known_processes
        };
        if !over(entries) {
            return Ok(());
        }
        // Running processes hold the budget: forgetting every exited one
        // would not make room, so none is (the refusal costs no history).
        // Exits `retire` has not noted yet are counted too, by looking at
        // every process, but only on the way to a refusal.
        let reserved = self.budget.reserved();
        let short = |freeable: Bytes| (reserved.saturating_sub(freeable) + want).exceeds(total);
        let mut freeable = entries.exited_held;
        if short(freeable) {
            for process in entries.processes.values() {
                let unnoted = process
                    .finished_at()
                    .is_some_and(|at| !entries.exited.contains(&(at, process.id.clone())));
                if unnoted {
                    freeable += process.reservation.held();
                }
            }
        }
        if short(freeable) {
            return Err(Self::exhausted(reserved, freeable, want, total));
        }
        // Oldest exit first, from the index `retire` keeps.
        while over(entries) {
            let Some((_, id)) = entries.exited.pop_first() else {
                break;
            };
            Self::forget_locked(entries, &id, Why::ForRoom);
        }
        // An exit `retire` has not noted yet (it runs just after the
        // exit): the same order, from every process.
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
            Self::forget_locked(entries, &id, Why::ForRoom);
        }
        let reserved = self.budget.reserved();
        if (reserved + want).exceeds(total) {
            return Err(Self::exhausted(reserved, entries.exited_held, want, total));
        }
        if known(entries) >= self.config.capacity.max_known_processes {
            return Err(ApiError::TooManyProcesses(
                self.config.capacity.max_known_processes,
            ));
        }
        Ok(())
    }
}

impl ProcessTable {
    /// The refusal of `want` against `total` when `reserved` is reserved
    /// and `exited` of it is held by exited processes.
    fn exhausted(reserved: Bytes, exited: Bytes, want: Bytes, total: Bytes) -> ApiError {
        let running = reserved.saturating_sub(exited);
        ApiError::RetentionExhausted(if reserved.memory + want.memory > total.memory {
            format!(
                "{} bytes wanted, {} of {} reserved, {} of it by running processes",
                want.memory, reserved.memory, total.memory, running.memory
            )
        } else {
            format!(
                "{} bytes of disk wanted, {} of {} (--retain-disk-total) reserved, {} of it by running processes",
                want.disk, reserved.disk, total.disk, running.disk
            )
        })
    }
}

/// Memory an exec holds outside retention while it runs (its buffered
/// output and the answer made from it), counted against `--retain-total`
/// like a process's retention; released on drop.
pub struct MemoryReservation {
    _share: Share,
}

impl ProcessTable {
    /// Reserves `bytes` of the memory budget, forgetting the oldest exited
    /// processes early if that is what it takes; 503 `retention_exhausted`
    /// when it does not fit.
    pub fn reserve_memory(self: &Arc<Self>, bytes: u64) -> Result<MemoryReservation, ApiError> {
        let mut entries = self.entries();
        self.make_room(&mut entries, Bytes::memory(bytes))?;
        Ok(MemoryReservation {
            _share: self.budget.share(Bytes::memory(bytes)),
        })
    }

    /// Reserves `bytes` of the memory budget if they are free as it
    /// stands, forgetting nothing: for what a reader asks the server to
    /// build (a screen snapshot), which must never cost another process
    /// its history. 503 `retention_exhausted` when they are not free.
    pub fn reserve_free_memory(&self, bytes: u64) -> Result<MemoryReservation, ApiError> {
        let _entries = self.entries();
        let total = Bytes {
            memory: self.config.retain_total,
            disk: self.config.retain_disk_total,
        };
        let reserved = self.budget.reserved();
        let want = Bytes::memory(bytes);
        if (reserved + want).exceeds(total) {
            return Err(Self::exhausted(reserved, Bytes::default(), want, total));
        }
        Ok(MemoryReservation {
            _share: self.budget.share(want),
        })
    }
}
