//! Supervision: the only owner of the OS child. It reaps it, fires the
//! deadline and the unattached timeout, serves signal and kill requests (only here, so nothing is
//! signalled after the reap), waits for capture (bounded by the drain
//! timeout), then publishes the exit.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tether_protocol::{ExitReason, ProcessInfo, ProcessStatus};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::capture::wait_deadline;
use crate::metrics::Metrics;
use crate::retained::RetainedOutput;
use crate::session::{kill_session, signal_group};

/// Requests to the supervisor, which alone may signal the child because it
/// alone reaps it (so nothing is signalled after it was reaped).
#[derive(Debug)]
pub enum Control {
    /// Send a signal to the process group; the reply says it was sent.
    Signal(Signal, oneshot::Sender<()>),
    /// Kill the whole session (TERM, then KILL after the grace; KILL at
    /// once for a zero grace) and report this reason.
    Kill(ExitReason, Duration, oneshot::Sender<()>),
}

/// `unattached_timeout_ms`: fires once the process has had no attachment
/// for `timeout`, counted from the spawn and afresh from each time the
/// last attachment goes. Never while one is attached.
pub struct Unattached {
    timeout: Duration,
    /// Attachments in use (`Process::attachment_slots`).
    attachments: watch::Receiver<usize>,
    /// When it fires, while nobody is attached.
    deadline: Option<Instant>,
}

impl Unattached {
    /// The timer of a process with no attachment yet.
    pub fn new(timeout: Duration, attachments: watch::Receiver<usize>) -> Unattached {
        Unattached {
            timeout,
            attachments,
            deadline: None,
        }
    }

    /// Resolves when the deadline passes. Cancel-safe: the deadline lives
    /// in `self`, so the supervisor's loop may drop and recreate this.
    async fn expired(&mut self) {
        loop {
            // A change means attachments came or went since the last look:
            // if none is left, the time starts afresh.
            let changed = self.attachments.has_changed().unwrap_or(false);
            if *self.attachments.borrow_and_update() > 0 {
                self.deadline = None;
            } else if changed || self.deadline.is_none() {
                self.deadline = Some(Instant::now() + self.timeout);
            }
            tokio::select! {
                result = self.attachments.changed() => {
                    if result.is_err() {
                        // The process was forgotten: nobody can attach again.
                        wait_deadline(self.deadline).await;
                        return;
                    }
                }
                _ = wait_deadline(self.deadline) => return,
            }
        }
    }
}

/// The unattached timeout, or never.
async fn unattached(timer: &mut Option<Unattached>) {
    match timer {
        Some(timer) => timer.expired().await,
        None => std::future::pending().await,
    }
}

/// The published exit: the final process object, and when it counted as
/// exited (reaped and capture complete).
#[derive(Debug, Clone)]
pub struct Exited {
    /// The process object with every exit field set.
    pub info: ProcessInfo,
    /// The same moment as `info.finished_at`, for ordering.
    pub finished_at: SystemTime,
}

/// Everything supervision needs, handed over by the spawner.
pub struct Supervisor {
    /// The OS child, owned here alone.
    pub child: Child,
    /// The process object at birth; the exit fields are filled in at exit.
    pub birth: ProcessInfo,
    /// When the OS process was created: `duration_ms` counts from here, not
    /// from when this task first ran.
    pub started: Instant,
    /// `timeout_ms`, if any.
    pub timeout: Option<Duration>,
    /// How long a session killed by its deadline or unattached timeout has
    /// between TERM and KILL.
    pub kill_grace: Duration,
    /// `unattached_timeout_ms`, if any.
    pub unattached: Option<Unattached>,
    /// Signal and kill requests.
    pub control: mpsc::Receiver<Control>,
    /// Tells capture the moment of the reap (the drain bound starts then).
    pub reaped: watch::Sender<Option<Instant>>,
    /// The capture tasks; each says whether it reached end of file.
    pub captures: Vec<JoinHandle<bool>>,
    /// Completed once capture is done.
    pub output: Arc<RetainedOutput>,
    /// Where the exit is published.
    pub exit: watch::Sender<Option<Exited>>,
    /// Counts exits.
    pub metrics: Arc<Metrics>,
}

