//! A running process's time index written beside its logs now and then
//! (`ID.times`, with `--data-dir`): what a crash would otherwise lose.

use super::log::StreamLog;
use super::RetainedOutput;

impl RetainedOutput {
    /// While the process runs, writes its time index beside the logs
    /// (`ID.times`) if output came since the last time, so that a crash
    /// loses at most the marks since (a restart's recording of a `lost`
    /// process has its times). Only with `--data-dir` (a record).
    pub fn save_times(&self) {
        let Some(record) = &self.record else { return };
        let (written, saved) = {
            let state = self.lock();
            let written = state.buffers.iter().map(StreamLog::end).sum::<u64>()
                + state.times.sizes().len() as u64;
            (written, state.times.saved())
        };
        if record.times_saved_at() != written {
            record.write_times(&saved);
            record.note_times_saved_at(written);
        }
    }
}
