//! What a handover carries of one process's retained output (issue 43):
//! each stream's log ([`super::log::CarriedLog`]: every byte of the window and its
//! offsets, the disk log by name), the time index, the resizes the screen
//! has not reached, and a PTY's screen as a snapshot. The new binary builds
//! the same [`RetainedOutput`] from it: the same offsets, nothing lost or
//! repeated. Capture is stopped while this is taken.

use std::time::{Duration, Instant};

use tether_protocol::{Overflow, StreamName};

use super::disk::{CarriedRing, RingFile};
use super::log::{Blob, CarriedLog, StreamLog};
use super::record::Record;
use super::screen_slot::PendingResize;
use super::times::{SavedTimes, TimeIndex};
use super::RetainedOutput;
use crate::screen::{Screen, ScreenLimits, Snapshot};

/// How long a handover lets a screen catch up with its output before it
/// is carried as it stands (and marked stale).
const SCREEN_CATCH_UP: Duration = Duration::from_secs(2);

/// A [`RetainedOutput`] in the state document.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedOutput {
    pub overflow: Overflow,
    /// stdout, stderr.
    pub streams: Vec<CarriedLog>,
    pub times: SavedTimes,
    /// `(offset, cols, rows)` of each resize the screen has not reached.
    pub resizes: Vec<(u64, u16, u16)>,
    pub screen: Option<CarriedScreen>,
}

/// A PTY's screen as its snapshot.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedScreen {
    pub cols: u16,
    pub rows: u16,
    pub offset: u64,
    pub data: Blob,
    pub stale: bool,
}

impl RetainedOutput {
    /// The output as carried; `put` stores bytes in the state document.
    pub fn carry(
        &self,
        put: &mut dyn FnMut(&[&[u8]]) -> std::io::Result<Blob>,
    ) -> std::io::Result<CarriedOutput> {
        let screen = match self.caught_up_snapshot() {
            Some((snapshot, stale)) => Some(CarriedScreen {
                cols: snapshot.cols,
                rows: snapshot.rows,
                offset: snapshot.offset,
                data: put(&[&snapshot.data])?,
                stale,
            }),
            None => None,
        };
        let state = self.lock();
        let streams = state
            .buffers
            .iter()
            .map(|log| log.carry(put))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(CarriedOutput {
            overflow: self.overflow,
            streams,
            times: state.times.saved(),
            resizes: state
                .resizes
                .iter()
                .map(|r| (r.offset, r.cols, r.rows))
                .collect(),
            screen,
        })
    }

    /// The screen's snapshot once the emulator has had all of the output
    /// (capture is stopped, so the end does not move), or as it stands
    /// after [`SCREEN_CATCH_UP`].
    fn caught_up_snapshot(&self) -> Option<(Snapshot, bool)> {
        let deadline = Instant::now() + SCREEN_CATCH_UP;
        loop {
            let (snapshot, stale) = self.screen_snapshot()?;
            let end = self.totals()[StreamName::Stdout.index()];
            if snapshot.offset >= end || Instant::now() >= deadline {
                let behind = snapshot.offset < end;
                return Some((snapshot, stale || behind));
            }
        }
    }

    /// The output a handover carried. `take` reads a blob back, `reopen`
    /// opens a disk log's ring again (in the same directory); `screen`
    /// says how the new binary bounds a screen (None: `--no-screen`).
    pub fn adopted(
        carried: CarriedOutput,
        take: &mut dyn FnMut(Blob) -> std::io::Result<Vec<u8>>,
        reopen: &mut dyn FnMut(CarriedRing) -> std::io::Result<RingFile>,
        record: Option<Record>,
        screen: Option<ScreenLimits>,
    ) -> std::io::Result<RetainedOutput> {
        let mut logs = Vec::with_capacity(2);
        for mut log in carried.streams.into_iter().take(2) {
            let window = take(log.window)?;
            let file = match log.disk.as_mut() {
                Some(disk) => {
                    let ring = std::mem::replace(
                        &mut disk.ring,
                        CarriedRing {
                            name: String::new(),
                            capacity: 0,
                            durable: false,
                            header: [0, 0],
                            open: false,
                            identity: None,
                        },
                    );
                    match reopen(ring) {
                        Ok(file) => Some(file),
                        Err(error) => {
                            tracing::warn!(%error, "a carried disk log could not be reopened: its bytes are reported as dropped");
                            None
                        }
                    }
                }
                None => None,
            };
            logs.push(StreamLog::resumed(log, &window, file));
        }
        let [stdout, stderr]: [StreamLog; 2] = logs
            .try_into()
            .map_err(|_| std::io::Error::other("a carried process has fewer than two streams"))?;
        let screen = match (carried.screen, screen) {
            (Some(s), Some(limits)) => {
                let snapshot = Snapshot {
                    offset: s.offset,
                    cols: s.cols,
                    rows: s.rows,
                    data: take(s.data)?,
                };
                Some(Screen::restored(&snapshot, limits, s.stale))
            }
            _ => None,
        };
        let output = RetainedOutput::with_logs([stdout, stderr], carried.overflow, record, screen);
        {
            let mut state = output.lock();
            output.set_times(&mut state, TimeIndex::restored(carried.times));
            state.resizes = carried
                .resizes
                .into_iter()
                .map(|(offset, cols, rows)| PendingResize { offset, cols, rows })
                .collect();
        }
        Ok(output)
    }
}
