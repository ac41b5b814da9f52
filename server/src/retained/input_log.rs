//! The input a process was given, kept for its recording's `i` events
//! (issue 44) when its spawn asked (`record_input`; off by default:
//! keystrokes include passwords). Each entry is the stdout offset the
//! input came at (so a recording puts it before the echo it caused), the
//! time, and the bytes as written to stdin, once each: numbered input is
//! logged where it is applied, after the exactly-once check.
//!
//! Bounded: the newest [`MAX_INPUT_BYTES`] of input in at most
//! [`MAX_INPUT_EVENTS`] entries; what goes is counted, and a recording
//! says how much input it no longer has.

use std::collections::VecDeque;

use base64::Engine;

/// Input bytes kept per process.
pub const MAX_INPUT_BYTES: usize = 64 << 10;

/// Entries kept per process (a keystroke each, typically).
pub const MAX_INPUT_EVENTS: usize = 2048;

/// What the log may hold in memory, counted in the process's metadata
/// when it records input: the bytes and each entry's offset, time and
/// length.
pub const INPUT_LOG_BYTES: u64 = (MAX_INPUT_BYTES + MAX_INPUT_EVENTS * 24) as u64;

/// What the log adds to `ID.times` at most: each entry as JSON with its
/// bytes in base64 (4 characters per 3 bytes), with room to spare.
pub const MAX_SAVED_INPUT_BYTES: u64 = 192 << 10;

/// One entry: input given when stdout had reached `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputEvent {
    pub offset: u64,
    pub at_ms: u64,
    pub bytes: Vec<u8>,
}

/// The log of one process that records its input.
#[derive(Debug, Default)]
pub struct InputLog {
    /// Newest last.
    events: VecDeque<(u64, u64, u32)>,
    /// The bytes of `events`, in order.
    bytes: VecDeque<u8>,
    /// Input bytes no longer kept.
    dropped: u64,
    /// Entries ever pushed: the next one's number.
    pushed: u64,
}

impl InputLog {
    /// `bytes` were given when stdout had reached `offset`, at `at_ms`.
    pub fn push(&mut self, offset: u64, at_ms: u64, bytes: &[u8]) {
        // More than the whole log: its newest part.
        let (skipped, bytes) = match bytes.len().checked_sub(MAX_INPUT_BYTES) {
            Some(excess) => (excess, &bytes[excess..]),
            None => (0, bytes),
        };
        self.dropped += skipped as u64;
        if bytes.is_empty() {
            return;
        }
        while self.events.len() >= MAX_INPUT_EVENTS
            || self.bytes.len() + bytes.len() > MAX_INPUT_BYTES
        {
            let Some((_, _, len)) = self.events.pop_front() else {
                break;
            };
            self.bytes.drain(..len as usize);
            self.dropped += u64::from(len);
        }
        self.events.push_back((offset, at_ms, bytes.len() as u32));
        self.bytes.extend(bytes);
        self.pushed += 1;
    }

    /// The entries kept from number `seen` on (those before it were read
    /// already), and the number of the next one.
    pub fn since(&self, seen: u64) -> (Vec<InputEvent>, u64) {
        let first = self.pushed - self.events.len() as u64;
        let skip = seen.saturating_sub(first).min(self.events.len() as u64) as usize;
        let mut at: usize = self.events.iter().take(skip).map(|e| e.2 as usize).sum();
        let events = self
            .events
            .iter()
            .skip(skip)
            .map(|&(offset, at_ms, len)| {
                let bytes = self.bytes.range(at..at + len as usize).copied().collect();
                at += len as usize;
                InputEvent {
                    offset,
                    at_ms,
                    bytes,
                }
            })
            .collect();
        (events, self.pushed)
    }

    /// Every entry kept, oldest first.
    pub fn events(&self) -> Vec<InputEvent> {
        self.since(0).0
    }

