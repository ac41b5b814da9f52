//! The description part of the state document: everything a handover
//! carries besides blobs, versioned by [`super::FORMAT`].

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::PathBuf;

use crate::contain::carry::CarriedContainment;
use crate::datadir::CarriedDataDir;
use crate::table::CarriedTable;

/// The server's state as carried. Descriptors are named by number (the
/// exec keeps numbers); `fds` lists every one, so that the new binary
/// marks them close-on-exec again before it starts anything.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub format: u32,
    /// The version that wrote it.
    pub from_version: String,
    pub listener: RawFd,
    /// A Unix socket's path (kept, not removed).
    pub unix_socket: Option<PathBuf>,
    pub containment: CarriedContainment,
    pub guard_pipe: Option<RawFd>,
    pub data_dir: Option<(CarriedDataDir, RawFd)>,
    pub lifetime: CarriedLifetime,
    /// The operator token in force (`None`: `--no-token`).
    pub operator_token: Option<String>,
    pub signing_key: [u8; 32],
    pub fingerprint_key: [u8; 32],
    pub table: CarriedTable,
    pub fds: Vec<RawFd>,
}

/// What the binary's start-up made that outlives one binary: the runtime
/// entry (its path and locked file), a generated token and its file, and
/// the path and flags to exec a new binary with.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CarriedLifetime {
    pub runtime_entry: Option<(PathBuf, RawFd)>,
    pub generated_token: Option<(String, Option<PathBuf>)>,
}

/// What `main.rs` hands the server for a handover: the binary it was
/// started from, its flags (without the token), and what its start-up
/// made.
#[derive(Debug, Default)]
pub struct Lifetime {
    /// `current_exe()` at start: the path a package upgrade replaces.
    pub binary: Option<PathBuf>,
    /// The flags as given, without `--token` and `--handover-fd`.
    pub args: Vec<OsString>,
    pub runtime_entry: Option<(PathBuf, std::os::fd::OwnedFd)>,
    pub generated_token: Option<(String, Option<PathBuf>)>,
}
