//! Supervision: the only owner of the OS child. It reaps it (through its
//! pidfd), fires the deadline and the unattached timeout, serves signal and
//! kill requests (only here, so nothing is signalled by number after the
//! reap), hands what is left of it to its containment, waits for capture
//! (bounded by the drain timeout), then publishes the exit.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tether_protocol::{ExitReason, ProcessInfo, ProcessStatus};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::capture::{wait_deadline, CaptureEnd};
use super::reservation::Reservation;
use crate::contain::pidfd::PidFd;
use crate::contain::unix_session::signal_group;
use crate::contain::{reaper, Contained};
use crate::metrics::Metrics;
use crate::retained::RetainedOutput;

/// Requests to the supervisor, which alone may signal the child because it
/// alone reaps it (so nothing is signalled after it was reaped).
#[derive(Debug)]
pub enum Control {
    /// Send a signal to the process group; the reply says it was sent.
    Signal(Signal, oneshot::Sender<()>),
    /// Kill the process and every descendant (TERM, then KILL after the
    /// grace; KILL at once for a zero grace) and report this reason.
    Kill(ExitReason, Duration, oneshot::Sender<()>),
    /// Replace the unattached timeout (`None`: never); a new one counts
    /// from now while nobody is attached.
    SetUnattached(Option<Duration>, oneshot::Sender<()>),
    /// Stop for a handover (issue 43): capture stops between two reads,
    /// nothing is reaped, and the descriptors and timers come back in the
    /// reply; the supervisor then stays parked until the exec.
    HandOver(oneshot::Sender<Frozen>),
}

/// A supervised process stopped for a handover: second descriptors of its
/// pidfd and of each output it still read, and its timers.
#[derive(Debug)]
pub struct Frozen {
    pub pidfd: std::os::fd::OwnedFd,
    pub outputs: Vec<(tether_protocol::StreamName, std::os::fd::OwnedFd)>,
    pub timers: Timers,
}

/// A process's timers as a handover carries them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Timers {
    /// Since the OS process was created (`duration_ms` counts from there).
    pub elapsed_ms: u64,
    /// `timeout_ms`: its deadline is `elapsed_ms` later than... the same
    /// moment, counted from the creation.
    pub timeout_ms: Option<u64>,
    /// `unattached_timeout_ms`; it counts afresh in the new binary (every
    /// attachment was closed for the handover).
    pub unattached_ms: Option<u64>,
    /// A kill under way: its reason, and how long until its KILL round.
    pub killing: Option<(ExitReason, Option<u64>)>,
}

/// How often a running process's time index is written beside its logs
/// (only when output came since, and only with `--data-dir`).
const SAVE_TIMES: Duration = Duration::from_secs(5);

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

/// One stream's capture as the supervisor runs it.
pub type CaptureRun = std::pin::Pin<Box<dyn std::future::Future<Output = CaptureEnd> + Send>>;

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
    /// The OS child, owned here alone: waited for and reaped through it.
    pub pidfd: PidFd,
    /// How its descendants are found and ended.
    pub contained: Arc<Contained>,
    /// The process object at birth; the exit fields are filled in at exit.
    pub birth: ProcessInfo,
    /// When the OS process was created: `duration_ms` counts from here, not
    /// from when this task first ran.
    pub started: Instant,
    /// `timeout_ms`, if any.
    pub timeout: Option<Duration>,
    /// How long a process killed by its deadline or unattached timeout has
    /// between TERM and KILL.
    pub kill_grace: Duration,
    /// `unattached_timeout_ms`, if any.
    pub unattached: Option<Unattached>,
    /// Attachments in use, for an unattached timeout set after the spawn.
    pub attachments: watch::Receiver<usize>,
    /// Signal and kill requests.
    pub control: mpsc::Receiver<Control>,
    /// Tells capture the moment of the reap (the drain bound starts then).
    pub reaped: watch::Sender<Option<Instant>>,
    /// Capture, one per stream, run in the supervisor's task; each says
    /// whether it reached end of file (a panic counts as not).
    pub captures: Vec<CaptureRun>,
    /// Completed once capture is done.
    pub output: Arc<RetainedOutput>,
    /// Settled to what the output holds before the exit is published.
    pub reservation: Arc<Reservation>,
    /// Where the exit is published.
    pub exit: watch::Sender<Option<Exited>>,
    /// Counts exits.
    pub metrics: Arc<Metrics>,
    /// Tells capture to stop for a handover.
    pub frozen: watch::Sender<bool>,
    /// A kill under way when a handover carried the process: its reason
    /// and when its KILL round is due.
    pub killing: Option<(ExitReason, Option<Instant>)>,
}

