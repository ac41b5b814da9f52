//! The attachment's input queue: frames for the process (stdin,
//! stdin_eof, signal, resize), in the order the client sent them, carried
//! out by a task of their own. The reader hands them over and goes on
//! reading, so credit is never stuck behind stdin that the process is not
//! reading yet; only when the attachment has [`STDIN_BUDGET`] bytes queued
//! does the reader wait.
//!
//! A stdin frame with nothing of this attachment queued before it skips
//! the task ([`ProcessQueue::try_now`]): the reader writes it to the
//! process itself, so a keystroke costs no task wake-up on its way in.

use std::sync::Arc;

use tether_protocol::{ClientFrame, Signal};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::state::ReaderEvent;
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::process::Process;
use crate::table::ProcessTable;

/// Bytes of stdin one attachment may have queued for its process.
pub const STDIN_BUDGET: usize = 4 << 20;

/// The reader's end of the queue.
pub struct ProcessQueue {
    frames: mpsc::Sender<(ClientFrame, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    largest: usize,
    process: Arc<Process>,
    grant: Grant,
    readonly: bool,
}

/// What [`ProcessQueue::try_now`] did with a frame.
pub enum Now {
    /// Carried out (written, or its tail queued in order).
    Done,
    /// Refused, as the queue's task would have refused it.
    Rejected(ApiError),
    /// Not for now: push it.
    Later(ClientFrame),
}

impl ProcessQueue {
    /// Starts the task that carries frames out; it reports failures as
    /// `events`. `budget` bounds the stdin bytes queued.
    pub fn start(
        process: Arc<Process>,
        table: Arc<ProcessTable>,
        grant: Grant,
        events: mpsc::Sender<ReaderEvent>,
        readonly: bool,
        budget: usize,
    ) -> ProcessQueue {
        let budget = budget.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        let (frames, mut queued) = mpsc::channel::<(ClientFrame, OwnedSemaphorePermit)>(1024);
        let task_process = process.clone();
        let task_table = table.clone();
        let task_grant = grant.clone();
        // Ends when the reader is gone and the queue is empty; a process
        // that never reads stdin makes its writes fail once it exits.
        tokio::spawn(async move {
            while let Some((frame, permit)) = queued.recv().await {
                let result = act(&task_process, &task_table, &task_grant, frame, readonly).await;
                drop(permit);
                if let Err(error) = result {
                    if events.send(ReaderEvent::Rejected(error)).await.is_err() {
                        return;
                    }
                }
            }
        });
        ProcessQueue {
            frames,
            budget: Arc::new(Semaphore::new(budget)),
            largest: budget,
            process,
            grant,
            readonly,
        }
    }

    /// Writes a stdin frame to the process here and now, if nothing this
    /// attachment sent before is still queued or being carried out and the
    /// process's own stdin queue is empty; else gives it back for
    /// [`ProcessQueue::push`]. As for a frame the task carries out, the
    /// budget is not held once the bytes are handed to the process (written,
    /// or their tail queued in the process's stdin queue).
    /// The same grant as the task's applies first: a frame without the
    /// write right goes the queued way, which refuses it.
    pub fn try_now(&self, frame: ClientFrame) -> Now {
        let idle = self.budget.available_permits() == self.largest;
        match frame {
            ClientFrame::Stdin { data } if idle && !self.readonly && self.may_write() => {
                match self.process.try_write_stdin(data) {
                    Ok(None) => Now::Done,
                    Ok(Some(data)) => Now::Later(ClientFrame::Stdin { data }),
                    Err(error) => Now::Rejected(error),
                }
            }
            frame => Now::Later(frame),
        }
    }

    /// True when this attachment's grant carries the write right now. A
    /// refusal is left to the queue's task, which reports and audits it.
    fn may_write(&self) -> bool {
        self.grant.allows(Need::Write, &self.process)
    }

    /// Queues a frame, waiting only while the budget is spent. False when
    /// the queue is gone.
    pub async fn push(&self, frame: ClientFrame) -> bool {
        let cost = match &frame {
            ClientFrame::Stdin { data } => data.len().clamp(1, self.largest),
            _ => 1,
        };
        let Ok(permit) = self.budget.clone().acquire_many_owned(cost as u32).await else {
            return false;
        };
        self.frames.send((frame, permit)).await.is_ok()
    }
}

/// Carries out one client frame through the process's own policy for it,
/// the same that HTTP uses. Failures that are not protocol errors (stdin
/// closed, read-only, bad signal name, no terminal) are reported and the
/// attachment carries on.
async fn act(
    process: &Process,
    table: &ProcessTable,
    grant: &Grant,
    frame: ClientFrame,
    readonly: bool,
) -> Result<(), ApiError> {
    if matches!(frame, ClientFrame::Credit { .. }) {
        return Ok(());
    }
    // The grant first: a token without the write right hears that, not
    // that the attachment asked to be read-only.
    grant.act_on(table, Need::Write, process)?;
    if readonly {
        return Err(ApiError::ReadOnly);
    }
    if let ClientFrame::Signal { .. } = &frame {
        grant.audit("signal", &process.id);
    }
    match frame {
        // Handled by the reader itself.
        ClientFrame::Credit { .. } => Ok(()),
        ClientFrame::Stdin { data } => process.write_stdin(data).await,
        ClientFrame::StdinEof => process.close_stdin().await,
        ClientFrame::Signal { signal } => process.signal(Signal::parse(&signal)?).await,
        ClientFrame::Resize { cols, rows } => table.resize(process, cols, rows),
    }
}
