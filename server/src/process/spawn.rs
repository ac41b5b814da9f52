//! Spawning: a validated plan becomes a running OS process (pipes or a
//! PTY, `setsid`, the PTY as controlling terminal, its own cgroup: see
//! [`crate::launch`]) with its stdin writer and its supervisor started; the
//! supervisor's task also runs each stream's capture.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use tether_protocol::{KubernetesNames, Overflow, StreamName, TermSize};
use tokio::sync::{mpsc, watch};

use super::capture::{Capture, CaptureEnd, Source};
use super::reservation::Reservation;
use super::stdin::StdinQueue;
use super::supervise::{CaptureRun, Supervisor, Unattached};
use super::Process;
use crate::budget::{Budget, Bytes};
use crate::datadir::DataDir;
use crate::error::ApiError;
use crate::launch::{self, StartPlan, Started, StartedIo};
use crate::metrics::Metrics;
use crate::options::ServerOptions;
use crate::pty::PtyMaster;
use crate::retained::log::StreamLog;
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
    /// Per-stream retention (on disk with a data directory).
    pub retain_bytes: usize,
    /// What the server keeps for this process besides its output, counted
    /// against `--retain-total` as well: see [`SpawnPlan::metadata_of`],
    /// plus, with an idempotency key, the key and the request it answers.
    pub metadata_bytes: u64,
    /// A PTY's screen memory for its size (`screen::memory_bound`),
    /// counted against `--retain-total` as well.
    pub screen_bytes: u64,
    /// The names of a Kubernetes exec (`server/src/kube/`), if it is one.
    pub kubernetes: Option<KubernetesNames>,
    /// Per-stream memory window (all of the retention without a data
    /// directory).
    pub retain_memory_bytes: usize,
    /// Where the disk logs go; memory only without.
    pub data_dir: Option<Arc<DataDir>>,
    /// Unique among known processes (the table checks).
    pub name: Option<String>,
    /// `unattached_timeout_ms`, if any.
    pub unattached_timeout: Option<Duration>,
    /// The spawn's own `user`: the uid and gid it runs as, resolved when
    /// planned (else the server's `--user`, if any).
    pub identity: Option<crate::secret::Identity>,
    /// Resource limits (the request's, else the server's defaults).
    pub limits: tether_protocol::Limits,
    /// Log its input for its recording (`retained/input_log.rs`).
    pub record_input: bool,
}

/// What a known process costs besides its argv and output: the process
/// object, its tasks and channels, its published exit.
const PROCESS_OVERHEAD: u64 = 4 << 10;

impl SpawnPlan {
    fn streams(&self) -> u64 {
        if self.tty.is_some() {
            1
        } else {
            2
        }
    }

    /// Memory this process reserves against `--retain-total`: its
    /// windows, its metadata and its screen.
    pub fn reserved_bytes(&self) -> u64 {
        RetainedOutput::reservation(self.retain_memory_bytes, self.overflow, self.streams())
            + self.metadata_bytes
            + self.screen_bytes
    }

    /// The fixed overhead, the time index (`retained/times.rs`) and the
    /// input log if it records its input (`retained/input_log.rs`), and argv
    /// twice (the process keeps it, and so does its published exit). `env` and `cwd` are not kept past the
    /// spawn.
    pub fn metadata_of(argv: &[String], record_input: bool) -> u64 {
        let argv: usize = argv.iter().map(|a| a.len() + 1).sum();
        let input = if record_input {
            crate::retained::input_log::INPUT_LOG_BYTES
        } else {
            0
        };
        PROCESS_OVERHEAD + crate::retained::times::INDEX_BYTES + input + 2 * argv as u64
    }

    /// Takes this plan's shares of the budget: under the table lock, once
    /// admission has found the room for [`SpawnPlan::reserved_bytes`] and
    /// [`SpawnPlan::reserved_disk_bytes`].
    pub fn reserve(&self, budget: &Arc<Budget>) -> Reservation {
        Reservation {
            output: budget.share(Bytes {
                memory: self.reserved_bytes() - self.screen_bytes,
                disk: self.reserved_disk_bytes(),
            }),
            screen: budget.share(Bytes::memory(self.screen_bytes)),
            metadata: self.metadata_bytes,
        }
    }

