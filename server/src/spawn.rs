//! Starting a process and running its life: spawn on pipes or a PTY, capture
//! each output stream from the first byte, write stdin, enforce the
//! deadline, reap, and publish the exit once capture is complete.
//!
//! The data path starts here: `capture` reads an output fd straight into
//! the process's [`RetainedOutput`](crate::retained::RetainedOutput) and
//! wakes attachments; nothing in it waits for a reader (drop mode) or for
//! more than the slowest attachment (block mode).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tether_protocol::{ExitReason, Overflow, StreamName};
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::sleep_until;

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::process::{Control, ExitInfo, Process, ProcessParts, StdinCommand};
use crate::pty::{self, PtyMaster};
use crate::session::{signal_orphans, signal_session};

/// Environment variables of the server that children never inherit.
pub const SECRET_ENV: &[&str] = &["TETHER_TOKEN"];

/// A validated spawn request.
#[derive(Debug, Clone)]
pub struct SpawnPlan {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    pub tty: Option<(u16, u16)>,
    pub stdin: bool,
    pub overflow: Overflow,
    pub retain_bytes: usize,
    pub reserved_bytes: u64,
}

/// Largest single read from an output fd; also bounds each append.
const READ_CHUNK: usize = 64 * 1024;
/// How far block-mode retention may grow once the program has exited: the
/// largest pipe Linux gives an unprivileged process (`pipe-max-size`).
pub(crate) const EXIT_SLACK: usize = 1 << 20;
/// Stdin messages queued per process before writers wait.
const STDIN_QUEUE: usize = 16;

/// Starts the process and its tasks. Must run inside the tokio runtime.
pub fn spawn(
    id: String,
    plan: SpawnPlan,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
) -> Result<Arc<Process>, ApiError> {
    if let Some(cwd) = &plan.cwd {
        match std::fs::metadata(cwd) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ApiError::SpawnFailed(format!(
                    "cwd {cwd:?} is not a directory"
                )))
            }
            Err(e) => return Err(ApiError::SpawnFailed(format!("cwd {cwd:?}: {e}"))),
        }
    }
    let mut cmd = Command::new(&plan.argv[0]);
    cmd.args(&plan.argv[1..]);
    for key in SECRET_ENV {
        cmd.env_remove(key);
    }
    cmd.envs(&plan.env);
    if let Some(cwd) = &plan.cwd {
        cmd.current_dir(cwd);
    }
    cmd.kill_on_drop(false);

    let mut pty_master = None;
    if let Some((cols, rows)) = plan.tty {
        let (master, slave) =
            pty::open(cols, rows).map_err(|e| ApiError::Internal(format!("openpty: {e}")))?;
        let clone = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|e| ApiError::Internal(format!("dup pty: {e}")))
        };
        cmd.stdin(Stdio::from(clone(&slave)?));
        cmd.stdout(Stdio::from(clone(&slave)?));
        cmd.stderr(Stdio::from(slave));
        if !plan.env.contains_key("TERM") {
            cmd.env("TERM", "xterm-256color");
        }
        // SAFETY: between fork and exec only async-signal-safe calls are
        // made (setsid, ioctl), touching no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                // Make the PTY (now fd 0) the controlling terminal, so job
                // control and Ctrl-C work as in a local terminal.
                if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        pty_master = Some(Arc::new(master));
    } else {
        cmd.stdin(if plan.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped());
        cmd.stderr(Stdio::piped());
        // SAFETY: setsid is async-signal-safe and touches no parent memory.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
    }

    let mut child = cmd.spawn().map_err(|e| spawn_error(&plan.argv[0], e))?;
    // Closes the parent's copies of the PTY slave, so the master reports
    // end of output once the child side is closed.
    drop(cmd);
    let pid = child.id().unwrap_or(0);

    let (control_tx, control_rx) = mpsc::channel(8);
    let wants_stdin = plan.tty.is_some() || plan.stdin;
    let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
    let process = Arc::new(Process::new(ProcessParts {
        id,
        pid,
        argv: plan.argv.clone(),
        overflow: plan.overflow,
        retain_bytes: plan.retain_bytes,
        reserved_bytes: plan.reserved_bytes,
        control: control_tx,
        stdin: wants_stdin.then_some(stdin_tx),
        pty: pty_master.clone(),
        metrics,
        kill_grace: config.kill_grace(),
    }));

    let id_span = tracing::info_span!("process", id = %process.id);
    let (reaped_tx, reaped_rx) = watch::channel(None);
    let mut captures = Vec::new();
    let drain = config.drain_timeout();
    match &pty_master {
        Some(master) => {
            captures.push(tokio::spawn(instrumented(
                &id_span,
                capture(
                    process.clone(),
                    StreamName::Stdout,
                    Source::Pty(master.clone()),
                    reaped_rx.clone(),
                    drain,
                ),
            )));
            tokio::spawn(write_stdin_pty(master.clone(), stdin_rx));
        }
        None => {
            for (stream, fd) in [
                (
                    StreamName::Stdout,
                    child.stdout.take().map(|p| p.into_owned_fd()),
                ),
                (
                    StreamName::Stderr,
                    child.stderr.take().map(|p| p.into_owned_fd()),
                ),
            ] {
                let fd = fd
                    .ok_or_else(|| ApiError::Internal("missing output pipe".into()))?
                    .map_err(|e| ApiError::Internal(format!("output pipe: {e}")))?;
                let source = Source::pipe(fd)
                    .map_err(|e| ApiError::Internal(format!("output pipe: {e}")))?;
                captures.push(tokio::spawn(instrumented(
                    &id_span,
                    capture(process.clone(), stream, source, reaped_rx.clone(), drain),
                )));
            }
            if let Some(stdin) = child.stdin.take() {
                tokio::spawn(write_stdin_pipe(stdin, stdin_rx));
            }
        }
    }
    tokio::spawn(instrumented(
        &id_span,
        supervise(
            process.clone(),
            child,
            plan.timeout,
            control_rx,
            reaped_tx,
            captures,
            config,
        ),
    ));
    Ok(process)
}

