//! A process as a handover carries it (issue 43), and as the new binary
//! adopts it. A running one is stopped first ([`Process::freeze`]): its
//! supervisor stops capture between two reads and gives up second
//! descriptors of its pidfd and outputs, with its timers. The process
//! itself never notices: it stays this pid's child (an exec keeps
//! children), writes into pipes and a terminal whose buffers hold its
//! output, and is read again from the same offsets by the new binary.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tether_protocol::{KubernetesNames, ProcessInfo, StreamName};
use tokio::sync::{mpsc, oneshot, watch};

use super::capture::Source;
use super::reservation::Reservation;
use super::spawn::{start_supervisor, Supervised};
use super::stdin::StdinQueue;
use super::supervise::{Control, Exited, Frozen, Timers};
use super::Process;
use crate::contain::carry::CarriedContained;
use crate::contain::pidfd::PidFd;
use crate::contain::Contained;
use crate::metrics::Metrics;
use crate::options::ServerOptions;
use crate::pty::PtyMaster;
use crate::retained::carry::CarriedOutput;
use crate::retained::RetainedOutput;
use crate::slots::Slots;

/// How long a process reaped before the handover may take to publish its
/// exit (its capture draining) before the handover gives up on it.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// A known process in the state document. Descriptors are named by their
/// numbers, which the exec keeps.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedProcess {
    pub id: String,
    pub name: Option<String>,
    pub pid: u32,
    pub argv: Vec<String>,
    pub tty: bool,
    /// Nanoseconds since the epoch (scoped tokens name the process by it).
    pub started_at_ns: u64,
    pub kubernetes: Option<KubernetesNames>,
    pub identity: Option<crate::secret::Identity>,
    pub start_dir: Option<std::path::PathBuf>,
    pub recovered: bool,
    /// Its published exit, once it has exited.
    pub exited: Option<ProcessInfo>,
    pub finished_at_ms: Option<u64>,
    pub output: CarriedOutput,
    pub contained: CarriedContained,
    /// What it holds of the budget: its output share (memory, disk), of
    /// which its metadata, and its screen's share.
    pub output_bytes: (u64, u64),
    pub metadata_bytes: u64,
    pub screen_bytes: u64,
    /// A running process's descriptors and timers.
    pub running: Option<CarriedRunning>,
    /// Its numbered input streams.
    pub inputs: Vec<super::input_streams::CarriedInput>,
    /// The carried-out idempotency records of its HTTP input.
    pub http_records: Vec<super::input_once::carry::CarriedRecord>,
}

/// The running part of a [`CarriedProcess`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedRunning {
    pub pidfd: RawFd,
    /// Each output capture still read (one that reached its end has none).
    pub outputs: Vec<(StreamName, RawFd)>,
    /// Its stdin pipe or PTY master, while open.
    pub stdin: Option<RawFd>,
    pub timers: Timers,
}

