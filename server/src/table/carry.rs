//! The table as a handover carries it (issue 43), and as the new binary
//! adopts it: every known process, running or exited, with what it holds
//! of the budget, so that the new binary's accounting is the old one's.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::ProcessTable;
use crate::budget::Bytes;
use crate::process::carry::CarriedProcess;
use crate::process::{Process, Reservation};
use crate::retained::disk::CarriedRing;
use crate::retained::log::Blob;
use crate::retained::RetainedOutput;
use crate::screen::ScreenLimits;
use crate::sync::LockExt;
use tether_protocol::api::UpgradeStarted;

/// How long queued stdin may take to be written before a handover goes on
/// without waiting further (what is still queued then is lost, and said).
const STDIN_DRAIN: Duration = Duration::from_secs(2);

/// A handover asked for (SIGUSR2, `POST /v1/admin/upgrade`), and where
/// its outcome goes: the preflight's refusal, or that it has begun.
pub struct HandoverRequest {
    /// The new binary (`None`: the one the server was started from).
    pub binary: Option<std::path::PathBuf>,
    /// Flags for the new binary, after the server's own.
    pub flags: Vec<String>,
    pub reply: Option<tokio::sync::oneshot::Sender<Result<UpgradeStarted, String>>>,
}

/// The table in the state document.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedTable {
    pub processes: Vec<CarriedProcess>,
    /// Spawn idempotency keys: the key, the canonical request, the id of
    /// the process it started.
    pub spawn_keys: Vec<(crate::process::input_once::IdempotencyKey, String, String)>,
    /// Why the last forgotten processes are gone.
    pub forgotten: Vec<super::forgotten::Gone>,
    pub metrics: crate::metrics::CarriedMetrics,
    /// Handovers before this one.
    pub handovers: u64,
}

impl ProcessTable {
    /// A handover begins: spawns are refused (503 `restarting`), those
    /// under way finish, and attachments, waits and followers are told.
    pub async fn begin_handover(&self) {
        self.handing_over.store(true, Ordering::SeqCst);
        loop {
            let spawned = self.spawned.notified();
            if self.entries().starting.is_empty() {
                break;
            }
            spawned.await;
        }
        self.restarting.send_replace(true);
    }

    /// Asks the server for a handover; the receiver gets its outcome.
    /// One at a time: another while one is asked for or under way is 409.
    pub fn request_handover(
        &self,
        binary: Option<std::path::PathBuf>,
        flags: Vec<String>,
    ) -> Result<
        tokio::sync::oneshot::Receiver<Result<UpgradeStarted, String>>,
        crate::error::ApiError,
    > {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        if self.handing_over.load(Ordering::SeqCst) {
            return Err(crate::error::ApiError::UpgradeRefused(
                "a handover is under way".into(),
            ));
        }
        self.handover_channel
            .0
            .try_send(HandoverRequest {
                binary,
                flags,
                reply: Some(reply),
            })
            .map_err(|_| {
                crate::error::ApiError::UpgradeRefused("a handover is already asked for".into())
            })?;
        Ok(outcome)
    }

    /// A sender of handover requests (for SIGUSR2).
    pub fn handover_requests(&self) -> tokio::sync::mpsc::Sender<HandoverRequest> {
        self.handover_channel.0.clone()
    }

    /// The server's end of handover requests; taken once.
    pub fn take_handover_requests(&self) -> Option<tokio::sync::mpsc::Receiver<HandoverRequest>> {
        self.handover_channel.1.lock_or_recover().take()
    }

    /// The handover was refused after all: serve as before.
    pub fn cancel_handover(&self) {
        self.handing_over.store(false, Ordering::SeqCst);
        self.restarting.send_replace(false);
    }

    /// Changes to true when a handover begins.
    pub fn restarting(&self) -> tokio::sync::watch::Receiver<bool> {
        self.restarting.subscribe()
    }

