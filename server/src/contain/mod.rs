//! Containment: ending every descendant of a process, however it detached,
//! and nothing else.
//!
//! - [`cgroup`]: a cgroup per process (v2 `cgroup.kill`, or the v1 freezer),
//!   joined by the child before it execs, so nothing escapes.
//! - [`pidfd`]: the leader is waited for and signalled through a pidfd, so
//!   no signal is ever sent to a number after its reap.
//! - [`guard`]: a process that ends everything when tetherd dies.
//! - [`reaper`]: the server's own children, and the orphan reaper as PID 1.
//! - [`resources`]: limits written to a process's cgroup before its clone;
//!   [`meter`]: its usage read back; [`limits`]: the flags and a request's
//!   limits checked.
//!
//! Without a writable cgroup hierarchy, processes fall back to the session
//! scan of [`unix_session`]: a descendant that calls `setsid` escapes it.
//! Each process reports which it got (`containment` in the process object).

pub mod carry;
pub mod cgroup;
pub mod guard;
pub mod limits;
pub mod meter;
pub mod pidfd;
pub mod reaper;
pub mod resources;
pub mod unix_session;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nix::sys::signal::Signal;

pub use cgroup::Entry;
use cgroup::{Cell, CgroupKind, Instance};
use guard::Guard;
use meter::Meter;
use resources::Controllers;
pub use tether_protocol::Containment as ContainmentKind;
use tether_protocol::{Limits, Usage};
use unix_session::{signal_orphans, signal_session};

/// `--containment`: which mechanism to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ContainmentMode {
    /// cgroup v2 if writable, else the v1 freezer, else sessions.
    #[default]
    Auto,
    /// cgroup v2 or refuse to start.
    Cgroup2,
    /// The cgroup v1 freezer or refuse to start.
    Cgroup1Freezer,
    /// Sessions only (descendants that call `setsid` escape).
    Session,
}

/// The guard tetherd started (only the binary does: an embedder's binary
/// cannot be re-executed as a guard).
static GUARD: OnceLock<Guard> = OnceLock::new();

/// Starts the guard and makes it this process's guard. Call at startup,
/// before the runtime spawns anything.
pub fn start_guard() -> io::Result<u32> {
    let guard = Guard::start()?;
    let pid = guard.pid();
    let _ = GUARD.set(guard);
    Ok(pid)
}

fn guard() -> Option<&'static Guard> {
    GUARD.get()
}

static CONTAINMENT: OnceLock<Containment> = OnceLock::new();

/// Sets up this process's containment once (see [`Containment::start`]);
/// later calls return the first.
pub fn install(mode: ContainmentMode) -> io::Result<&'static Containment> {
    if let Some(containment) = CONTAINMENT.get() {
        return Ok(containment);
    }
    let containment = Containment::start(mode)?;
    Ok(CONTAINMENT.get_or_init(|| containment))
}

/// This process's containment: sessions only until [`install`] ran.
pub fn current() -> &'static Containment {
    CONTAINMENT.get_or_init(|| Containment {
        instance: None,
        controllers: None,
    })
}

/// The server's containment: the instance cgroup, if any, and the resource
/// controllers of its process cgroups, if any.
#[derive(Debug)]
pub struct Containment {
    instance: Option<Instance>,
    controllers: Option<Controllers>,
}

/// The cgroup of a new process, the descriptors its launch needs, and its
/// limits and accounting, if there are controllers.
pub type NewCell = (Cell, Entry, Option<Meter>);

