//! A process known to the server: its identity, its retained output, its
//! exit, and the handles through which clients signal it and write to it.
//!
//! Ownership: the supervisor task (`spawn.rs`) alone owns the OS child and
//! reaps it; it publishes the exit that [`Process::watch_exit`] reports. Capture tasks
//! alone write into [`Process::output`]. Everything else reads.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use nix::sys::signal::Signal;
use tether_protocol::{ExitReason, Overflow, ProcessInfo, ProcessStatus, StreamName};
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pty::PtyMaster;
use crate::retained::RetainedOutput;

/// How a process ended: the fields the process object gains at exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// See [`ProcessInfo::exit_code`].
    pub exit_code: i32,
    /// Name of the signal that ended it.
    pub signal: Option<String>,
    /// Why it ended.
    pub reason: ExitReason,
    /// When it counted as exited (reaped and capture complete).
    pub finished_at: SystemTime,
    /// Monotonic spawn-to-reap time.
    pub duration_ms: u64,
    /// Capture stopped at the drain bound, before end of file.
    pub output_incomplete: bool,
    /// Final stream totals.
    pub stdout_bytes: u64,
    /// Final stream totals.
    pub stderr_bytes: u64,
}

/// Requests to the supervisor, which alone may signal the child because it
/// alone reaps it (so nothing is signalled after it was reaped).
#[derive(Debug)]
pub enum Control {
    /// Send a signal to the process group; the reply says it was sent.
    Signal(Signal, oneshot::Sender<()>),
    /// Kill the whole session (TERM, then KILL after the grace) and report
    /// this reason.
    Kill(ExitReason, oneshot::Sender<()>),
}

/// What the stdin writer task is asked to do.
#[derive(Debug)]
pub enum StdinCommand {
    /// Write these bytes.
    Data(Vec<u8>),
    /// Close stdin (pipes) or send the EOF character (PTY).
    Eof,
}

/// A process known to the server.
pub struct Process {
    /// Server-assigned id.
    pub id: String,
    /// OS pid of the session leader.
    pub pid: u32,
    /// What was executed.
    pub argv: Vec<String>,
    /// PTY or pipes.
    pub tty: bool,
    /// Retention overflow mode.
    pub overflow: Overflow,
    /// Wall-clock spawn time.
    pub started_at: SystemTime,
    /// Retention reserved against `--retain-total`.
    pub reserved_bytes: u64,
    /// Live attachments.
    pub attachments: AtomicUsize,
    /// The server's counters.
    pub metrics: Arc<Metrics>,
    output: Mutex<RetainedOutput>,
    output_changed: watch::Sender<()>,
    space_freed: [Notify; 2],
    exit: watch::Sender<Option<ExitInfo>>,
    control: mpsc::Sender<Control>,
    stdin: Mutex<Option<mpsc::Sender<StdinCommand>>>,
    pty: Option<Arc<PtyMaster>>,
    kill_grace: std::time::Duration,
}

/// The parts of a [`Process`] that the spawner fixes at birth.
pub struct ProcessParts {
    pub id: String,
    pub pid: u32,
    pub argv: Vec<String>,
    pub overflow: Overflow,
    pub retain_bytes: usize,
    pub reserved_bytes: u64,
    pub control: mpsc::Sender<Control>,
    pub stdin: Option<mpsc::Sender<StdinCommand>>,
    pub pty: Option<Arc<PtyMaster>>,
    pub metrics: Arc<Metrics>,
    pub kill_grace: std::time::Duration,
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl Process {
    pub(crate) fn new(parts: ProcessParts) -> Process {
        Process {
            id: parts.id,
            pid: parts.pid,
            argv: parts.argv,
            tty: parts.pty.is_some(),
            overflow: parts.overflow,
            started_at: SystemTime::now(),
            reserved_bytes: parts.reserved_bytes,
            attachments: AtomicUsize::new(0),
            metrics: parts.metrics,
            output: Mutex::new(RetainedOutput::new(parts.retain_bytes, parts.overflow)),
            output_changed: watch::Sender::new(()),
            space_freed: [Notify::new(), Notify::new()],
            exit: watch::Sender::new(None),
            control: parts.control,
            stdin: Mutex::new(parts.stdin),
            pty: parts.pty,
            kill_grace: parts.kill_grace,
        }
    }

    /// Locks the retained output. Never held across an await.
    pub fn output(&self) -> MutexGuard<'_, RetainedOutput> {
        // A panic while holding this lock would be a bug in a few lines of
        // buffer code; the data is still consistent enough to serve.
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes attachments after capture appended output.
    pub(crate) fn notify_output(&self) {
        self.output_changed.send_replace(());
    }

    /// A receiver that changes whenever output is appended.
    pub fn watch_output(&self) -> watch::Receiver<()> {
        self.output_changed.subscribe()
    }

    /// Wakes a block-mode capture waiting for room in `stream`.
    pub fn notify_space(&self, stream: StreamName) {
        self.space_freed[stream.index()].notify_one();
    }

    pub(crate) fn space_freed(&self, stream: StreamName) -> &Notify {
        &self.space_freed[stream.index()]
    }

    /// A receiver that changes once, when the process counts as exited.
    pub fn watch_exit(&self) -> watch::Receiver<Option<ExitInfo>> {
        self.exit.subscribe()
    }

    /// The exit, once the process counts as exited.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.exit.borrow().clone()
    }

