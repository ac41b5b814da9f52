//! One stream's log as a handover carries it (issue 43): the window's
//! bytes (a blob of the state document) and offsets, the disk log by name
//! with its range, and the block-mode floor. Attachments are closed before
//! a handover, so no reader's floor is carried: the idle floor holds.

use std::sync::Arc;

use super::super::disk::{CarriedRing, RingFile};
use super::super::ring::{Next, StreamBuffer};
use super::{Disk, StreamLog};

/// Bytes kept apart from the state's description (a window, a snapshot):
/// where in the state document they are.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    pub at: u64,
    pub len: u64,
}

/// A [`StreamLog`] in the state document.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedLog {
    /// Offset of the window's first byte; its bytes are `window`.
    pub window_start: u64,
    pub window: Blob,
    pub window_capacity: u64,
    pub capacity: u64,
    pub complete: bool,
    pub fault: Option<String>,
    pub idle_floor: u64,
    pub disk: Option<CarriedDisk>,
}

/// The disk part of a [`CarriedLog`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedDisk {
    pub ring: CarriedRing,
    pub start: u64,
    pub end: u64,
    pub header_start: u64,
    pub failed: bool,
    pub held: bool,
}

impl StreamLog {
    /// The log as carried: `put` stores the window's bytes (in two parts,
    /// as the ring holds them) and names where. Capture is stopped, so no
    /// disk write is under way.
    pub fn carry(
        &self,
        put: &mut dyn FnMut(&[&[u8]]) -> std::io::Result<Blob>,
    ) -> std::io::Result<CarriedLog> {
        let (start, end) = (self.window.start(), self.window.end());
        let length = usize::try_from(end - start).unwrap_or(usize::MAX);
        let window = match self.window.next(start, length, |_, parts| put(parts)) {
            Next::Data { frame, .. } => frame?,
            _ => put(&[])?,
        };
        let disk = match &self.disk {
            Some(d) => Some(CarriedDisk {
                ring: d.file.carried()?,
                start: d.start,
                end: d.end,
                header_start: d.header_start,
                failed: d.failed,
                held: d.held,
            }),
            None => None,
        };
        Ok(CarriedLog {
            window_start: start,
            window,
            window_capacity: self.window_capacity,
            capacity: self.capacity,
            complete: self.window.is_complete(),
            fault: self.fault.clone(),
            idle_floor: self.idle_floor,
            disk,
        })
    }

    /// The log a handover carried, with its window's bytes and its ring
    /// file reopened (see [`RingFile::resumed`]): it goes on from the same
    /// offsets, appending where it stopped.
    pub fn resumed(carried: CarriedLog, window: &[u8], file: Option<RingFile>) -> StreamLog {
        let mut buffer = StreamBuffer::resume_at(
            usize::try_from(carried.window_capacity).unwrap_or(usize::MAX),
            carried.window_start,
        );
        buffer.push(window);
        if carried.complete {
            buffer.complete();
        }
        let mut fault = carried.fault;
        if carried.disk.is_some() && file.is_none() && fault.is_none() {
            fault = Some("the disk log could not be reopened after a handover".into());
        }
        let disk = match (carried.disk, file) {
            (Some(d), Some(file)) => Some(Disk {
                file: Arc::new(file),
                start: d.start,
                end: d.end,
                writing: None,
                header_start: d.header_start,
                failed: d.failed,
                held: d.held,
            }),
            _ => None,
        };
        StreamLog {
            window: buffer,
            window_capacity: carried.window_capacity,
            capacity: carried.capacity,
            disk,
            fault,
            floors: Default::default(),
            idle_floor: carried.idle_floor,
        }
    }
}