/// Runs a task inside the process's span, so its logs carry the id.
fn instrumented<F: std::future::Future>(
    span: &tracing::Span,
    task: F,
) -> tracing::instrument::Instrumented<F> {
    use tracing::Instrument;
    task.instrument(span.clone())
}

fn spawn_error(program: &str, e: io::Error) -> ApiError {
    match e.kind() {
        io::ErrorKind::NotFound => {
            ApiError::SpawnFailed(format!("program {program:?} not found: {e}"))
        }
        io::ErrorKind::PermissionDenied => {
            ApiError::SpawnFailed(format!("program {program:?} is not executable: {e}"))
        }
        _ => ApiError::SpawnFailed(format!("could not start {program:?}: {e}")),
    }
}

/// Where capture reads from: a pipe or a PTY master, both non-blocking fds
/// driven by the reactor.
enum Source {
    Pipe(AsyncFd<OwnedFd>),
    Pty(Arc<PtyMaster>),
}

impl Source {
    fn pipe(fd: OwnedFd) -> io::Result<Source> {
        pty::set_nonblocking(&fd)?;
        Ok(Source::Pipe(pty::register(fd)?))
    }

    fn fd(&self) -> &AsyncFd<OwnedFd> {
        match self {
            Source::Pipe(fd) => fd,
            Source::Pty(master) => master.async_fd(),
        }
    }
}

thread_local! {
    /// One read buffer per runtime worker thread: an idle stream holds no
    /// buffer, and no read pays for zeroing one.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_CHUNK]);
}

/// Reads once from a ready fd into the retained buffer. Returns the bytes
/// read; 0 at end of output (EIO is how a PTY master reports that the child
/// side closed).
fn read_into(
    process: &Process,
    stream: StreamName,
    fd: &OwnedFd,
    room: usize,
) -> io::Result<usize> {
    READ_BUFFER.with_borrow_mut(|buf| read_with(process, stream, fd, room, buf))
}