    pub(crate) fn publish_exit(&self, info: ExitInfo) {
        self.exit.send_replace(Some(info));
        self.notify_output();
    }

    /// The process object as of now.
    pub fn info(&self) -> ProcessInfo {
        let exit = self.exit_info();
        let (stdout_bytes, stderr_bytes) = match &exit {
            Some(e) => (e.stdout_bytes, e.stderr_bytes),
            None => {
                let out = self.output();
                (
                    out.stream(StreamName::Stdout).end(),
                    out.stream(StreamName::Stderr).end(),
                )
            }
        };
        ProcessInfo {
            id: self.id.clone(),
            pid: self.pid,
            argv: self.argv.clone(),
            tty: self.tty,
            overflow: self.overflow,
            status: if exit.is_some() {
                ProcessStatus::Exited
            } else {
                ProcessStatus::Running
            },
            started_at: timestamp(self.started_at),
            exit_code: exit.as_ref().map(|e| e.exit_code),
            signal: exit.as_ref().and_then(|e| e.signal.clone()),
            reason: exit.as_ref().map(|e| e.reason),
            finished_at: exit.as_ref().map(|e| timestamp(e.finished_at)),
            duration_ms: exit.as_ref().map(|e| e.duration_ms),
            stdout_bytes,
            stderr_bytes,
            output_incomplete: exit.as_ref().is_some_and(|e| e.output_incomplete),
        }
    }

    /// True until the process counts as exited.
    pub fn is_running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// Sends `signal` to the process group. 409 once it has been reaped.
    pub async fn signal(&self, signal: Signal) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Signal(signal, tx))
            .await
            .map_err(|_| ApiError::NotRunning(self.id.clone()))?;
        rx.await.map_err(|_| ApiError::NotRunning(self.id.clone()))
    }

    /// Kills the whole session with `reason`. Once the leader has been
    /// reaped (the exit may still be draining, or published), the reason
    /// stays what it was, but descendants left in the session are killed
    /// all the same: DELETE and shutdown leave nothing behind.
    pub async fn kill(&self, reason: ExitReason) {
        let (tx, rx) = oneshot::channel();
        if self.control.send(Control::Kill(reason, tx)).await.is_ok() && rx.await.is_ok() {
            return;
        }
        // The reaped leader's session id stays reserved while any member
        // lives, so this reaches only what is left of this session.
        crate::spawn::kill_orphans(self.pid, self.tty, self.kill_grace);
    }

    fn stdin_sender(&self) -> Result<mpsc::Sender<StdinCommand>, ApiError> {
        self.stdin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| ApiError::StdinUnavailable(self.id.clone()))
    }

    /// Queues bytes for stdin; waits while the stdin queue is full.
    pub async fn write_stdin(&self, data: Vec<u8>) -> Result<(), ApiError> {
        if !self.is_running() {
            return Err(ApiError::NotRunning(self.id.clone()));
        }
        self.stdin_sender()?
            .send(StdinCommand::Data(data))
            .await
            .map_err(|_| ApiError::StdinUnavailable(self.id.clone()))
    }

    /// Closes stdin (pipes) or sends the terminal's EOF character (PTY).
    pub async fn close_stdin(&self) -> Result<(), ApiError> {
        let sender = self.stdin_sender()?;
        if !self.tty {
            // Later writes get a clear error instead of a silent drop.
            *self.stdin.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        sender
            .send(StdinCommand::Eof)
            .await
            .map_err(|_| ApiError::StdinUnavailable(self.id.clone()))
    }

    /// Sets the PTY window size (ignored for pipes).
    pub fn resize(&self, cols: u32, rows: u32) -> Result<(), ApiError> {
        crate::pty::validate_size(cols, rows)?;
        if !self.is_running() {
            return Err(ApiError::NotRunning(self.id.clone()));
        }
        match &self.pty {
            Some(pty) => pty
                .resize(cols as u16, rows as u16)
                .map_err(|e| ApiError::Internal(format!("resize failed: {e}"))),
            None => Ok(()),
        }
    }
}
