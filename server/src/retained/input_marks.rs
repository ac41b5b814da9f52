//! Where a process's input goes in its input log (`input_log.rs`): the
//! stdout offset and the time it came at, taken under the streams' lock.
//! Apart from the log itself, which the time index holds (`times.rs`), so
//! that no file imports in a circle.

use std::sync::atomic::Ordering;

use tether_protocol::StreamName;

use super::{times, RetainedOutput, Streams};

impl RetainedOutput {
    /// From now on this process's input is logged for its recording
    /// (`input_log.rs`): the spawn asked (`record_input`).
    pub fn record_input(&self) {
        self.lock().times.record_input();
        self.records_input.store(true, Ordering::Release);
    }

    /// Puts `index` (read back or carried) in place of the time index,
    /// and with it whether input is logged.
    pub(super) fn set_times(&self, state: &mut Streams, index: times::TimeIndex) {
        self.records_input
            .store(index.records_input(), Ordering::Release);
        state.times = index;
    }

    /// Where input given now stands: stdout's end and the time. Taken
    /// before the input is written, so that the echo it causes comes
    /// after it in a recording. Without an input log, the answer comes
    /// without taking the streams' lock: this is every keystroke's path.
    pub fn input_mark(&self) -> Option<(u64, u64)> {
        if !self.records_input.load(Ordering::Acquire) {
            return None;
        }
        let state = self.lock();
        let offset = state.buffers[StreamName::Stdout.index()].end();
        Some((offset, times::now_ms()))
    }

    /// True when this process's input is logged (the process object's
    /// `records_input`).
    pub fn records_input(&self) -> bool {
        self.records_input.load(Ordering::Acquire)
    }

    /// Logs input written to stdin at `mark` ([`RetainedOutput::input_mark`]).
    pub fn input_written(&self, mark: (u64, u64), bytes: &[u8]) {
        self.lock().times.input(mark.0, mark.1, bytes);
    }
}
