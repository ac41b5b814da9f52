//! Where a process's input goes in its input log (`input_log.rs`): the
//! stdout offset and the time it came at, taken under the streams' lock.
//! Apart from the log itself, which the time index holds (`times.rs`), so
//! that no file imports in a circle.

use tether_protocol::StreamName;

use super::{times, RetainedOutput};

impl RetainedOutput {
    /// From now on this process's input is logged for its recording
    /// (`input_log.rs`): the spawn asked (`record_input`).
    pub fn record_input(&self) {
        self.lock().times.record_input();
    }

    /// Where input given now stands: stdout's end and the time. Taken
    /// before the input is written, so that the echo it causes comes
    /// after it in a recording.
    pub fn input_mark(&self) -> Option<(u64, u64)> {
        let state = self.lock();
        state.times.records_input().then(|| {
            let offset = state.buffers[StreamName::Stdout.index()].end();
            (offset, times::now_ms())
        })
    }

    /// Logs input written to stdin at `mark` ([`RetainedOutput::input_mark`]).
    pub fn input_written(&self, mark: (u64, u64), bytes: &[u8]) {
        self.lock().times.input(mark.0, mark.1, bytes);
    }
}
