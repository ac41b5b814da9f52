//! What every section of the harness is given: the binaries, the sizes
//! of this run, the report; and the check every reader of zeros makes.

use std::path::PathBuf;

use anyhow::Result;

use crate::report::Report;
use crate::tetherd;

/// Sizes and repetitions.
#[derive(Debug, Clone)]
pub struct Params {
    pub spawn_runs: usize,
    pub wait_runs: usize,
    pub echo_rounds: usize,
    pub pipe_bytes: u64,
    pub pty_bytes: u64,
    pub tp_runs: usize,
    pub fair_secs: f64,
    pub fair_runs: usize,
    pub sessions: usize,
    pub scale_keys: usize,
    pub scale_rate_hz: u64,
    pub storm_secs: u64,
    pub storm_runs: usize,
    pub retention_procs: usize,
    pub retention_mib: u64,
    pub scale_typing_pct: u64,
    pub viewers: usize,
    pub fanout_bytes: u64,
    pub waits: usize,
}

impl Params {
    pub fn new(quick: bool, sessions: Option<usize>) -> Params {
        if quick {
            Params {
                spawn_runs: 30,
                wait_runs: 20,
                echo_rounds: 1000,
                pipe_bytes: 64 << 20,
                pty_bytes: 16 << 20,
                tp_runs: 2,
                fair_secs: 1.0,
                fair_runs: 1,
                sessions: sessions.unwrap_or(50),
                scale_keys: 10,
                scale_rate_hz: 10,
                storm_secs: 2,
                storm_runs: 1,
                retention_procs: 20,
                retention_mib: 1,
                scale_typing_pct: 10,
                viewers: 20,
                fanout_bytes: 4 << 20,
                waits: 200,
            }
        } else {
            Params {
                spawn_runs: 300,
                wait_runs: 100,
                echo_rounds: 5000,
                pipe_bytes: 1 << 30,
                pty_bytes: 256 << 20,
                tp_runs: 5,
                fair_secs: 3.0,
                fair_runs: 3,
                sessions: sessions.unwrap_or(10_000),
                scale_keys: 20,
                scale_rate_hz: 2,
                storm_secs: 10,
                storm_runs: 2,
                retention_procs: 1000,
                retention_mib: 4,
                scale_typing_pct: 10,
                viewers: 1000,
                fanout_bytes: 100 << 20,
                waits: 10_000,
            }
        }
    }
}

/// True when every byte is zero (an OR-reduction the compiler vectorises,
/// so checking a GiB costs little next to moving it).
pub fn all_zero(data: &[u8]) -> bool {
    data.iter().fold(0u8, |acc, &b| acc | b) == 0
}

/// What every section gets.
pub struct Ctx {
    pub bin: PathBuf,
    /// The `tether` CLI beside it, if built.
    pub cli: Option<PathBuf>,
    /// Extra flags for every tetherd.
    pub extra: Vec<String>,
    pub p: Params,
    pub report: Report,
    /// `--ttyd`: the peer of section 12.
    pub ttyd: Option<PathBuf>,
}

impl Ctx {
    /// Starts a tetherd with section-specific flags plus `--tetherd-arg`s.
    pub fn start_server(&self, args: &[String]) -> Result<tetherd::Tetherd> {
        let mut all = args.to_vec();
        all.extend(self.extra.iter().cloned());
        tetherd::Tetherd::start(&self.bin, &all)
    }
}
