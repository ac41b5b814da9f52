//! The writer's run: its opening, then its pump. The pump keeps a cursor
//! per stream, asks the retained output for the next frame of each stream
//! in turn (so neither starves), honours the credit window, batches frames
//! between flushes, and sends `exit` once every stream is complete and
//! fully sent. It returns to its `select!` after every flush, so error
//! frames, closes and pings are never starved by a flood.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::Message;
use tether_protocol::StreamName;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::close::{Close, SocketGone};
use super::opening::Opening;
use super::state::{Liveness, ReaderEvent};
use super::writer::Writer;
use crate::metrics::Metrics;
use crate::retained::Next;

/// Flush after this many bytes of feed()s, so big bursts go out in few
/// syscalls and small ones promptly.
const FLUSH_BYTES: usize = 256 * 1024;

/// How long an `input_ack` may wait for output to ride with. A keystroke's
/// echo comes within it, so its acknowledgement costs no write of its own;
/// input that makes no output is acknowledged this much later.
const ACK_DELAY: Duration = Duration::from_millis(5);

/// How the writer keeps the connection honest.
pub struct Keepalive {
    /// Updated by the reader.
    pub liveness: Arc<Liveness>,
    /// `--ping-interval-ms`.
    pub ping_every: Duration,
    /// `--idle-timeout-ms`.
    pub idle_timeout: Duration,
}

/// What [`Writer::send_available`] left behind.
enum Progress {
    /// Every stream is complete and fully sent: the exit frame may follow.
    Complete,
    /// Nothing more may be sent now (no output yet, or no credit).
    Waiting,
    /// More is ready; events were given a turn first.
    More,
}

impl Writer {
    /// Sends the opening, then output as it comes, until the exit frame has
    /// been sent or the attachment must end: returns the Close to end it
    /// with. `events` goes with it, so the reader stops at its next report.
    pub async fn run(
        &mut self,
        events: mpsc::Receiver<ReaderEvent>,
        keepalive: Keepalive,
    ) -> Result<Close, SocketGone> {
        match self.open().await? {
            Opening::Open => self.pump(events, keepalive).await,
            Opening::Refused(close) => Ok(close),
        }
    }

