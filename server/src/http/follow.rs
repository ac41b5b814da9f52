//! Reading a process's retained output over plain HTTP: a [`Follower`]
//! reads one or both streams from given offsets, chunk by chunk, waiting
//! for more while the process runs, and ends with its exit. It is what the
//! `output` endpoint (raw bytes or Server-Sent Events) and `POST /v1/exec`
//! read with; it registers with the retained output as a reader, so block
//! mode paces the program by it as by an attachment.

use std::sync::Arc;

use axum::body::Bytes;
use tether_protocol::{ProcessInfo, StreamName};
use tokio::sync::watch;

use crate::attach::Admission;
use crate::process::supervise::Exited;
use crate::process::Process;
use crate::retained::{Cursor, Next, Reader};

/// One thing a follower reads.
#[derive(Debug)]
pub enum Chunk {
    /// Bytes of `stream` at `offset`.
    Data {
        stream: StreamName,
        offset: u64,
        bytes: Bytes,
    },
    /// Bytes `offset..offset + length` of `stream` were evicted (or never
    /// reached the disk) before this reader got them.
    Dropped {
        stream: StreamName,
        offset: u64,
        length: u64,
    },
    /// The process has exited and every stream followed was read: last.
    Exit(Box<ProcessInfo>),
}

/// Reads streams of one process from offsets, in turn (so neither starves).
pub struct Follower {
    process: Arc<Process>,
    reader: Reader,
    cursors: [Cursor; 2],
    streams: Vec<StreamName>,
    appended: watch::Receiver<()>,
    exit: watch::Receiver<Option<Exited>>,
    turn: usize,
    max: usize,
    exit_sent: bool,
    /// The attachment slot this follower holds.
    _admission: Option<Admission>,
    /// A follower holding a slot ends when the server hands over (its
    /// client reconnects to the new binary and resumes from its offsets).
    restarting: Option<watch::Receiver<bool>>,
}

impl Follower {
    /// Follows `streams` from `starts` (per stream index), at most `max`
    /// bytes per chunk, holding `admission` (an attachment slot) if given.
    pub fn new(
        process: Arc<Process>,
        streams: Vec<StreamName>,
        starts: [u64; 2],
        max: usize,
        admission: Option<Admission>,
    ) -> Follower {
        Follower {
            reader: process.output().reader(starts),
            cursors: starts.map(Cursor::at),
            appended: process.output().watch(),
            exit: process.watch_exit(),
            process,
            streams,
            turn: 0,
            max: max.max(1),
            exit_sent: false,
            restarting: admission.as_ref().map(Admission::restarting),
            _admission: admission,
        }
    }

    /// The next offset of each stream.
    pub fn offsets(&self) -> [u64; 2] {
        self.cursors.map(|c| c.next)
    }

    /// The process followed.
    pub fn process(&self) -> &Arc<Process> {
        &self.process
    }

    /// The next chunk. With `follow`, waits for output and ends with the
    /// exit; without, ends (None) once what is retained now has been read,
    /// with the exit only if the process has already exited. None after
    /// the exit.
    pub async fn next(&mut self, follow: bool) -> Option<Chunk> {
        loop {
            if self.exit_sent {
                return None;
            }
            self.appended.borrow_and_update();
            // Read before the streams: the exit is published only after
            // capture completed, so "exited and every stream at its end"
            // means nothing can follow.
            let exited = self.exit.borrow_and_update().is_some();
            let mut complete = true;
            for k in 0..self.streams.len() {
                let stream = self.streams[(self.turn + k) % self.streams.len()];
                let cursor = &mut self.cursors[stream.index()];
                match self
                    .reader
                    .next(stream, cursor, self.max, |_, parts| parts.concat())
                {
                    Next::Data { offset, frame, .. } => {
                        self.turn = self.turn.wrapping_add(k + 1);
                        self.reader.release(&self.cursors, None);
                        return Some(Chunk::Data {
                            stream,
                            offset,
                            bytes: Bytes::from(frame),
                        });
                    }
                    Next::Dropped { offset, length } => {
                        self.reader.release(&self.cursors, None);
                        return Some(Chunk::Dropped {
                            stream,
                            offset,
                            length,
                        });
                    }
                    Next::Pending => complete = false,
                    Next::End => {}
                }
            }
            if complete && exited {
                self.exit_sent = true;
                return Some(Chunk::Exit(Box::new(self.process.info())));
            }
            if !follow {
                return None;
            }
            let restarting = async {
                match self.restarting.as_mut() {
                    Some(restarting) => crate::attach::until_restarting(restarting).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                true = restarting => return None,
                changed = self.appended.changed() => if changed.is_err() { return None },
                changed = self.exit.changed() => if changed.is_err() && !exited {
                    // The supervisor is gone without publishing: nothing
                    // more will come (not expected; never spin on it).
                    return None;
                },
            }
        }
    }
}