/// How the supervisor's watch over the child ended.
enum Life {
    /// Reaped: status, the reason the server killed it, duration, bill.
    Reaped(io::Result<ExitStatus>, Option<ExitReason>, u64, Bill),
    /// Stopped for a handover.
    HandedOver(oneshot::Sender<Frozen>, Timers),
}

/// What `until_reaped` ends with.
enum Watch {
    Reaped(io::Result<ExitStatus>, Option<ExitReason>, Option<Instant>),
    HandedOver(oneshot::Sender<Frozen>, Timers),
}

impl Supervisor {
    /// Runs the process's life to its published exit. Capture runs in this
    /// same task, beside the reap: at the exit the pidfd and the end of
    /// each pipe arrive together and are handled by one thread, instead of
    /// each capture task's end waking this one, possibly on another worker
    /// (a wake-up of an idle vCPU costs tens to hundreds of microseconds).
    pub async fn run(mut self) {
        let captures = futures_util::future::join_all(std::mem::take(&mut self.captures));
        let (ends, life) = tokio::join!(captures, self.life());
        let (status, killed, duration_ms, bill) = match life {
            Life::Reaped(status, killed, duration_ms, bill) => (status, killed, duration_ms, bill),
            Life::HandedOver(reply, timers) => return self.hand_over(ends, reply, timers).await,
        };
        let complete = ends
            .into_iter()
            .all(|end| matches!(end, CaptureEnd::Ended(true)));
        let [stdout_bytes, stderr_bytes] = self.output.complete();
        if let Err(e) = &status {
            tracing::error!(id = %self.birth.id, error = %e, "wait failed");
        }
        let (exit_code, signal, reason) = classify(status, killed, bill.oom_kills);
        tracing::info!(id = %self.birth.id, exit_code, ?reason, duration_ms, "process exited");
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
            retention_error: self.output.retention_error(),
            usage: bill.usage,
            pids_limit_hit: bill.pids_limit_hit,
            ..self.birth
        };
        self.output.record_exit(&info);
        // Before the exit is published: whoever sees the exit (a wait, then
        // a spawn) finds the budget counting what this process holds now,
        // its time index on disk included (written just above).
        self.reservation.settle(&self.output);
        self.exit.send_replace(Some(Exited { info, finished_at }));
    }

    /// Until the child is reaped, then what follows the reap at once: its
    /// leftovers handed to containment, queued requests answered, capture
    /// told (its drain bound starts). Returns the status, the reason the
    /// server killed it, if it did, its duration and its bill.
    async fn life(&mut self) -> Life {
        let (status, killed, leftovers_until) = match self.until_reaped().await {
            Watch::Reaped(status, killed, until) => (status, killed, until),
            Watch::HandedOver(reply, timers) => return Life::HandedOver(reply, timers),
        };
        let duration_ms = self.started.elapsed().as_millis() as u64;
        // Read before containment may remove the cgroups, which hold the
        // counts: what the leader and its descendants used until its reap.
        // Read here, as a live process object's usage is: a few reads of
        // cgroupfs (kernel memory, microseconds), where handing them to the
        // blocking pool and back cost two thread wake-ups on every exit.
        let (usage, oom_kills, pids_limit_hit) = self.contained.final_bill();
        let bill = Bill {
            usage,
            oom_kills,
            pids_limit_hit,
        };
        self.contained.set_reaped();
        reaper::forget(self.birth.pid);
        tokio::spawn(self.contained.clone().release(leftovers_until));
        // Requests still queued find the process reaped: dropping their
        // reply senders makes them report `not_running`.
        self.control.close();
        while self.control.try_recv().is_ok() {}
        self.reaped.send_replace(Some(Instant::now()));
        Life::Reaped(status, killed, duration_ms, bill)
    }

    /// Capture has stopped: hands the descriptors and timers over, then
    /// stays parked holding everything else (the exit's sender, the control
    /// channel), so that nothing reads this process as exited or forgotten
    /// before the exec ends this binary.
    async fn hand_over(
        self,
        ends: Vec<CaptureEnd>,
        reply: oneshot::Sender<Frozen>,
        timers: Timers,
    ) {
        let outputs = ends
            .into_iter()
            .filter_map(|end| match end {
                CaptureEnd::Frozen(stream, fd) => Some((stream, fd)),
                CaptureEnd::Ended(_) => None,
            })
            .collect();
        match self.pidfd.try_clone_fd() {
            Ok(pidfd) => {
                let _ = reply.send(Frozen {
                    pidfd,
                    outputs,
                    timers,
                });
            }
            Err(error) => {
                tracing::error!(id = %self.birth.id, %error, "cannot keep the pidfd for the handover")
            }
        }
        std::future::pending::<()>().await;
    }

    /// Serves requests and the deadline until the child is reaped. Returns
    /// its status, the reason the server killed it, if it did, and when
    /// what is left of it (descendants) must end: at the pending KILL
    /// round, at once if that round already ran, else at the deadline.
    async fn until_reaped(&mut self) -> Watch {
        let deadline = self.timeout.map(|t| self.started + t);
        // The time index goes to disk now and then while the process runs
        // (with `--data-dir`): a crash loses at most this much of it.
        let mut save_times = tokio::time::interval_at(Instant::now() + SAVE_TIMES, SAVE_TIMES);
        save_times.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let pid = self.birth.pid;
        let (mut killed, mut kill_at) = match self.killing.take() {
            Some((reason, at)) => (Some(reason), at),
            // When the KILL round of a kill is due (TERM went first).
            None => (None, None),
        };
        loop {
            tokio::select! {
                status = self.pidfd.wait() => {
                    let until = match (kill_at, killed) {
                        (Some(at), _) => Some(at),
                        (None, Some(_)) => Some(Instant::now()),
                        (None, None) => deadline,
                    };
                    return Watch::Reaped(status, killed, until);
                }
                _ = wait_deadline(deadline), if killed.is_none() => {
                    tracing::info!(id = %self.birth.id, "deadline reached; killing every descendant");
                    killed = Some(ExitReason::Timeout);
                    self.contained.terminate().await;
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                _ = save_times.tick() => self.output.save_times(),
                _ = wait_deadline(kill_at) => {
                    self.contained.kill().await;
                    kill_at = None;
                }
                _ = unattached(&mut self.unattached), if killed.is_none() => {
                    tracing::info!(id = %self.birth.id, "no attachment for the unattached timeout; killing session");
                    killed = Some(ExitReason::Unattached);
                    self.contained.terminate().await;
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                Some(request) = self.control.recv() => match request {
                    Control::Signal(signal, reply) => {
                        // Not yet reaped (only this task reaps), so the
                        // group id is still this process's.
                        signal_group(pid, signal);
                        let _ = reply.send(());
                    }
                    Control::Kill(reason, grace, reply) => {
                        // The first kill gives the reason; a later one with
                        // no grace still hastens a process that is dying.
                        if killed.is_none() || grace.is_zero() {
                            killed.get_or_insert(reason);
                            if grace.is_zero() {
                                self.contained.kill().await;
                                kill_at = None;
                            } else {
                                self.contained.terminate().await;
                                kill_at = Some(Instant::now() + grace);
                            }
                        }
                        let _ = reply.send(());
                    }
                    Control::SetUnattached(timeout, reply) => {
                        self.unattached =
                            timeout.map(|t| Unattached::new(t, self.attachments.clone()));
                        let _ = reply.send(());
                    }
                    Control::HandOver(reply) => {
                        self.frozen.send_replace(true);
                        let now = Instant::now();
                        let ms = |d: Duration| d.as_millis() as u64;
                        let timers = Timers {
                            elapsed_ms: ms(self.started.elapsed()),
                            timeout_ms: self.timeout.map(ms),
                            unattached_ms: self.unattached.as_ref().map(|u| ms(u.timeout)),
                            killing: killed.map(|reason| {
                                (reason, kill_at.map(|at| ms(at.saturating_duration_since(now))))
                            }),
                        };
                        return Watch::HandedOver(reply, timers);
                    }
                },
            }
        }
    }
}

/// What a process used and hit, read from its cgroup at the reap.
#[derive(Debug, Default)]
struct Bill {
    usage: Option<tether_protocol::Usage>,
    oom_kills: u64,
    pids_limit_hit: bool,
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Exit code, signal name and reason. The reason comes from what the
/// server did (it fired the deadline, or was asked to kill), or from what
/// the kernel counted (an OOM kill in its cgroup, `oom_kills`, followed by
/// a failure: a program that survives the loss of a child and exits 0 ran
/// to its end), never from a guess about elapsed time.
fn classify(
    status: io::Result<ExitStatus>,
    killed: Option<ExitReason>,
    oom_kills: u64,
) -> (i32, Option<String>, ExitReason) {
    let (code, signal) = match &status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(tether_protocol::signal::signal_name(sig))),
            (None, None) => (-1, None),
        },
        Err(_) => (-1, None),
    };
    match killed {
        Some(ExitReason::Timeout) => (124, signal, ExitReason::Timeout),
        Some(reason) => (code, signal, reason),
        None if oom_kills > 0 && code != 0 => (code, signal, ExitReason::Oom),
        None if signal.is_some() => (code, signal, ExitReason::Signal),
        None => (code, signal, ExitReason::Exit),
    }
}