impl Containment {
    /// Sets up containment as `mode` asks; `Auto` falls back quietly (with
    /// a warning), an explicit mode that is not available is an error.
    pub fn start(mode: ContainmentMode) -> io::Result<Containment> {
        let tried: &[CgroupKind] = match mode {
            ContainmentMode::Auto => &[CgroupKind::V2, CgroupKind::V1Freezer],
            ContainmentMode::Cgroup2 => &[CgroupKind::V2],
            ContainmentMode::Cgroup1Freezer => &[CgroupKind::V1Freezer],
            ContainmentMode::Session => &[],
        };
        let mut errors = Vec::new();
        for &kind in tried {
            match Instance::create(kind) {
                Ok(instance) => {
                    if let Some(guard) = guard() {
                        guard.cgroup(&instance);
                    }
                    let controllers = controllers_for(&instance, false);
                    if let (Some(guard), Some(controllers)) = (guard(), &controllers) {
                        for dir in controllers.v1_dirs() {
                            guard.controllers(dir);
                        }
                    }
                    tracing::info!(
                        containment = kind.name(),
                        dir = %instance.dir().display(),
                        controllers = %controllers.as_ref().map_or_else(
                            || "none".to_string(),
                            resources::Controllers::describe
                        ),
                        "containment"
                    );
                    return Ok(Containment {
                        instance: Some(instance),
                        controllers,
                    });
                }
                Err(e) => errors.push(format!("{}: {e}", kind.name())),
            }
        }
        if mode != ContainmentMode::Auto && mode != ContainmentMode::Session {
            return Err(io::Error::other(format!(
                "containment unavailable: {}",
                errors.join("; ")
            )));
        }
        if !errors.is_empty() {
            tracing::warn!(
                errors = %errors.join("; "),
                "no writable cgroup hierarchy: processes are contained by session only"
            );
        }
        Ok(Containment {
            instance: None,
            controllers: None,
        })
    }

    /// Why `limits` cannot be applied to processes of this server, if they
    /// cannot: a request with limits is refused then, never run unlimited.
    pub fn limits_refusal(&self, limits: &Limits) -> Option<String> {
        if limits.is_empty() {
            return None;
        }
        match (&self.instance, &self.controllers) {
            (None, _) => Some(
                "resource limits need cgroups, and this server contains processes by session only (--containment session, or no writable cgroup hierarchy)".into(),
            ),
            (Some(instance), None) => Some(format!(
                "resource limits need the memory, cpu and pids cgroup controllers, and none is available to this server's {} cgroup",
                instance.kind().name()
            )),
            (Some(_), Some(controllers)) => controllers.refusal(limits).map(str::to_string),
        }
    }

    /// The cgroup for a new process, with `limits` written to it, and the
    /// descriptors its launch needs; None for the session fallback (the
    /// hierarchy refused, e.g. out of cgroups), which only a process
    /// without limits gets: with limits that is an error. Blocking: a few
    /// mkdirs, writes and opens.
    pub fn cell(&self, id: &str, limits: &Limits) -> io::Result<Option<NewCell>> {
        let refused =
            |e: io::Error| io::Error::new(e.kind(), format!("no cgroup for the limits: {e}"));
        let Some(instance) = &self.instance else {
            return match self.limits_refusal(limits) {
                Some(why) => Err(io::Error::other(why)),
                None => Ok(None),
            };
        };
        let (cell, mut entry) = match instance.cell(id) {
            Ok(cell) => cell,
            Err(e) if limits.is_empty() => {
                tracing::warn!(id, error = %e, "no cgroup for the process: contained by session only");
                return Ok(None);
            }
            Err(e) => return Err(refused(e)),
        };
        let Some(controllers) = &self.controllers else {
            if let Some(why) = self.limits_refusal(limits) {
                let _ = cell.remove();
                return Err(io::Error::other(why));
            }
            return Ok(Some((cell, entry, None)));
        };
        let v2 = cell.kind() == CgroupKind::V2;
        match controllers.cell(cell.dir(), v2, id, limits) {
            Ok((meter, procs)) => {
                entry.controller_procs = procs;
                Ok(Some((cell, entry, Some(meter))))
            }
            Err(e) if limits.is_empty() => {
                tracing::warn!(id, error = %e, "no resource cgroups for the process: no usage");
                Ok(Some((cell, entry, None)))
            }
            Err(e) => {
                let _ = cell.remove();
                Err(refused(e))
            }
        }
    }