    /// Sends output as it comes until the exit frame has been sent or the
    /// attachment must end.
    async fn pump(
        &mut self,
        mut events: mpsc::Receiver<ReaderEvent>,
        keepalive: Keepalive,
    ) -> Result<Close, SocketGone> {
        let mut output = self.process.output().watch();
        let mut exit = self.process.watch_exit();
        let mut restarting = self.restarting.clone();
        let every = keepalive.ping_every;
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            output.borrow_and_update();
            let exited = exit.borrow_and_update().is_some();
            let sent = self.send_available(exited).await?;
            if exited && matches!(sent, Progress::Complete) {
                if self.ack_due.take().is_some() {
                    self.acknowledge().await?;
                }
                if let Some(exit) = self.framing.exit(self.process.info()) {
                    self.send(exit).await?;
                }
                return Ok(Close::Normal("process exited"));
            }
            // Biased: error frames, closes and pings go before more output;
            // with output still waiting, loop straight back to it.
            let more = matches!(sent, Progress::More);
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Some(ReaderEvent::Rejected(error)) => {
                        if let Some(message) = self.framing.rejected(&error) {
                            self.send(message).await?;
                        }
                    }
                    Some(ReaderEvent::Fatal(error)) => {
                        if let Some(message) = self.framing.fatal(&error) {
                            self.send(message).await?;
                        }
                        return Ok(Close::after(&error));
                    }
                    Some(ReaderEvent::Gone) | None => return Err(SocketGone),
                },
                true = until_restarting(&mut restarting) => {
                    return Ok(Close::Restart("restarting"));
                }
                Some(()) = changed(&mut self.acknowledged) => {
                    self.ack_due.get_or_insert_with(|| tokio::time::Instant::now() + ACK_DELAY);
                }
                _ = sleep_until(self.ack_due) => {
                    self.ack_due = None;
                    self.acknowledge().await?;
                }
                _ = ping.tick() => {
                    if keepalive.liveness.unanswered_for() > keepalive.idle_timeout {
                        return Ok(Close::GoingAway("idle timeout"));
                    }
                    self.send(Message::Ping(Default::default())).await?;
                    keepalive.liveness.pinged();
                }
                _ = output.changed() => {}
                // Once exited, the supervisor has dropped the sender and
                // `changed` fails at once: watching it then would spin.
                Ok(()) = exit.changed(), if !exited => {}
                // Without a window no credit is counted: nothing to watch.
                _ = self.credit.changed.notified(), if self.window.is_some() => {
                    // Credit acknowledges bytes already sent: block-mode
                    // capture may reuse their room now.
                    self.release_sent();
                }
                _ = std::future::ready(()), if more => {}
            }
        }
    }

    /// Sends what output this attachment may be sent now, batching frames
    /// between flushes, and returns after one flush's worth so that events
    /// get their turn.
    ///
    /// While the process runs, a round that left every stream drained (its
    /// frame shorter than allowed, or nothing) ends it: output that came
    /// since wakes the writer again through the watch it marked seen before
    /// this call, so a keystroke's echo costs one look at the retained
    /// output, not two. After the exit no wake-up will come, so it looks
    /// until every stream says so itself.
    async fn send_available(&mut self, exited: bool) -> Result<Progress, SocketGone> {
        loop {
            let mut sent_any = false;
            let mut done = true;
            let mut drained = !exited;
            let granted = self.credit.granted();
            // One frame per stream per round: neither stream starves.
            for stream in StreamName::ALL {
                let i = stream.index();
                let allowance = match self.window {
                    Some(window) => {
                        (window.saturating_add(granted[i])).saturating_sub(self.cursors[i].sent)
                    }
                    None => u64::MAX,
                };
                let max = usize::try_from(allowance)
                    .unwrap_or(usize::MAX)
                    .min(self.max_data);
                let wanted = self.framing.wants(stream);
                let framing = &self.framing;
                // A stream the client does not read is moved through
                // unsent, so it paces nothing.
                let next = self
                    .output
                    .next(stream, &mut self.cursors[i], max, |offset, parts| {
                        wanted.then(|| framing.data(stream, offset, parts))
                    });
                let message = match next {
                    Next::End => continue,
                    Next::Pending => {
                        done = false;
                        continue;
                    }
                    Next::Dropped { offset, length } => {
                        drained = false;
                        Metrics::add(&self.process.metrics.dropped, stream, length);
                        if wanted {
                            self.framing.dropped(stream, offset, length)
                        } else {
                            None
                        }
                    }
                    Next::Data { length, frame, .. } => {
                        drained &= (length as usize) < max;
                        if wanted {
                            Metrics::add(&self.process.metrics.sent, stream, length);
                        }
                        frame
                    }
                };
                done = false;
                sent_any = true;
                let Some(message) = message else {
                    continue;
                };
                // A due acknowledgement rides with the output, in its flush.
                if self.ack_due.take().is_some() {
                    if let Some(ack) = self.input_ack() {
                        self.feed(ack).await?;
                    }
                }
                self.feed(message).await?;
                if self.unflushed >= FLUSH_BYTES {
                    self.flush().await?;
                    return Ok(Progress::More);
                }
            }
            if !sent_any || drained {
                if self.unflushed > 0 {
                    self.flush().await?;
                }
                return Ok(if done && !sent_any {
                    Progress::Complete
                } else {
                    Progress::Waiting
                });
            }
            self.release_sent();
        }
    }
}

/// Resolves when the watched position moves; never without one (or once
/// its sender is gone).
async fn changed(watched: &mut Option<watch::Receiver<u64>>) -> Option<()> {
    match watched {
        Some(receiver) => receiver.changed().await.ok(),
        None => std::future::pending().await,
    }
}

/// Resolves at `deadline`; never without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Resolves to true when the server begins a handover (false if it never
/// can: the table is gone).
pub async fn until_restarting(restarting: &mut tokio::sync::watch::Receiver<bool>) -> bool {
    restarting.wait_for(|r| *r).await.is_ok()
}
