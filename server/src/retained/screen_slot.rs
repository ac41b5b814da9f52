//! What a PTY's retained output keeps for its terminal emulator: the
//! emulator under its own lock, its place in the screen worker's queue,
//! and the resizes recorded ahead of it. `mod.rs` holds these; the worker
//! that feeds them (`screen_feed.rs`) reads retention through `mod.rs`, so
//! the two files never import each other.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Mutex, MutexGuard};

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
}

impl ScreenFeed {
    pub fn new(screen: Screen) -> ScreenFeed {
        ScreenFeed {
            screen: Mutex::new(screen),
            queued: AtomicBool::new(false),
            sleep_requested: AtomicBool::new(false),
            unfed: AtomicUsize::new(0),
        }
    }

    /// Held while feeding one turn or taking a snapshot, never across an
    /// await. The emulator's state stays usable after a panic in it.
    pub(super) fn lock(&self) -> MutexGuard<'_, Screen> {
        self.screen.lock_or_recover()
    }
}