    /// Ends every process left in any process cgroup and removes the
    /// instance cgroup; at shutdown, after every process was killed.
    /// Blocking.
    pub fn kill_everything(&self) {
        if let Some(instance) = &self.instance {
            instance.kill_everything();
        }
        if let Some(controllers) = &self.controllers {
            controllers.remove();
        }
    }
}

/// The resource controllers for the process cgroups under `instance`: v2's
/// in the instance cgroup, else (a hybrid host) v1 hierarchies beside it.
fn controllers_for(instance: &Instance, adopt: bool) -> Option<Controllers> {
    if instance.kind() == CgroupKind::V2 {
        let ours: Vec<u32> = std::iter::once(std::process::id())
            .chain(guard().map(|g| g.pid()))
            .collect();
        if let Some(controllers) = Controllers::enable_v2(instance.dir(), &ours) {
            return Some(controllers);
        }
    }
    let name = instance.dir().file_name()?.to_str()?;
    let controllers = Controllers::create_v1(name, adopt);
    if controllers.is_none() {
        tracing::warn!("no memory, cpu and pids cgroup controllers: requests with limits are refused, processes have no usage");
    }
    controllers
}

/// How one process is contained, and the only way it is signalled.
#[derive(Debug)]
pub struct Contained {
    cell: Option<Arc<Cell>>,
    /// Its limits and accounting, if there are controllers.
    meter: Option<Arc<Meter>>,
    /// The limits applied (none when empty).
    limits: Option<Limits>,
    /// Usage and the pids event as read at the reap: from then on the
    /// cgroups may be gone.
    final_usage: OnceLock<(Option<Usage>, bool)>,
    sid: u32,
    tty: bool,
    /// Set by supervision once it reaped the leader: from then on the
    /// session fallback spares a stranger that took over the number.
    reaped: AtomicBool,
}

impl Contained {
    /// The process was launched as session leader `sid`, in `cell` if any,
    /// with `limits` applied through `meter`. Registers a session-only
    /// process with the guard.
    pub fn new(
        cell: Option<Cell>,
        meter: Option<Meter>,
        limits: Limits,
        sid: u32,
        tty: bool,
    ) -> Contained {
        if cell.is_none() {
            if let (Some(guard), Some(start)) = (guard(), guard::start_time(sid)) {
                guard.session(sid, start);
            }
        }
        Contained {
            cell: cell.map(Arc::new),
            meter: meter.map(Arc::new),
            limits: (!limits.is_empty()).then_some(limits),
            final_usage: OnceLock::new(),
            sid,
            tty,
            reaped: AtomicBool::new(false),
        }
    }

    /// What the process object reports.
    pub fn kind(&self) -> ContainmentKind {
        match self.cell.as_ref().map(|c| c.kind()) {
            Some(CgroupKind::V2) => ContainmentKind::Cgroup2,
            Some(CgroupKind::V1Freezer) => ContainmentKind::Cgroup1Freezer,
            None => ContainmentKind::Session,
        }
    }

    /// The limits applied, if any.
    pub fn limits(&self) -> Option<Limits> {
        self.limits
    }

    /// What it used so far (a few reads of cgroupfs); None without
    /// controllers. After [`Contained::final_bill`], what it said.
    pub fn usage(&self) -> Option<Usage> {
        match self.final_usage.get() {
            Some((usage, _)) => *usage,
            None => self.meter.as_ref().map(|m| m.usage()),
        }
    }

    /// Whether a fork failed at its `pids` limit.
    pub fn pids_limit_hit(&self) -> bool {
        match self.final_usage.get() {
            Some((_, hit)) => *hit,
            None => self.meter.as_ref().is_some_and(|m| m.pids_limit_hit()),
        }
    }

    /// At the reap, before [`Contained::release`]: the usage, how many
    /// members the kernel's OOM killer ended, and whether the pids limit
    /// was hit; later [`Contained::usage`] answers the same. A few reads of cgroupfs (kernel memory), done inline.
    pub fn final_bill(&self) -> (Option<Usage>, u64, bool) {
        let Some(meter) = &self.meter else {
            return (None, 0, false);
        };
        let (usage, hit) = *self
            .final_usage
            .get_or_init(|| (Some(meter.usage()), meter.pids_limit_hit()));
        (usage, meter.oom_kills(), hit)
    }

