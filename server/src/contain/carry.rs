//! What a handover carries of containment (issue 43): the guard (its pid
//! and the write end of its pipe, so it never sees end of file and kills
//! nothing), the instance cgroup, and each process's cell, limits and
//! session. The new binary adopts them as they are: no process changes
//! cgroup, no session is registered twice.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use tether_protocol::Limits;

use super::cgroup::{Cell, CgroupKind, Instance};
use super::guard::Guard;
use super::meter::{Dirs, Meter};
use super::{controllers_for, Contained, Containment, CONTAINMENT, GUARD};

/// The server's containment as carried.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedContainment {
    /// The guard's pid.
    pub guard_pid: Option<u32>,
    /// The instance cgroup: `(v2, dir)`.
    pub instance: Option<(bool, PathBuf)>,
}

/// One process's containment as carried.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedContained {
    /// Its cell: `(v2, dir)`.
    pub cell: Option<(bool, PathBuf)>,
    /// Its meter, if it has one.
    pub meter: Option<CarriedMeter>,
    pub limits: Option<Limits>,
    pub sid: u32,
    pub tty: bool,
}

/// Where a process's meter reads.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum CarriedMeter {
    V2 {
        dir: PathBuf,
        io: bool,
    },
    V1 {
        dirs: Vec<(String, PathBuf)>,
        cpu_stat: Option<PathBuf>,
    },
}

fn kind(v2: bool) -> CgroupKind {
    if v2 {
        CgroupKind::V2
    } else {
        CgroupKind::V1Freezer
    }
}

/// The server's containment and a second descriptor of the guard's pipe,
/// for the new binary.
pub fn carry() -> io::Result<(CarriedContainment, Option<OwnedFd>)> {
    let guard = GUARD.get();
    let pipe = match guard {
        Some(guard) => Some(guard.pipe_fd()?),
        None => None,
    };
    let instance = super::current()
        .instance
        .as_ref()
        .map(|i| (i.kind() == CgroupKind::V2, i.dir().to_path_buf()));
    Ok((
        CarriedContainment {
            guard_pid: guard.map(Guard::pid),
            instance,
        },
        pipe,
    ))
}

/// Adopts what [`carry`] gave: the guard (with its pipe) and the instance
/// cgroup, with their controllers. Call once, at start, instead of
/// `start_guard` and `install`.
pub fn adopt(
    carried: &CarriedContainment,
    guard_pipe: Option<OwnedFd>,
) -> io::Result<&'static Containment> {
    if let (Some(pid), Some(pipe)) = (carried.guard_pid, guard_pipe) {
        let _ = GUARD.set(Guard::adopted(pid, pipe));
    }
    let containment = match &carried.instance {
        Some((v2, dir)) => {
            let instance = Instance::at(kind(*v2), dir.clone());
            let controllers = controllers_for(&instance, true);
            Containment {
                instance: Some(instance),
                controllers,
            }
        }
        None => Containment {
            instance: None,
            controllers: None,
        },
    };
    Ok(CONTAINMENT.get_or_init(|| containment))
}

impl Contained {
    /// This process's containment as carried.
    pub fn carried(&self) -> CarriedContained {
        CarriedContained {
            cell: self
                .cell
                .as_ref()
                .map(|c| (c.kind() == CgroupKind::V2, c.dir().to_path_buf())),
            meter: self.meter.as_ref().map(|m| match m.dirs() {
                Dirs::V2 { dir, io } => CarriedMeter::V2 {
                    dir: dir.clone(),
                    io: *io,
                },
                Dirs::V1 { dirs, cpu_stat } => CarriedMeter::V1 {
                    dirs: dirs
                        .iter()
                        .map(|(c, d)| (c.to_string(), d.clone()))
                        .collect(),
                    cpu_stat: cpu_stat.clone(),
                },
            }),
            limits: self.limits,
            sid: self.sid,
            tty: self.tty,
        }
    }

    /// The containment a handover carried. The session (without a cell) is
    /// registered with the guard already.
    pub fn adopted(carried: CarriedContained) -> Contained {
        Contained {
            cell: carried
                .cell
                .map(|(v2, dir)| Arc::new(Cell::at(kind(v2), dir))),
            meter: carried.meter.map(|meter| {
                Arc::new(Meter::new(match meter {
                    CarriedMeter::V2 { dir, io } => Dirs::V2 { dir, io },
                    CarriedMeter::V1 { dirs, cpu_stat } => Dirs::V1 {
                        // Only the controllers this binary knows.
                        dirs: dirs
                            .into_iter()
                            .filter_map(|(c, d)| Some((super::resources::v1_controller(&c)?, d)))
                            .collect(),
                        cpu_stat,
                    },
                }))
            }),
            limits: carried.limits,
            final_usage: OnceLock::new(),
            sid: carried.sid,
            tty: carried.tty,
            reaped: AtomicBool::new(false),
        }
    }
}

impl Guard {
    fn adopted(pid: u32, pipe: OwnedFd) -> Guard {
        Guard::from_parts(Mutex::new(std::fs::File::from(pipe)), pid)
    }
}

/// A descriptor's second copy (close-on-exec, as every descriptor here).
pub fn dup(fd: impl AsFd) -> io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
}