impl Supervisor {
    /// Runs the process's life to its published exit.
    pub async fn run(mut self) {
        let (status, killed) = self.until_reaped().await;
        let duration_ms = self.started.elapsed().as_millis() as u64;
        // Requests still queued find the process reaped: dropping their
        // reply senders makes them report `not_running`.
        drop(self.control);
        self.reaped.send_replace(Some(Instant::now()));

        let mut complete = true;
        for capture in self.captures {
            complete &= capture.await.unwrap_or(false);
        }
        let [stdout_bytes, stderr_bytes] = self.output.complete();
        let (exit_code, signal, reason) = classify(status, killed);
        tracing::info!(exit_code, ?reason, duration_ms, "process exited");
        self.metrics.exited(reason);
        let finished_at = SystemTime::now();
        let info = ProcessInfo {
            status: ProcessStatus::Exited,
            exit_code: Some(exit_code),
            signal,
            reason: Some(reason),
            finished_at: Some(timestamp(finished_at)),
            duration_ms: Some(duration_ms),
            stdout_bytes,
            stderr_bytes,
            output_incomplete: !complete,
            ..self.birth
        };
        self.exit.send_replace(Some(Exited { info, finished_at }));
    }

    /// Serves requests and the deadline until the child is reaped. Returns
    /// its status and the reason the server killed it, if it did.
    async fn until_reaped(&mut self) -> (io::Result<ExitStatus>, Option<ExitReason>) {
        let deadline = self.timeout.map(|t| self.started + t);
        let pid = self.birth.pid;
        let tty = self.birth.tty;
        let mut killed: Option<ExitReason> = None;
        loop {
            tokio::select! {
                status = self.child.wait() => return (status, killed),
                _ = wait_deadline(deadline), if killed.is_none() => {
                    tracing::info!("deadline reached; killing session");
                    killed = Some(ExitReason::Timeout);
                    kill_session(pid, tty, self.kill_grace);
                }
                _ = unattached(&mut self.unattached), if killed.is_none() => {
                    tracing::info!("no attachment for the unattached timeout; killing session");
                    killed = Some(ExitReason::Unattached);
                    kill_session(pid, tty, self.kill_grace);
                }
                Some(request) = self.control.recv() => match request {
                    Control::Signal(signal, reply) => {
                        // Not yet reaped (only this task reaps), so the pid
                        // and group are still this process's.
                        signal_group(pid, signal);
                        let _ = reply.send(());
                    }
                    Control::Kill(reason, grace, reply) => {
                        // The first kill gives the reason; a later one with
                        // no grace still hastens a session that is dying.
                        if killed.is_none() || grace.is_zero() {
                            killed.get_or_insert(reason);
                            kill_session(pid, tty, grace);
                        }
                        let _ = reply.send(());
                    }
                },
            }
        }
    }
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Exit code, signal name and reason. The reason comes from what the
/// server did (it fired the deadline, or was asked to kill), never from a
/// guess about elapsed time.
fn classify(
    status: io::Result<ExitStatus>,
    killed: Option<ExitReason>,
) -> (i32, Option<String>, ExitReason) {
    let (code, signal) = match &status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(tether_protocol::signal::signal_name(sig))),
            (None, None) => (-1, None),
        },
        Err(e) => {
            tracing::error!(error = %e, "wait failed");
            (-1, None)
        }
    };
    match killed {
        Some(ExitReason::Timeout) => (124, signal, ExitReason::Timeout),
        Some(reason) => (code, signal, reason),
        None if signal.is_some() => (code, signal, ExitReason::Signal),
        None => (code, signal, ExitReason::Exit),
    }
}