fn ms_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Process {
    /// Stops a running process's capture and supervision for a handover.
    /// `None` when it is not running (any more): it is carried as exited,
    /// once its exit is published (a process reaped just before may still
    /// be draining its output; bounded by `EXIT_WAIT`).
    pub async fn freeze(&self) -> Option<Frozen> {
        let (reply, frozen) = oneshot::channel();
        if self.control.send(Control::HandOver(reply)).await.is_ok() {
            if let Ok(frozen) = frozen.await {
                return Some(frozen);
            }
        }
        let mut exit = self.watch_exit();
        let _ = tokio::time::timeout(EXIT_WAIT, exit.wait_for(|e| e.is_some())).await;
        None
    }

    /// Nothing is queued for its stdin writer.
    pub fn stdin_idle(&self) -> bool {
        self.stdin.is_idle()
    }

    /// The process as carried. `frozen` is what [`Process::freeze`] gave
    /// (None: exited); `keep` takes each descriptor the exec must keep and
    /// gives back its number; `put` stores bytes in the state document.
    pub fn carry(
        &self,
        frozen: Option<Frozen>,
        inputs: Vec<super::input_streams::CarriedInput>,
        keep: &mut dyn FnMut(OwnedFd) -> RawFd,
        put: &mut dyn FnMut(&[&[u8]]) -> std::io::Result<crate::retained::log::Blob>,
    ) -> std::io::Result<CarriedProcess> {
        let exited = self.exit.borrow().clone();
        let running = match frozen {
            Some(frozen) => {
                let stdin = match self.stdin.carry_fd() {
                    Some(fd) => Some(keep(fd?)),
                    None => None,
                };
                Some(CarriedRunning {
                    pidfd: keep(frozen.pidfd),
                    outputs: frozen
                        .outputs
                        .into_iter()
                        .map(|(stream, fd)| (stream, keep(fd)))
                        .collect(),
                    stdin,
                    timers: frozen.timers,
                })
            }
            None => None,
        };
        Ok(CarriedProcess {
            id: self.id.clone(),
            name: self.name.clone(),
            pid: self.pid,
            argv: self.argv.clone(),
            tty: self.tty,
            started_at_ns: crate::token::instance_of(self.started_at),
            kubernetes: self.kubernetes.clone(),
            identity: self.identity.clone(),
            start_dir: self.start_dir.clone(),
            recovered: self.recovered,
            finished_at_ms: exited.as_ref().map(|e| ms_since_epoch(e.finished_at)),
            exited: exited.map(|e| e.info),
            output: self.output.carry(put)?,
            contained: self.contained.carried(),
            output_bytes: {
                let held = self.reservation.output.held();
                (held.memory, held.disk)
            },
            metadata_bytes: self.reservation.metadata,
            screen_bytes: self.reservation.screen.held().memory,
            running,
            inputs,
            http_records: self.inputs.http.carried(),
        })
    }

    /// The process a handover carried, with its output rebuilt; a running
    /// one is supervised and captured again from where it stopped. `take`
    /// hands over the descriptor with a number the state names.
    pub fn adopted(
        carried: CarriedProcess,
        output: RetainedOutput,
        reservation: Reservation,
        take: &mut dyn FnMut(RawFd) -> std::io::Result<OwnedFd>,
        records_quota: &Arc<crate::budget::Quota>,
        config: &ServerOptions,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Arc<Process>> {
        let output = Arc::new(output);
        let contained = Arc::new(Contained::adopted(carried.contained));
        let (control, control_rx) = mpsc::channel(8);
        let exited = match (&carried.exited, carried.finished_at_ms) {
            (Some(info), Some(at)) => Some(Exited {
                info: info.clone(),
                finished_at: from_ms(at),
            }),
            _ => None,
        };
        let (exit_tx, exit) = watch::channel(exited);
        let mut pty = None;
        let mut stdin = StdinQueue::none();
        let mut sources = Vec::new();
        let mut supervision = None;
        if let (Some(running), None) = (carried.running, &carried.exited) {
            let pidfd = PidFd::adopt(take(running.pidfd)?, carried.pid)?;
            if carried.tty {
                // One master: output and stdin are the same descriptor.
                let fd = match running.stdin.or(running.outputs.first().map(|o| o.1)) {
                    Some(fd) => take(fd)?,
                    None => return Err(std::io::Error::other("a PTY process without its master")),
                };
                let master = Arc::new(PtyMaster::adopt(fd)?);
                if running
                    .outputs
                    .iter()
                    .any(|(s, _)| *s == StreamName::Stdout)
                {
                    sources.push((StreamName::Stdout, Source::Pty(master.clone())));
                }
                stdin = StdinQueue::pty(master.clone());
                pty = Some(master);
            } else {
                for (stream, fd) in running.outputs {
                    sources.push((stream, Source::pipe(take(fd)?)?));
                }
                if let Some(fd) = running.stdin {
                    stdin =
                        StdinQueue::pipe(tokio::net::unix::pipe::Sender::from_owned_fd(take(fd)?)?);
                }
            }
            supervision = Some((pidfd, running.timers));
        } else {
            contained.set_reaped();
        }
        let process = Arc::new(Process {
            id: carried.id,
            name: carried.name,
            pid: carried.pid,
            argv: carried.argv,
            tty: carried.tty,
            started_at: UNIX_EPOCH + Duration::from_nanos(carried.started_at_ns),
            reservation: Arc::new(reservation),
            attachment_slots: Slots::new(config.max_attachments_per_process),
            metrics: metrics.clone(),
            kubernetes: carried.kubernetes,
            inputs: super::input_streams::InputStreams::adopted(
                carried.inputs,
                super::input_once::OnceKeys::adopted(carried.http_records, records_quota),
            ),
            identity: carried.identity,
            start_dir: carried.start_dir,
            recovered: carried.recovered,
            output,
            exit,
            control,
            stdin,
            pty,
            kill_grace: config.kill_grace(),
            contained: contained.clone(),
        });
        match supervision {
            Some((pidfd, timers)) => {
                let now = tokio::time::Instant::now();
                let started = now
                    .checked_sub(Duration::from_millis(timers.elapsed_ms))
                    .unwrap_or(now);
                start_supervisor(
                    &process,
                    Supervised {
                        sources,
                        pidfd,
                        contained,
                        started,
                        timeout: timers.timeout_ms.map(Duration::from_millis),
                        unattached: timers.unattached_ms.map(Duration::from_millis),
                        killing: timers.killing.map(|(reason, kill_in)| {
                            (reason, kill_in.map(|ms| now + Duration::from_millis(ms)))
                        }),
                        screen_idle: carried.tty,
                        control: control_rx,
                        exit: exit_tx,
                    },
                    config,
                    metrics,
                );
            }
            None => {
                // Exited: requests find it reaped (as a recovered one).
                drop(control_rx);
                drop(exit_tx);
            }
        }
        Ok(process)
    }
}
