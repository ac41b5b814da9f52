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
use crate::process::input_streams::{InputClaim, Plan};
use crate::process::Process;
use crate::table::ProcessTable;

/// Bytes of stdin one attachment may have queued for its process.
pub const STDIN_BUDGET: usize = 4 << 20;

/// A frame for the process, numbered when the attachment numbers its input
/// (`seq`: the sequence position of its first unit).
pub struct ForProcess {
    /// What to do (never `credit` or `input`).
    pub frame: ClientFrame,
    /// Its position in the attachment's input stream, if numbered.
    pub seq: Option<u64>,
}

/// The reader's end of the queue.
pub struct ProcessQueue {
    frames: mpsc::Sender<(ForProcess, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    largest: usize,
    process: Arc<Process>,
    grant: Grant,
    readonly: bool,
    input: Option<Arc<InputClaim>>,
}

/// What [`ProcessQueue::try_now`] did with a frame.
pub enum Now {
    /// Carried out (written, or its tail queued in order), or a duplicate.
    Done,
    /// Refused, as the queue's task would have refused it.
    Rejected(ApiError),
    /// Not for now: push it.
    Later(ForProcess),
}

impl ProcessQueue {
    /// Starts the task that carries frames out; it reports failures as
    /// `events`. `budget` bounds the stdin bytes queued. With `input`, the
    /// attachment numbers its input: each frame is applied at most once,
    /// in order, whatever connection of the stream brings it.
    pub fn start(
        process: Arc<Process>,
        table: Arc<ProcessTable>,
        grant: Grant,
        events: mpsc::Sender<ReaderEvent>,
        readonly: bool,
        budget: usize,
        input: Option<InputClaim>,
    ) -> ProcessQueue {
        let budget = budget.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        let (frames, mut queued) = mpsc::channel::<(ForProcess, OwnedSemaphorePermit)>(1024);
        let input = input.map(Arc::new);
        let task_process = process.clone();
        let task_table = table.clone();
        let task_grant = grant.clone();
        // Holds the input stream until the last queued frame is carried
        // out: its TTL starts after that.
        let task_input = input.clone();
        // Ends when the reader is gone and the queue is empty; a process
        // that never reads stdin makes its writes fail once it exits.
        tokio::spawn(async move {
            while let Some((item, permit)) = queued.recv().await {
                let result = match (&task_input, item.seq) {
                    (Some(input), Some(seq)) => {
                        act_numbered(input, seq, item.frame, |frame| {
                            act(&task_process, &task_table, &task_grant, frame, readonly)
                        })
                        .await
                    }
                    _ => {
                        act(
                            &task_process,
                            &task_table,
                            &task_grant,
                            item.frame,
                            readonly,
                        )
                        .await
                    }
                };
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
            input,
        }
    }

    /// The frame for the process that a client frame stands for: `input`
    /// frames on an attachment that numbers its input, the unnumbered
    /// ones on one that does not (each refused on the other kind, so a
    /// numbered stream never has a unit applied out of its order).
    pub fn accept(&self, frame: ClientFrame) -> Result<ForProcess, ApiError> {
        match (frame, self.input.is_some()) {
            (ClientFrame::Input { seq, action }, true) => Ok(ForProcess {
                frame: action.into_frame(),
                seq: Some(seq),
            }),
            (ClientFrame::Input { .. }, false) => Err(ApiError::InvalidRequest(
                "input frames need an attachment opened with input=ID".into(),
            )),
            (_, true) => Err(ApiError::InvalidRequest(
                "this attachment numbers its input (input=ID): send stdin, stdin_eof, signal and resize as input frames".into(),
            )),
            (frame, false) => Ok(ForProcess { frame, seq: None }),
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
    pub fn try_now(&self, item: ForProcess) -> Now {
        let idle = self.budget.available_permits() == self.largest;
        let ForProcess {
            frame: ClientFrame::Stdin { data },
            seq,
        } = item
        else {
            return Now::Later(item);
        };
        if !idle || self.readonly || !self.may_write() {
            return Now::Later(ForProcess {
                frame: ClientFrame::Stdin { data },
                seq,
            });
        }
        let (Some(input), Some(seq)) = (&self.input, seq) else {
            return match self.process.try_write_stdin(data) {
                Ok(None) => Now::Done,
                Ok(Some(data)) => Now::Later(ForProcess {
                    frame: ClientFrame::Stdin { data },
                    seq: None,
                }),
                Err(error) => Now::Rejected(error),
            };
        };
        // Another connection of the stream is applying: wait in line.
        let Ok(mut next) = input.order().try_lock() else {
            return Now::Later(ForProcess {
                frame: ClientFrame::Stdin { data },
                seq: Some(seq),
            });
        };
        let end = seq + data.len() as u64;
        let data = match Plan::of(seq, data.len() as u64, *next) {
            Plan::Duplicate => return Now::Done,
            Plan::Gap { expected } => {
                return Now::Rejected(ApiError::InputOutOfOrder { expected, got: seq })
            }
            Plan::Apply { skip } => trim(data, skip),
        };
        let result = self.process.try_write_stdin(data);
        match result {
            Ok(Some(data)) => Now::Later(ForProcess {
                frame: ClientFrame::Stdin { data },
                seq: Some(*next),
            }),
            Ok(None) => {
                *next = end;
                input.applied(end);
                Now::Done
            }
            Err(error) => {
                *next = end;
                input.applied(end);
                Now::Rejected(error)
            }
        }
    }

    /// True when this attachment's grant carries the write right now. A
    /// refusal is left to the queue's task, which reports and audits it.
    fn may_write(&self) -> bool {
        self.grant.allows(Need::Write, &self.process)
    }

    /// Queues a frame, waiting only while the budget is spent. False when
    /// the queue is gone.
    pub async fn push(&self, item: ForProcess) -> bool {
        let cost = match &item.frame {
            ClientFrame::Stdin { data } => data.len().clamp(1, self.largest),
            _ => 1,
        };
        let Ok(permit) = self.budget.clone().acquire_many_owned(cost as u32).await else {
            return false;
        };
        self.frames.send((item, permit)).await.is_ok()
    }
}

/// The bytes of `data` from its `skip`th on.
fn trim(mut data: Vec<u8>, skip: u64) -> Vec<u8> {
    let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
    data.drain(..skip);
    data
}

/// Carries out a numbered frame through `act` at most once, in its
/// stream's order: a duplicate is dropped, a frame past a gap refused, the
/// new tail of a partly applied stdin frame written. Carried out or
/// refused by `act`, it counts as applied: a resend never repeats it.
async fn act_numbered<F, Fut>(
    input: &InputClaim,
    seq: u64,
    frame: ClientFrame,
    act: F,
) -> Result<(), ApiError>
where
    F: FnOnce(ClientFrame) -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let mut next = input.order().lock().await;
    let units = match &frame {
        ClientFrame::Stdin { data } => data.len() as u64,
        _ => 1,
    };
    let frame = match (Plan::of(seq, units, *next), frame) {
        (Plan::Duplicate, _) => return Ok(()),
        (Plan::Gap { expected }, _) => {
            return Err(ApiError::InputOutOfOrder { expected, got: seq })
        }
        (Plan::Apply { skip }, ClientFrame::Stdin { data }) => ClientFrame::Stdin {
            data: trim(data, skip),
        },
        (Plan::Apply { .. }, frame) => frame,
    };
    let result = act(frame).await;
    *next = seq + units;
    input.applied(*next);
    result
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
        // Handled by the reader itself, or unwrapped by it.
        ClientFrame::Credit { .. } | ClientFrame::Input { .. } => Ok(()),
        ClientFrame::Stdin { data } => process.write_stdin(data).await,
        ClientFrame::StdinEof => process.close_stdin().await,
        ClientFrame::Signal { signal } => process.signal(Signal::parse(&signal)?).await,
        ClientFrame::Resize { cols, rows } => table.resize(process, cols, rows),
    }
}
