//! A process known to the server: its identity, its retained output, its
//! exit, and the one policy for each operation clients may ask of it
//! (signal, kill, resize, stdin), whichever entry point (HTTP or a frame)
//! they come through.
//!
//! The parts of its life are apart, in the order a process lives them:
//! [`spawn`](mod@spawn) starts it and its tasks, [`capture`] reads each output fd into
//! the retained output, [`stdin`] writes what clients send, and
//! [`supervise`] alone owns the OS child: it reaps it, fires the deadline,
//! serves signals and kills, and publishes the exit.

pub mod capture;
pub mod carry;
pub mod input_once;
pub mod input_streams;
pub mod recovered;
pub mod reservation;
pub mod spawn;
pub mod stdin;
pub mod supervise;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tether_protocol::{
    ExitReason, KubernetesNames, Overflow, ProcessInfo, ProcessStatus, Signal, TermSize,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::contain::Contained;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pty::PtyMaster;
use crate::retained::RetainedOutput;
use crate::slots::Slots;
use stdin::StdinQueue;
use supervise::{timestamp, Control, Exited};

pub use reservation::Reservation;
pub use spawn::{spawn, SpawnPlan};

/// A share of a process's HTTP stdin budget, held from before the body is
/// read until its bytes are written.
pub struct HttpStdinPermit(tokio::sync::OwnedSemaphorePermit);

/// A process known to the server.
pub struct Process {
    /// Server-assigned id.
    pub id: String,
    /// The name given at spawn, unique among known processes.
    pub name: Option<String>,
    /// OS pid of the session leader.
    pub pid: u32,
    /// What was executed.
    pub argv: Vec<String>,
    /// PTY or pipes.
    pub tty: bool,
    /// Wall-clock spawn time.
    pub started_at: SystemTime,
    /// What it holds of the retention budget.
    pub reservation: Arc<Reservation>,
    /// Attachment slots (`--max-attachments-per-process`).
    pub attachment_slots: Slots,
    /// The server's counters.
    pub metrics: Arc<Metrics>,
    /// The names of a Kubernetes exec, if it is one.
    pub kubernetes: Option<KubernetesNames>,
    /// Its numbered input streams (attach with `input=ID`).
    pub inputs: input_streams::InputStreams,
    /// The user and group it runs as (the spawn's, else `--user`'s).
    pub identity: Option<crate::secret::Identity>,
    /// The directory it started in (`None`: the server's own).
    pub start_dir: Option<std::path::PathBuf>,
    /// Read back from `--data-dir` after a restart: its user and directory
    /// are not known.
    pub recovered: bool,
    output: Arc<RetainedOutput>,
    exit: watch::Receiver<Option<Exited>>,
    control: mpsc::Sender<Control>,
    stdin: StdinQueue,
    pty: Option<Arc<PtyMaster>>,
    kill_grace: Duration,
    /// How its descendants are found and ended, also after the reap.
    contained: Arc<Contained>,
}

impl Process {
    /// Its retained output (capture writes it, attachments read it).
    pub fn output(&self) -> &Arc<RetainedOutput> {
        &self.output
    }

    /// The retention overflow mode.
    pub fn overflow(&self) -> Overflow {
        self.output.overflow()
    }

    /// A receiver that changes once, when the process counts as exited.
    pub fn watch_exit(&self) -> watch::Receiver<Option<Exited>> {
        self.exit.clone()
    }

    /// When it counted as exited, once it has.
    pub fn finished_at(&self) -> Option<SystemTime> {
        self.exit.borrow().as_ref().map(|e| e.finished_at)
    }

    /// True until the process counts as exited.
    pub fn is_running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// The process object as of now: once exited, the one the supervisor
    /// published, so every view carries the same final totals.
    pub fn info(&self) -> ProcessInfo {
        let exited = self.exit.borrow().as_ref().map(|e| e.info.clone());
        let mut info = match exited {
            Some(mut info) => {
                // A log found unreadable after the exit (a recovered one)
                // is said here too.
                if info.retention_error.is_none() {
                    info.retention_error = self.output.retention_error();
                }
                info
            }
            None => self.running_info(true),
        };
        // What retention holds now: eviction moves the first, even after
        // the exit.
        [info.first_retained_at, info.last_retained_at] = self
            .output
            .retained_times()
            .map(|ms| ms.map(|ms| timestamp(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))));
        info.records_input = self.output.records_input();
        info
    }

