//! What a PTY's retained output keeps for its terminal emulator: the
//! emulator under its own lock, its place in the screen worker's queue,
//! and the resizes recorded ahead of it. `mod.rs` holds these; the worker
//! that feeds them (`screen_feed.rs`) reads retention through `mod.rs`, so
//! the two files never import each other.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::screen::Screen;
use crate::sync::LockExt;

/// Resizes recorded ahead of the emulator; past this many, the newest one
/// replaces the last (the size in between is never shown).
pub(super) const MAX_PENDING_RESIZES: usize = 64;

/// A terminal resize at a stdout offset, waiting for the emulator.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingResize {
    pub offset: u64,
    pub cols: u16,
    pub rows: u16,
}

/// One PTY's emulator, its lock, and its place in the worker's queue.
#[derive(Debug)]
pub(super) struct ScreenFeed {
    screen: Mutex<Screen>,
    /// In the worker's queue (or being fed): not queued again.
    pub(super) queued: AtomicBool,
    /// Output has been quiet: reduce the emulator once it has caught up.
    pub(super) sleep_requested: AtomicBool,
    /// Bytes appended since the worker last began a turn on this emulator.
    pub(super) unfed: AtomicUsize,
    /// The one snapshot the screen's own reservation has room for is
    /// being built or sent (see [`SnapshotSlot`]).
    pub(super) snapshot_slot_taken: Arc<AtomicBool>,
}

/// The room the screen's own reservation keeps for one snapshot being
/// built or sent, taken by one request at a time; given back on drop.
/// Others reserve their own room in the budget, or are refused.
pub struct SnapshotSlot(Arc<AtomicBool>);

impl Drop for SnapshotSlot {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ScreenFeed {
    /// The screen's own room for one snapshot, if no request holds it.
    pub fn take_snapshot_slot(&self) -> Option<SnapshotSlot> {
        self.snapshot_slot_taken
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| SnapshotSlot(self.snapshot_slot_taken.clone()))
    }

    pub fn new(screen: Screen) -> ScreenFeed {
        ScreenFeed {
            screen: Mutex::new(screen),
            queued: AtomicBool::new(false),
            sleep_requested: AtomicBool::new(false),
            snapshot_slot_taken: Arc::new(AtomicBool::new(false)),
            unfed: AtomicUsize::new(0),
        }
    }

    /// Held while feeding one turn or taking a snapshot, never across an
    /// await. The emulator's state stays usable after a panic in it.
    pub(super) fn lock(&self) -> MutexGuard<'_, Screen> {
        self.screen.lock_or_recover()
    }
}