    /// Disk this process reserves against `--retain-disk-total`.
    pub fn reserved_disk_bytes(&self) -> u64 {
        match &self.data_dir {
            Some(dir) => {
                RetainedOutput::reservation(self.retain_bytes, self.overflow, self.streams())
                    // `ID.times` at the exit, where a restart reads it.
                    + if dir.is_private() { 0 } else { self.saved_times_bytes() }
            }
            None => 0,
        }
    }

    /// The most `ID.times` may take: the index, and the input log if it
    /// records its input.
    fn saved_times_bytes(&self) -> u64 {
        crate::retained::times::MAX_SAVED_BYTES
            + if self.record_input {
                crate::retained::input_log::MAX_SAVED_INPUT_BYTES
            } else {
                0
            }
    }

    /// The retained output: disk logs behind memory windows, or memory.
    fn output(&self, id: &str, screen: Option<Screen>) -> RetainedOutput {
        let Some(dir) = &self.data_dir else {
            let window = self.retain_memory_bytes;
            let logs = [StreamLog::memory(window), StreamLog::memory(window)];
            return RetainedOutput::with_logs(logs, self.overflow, None, screen);
        };
        // The file has room for block mode's exit slack from the start.
        let physical = RetainedOutput::reservation(self.retain_bytes, self.overflow, 1);
        let logs = dir.logs(
            id,
            self.streams() as usize,
            self.retain_memory_bytes,
            self.retain_bytes as u64,
            physical,
        );
        RetainedOutput::with_logs(logs, self.overflow, dir.record(id), screen)
    }
}