fn read_with(
    process: &Process,
    stream: StreamName,
    fd: &OwnedFd,
    room: usize,
    buf: &mut [u8],
) -> io::Result<usize> {
    let want = room.min(buf.len());
    match nix::unistd::read(fd, &mut buf[..want]) {
        Ok(0) | Err(nix::errno::Errno::EIO) => Ok(0),
        Ok(n) => {
            process.output().stream_mut(stream).push(&buf[..n]);
            process.notify_output();
            Metrics::add(&process.metrics.captured, stream, n as u64);
            Ok(n)
        }
        Err(nix::errno::Errno::EAGAIN) => Err(io::ErrorKind::WouldBlock.into()),
        Err(e) => Err(e.into()),
    }
}

/// Captures one output stream until end of file, or until the drain bound
/// after the reap. Returns true when it reached end of file.
async fn capture(
    process: Arc<Process>,
    stream: StreamName,
    source: Source,
    mut reaped: watch::Receiver<Option<tokio::time::Instant>>,
    drain: Duration,
) -> bool {
    let block = process.overflow == Overflow::Block;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let mut room = usize::MAX;
        if block {
            // Wait for room: the slowest attachment has not been sent what
            // is retained. After the reap the tail of the pipe fits the exit
            // slack; what still finds no room is a descendant writing on,
            // and the drain bound holds for it as in drop mode, whoever is
            // attached (wait reports completion regardless of readers).
            loop {
                let notified = process.space_freed(stream).notified();
                room = process.output().stream(stream).block_room();
                if room > 0 {
                    break;
                }
                tokio::select! {
                    _ = notified => {}
                    _ = wait_deadline(deadline) => return false,
                    Ok(()) = reaped.changed(), if deadline.is_none() => {
                        deadline = on_reaped(&process, stream, &reaped, drain);
                    }
                }
            }
        }
        let fd = source.fd();
        tokio::select! {
            ready = fd.readable() => {
                let Ok(mut guard) = ready else { return true };
                match guard.try_io(|fd| read_into(&process, stream, fd.get_ref(), room)) {
                    Ok(Ok(0)) => return true,
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(id = %process.id, stream = stream.as_str(), error = %e, "capture read failed");
                        return true;
                    }
                    Err(_would_block) => {}
                }
            }
            _ = wait_deadline(deadline) => return false,
            Ok(()) = reaped.changed(), if deadline.is_none() => {
                deadline = on_reaped(&process, stream, &reaped, drain);
            }
        }
    }
}

/// Once the program has been reaped, what is left in its pipe (or the
/// terminal's buffer) is finite. In block mode that tail may not fit the
/// retention when nobody is attached; let it grow by at most
/// [`EXIT_SLACK`], so the exit is reported promptly and nothing the program
/// wrote is lost. Returns the drain deadline.
fn on_reaped(
    process: &Process,
    stream: StreamName,
    reaped: &watch::Receiver<Option<tokio::time::Instant>>,
    drain: Duration,
) -> Option<tokio::time::Instant> {
    let at = *reaped.borrow();
    if at.is_some() && process.overflow == Overflow::Block {
        process.output().stream_mut(stream).grow(EXIT_SLACK);
    }
    at.map(|at| at + drain)
}

