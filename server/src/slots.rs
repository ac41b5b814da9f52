//! A bounded count of things in use (attachments, per process and in
//! total): taking a slot gives a permit, and dropping the permit gives the
//! slot back, on every path. The count in use can be watched (the
//! unattached timeout of a process waits for it to reach zero).

use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// At most `limit` slots in use at once.
#[derive(Debug)]
pub struct Slots {
    free: Arc<Semaphore>,
    limit: usize,
    in_use: Arc<watch::Sender<usize>>,
}

/// One slot in use until dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    in_use: Arc<watch::Sender<usize>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_use.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Slots {
    /// `limit` free slots (capped at what a semaphore can count, far above
    /// any memory bound).
    pub fn new(limit: usize) -> Slots {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        Slots {
            free: Arc::new(Semaphore::new(limit)),
            limit,
            in_use: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Takes a slot, or `None` when all are in use.
    pub fn take(&self) -> Option<Slot> {
        let permit = self.free.clone().try_acquire_owned().ok()?;
        self.in_use.send_modify(|n| *n += 1);
        Some(Slot {
            _permit: permit,
            in_use: self.in_use.clone(),
        })
    }

    /// Takes a slot only if `keep` more stay free after it (fewer when the
    /// limit is too small to keep them and still admit one), else `None`.
    pub fn take_leaving(&self, keep: usize) -> Option<Slot> {
        let keep = keep.min(self.limit.saturating_sub(1));
        let slot = self.take()?;
        (self.free.available_permits() >= keep).then_some(slot)
    }

    /// Slots in use now.
    pub fn in_use(&self) -> usize {
        self.limit - self.free.available_permits()
    }

    /// The number in use, as it changes.
    pub fn watch(&self) -> watch::Receiver<usize> {
        self.in_use.subscribe()
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }
}
