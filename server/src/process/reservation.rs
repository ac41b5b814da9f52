//! What a process holds of the retention budget ([`crate::budget`]): its
//! output and metadata, settled at the exit to what the output holds, and
//! its screen, moved by resizes.

use crate::budget::{Bytes, Share};
use crate::retained::RetainedOutput;

/// What a process holds of the retention budget (`--retain-total`,
/// `--retain-disk-total`), in two shares: each is given back whole when the
/// process is forgotten, whoever still holds the process.
#[derive(Debug)]
pub struct Reservation {
    /// Its output (memory windows, disk logs) and metadata: reserved in
    /// full while it runs, lowered at the exit to what it holds
    /// ([`Reservation::settle`]).
    pub output: Share,
    /// A PTY's screen for its current size; changed under the table lock
    /// by a resize.
    pub screen: Share,
    /// What it keeps besides output (argv, an idempotency key), which the
    /// exit does not shrink.
    pub metadata: u64,
}

impl Reservation {
    /// Capture is complete: the output part becomes what the output holds
    /// (an exited `true` keeps a few kilobytes, not its windows), so that
    /// the budget forgets exited processes for what they really cost.
    pub fn settle(&self, output: &RetainedOutput) {
        let (memory, disk) = output.settle();
        self.output.lower_to(Bytes {
            memory: self.metadata + memory,
            disk,
        });
    }

    /// Both shares together, as held now.
    pub fn held(&self) -> Bytes {
        self.output.held() + self.screen.held()
    }

    /// Gives both shares back (the process is forgotten).
    pub fn release(&self) {
        self.output.release();
        self.screen.release();
    }
}
