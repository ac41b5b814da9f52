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
use crate::process::input_streams::{InputClaim, Plan, PROCESS_QUEUED_STDIN};
use crate::process::Process;
use crate::table::ProcessTable;

/// Bytes of stdin one attachment may have queued for its process.
pub const STDIN_BUDGET: usize = 4 << 20;

/// What a queued frame holds until it is carried out: its room in the
/// attachment's budget, in its process's, and in the server's memory
/// budget (`--retain-total`); or why the server had no room for it, which
/// the queue's task reports in its turn.
struct Permits {
    attachment: OwnedSemaphorePermit,
    process: OwnedSemaphorePermit,
    room: Result<crate::table::MemoryReservation, ApiError>,
}

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
    frames: mpsc::Sender<(ForProcess, Permits)>,
    budget: Arc<Semaphore>,
    largest: usize,
    process: Arc<Process>,
    table: Arc<ProcessTable>,
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
        let (frames, mut queued) = mpsc::channel::<(ForProcess, Permits)>(1024);
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
            while let Some((item, permits)) = queued.recv().await {
                let Permits {
                    attachment: attachment_room,
                    process: process_room,
                    room,
                } = permits;
                let result = match (room, &task_input, item.seq) {
                    // Refused for want of room: nothing is carried out, and
                    // a numbered frame's position does not move.
                    (Err(refused), _, _) => Err(refused),
                    // The right first, outside the stream's order: a
                    // refusal changes nothing, its position included, so
                    // the writer's own input under it is never taken for a
                    // duplicate.
                    (Ok(_room), Some(input), Some(seq)) => {
                        match authorize(&task_process, &task_table, &task_grant, readonly) {
                            Err(refused) => Err(refused),
                            Ok(()) => {
                                act_numbered(input, seq, item.frame, |frame| {
                                    carry_out(&task_process, &task_table, &task_grant, frame)
                                })
                                .await
                            }
                        }
                    }
                    (Ok(_room), _, _) => {
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
                drop((attachment_room, process_room));
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
            table,
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
        let (frame, turn) = match step(input, &mut next, seq, ClientFrame::Stdin { data }) {
            Step::Duplicate => return Now::Done,
            Step::OutOfOrder(error) => return Now::Rejected(error),
            Step::Apply { frame, turn } => (frame, turn),
        };
        // `step` gives stdin back as stdin (its new tail); anything else
        // would go the queued way.
        let ClientFrame::Stdin { data } = frame else {
            return Now::Later(ForProcess {
                frame,
                seq: Some(turn.at()),
            });
        };
        match self.process.try_write_stdin(data) {
            Ok(Some(data)) => Now::Later(ForProcess {
                frame: ClientFrame::Stdin { data },
                seq: Some(turn.at()),
            }),
            Ok(None) => {
                turn.applied();
                Now::Done
            }
            Err(error) => {
                turn.applied();
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
        // The attachment's own budget first, then the process's (shared by
        // all its attachments), so one attachment waits on its own flood.
        let Ok(own) = self.budget.clone().acquire_many_owned(cost as u32).await else {
            return false;
        };
        let shared = self.process.inputs.queued_stdin.clone();
        let cost = cost.min(PROCESS_QUEUED_STDIN);
        let Ok(process) = shared.acquire_many_owned(cost as u32).await else {
            return false;
        };
        // Counted in the server's memory budget while queued; without room
        // (nothing is forgotten to make it) the frame is refused in its
        // turn with `retention_exhausted`, never held past the budget.
        let room = self.table.reserve_free_memory(cost as u64);
        let permits = Permits {
            attachment: own,
            process,
            room,
        };
        self.frames.send((item, permits)).await.is_ok()
    }
}

/// The bytes of `data` from its `skip`th on.
fn trim(mut data: Vec<u8>, skip: u64) -> Vec<u8> {
    let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
    data.drain(..skip);
    data
}

/// Carries out a numbered frame through `act` at most once, in its
/// stream's order (see [`step`]).
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
    match step(input, &mut next, seq, frame) {
        Step::Duplicate => Ok(()),
        Step::OutOfOrder(error) => Err(error),
        Step::Apply { frame, turn } => {
            let result = act(frame).await;
            turn.applied();
            result
        }
    }
}

/// What [`step`] makes of a numbered frame.
enum Step<'a> {
    /// Every unit of it was applied before: drop it.
    Duplicate,
    /// It starts past where the stream stands: refuse it.
    OutOfOrder(ApiError),
    /// Apply `frame` (the new tail of a partly applied stdin frame), then
    /// record it with [`Turn::applied`].
    Apply { frame: ClientFrame, turn: Turn<'a> },
}

/// A numbered frame's turn in its stream, under the stream's order lock.
struct Turn<'a> {
    input: &'a InputClaim,
    /// Where the stream stands (guarded by its order lock).
    next: &'a mut u64,
    /// Where it stands once this frame is applied.
    end: u64,
}

impl Turn<'_> {
    /// Where the frame left to apply starts.
    fn at(&self) -> u64 {
        *self.next
    }

    /// The frame was carried out or refused by the process: either way it
    /// counts as applied, so a resend never repeats it.
    fn applied(self) {
        *self.next = self.end;
        self.input.applied(self.end);
    }
}