    /// Input bytes given but no longer kept (the oldest).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The log as `ID.times` and a handover keep it.
    pub fn saved(&self) -> SavedInput {
        let engine = base64::engine::general_purpose::STANDARD;
        SavedInput {
            dropped: self.dropped,
            events: self
                .events()
                .into_iter()
                .map(|e| (e.offset, e.at_ms, engine.encode(&e.bytes)))
                .collect(),
        }
    }

    /// A log read back: entries that do not decode, or that go back in
    /// offset or time, end it there (never trusted past a fault); the
    /// bounds hold whatever the file says.
    pub fn restored(saved: SavedInput) -> InputLog {
        let engine = base64::engine::general_purpose::STANDARD;
        let mut log = InputLog {
            dropped: saved.dropped,
            ..InputLog::default()
        };
        let mut last = (0, 0);
        for (offset, at_ms, text) in saved.events {
            let Ok(bytes) = engine.decode(text.as_bytes()) else {
                break;
            };
            if offset < last.0 || at_ms < last.1 {
                break;
            }
            last = (offset, at_ms);
            log.push(offset, at_ms, &bytes);
        }
        log
    }
}

/// [`InputLog`] written out: input bytes no longer kept, and each entry
/// as `(stdout offset, ms since the epoch, base64 bytes)`.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct SavedInput {
    pub dropped: u64,
    pub events: Vec<(u64, u64, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_input_is_kept_once_with_its_offset_and_time() {
        let mut log = InputLog::default();
        log.push(0, 10, b"ls\r");
        log.push(12, 20, b"\x03");
        let events = log.events();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].bytes, b"ls\r");
        assert_eq!((events[1].offset, events[1].at_ms), (12, 20));
        assert_eq!(log.dropped(), 0);
    }

    #[test]
    fn a_full_log_keeps_the_newest_and_counts_what_went() {
        let mut log = InputLog::default();
        for i in 0..(MAX_INPUT_EVENTS as u64 + 5) {
            log.push(i, i, b"k");
        }
        assert_eq!(log.events().len(), MAX_INPUT_EVENTS);
        assert_eq!(log.dropped(), 5);
        assert_eq!(log.events()[0].offset, 5);
        // One paste larger than the log: its newest bytes.
        let paste = vec![b'p'; MAX_INPUT_BYTES + 100];
        log.push(10_000, 10_000, &paste);
        assert_eq!(log.events().len(), 1);
        assert_eq!(log.events()[0].bytes.len(), MAX_INPUT_BYTES);
        assert_eq!(log.dropped(), 5 + MAX_INPUT_EVENTS as u64 + 100);
    }

    #[test]
    fn a_saved_log_reads_back_the_same_and_a_corrupt_one_stops_at_the_fault() {
        let mut log = InputLog::default();
        log.push(0, 1, b"a\xff");
        log.push(5, 2, b"b");
        let back = InputLog::restored(log.saved());
        assert_eq!(back.events(), log.events());
        let mut saved = log.saved();
        saved.events.push((4, 3, "c".into())); // offset goes back
        saved.events.push((9, 4, "Yw==".into()));
        assert_eq!(InputLog::restored(saved).events(), log.events());
        let garbage = SavedInput {
            dropped: 0,
            events: vec![(0, 0, "not base64!".into())],
        };
        assert!(InputLog::restored(garbage).events().is_empty());
    }

    #[test]
    fn the_saved_log_fits_its_bound_at_its_fullest() {
        let mut log = InputLog::default();
        // The most entries, with the most bytes, at the largest numbers.
        let each = MAX_INPUT_BYTES / MAX_INPUT_EVENTS;
        for _ in 0..MAX_INPUT_EVENTS {
            log.push(u64::MAX / 2, u64::MAX / 2, &vec![0xff; each]);
        }
        let json = serde_json::to_vec(&log.saved()).unwrap();
        assert!(json.len() as u64 <= MAX_SAVED_INPUT_BYTES, "{}", json.len());
    }
}