async fn wait_deadline(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn write_stdin_pipe(mut stdin: ChildStdin, mut rx: mpsc::Receiver<StdinCommand>) {
    while let Some(command) = rx.recv().await {
        match command {
            StdinCommand::Data(data) => {
                if stdin.write_all(&data).await.is_err() {
                    // The program closed its stdin; later writes go nowhere,
                    // as with a real pipe.
                    break;
                }
            }
            StdinCommand::Eof => break,
        }
    }
    // Dropping the pipe is the end-of-file the program sees.
}

async fn write_stdin_pty(master: Arc<PtyMaster>, mut rx: mpsc::Receiver<StdinCommand>) {
    while let Some(command) = rx.recv().await {
        let result = match command {
            StdinCommand::Data(data) => master.write_all(&data).await,
            // A PTY has no half-close: EOF is the terminal's EOF character.
            StdinCommand::Eof => master.write_all(&[master.eof_char()]).await,
        };
        if result.is_err() {
            break;
        }
    }
}

/// Owns the child: reaps it, fires the deadline, serves signal and kill
/// requests (only here, so nothing is signalled after the reap), then waits
/// for capture and publishes the exit.
async fn supervise(
    process: Arc<Process>,
    mut child: Child,
    timeout: Option<Duration>,
    mut control: mpsc::Receiver<Control>,
    reaped_tx: watch::Sender<Option<tokio::time::Instant>>,
    captures: Vec<tokio::task::JoinHandle<bool>>,
    config: Arc<Config>,
) {
    let started = Instant::now();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let pid = process.pid;
    let mut killed: Option<ExitReason> = None;
    let status: io::Result<ExitStatus> = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = wait_deadline(deadline), if killed.is_none() => {
                tracing::info!(id = %process.id, "deadline reached; killing session");
                killed = Some(ExitReason::Timeout);
                kill_session(pid, process.tty, config.kill_grace());
            }
            Some(request) = control.recv() => match request {
                Control::Signal(signal, reply) => {
                    // Not yet reaped (only this task reaps), so the pid and
                    // group are still this process's.
                    if let Ok(raw) = i32::try_from(pid) {
                        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), signal);
                    }
                    let _ = reply.send(());
                }
                Control::Kill(reason, reply) => {
                    if killed.is_none() {
                        killed = Some(reason);
                        kill_session(pid, process.tty, config.kill_grace());
                    }
                    let _ = reply.send(());
                }
            },
        }
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    // Requests still queued find the process reaped: dropping their reply
    // senders makes them report `not_running`.
    drop(control);
    reaped_tx.send_replace(Some(tokio::time::Instant::now()));

    let mut complete = true;
    for capture in captures {
        complete &= capture.await.unwrap_or(false);
    }
    let (stdout_bytes, stderr_bytes) = {
        let mut out = process.output();
        for stream in StreamName::ALL {
            out.stream_mut(stream).complete();
        }
        (
            out.stream(StreamName::Stdout).end(),
            out.stream(StreamName::Stderr).end(),
        )
    };
    let (exit_code, signal, reason) = classify(status, killed);
    tracing::info!(id = %process.id, exit_code, ?reason, duration_ms, "process exited");
    process.metrics.exited(reason);
    process.publish_exit(ExitInfo {
        exit_code,
        signal,
        reason,
        finished_at: SystemTime::now(),
        duration_ms,
        output_incomplete: !complete,
        stdout_bytes,
        stderr_bytes,
    });
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

/// TERM (and HUP on a PTY, as closing a terminal does: an interactive shell
/// ignores TERM) to every member of the session now, KILL to whatever is
/// left after the grace. Runs the /proc scans off the runtime's workers.
pub(crate) fn kill_session(sid: u32, tty: bool, grace: Duration) {
    kill_with(sid, tty, grace, signal_session);
}

/// The same for a session whose leader was already reaped: only what is
/// left of it, never a stranger that reused the number.
pub(crate) fn kill_orphans(sid: u32, tty: bool, grace: Duration) {
    kill_with(sid, tty, grace, signal_orphans);
}

fn kill_with(sid: u32, tty: bool, grace: Duration, signal: fn(u32, Signal) -> usize) {
    tokio::task::spawn_blocking(move || {
        if tty {
            signal(sid, Signal::SIGHUP);
        }
        signal(sid, Signal::SIGTERM)
    });
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        let _ = tokio::task::spawn_blocking(move || {
            // Members may fork while being killed; a few rounds catch them.
            for _ in 0..8 {
                if signal(sid, Signal::SIGKILL) == 0 {
                    break;
                }
            }
        })
        .await;
    });
}