    /// The process object at spawn, for what is kept of it and for the
    /// supervisor to fill in at the exit: without `usage`, which is nothing
    /// yet and costs a few reads of cgroupfs per controller (the exit
    /// carries the final bill).
    pub fn birth_info(&self) -> ProcessInfo {
        self.running_info(false)
    }

    fn running_info(&self, with_usage: bool) -> ProcessInfo {
        let [stdout_bytes, stderr_bytes] = self.output.totals();
        ProcessInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            pid: self.pid,
            argv: self.argv.clone(),
            tty: self.tty,
            overflow: self.overflow(),
            status: ProcessStatus::Running,
            started_at: timestamp(self.started_at),
            exit_code: None,
            signal: None,
            reason: None,
            finished_at: None,
            duration_ms: None,
            stdout_bytes,
            stderr_bytes,
            output_incomplete: false,
            first_retained_at: None,
            last_retained_at: None,
            records_input: false,
            kubernetes: self.kubernetes.clone(),
            node: node_of(&self.id).map(str::to_string),
            containment: Some(self.contained.kind()),
            limits: self.contained.limits(),
            // Live: a few reads of cgroupfs (in memory, microseconds).
            usage: with_usage.then(|| self.contained.usage()).flatten(),
            pids_limit_hit: with_usage && self.contained.pids_limit_hit(),
            retention_error: self.output.retention_error(),
        }
    }

    /// Its working directory: the current one while it runs (read from
    /// `/proc`, so a shell's `cd` counts), else the one it started in. On
    /// a PTY, the terminal's foreground program's (the shell at its
    /// prompt, as terminal emulators open a new tab there), when it is of
    /// this session: a shell started by `sh -c` is a child of the leader.
    pub fn working_dir(&self) -> Option<std::path::PathBuf> {
        if !self.is_running() {
            return self.start_dir.clone();
        }
        let cwd_of = |pid: u32| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .ok()
                // A removed directory reads as "PATH (deleted)".
                .filter(|dir| dir.is_dir())
        };
        let foreground = self
            .pty
            .as_ref()
            .and_then(|pty| pty.foreground_group())
            .filter(|&pgid| crate::contain::unix_session::session_of(pgid) == Some(self.pid));
        foreground
            .and_then(cwd_of)
            .or_else(|| cwd_of(self.pid))
            .or_else(|| self.start_dir.clone())
    }

    fn not_running(&self) -> ApiError {
        ApiError::NotRunning(self.id.clone())
    }

    /// Sends `signal` to the process group. 409 once it has been reaped.
    pub async fn signal(&self, signal: Signal) -> Result<(), ApiError> {
        let signal = nix::sys::signal::Signal::try_from(signal.number()).map_err(|_| {
            ApiError::Internal(format!("signal {} unknown to the OS", signal.name()))
        })?;
        self.ask(|done| Control::Signal(signal, done)).await
    }

    /// Replaces the unattached timeout (`None`: never); a new one counts
    /// from now while nobody is attached. 409 once it has been reaped.
    pub async fn set_unattached_timeout(&self, timeout: Option<Duration>) -> Result<(), ApiError> {
        self.ask(|done| Control::SetUnattached(timeout, done)).await
    }

    /// Hands a request to the supervisor and waits until it is carried
    /// out: `not_running` once the process has been reaped (the supervisor
    /// no longer takes requests, or dropped this one unanswered).
    async fn ask(
        &self,
        request: impl FnOnce(oneshot::Sender<()>) -> Control,
    ) -> Result<(), ApiError> {
        let (done, carried_out) = oneshot::channel();
        self.control
            .send(request(done))
            .await
            .map_err(|_| self.not_running())?;
        carried_out.await.map_err(|_| self.not_running())
    }

    /// Kills the whole session with `reason`: TERM, then KILL after
    /// `--kill-grace-ms`. Once the leader has been reaped (the exit may
    /// still be draining, or published), the reason stays what it was, but
    /// descendants left in the session are killed all the same: a kill,
    /// DELETE and shutdown leave nothing behind.
    pub async fn kill(&self, reason: ExitReason) {
        self.kill_with_grace(reason, self.kill_grace).await;
    }

    /// [`Process::kill`] with this grace between TERM and KILL (zero: KILL
    /// at once).
    pub async fn kill_with_grace(&self, reason: ExitReason, grace: Duration) {
        if self
            .ask(|done| Control::Kill(reason, grace, done))
            .await
            .is_ok()
        {
            return;
        }
        // Reaped: what is left is ended through its cgroup, or through
        // its session if no stranger took over the number.
        tokio::spawn(self.contained.clone().end(grace));
    }

    /// Writes bytes to stdin, at once when nothing is queued ahead, else
    /// queued; waits while the stdin queue is full.
    pub async fn write_stdin(&self, data: Vec<u8>) -> Result<(), ApiError> {
        self.queue_stdin(data, None).await
    }

    /// Writes stdin at once if the process's stdin queue is empty (see
    /// [`stdin::StdinQueue::try_write`]); gives the bytes back when
    /// something is queued ahead of them.
    pub fn try_write_stdin(&self, data: Vec<u8>) -> Result<Option<Vec<u8>>, ApiError> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        let logged = self.input_to_log(&data);
        match self.stdin.try_write(data, None) {
            Ok(stdin::TryWrite::Done) => {
                self.log_input(logged);
                Ok(None)
            }
            Ok(stdin::TryWrite::Busy(data, _)) => Ok(Some(data)),
            Err(stdin::StdinClosed) => Err(ApiError::StdinUnavailable(self.id.clone())),
        }
    }

    /// Reserves `bytes` of this process's HTTP stdin budget before a POST
    /// body is read: 429 `stdin_busy` when it is spent.
    pub fn reserve_http_stdin(&self, bytes: usize) -> Result<HttpStdinPermit, ApiError> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        self.stdin
            .reserve_http(bytes)
            .map(HttpStdinPermit)
            .map_err(|stdin::StdinBusy(limit)| ApiError::StdinBusy(self.id.clone(), limit))
    }

    /// Queues bytes read under an HTTP stdin reservation, which is given
    /// back once they are written to the process.
    pub async fn write_http_stdin(
        &self,
        data: Vec<u8>,
        permit: HttpStdinPermit,
    ) -> Result<(), ApiError> {
        self.queue_stdin(data, Some(permit.0)).await
    }

    async fn queue_stdin(
        &self,
        data: Vec<u8>,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<(), ApiError> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        let logged = self.input_to_log(&data);
        self.stdin
            .write(data, permit)
            .await
            .map_err(|_| ApiError::StdinUnavailable(self.id.clone()))?;
        self.log_input(logged);
        Ok(())
    }

    /// Input about to be written, with where it stands, if this process
    /// records its input (`record_input`): taken before the write so the
    /// echo comes after it in the recording.
    fn input_to_log(&self, data: &[u8]) -> Option<((u64, u64), Vec<u8>)> {
        self.output().input_mark().map(|mark| (mark, data.to_vec()))
    }

    /// Logs input once it is accepted (written, or queued to be).
    fn log_input(&self, logged: Option<((u64, u64), Vec<u8>)>) {
        if let Some((mark, data)) = logged {
            self.output().input_written(mark, &data);
        }
    }

    /// Closes stdin (pipes) or sends the terminal's EOF character (PTY).
    pub async fn close_stdin(&self) -> Result<(), ApiError> {
        self.stdin
            .close()
            .await
            .map_err(|_| ApiError::StdinUnavailable(self.id.clone()))
    }

    /// Sets the PTY window size. Refused for pipes (400) and once exited
    /// (409). Every entry point comes through `ProcessTable::resize`,
    /// which checks the size against the server's bounds first.
    pub(crate) fn resize(&self, size: TermSize) -> Result<(), ApiError> {
        let Some(pty) = &self.pty else {
            return Err(ApiError::NoTerminal(self.id.clone()));
        };
        if !self.is_running() {
            return Err(self.not_running());
        }
        self.output
            .resize_with(size, || pty.resize(size))
            .map_err(|e| ApiError::Internal(format!("resize failed: {e}")))
    }
}

/// The node named in a process id (`NODE.HEX32`), if it has one. A name
/// given at spawn may hold a dot too, but never ends in 32 hex digits
/// after it.
pub fn node_of(id: &str) -> Option<&str> {
    let (node, random) = id.rsplit_once('.')?;
    let random_ok = random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit());
    (random_ok && !node.is_empty()).then_some(node)
}