    /// Supervision reaped the leader (call before anyone else may signal).
    pub fn set_reaped(&self) {
        self.reaped.store(true, Ordering::SeqCst);
    }

    /// TERM (and HUP first on a PTY, as closing a terminal does: an
    /// interactive shell ignores TERM) to every member.
    pub async fn terminate(&self) {
        let signals: &[Signal] = if self.tty {
            &[Signal::SIGHUP, Signal::SIGTERM]
        } else {
            &[Signal::SIGTERM]
        };
        for &signal in signals {
            self.blocking(move |cell, sid, reaped| match cell {
                Some(cell) => {
                    cell.signal_all(signal);
                }
                None if reaped => {
                    signal_orphans(sid, signal);
                }
                None => {
                    signal_session(sid, signal);
                }
            })
            .await;
        }
    }

    /// KILL to every member, including those forked meanwhile.
    pub async fn kill(&self) {
        self.blocking(move |cell, sid, reaped| match cell {
            Some(cell) => cell.kill_all(),
            None => {
                // Members may fork while being killed; a few rounds catch them.
                let signal: fn(u32, Signal) -> usize = if reaped {
                    signal_orphans
                } else {
                    signal_session
                };
                for _ in 0..8 {
                    if signal(sid, Signal::SIGKILL) == 0 {
                        break;
                    }
                }
            }
        })
        .await;
    }

    /// TERM now, KILL after `grace`: for what is left after the reap (a
    /// DELETE of a process that exited but left descendants).
    pub async fn end(self: Arc<Self>, grace: Duration) {
        self.terminate().await;
        tokio::time::sleep(grace).await;
        self.kill().await;
    }

    /// After the reap: removes the cgroup once it is empty, or tells the
    /// guard the session is no longer its to end. `until` bounds how long
    /// leftovers (descendants of a leader that exited by itself, or that
    /// outlived the kill's TERM) may live; at it they are killed. Runs as a
    /// task of its own, so it never delays the exit report.
    pub async fn release(self: Arc<Self>, until: Option<tokio::time::Instant>) {
        let Some(cell) = self.cell.clone() else {
            // A session's members cannot be watched cheaply: end what is
            // left at the bound, if there is one.
            if let Some(at) = until {
                tokio::time::sleep_until(at).await;
                self.kill().await;
            }
            if let Some(guard) = guard() {
                guard.session_reaped(self.sid);
            }
            return;
        };
        let mut killed = false;
        let mut looks = 0u32;
        loop {
            let cell = cell.clone();
            let removed = tokio::task::spawn_blocking(move || cell.remove().is_ok())
                .await
                .unwrap_or(false);
            if removed {
                if let Some(meter) = self.meter.clone() {
                    let _ = tokio::task::spawn_blocking(move || meter.remove()).await;
                }
                return;
            }
            let now = tokio::time::Instant::now();
            if !killed && until.is_some_and(|at| now >= at) {
                self.kill().await;
                killed = true;
            }
            // Dying members go within moments; leftovers that live on are
            // looked at once a second, or at the bound.
            looks += 1;
            let pause = Duration::from_millis(if killed && looks < 100 { 20 } else { 1000 });
            let wake = match until {
                Some(at) if !killed => (now + pause).min(at),
                _ => now + pause,
            };
            tokio::time::sleep_until(wake).await;
        }
    }

    async fn blocking(&self, f: impl FnOnce(Option<&Cell>, u32, bool) + Send + 'static) {
        let cell = self.cell.clone();
        let sid = self.sid;
        let reaped = self.reaped.load(Ordering::SeqCst);
        let _ = tokio::task::spawn_blocking(move || f(cell.as_deref(), sid, reaped)).await;
    }
}