/// The exactly-once step of a numbered input stream, taken under its order
/// lock (`next`): a duplicate is dropped, a frame past a gap refused, and
/// of the rest only what the stream has not applied yet is applied.
fn step<'a>(input: &'a InputClaim, next: &'a mut u64, seq: u64, frame: ClientFrame) -> Step<'a> {
    let units = match &frame {
        ClientFrame::Stdin { data } => data.len() as u64,
        _ => 1,
    };
    let skip = match Plan::of(seq, units, *next) {
        Plan::Duplicate => return Step::Duplicate,
        Plan::Gap { expected } => {
            return Step::OutOfOrder(ApiError::InputOutOfOrder { expected, got: seq })
        }
        Plan::Apply { skip } => skip,
    };
    let frame = match frame {
        ClientFrame::Stdin { data } => ClientFrame::Stdin {
            data: trim(data, skip),
        },
        frame => frame,
    };
    Step::Apply {
        frame,
        turn: Turn {
            input,
            next,
            end: seq + units,
        },
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
    authorize(process, table, grant, readonly)?;
    carry_out(process, table, grant, frame).await
}

/// Whether this attachment may act on the process now: the grant first (a
/// token without the write right hears that, not that the attachment asked
/// to be read-only), then the attachment's own read-only mode.
fn authorize(
    process: &Process,
    table: &ProcessTable,
    grant: &Grant,
    readonly: bool,
) -> Result<(), ApiError> {
    grant.act_on(table, Need::Write, process)?;
    if readonly {
        return Err(ApiError::ReadOnly);
    }
    Ok(())
}

/// Carries out an authorized frame.
async fn carry_out(
    process: &Process,
    table: &ProcessTable,
    grant: &Grant,
    frame: ClientFrame,
) -> Result<(), ApiError> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::process::input_streams::InputStreams;

    fn stdin(data: &[u8]) -> ClientFrame {
        ClientFrame::Stdin {
            data: data.to_vec(),
        }
    }

    #[test]
    fn the_step_applies_only_what_is_new_and_records_it() {
        let streams = InputStreams::default();
        let Ok(input) = streams.claim("operator", "a", false, Duration::from_secs(60), 4) else {
            panic!("claim");
        };
        let applied = input.watch();
        let mut next = 3;
        assert!(matches!(
            step(&input, &mut next, 0, stdin(b"abc")),
            Step::Duplicate
        ));
        assert!(matches!(
            step(&input, &mut next, 4, stdin(b"e")),
            Step::OutOfOrder(ApiError::InputOutOfOrder {
                expected: 3,
                got: 4
            })
        ));
        let Step::Apply { frame, turn } = step(&input, &mut next, 1, stdin(b"bcde")) else {
            panic!("expected the new tail to apply");
        };
        assert_eq!(turn.at(), 3);
        assert!(matches!(frame, ClientFrame::Stdin { data } if data == b"de"));
        turn.applied();
        assert_eq!((next, *applied.borrow()), (5, 5));
        let Step::Apply { frame, turn } = step(&input, &mut next, 5, ClientFrame::StdinEof) else {
            panic!("expected stdin_eof to apply");
        };
        assert!(matches!(frame, ClientFrame::StdinEof));
        turn.applied();
        assert_eq!(next, 6);
    }
}