/// Starts the process and its tasks. Must run inside the tokio runtime.
/// Takes no lock: the table reserves the slot and the `reservation` before
/// and records the process after (a failed spawn drops the reservation,
/// giving it back).
pub fn spawn(
    id: String,
    plan: SpawnPlan,
    reservation: Reservation,
    config: &ServerOptions,
    metrics: Arc<Metrics>,
) -> Result<Arc<Process>, ApiError> {
    check_cwd(plan.cwd.as_deref())?;
    let started = tokio::time::Instant::now();
    let identity = plan.identity.clone().or(config.spawn_identity.clone());
    let Started {
        pid,
        pidfd,
        contained,
        io,
        cwd: start_dir,
    } = launch::start(
        &StartPlan {
            id: &id,
            argv: &plan.argv,
            env: &plan.env,
            cwd: plan.cwd.as_deref().map(Path::new),
            tty: plan.tty,
            stdin: plan.stdin,
            secret_env: SECRET_ENV,
            identity: identity.as_ref(),
            open_file_limit: crate::limits::inherited_limit(),
            limits: plan.limits,
        },
        crate::contain::current(),
    )?;
    let (sources, stdin, pty) = match server_side(io) {
        Ok(side) => side,
        Err(e) => {
            launch::abandon(pid, pidfd, contained);
            return Err(e);
        }
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
    let output = Arc::new(plan.output(&id, screen));
    if let Some(size) = plan.tty {
        output.sized(size);
    }
    if plan.record_input {
        output.record_input();
    }
    let (control, control_rx) = mpsc::channel(8);
    let (exit_tx, exit) = watch::channel(None);
    let process = Arc::new(Process {
        id,
        pid,
        reservation: Arc::new(reservation),
        name: plan.name,
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
        kubernetes: plan.kubernetes,
        inputs: Default::default(),
        identity,
        start_dir,
        recovered: false,
        contained: contained.clone(),
    });

    output.record(&process.birth_info());
    start_supervisor(
        &process,
        Supervised {
            sources,
            pidfd,
            contained,
            started,
            timeout: plan.timeout,
            unattached: plan.unattached_timeout,
            killing: None,
            screen_idle: plan.tty.is_some(),
            control: control_rx,
            exit: exit_tx,
        },
        config,
        metrics,
    );
    Ok(process)
}

/// What a process's supervisor is started with: at the spawn, or when a
/// handover's new binary adopts it (`carry.rs`).
pub(super) struct Supervised {
    pub sources: Vec<(StreamName, Source)>,
    pub pidfd: crate::contain::pidfd::PidFd,
    pub contained: Arc<crate::contain::Contained>,
    /// When the OS process was created.
    pub started: tokio::time::Instant,
    pub timeout: Option<Duration>,
    pub unattached: Option<Duration>,
    /// A kill under way, carried by a handover.
    pub killing: Option<(tether_protocol::ExitReason, Option<tokio::time::Instant>)>,
    /// A PTY: its screen rests when its output is quiet.
    pub screen_idle: bool,
    /// The process's requests.
    pub control: mpsc::Receiver<super::supervise::Control>,
    /// Where its exit is published.
    pub exit: watch::Sender<Option<super::supervise::Exited>>,
}

/// Starts the task that supervises `process` and runs its capture.
pub(super) fn start_supervisor(
    process: &Arc<Process>,
    parts: Supervised,
    config: &ServerOptions,
    metrics: Arc<Metrics>,
) {
    let output = process.output.clone();
    let (reaped, reaped_rx) = watch::channel(None);
    let (frozen, frozen_rx) = watch::channel(false);
    let captures = parts
        .sources
        .into_iter()
        .map(|(stream, source)| {
            let capture = Capture {
                output: output.clone(),
                stream,
                id: process.id.clone(),
                source,
                reaped: reaped_rx.clone(),
                drain: config.drain_timeout(),
                metrics: metrics.clone(),
                screen_idle: (parts.screen_idle && stream == StreamName::Stdout)
                    .then(|| config.screen_idle()),
                frozen: frozen_rx.clone(),
            };
            // Polled inside the supervisor's future, not a task of its
            // own: no wake-up of another task per read.
            let run = std::panic::AssertUnwindSafe(capture.run())
                .catch_unwind()
                .map(|ended| ended.unwrap_or(CaptureEnd::Ended(false)));
            Box::pin(run) as CaptureRun
        })
        .collect();
    let supervisor = Supervisor {
        pidfd: parts.pidfd,
        contained: parts.contained,
        birth: process.birth_info(),
        started: parts.started,
        timeout: parts.timeout,
        kill_grace: config.kill_grace(),
        unattached: parts
            .unattached
            .map(|timeout| Unattached::new(timeout, process.attachment_slots.watch())),
        attachments: process.attachment_slots.watch(),
        control: parts.control,
        reaped,
        captures,
        output,
        reservation: process.reservation.clone(),
        exit: parts.exit,
        metrics,
        frozen,
        killing: parts.killing,
    };
    // No span around the supervisor: one would be entered and left at
    // every poll (every read of output); its events carry the id instead.
    tokio::spawn(supervisor.run());
}

/// What capture reads, the stdin queue and the PTY master.
type ServerSide = (
    Vec<(StreamName, Source)>,
    StdinQueue,
    Option<Arc<PtyMaster>>,
);

/// Registers the server's ends of the process's stdio with the reactor.
fn server_side(io: StartedIo) -> Result<ServerSide, ApiError> {
    Ok(match io {
        StartedIo::Pty(master) => {
            let master = Arc::new(master);
            (
                vec![(StreamName::Stdout, Source::Pty(master.clone()))],
                StdinQueue::pty(master.clone()),
                Some(master),
            )
        }
        StartedIo::Pipes {
            stdin,
            stdout,
            stderr,
        } => {
            let source =
                |fd| Source::pipe(fd).map_err(|e| ApiError::Internal(format!("output pipe: {e}")));
            let stdin = match stdin {
                Some(fd) => StdinQueue::pipe(
                    tokio::net::unix::pipe::Sender::from_owned_fd(fd)
                        .map_err(|e| ApiError::Internal(format!("stdin pipe: {e}")))?,
                ),
                None => StdinQueue::none(),
            };
            (
                vec![
                    (StreamName::Stdout, source(stdout)?),
                    (StreamName::Stderr, source(stderr)?),
                ],
                stdin,
                None,
            )
        }
    })
}

fn check_cwd(cwd: Option<&str>) -> Result<(), ApiError> {
    let Some(cwd) = cwd else { return Ok(()) };
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ApiError::CannotExecute(format!(
            "cwd {cwd:?} is not a directory"
        ))),
        Err(e) => Err(ApiError::CannotExecute(format!("cwd {cwd:?}: {e}"))),
    }
}