    /// Stops every running process's capture and supervision and carries
    /// the table. Past this point the old binary serves nothing again: it
    /// execs. `keep` takes each descriptor the exec must keep; `put`
    /// stores bytes in the state document.
    pub async fn carry(
        &self,
        keep: &mut dyn FnMut(OwnedFd) -> RawFd,
        put: &mut dyn FnMut(&[&[u8]]) -> std::io::Result<Blob>,
    ) -> std::io::Result<CarriedTable> {
        let all = self.list();
        // Input accepted before the handover reaches the process first.
        let deadline = tokio::time::Instant::now() + STDIN_DRAIN;
        for process in all.iter().filter(|p| p.is_running()) {
            // Looked at every millisecond, not spun on: the single worker
            // thread must run the writer tasks meanwhile.
            while !process.stdin_idle() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if !process.stdin_idle() {
                tracing::warn!(id = %process.id, "stdin still queued at the handover: it is lost");
            }
        }
        let started = std::time::Instant::now();
        let frozen = futures_util::future::join_all(all.iter().map(|p| p.freeze())).await;
        tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            "handover: every process frozen"
        );
        let mut processes = Vec::with_capacity(all.len());
        for (process, frozen) in all.iter().zip(frozen) {
            let inputs = process.inputs.carried().await;
            processes.push(process.carry(frozen, inputs, keep, put)?);
        }
        let entries = self.entries();
        let carried = CarriedTable {
            processes,
            forgotten: entries.forgotten.carried(),
            spawn_keys: entries
                .idempotency
                .iter()
                .map(|(key, (body, id))| ((**key).clone(), body.clone(), id.clone()))
                .collect(),
            metrics: self.metrics.carried(),
            handovers: self.handovers.load(Ordering::SeqCst),
        };
        Ok(carried)
    }

    /// Adopts what [`ProcessTable::carry`] gave, in the new binary: before
    /// serving. `take_blob` reads bytes back, `take_fd` hands over a
    /// descriptor the state names.
    pub fn adopt(
        self: &Arc<Self>,
        carried: CarriedTable,
        take_blob: &mut dyn FnMut(Blob) -> std::io::Result<Vec<u8>>,
        take_fd: &mut dyn FnMut(RawFd) -> std::io::Result<OwnedFd>,
    ) -> std::io::Result<()> {
        let screen = (!self.config.no_screen).then_some(ScreenLimits {
            scrollback_lines: self.config.screen_scrollback,
        });
        self.handovers
            .store(carried.handovers + 1, Ordering::SeqCst);
        self.metrics.adopt(&carried.metrics);
        self.entries().forgotten = super::forgotten::Forgotten::adopted(carried.forgotten);
        let spawn_keys = carried.spawn_keys;
        for mut carried in carried.processes {
            let id = carried.id.clone();
            let data_dir = self.data_dir.clone();
            let mut reopen = |ring: CarriedRing| match &data_dir {
                Some(dir) => dir.resume_ring(ring),
                None => Err(std::io::Error::other(
                    "no data directory to reopen a log in",
                )),
            };
            let record = self.data_dir.as_ref().and_then(|d| d.record(&id));
            let output_state = std::mem::replace(&mut carried.output, empty_output());
            let output =
                RetainedOutput::adopted(output_state, take_blob, &mut reopen, record, screen)?;
            let reservation = Reservation {
                output: self.budget.share(Bytes {
                    memory: carried.output_bytes.0,
                    disk: carried.output_bytes.1,
                }),
                screen: self.budget.share(Bytes::memory(carried.screen_bytes)),
                metadata: carried.metadata_bytes,
            };
            let process = Process::adopted(
                carried,
                output,
                reservation,
                take_fd,
                &self.idempotency_records,
                &self.config,
                self.metrics.clone(),
            )?;
            tracing::info!(id = %process.id, running = process.is_running(), "adopted from the handover");
            {
                let mut entries = self.entries();
                if let Some(name) = &process.name {
                    entries.names.insert(name.clone(), process.id.clone());
                }
                entries.processes.insert(id, process.clone());
            }
            tokio::spawn(self.clone().retire(process));
        }
        let mut entries = self.entries();
        for (key, body, id) in spawn_keys {
            if entries.processes.contains_key(&id) {
                let key = Arc::new(key);
                entries.keys.insert(id.clone(), key.clone());
                entries.idempotency.insert(key, (body, id));
            }
        }
        Ok(())
    }
}

/// A placeholder while the real one is moved out.
fn empty_output() -> crate::retained::carry::CarriedOutput {
    crate::retained::carry::CarriedOutput {
        overflow: tether_protocol::Overflow::Drop,
        streams: Vec::new(),
        times: Default::default(),
        resizes: Vec::new(),
        screen: None,
    }
}
