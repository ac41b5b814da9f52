//! Spawning: a validated plan becomes a running OS process (pipes or a
//! PTY, `setsid`, the PTY as controlling terminal) with its capture tasks,
//! its stdin writer and its supervisor started.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tether_protocol::{Overflow, StreamName, TermSize};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::capture::{Capture, Source};
use super::stdin::StdinQueue;
use super::supervise::Supervisor;
use super::Process;
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pty::{self, PtyMaster};
use crate::retained::RetainedOutput;
use crate::screen::{Screen, ScreenLimits};
use crate::slots::Slots;

/// Environment variables of the server that children never inherit.
pub const SECRET_ENV: &[&str] = &["TETHER_TOKEN"];

/// A validated spawn request (see `ProcessTable::plan`).
#[derive(Debug, Clone)]
pub struct SpawnPlan {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    /// On a PTY of this size, or on pipes.
    pub tty: Option<TermSize>,
    /// A stdin pipe (always with a PTY).
    pub stdin: bool,
    pub overflow: Overflow,
    /// Per-stream retention.
    pub retain_bytes: usize,
}

impl SpawnPlan {
    /// Retention this process reserves against `--retain-total`.
    pub fn reserved_bytes(&self) -> u64 {
        let streams = if self.tty.is_some() { 1 } else { 2 };
        RetainedOutput::reservation(self.retain_bytes, self.overflow, streams)
    }
}

/// Starts the process and its tasks. Must run inside the tokio runtime.
/// Takes no lock: the table reserves the slot before and records the
/// process after.
pub fn spawn(
    id: String,
    plan: SpawnPlan,
    config: &Config,
    metrics: Arc<Metrics>,
) -> Result<Arc<Process>, ApiError> {
    check_cwd(plan.cwd.as_deref())?;
    let (mut command, pty) = command(&plan)?;
    let mut child = command.spawn().map_err(|e| spawn_error(&plan.argv[0], e))?;
    // Closes the parent's copies of the PTY slave, so the master reports
    // end of output once the child side is closed.
    drop(command);

    let sources = sources(&mut child, pty.as_ref())?;
    let stdin = match (&pty, child.stdin.take()) {
        (Some(master), _) => StdinQueue::pty(master.clone()),
        (None, Some(pipe)) => StdinQueue::pipe(pipe),
        (None, None) => StdinQueue::none(),
    };
    let screen = plan.tty.filter(|_| !config.no_screen).map(|size| {
        Screen::new(
            size.cols(),
            size.rows(),
            ScreenLimits {
                scrollback_lines: config.screen_scrollback,
            },
        )
    });
    let output = Arc::new(RetainedOutput::with_screen(
        plan.retain_bytes,
        plan.overflow,
        screen,
    ));
    let (control, control_rx) = mpsc::channel(8);
    let (exit_tx, exit) = watch::channel(None);
    let process = Arc::new(Process {
        id,
        pid: child.id().unwrap_or(0),
        reserved_bytes: plan.reserved_bytes(),
        argv: plan.argv,
        tty: pty.is_some(),
        started_at: SystemTime::now(),
        attachment_slots: Slots::new(config.max_attachments_per_process),
        metrics: metrics.clone(),
        output: output.clone(),
        exit,
        control,
        stdin,
        pty,
        kill_grace: config.kill_grace(),
    });

    let span = tracing::info_span!("process", id = %process.id);
    let (reaped, reaped_rx) = watch::channel(None);
    let captures = sources
        .into_iter()
        .map(|(stream, source)| {
            let capture = Capture {
                output: output.clone(),
                stream,
                source,
                reaped: reaped_rx.clone(),
                drain: config.drain_timeout(),
                metrics: metrics.clone(),
                screen_idle: (plan.tty.is_some() && stream == StreamName::Stdout)
                    .then(|| config.screen_idle()),
            };
            tokio::spawn(capture.run().instrument(span.clone()))
        })
        .collect();
    let supervisor = Supervisor {
        child,
        birth: process.info(),
        timeout: plan.timeout,
        kill_grace: config.kill_grace(),
        control: control_rx,
        reaped,
        captures,
        output,
        exit: exit_tx,
        metrics,
    };
    tokio::spawn(supervisor.run().instrument(span));
    Ok(process)
}

fn check_cwd(cwd: Option<&str>) -> Result<(), ApiError> {
    let Some(cwd) = cwd else { return Ok(()) };
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ApiError::SpawnFailed(format!(
            "cwd {cwd:?} is not a directory"
        ))),
        Err(e) => Err(ApiError::SpawnFailed(format!("cwd {cwd:?}: {e}"))),
    }
}

/// The command to execute, in its own session; with a PTY, the master side
/// too (the slave is the child's stdin, stdout and stderr).
fn command(plan: &SpawnPlan) -> Result<(Command, Option<Arc<PtyMaster>>), ApiError> {
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

    let Some(size) = plan.tty else {
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
        return Ok((cmd, None));
    };
    let (master, slave) =
        pty::open(size).map_err(|e| ApiError::Internal(format!("openpty: {e}")))?;
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
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (setsid, ioctl), touching no memory of the parent.
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
    Ok((cmd, Some(Arc::new(master))))
}

/// What capture reads: the PTY master as `stdout`, or both pipes.
fn sources(
    child: &mut Child,
    pty: Option<&Arc<PtyMaster>>,
) -> Result<Vec<(StreamName, Source)>, ApiError> {
    if let Some(master) = pty {
        return Ok(vec![(StreamName::Stdout, Source::Pty(master.clone()))]);
    }
    let pipe = |fd: Option<io::Result<OwnedFd>>| {
        let fd = fd
            .ok_or_else(|| ApiError::Internal("missing output pipe".into()))?
            .map_err(|e| ApiError::Internal(format!("output pipe: {e}")))?;
        Source::pipe(fd).map_err(|e| ApiError::Internal(format!("output pipe: {e}")))
    };
    Ok(vec![
        (
            StreamName::Stdout,
            pipe(child.stdout.take().map(|p| p.into_owned_fd()))?,
        ),
        (
            StreamName::Stderr,
            pipe(child.stderr.take().map(|p| p.into_owned_fd()))?,
        ),
    ])
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
