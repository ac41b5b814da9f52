//! A bounded count of things in use (attachments, per process and in
//! total): taking a slot gives a permit, and dropping the permit gives the
//! slot back, on every path.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most `limit` slots in use at once.
#[derive(Debug)]
pub struct Slots {
    free: Arc<Semaphore>,
    limit: usize,
}

/// One slot in use until dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    /// `limit` free slots (capped at what a semaphore can count, far above
    /// any memory bound).
    pub fn new(limit: usize) -> Slots {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        Slots {
            free: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Takes a slot, or `None` when all are in use.
    pub fn take(&self) -> Option<Slot> {
        self.free
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|permit| Slot { _permit: permit })
    }

    /// Slots in use now.
    pub fn in_use(&self) -> usize {
        self.limit - self.free.available_permits()
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }
}
