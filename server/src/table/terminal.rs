//! Terminal sizes against the server's bounds: at most `--max-term-cells`
//! cells, and each PTY's screen memory (see `screen::memory_bound`)
//! reserved against `--retain-total` at spawn and at every resize, so that
//! no client (a write-scoped token is enough to resize) can make the
//! server's memory follow the terminal size past its budget.

use tether_protocol::TermSize;

use super::{MemoryReservation, ProcessTable};
use crate::budget::Bytes;
use crate::error::ApiError;
use crate::process::Process;
use crate::retained::{RetainedOutput, SnapshotSlot};
use crate::screen::{memory_bound, ScreenLimits};

/// Room for one snapshot of a screen (or its text) while it is built and
/// sent, held until then: the room the screen's own reservation keeps for
/// one, or, while another request holds that, room of its own in the
/// memory budget. So concurrent requests for a large screen cannot hold
/// more than the budget, whoever asks (reading a screen needs only the
/// read right).
pub enum SnapshotRoom {
    /// The screen's own room.
    Own(SnapshotSlot),
    /// Room reserved in the budget for this one.
    Reserved(MemoryReservation),
}

impl SnapshotRoom {
    /// Room for a snapshot of `output`'s screen: None for pipes; 503
    /// `retention_exhausted` when the budget has no room (nothing is
    /// forgotten to make it: a reader never costs anyone their history).
    pub fn take(
        output: &RetainedOutput,
        table: &ProcessTable,
    ) -> Option<Result<SnapshotRoom, ApiError>> {
        let bound = output.snapshot_bound()?;
        Some(match output.snapshot_slot() {
            Some(slot) => Ok(SnapshotRoom::Own(slot)),
            None => table.reserve_free_memory(bound).map(SnapshotRoom::Reserved),
        })
    }
}

impl ProcessTable {
    /// Checks a terminal size against `--max-term-cells`, and returns the
    /// memory its screen reserves (0 with `--no-screen`).
    pub(super) fn screen_bytes(&self, size: TermSize) -> Result<u64, ApiError> {
        let cells = u64::from(size.cols()) * u64::from(size.rows());
        if cells > self.config.max_term_cells {
            return Err(ApiError::TerminalTooLarge {
                cols: size.cols(),
                rows: size.rows(),
                max: self.config.max_term_cells,
            });
        }
        if self.config.no_screen {
            return Ok(0);
        }
        let limits = ScreenLimits {
            scrollback_lines: self.config.screen_scrollback,
        };
        Ok(memory_bound(size.cols(), size.rows(), limits))
    }

    /// Resizes a PTY, whichever entry point asks (HTTP, a `resize` frame,
    /// the Kubernetes resize channel): refused with 400 beyond
    /// `--max-term-cells`, and with 503 `retention_exhausted` when its
    /// screen at the new size does not fit the memory budget (exited
    /// processes are forgotten early to make room, as for a spawn). The
    /// reservation follows the size under the table lock.
    pub fn resize(&self, process: &Process, cols: u32, rows: u32) -> Result<(), ApiError> {
        if !process.tty {
            return Err(ApiError::NoTerminal(process.id.clone()));
        }
        let size = TermSize::new(cols, rows)?;
        let want = self.screen_bytes(size)?;
        let mut entries = self.entries();
        if !process.is_running() {
            return Err(ApiError::NotRunning(process.id.clone()));
        }
        // Still known: a forgotten process's reservation is no longer counted.
        let known = entries
            .processes
            .get(&process.id)
            .is_some_and(|p| std::ptr::eq(p.as_ref(), process));
        let screen = &process.reservation.screen;
        let held = screen.held().memory;
        if known && want > held {
            self.make_room(&mut entries, Bytes::memory(want - held))?;
        }
        process.resize(size)?;
        if known {
            screen.set_memory(want);
        }
        Ok(())
    }
}
