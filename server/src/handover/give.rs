//! The old binary's side of a handover: the preflight, then carrying the
//! state into the document and executing the new binary.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use super::document::DocumentWriter;
use super::state::{CarriedLifetime, Lifetime, State};
use super::FORMAT;
use crate::datadir::DataDir;
use crate::options::ServerOptions;
use crate::table::ProcessTable;

/// How long the new binary may take to answer `--handover-check`.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(10);

/// A new binary that passed the preflight.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Preflight {
    pub binary: PathBuf,
    /// Its version, as it reports it.
    pub version: String,
}

/// The first line of what a program wrote, short and without control
/// characters, for a message.
fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

/// Asks `binary` whether it reads this server's state format and takes
/// `args` (runs it with them and `--handover-check`); with `new_flags`,
/// whether they leave what a handover cannot change as it is
/// (`flags.rs`). The reason a binary is refused, if it is.
pub async fn preflight(
    binary: &Path,
    args: &[OsString],
    own: &[OsString],
    new_flags: bool,
) -> Result<Preflight, String> {
    let name = binary.display();
    let run = tokio::process::Command::new(binary)
        .args(args)
        .arg("--handover-check")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PREFLIGHT_TIMEOUT, run)
        .await
        .map_err(|_| format!("{name}: no answer to --handover-check within {PREFLIGHT_TIMEOUT:?}"))?
        .map_err(|e| format!("{name}: cannot run it: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{name}: --handover-check failed ({}): {} (a tetherd older than handovers, or not tetherd)",
            output.status,
            first_line(&output.stderr)
        ));
    }
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|_| format!("{name}: its answer to --handover-check is not tetherd's"))?;
    let formats: Vec<u64> = report["handover_formats"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_u64()).collect())
        .unwrap_or_default();
    if !formats.contains(&u64::from(FORMAT)) {
        return Err(format!(
            "{name} reads handover state formats {formats:?}; this server writes format {FORMAT}"
        ));
    }
    match report.get("config") {
        Some(theirs) => super::flags::same_identity(&super::flags::own_identity(own)?, theirs)?,
        None if new_flags => {
            return Err(format!(
                "{name} does not report what its flags say: it cannot take new flags at a handover"
            ))
        }
        None => {}
    }
    Ok(Preflight {
        binary: binary.to_path_buf(),
        version: report["version"].as_str().unwrap_or("unknown").to_string(),
    })
}

/// Descriptors a handover adds for each running process (second copies of
/// its pidfd, outputs and stdin), and for the server (the listener, the
/// guard's pipe, the locks, the document), with room to spare.
const FDS_PER_PROCESS: u64 = 4;
const FDS_FOR_SERVER: u64 = 16;

/// Whether the open-file limit leaves room for the handover's second
/// descriptors: checked before anything stops, so that a server near its
/// limit refuses the handover instead of failing half way.
pub fn check_descriptors(running: usize) -> Result<(), String> {
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as u64;
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(u64::MAX, |(soft, _)| soft);
    let need = running as u64 * FDS_PER_PROCESS + FDS_FOR_SERVER;
    if open.saturating_add(need) > limit {
        return Err(format!(
            "a handover of {running} running processes needs {need} more descriptors, and {open} of the open-file limit {limit} are in use"
        ));
    }
    Ok(())
}

/// Carries the state into the document and executes `binary` with it and
/// `args` (its command line: `flags.rs`).
/// Returns only if that fails and so does executing the running binary
/// again with the same state: then the error.
pub async fn give(
    table: &Arc<ProcessTable>,
    listener: OwnedFd,
    unix_socket: Option<PathBuf>,
    data_dir: Option<&DataDir>,
    lifetime: &Lifetime,
    config: &ServerOptions,
    (binary, args): (&Path, &[OsString]),
) -> io::Error {
    let document = match carry(table, listener, unix_socket, data_dir, lifetime, config).await {
        Ok(document) => document,
        Err(error) => return error,
    };
    let (kept, number) = document;
    let mut args: Vec<OsString> = args.to_vec();
    args.push("--handover-fd".into());
    args.push(number.to_string().into());
    tracing::info!(binary = %binary.display(), processes = table.list().len(), "handing over");
    let error = exec(binary, &args);
    tracing::error!(%error, binary = %binary.display(), "the new binary could not be executed: executing this one again with the same state");
    let again = exec(Path::new("/proc/self/exe"), &args);
    drop(kept);
    again
}

/// Writes the document; the descriptors the exec keeps (the document's
/// last) and the document's number.
async fn carry(
    table: &Arc<ProcessTable>,
    listener: OwnedFd,
    unix_socket: Option<PathBuf>,
    data_dir: Option<&DataDir>,
    lifetime: &Lifetime,
    config: &ServerOptions,
) -> io::Result<(Vec<OwnedFd>, RawFd)> {
    let mut kept: Vec<OwnedFd> = Vec::new();
    let mut keep = |fd: OwnedFd| {
        let number = fd.as_raw_fd();
        kept.push(fd);
        number
    };
    let mut writer = DocumentWriter::new(FORMAT)?;
    let started = std::time::Instant::now();
    let carried = table
        .carry(&mut keep, &mut |parts| writer.put(parts))
        .await?;
    tracing::info!(
        processes = carried.processes.len(),
        ms = started.elapsed().as_millis() as u64,
        "handover: the table is carried"
    );
    let (containment, guard_pipe) = crate::contain::carry::carry()?;
    let data_dir = match data_dir {
        Some(dir) => {
            let (carried, lock) = dir.carry()?;
            Some((carried, keep(lock)))
        }
        None => None,
    };
    let runtime_entry = match &lifetime.runtime_entry {
        Some((path, fd)) => Some((path.clone(), keep(fd.as_fd().try_clone_to_owned()?))),
        None => None,
    };
    let mut state = State {
        format: FORMAT,
        from_version: env!("CARGO_PKG_VERSION").to_string(),
        listener: keep(listener),
        unix_socket,
        containment,
        guard_pipe: guard_pipe.map(&mut keep),
        data_dir,
        lifetime: CarriedLifetime {
            runtime_entry,
            generated_token: lifetime.generated_token.clone(),
        },
        operator_token: config.token.get().map(|t| t.to_string()),
        signing_key: config.signing_key.to_bytes(),
        fingerprint_key: crate::process::input_once::fingerprint_key(),
        table: carried,
        fds: Vec::new(),
    };
    state.fds = kept.iter().map(AsRawFd::as_raw_fd).collect();
    let document = writer.finish(&state)?;
    let number = document.as_raw_fd();
    kept.push(document);
    for fd in &kept {
        // Kept across the exec; the new binary sets it again at once.
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )?;
    }
    Ok((kept, number))
}

/// Executes `binary` with `args` (argv[0] is tetherd), this process's
/// environment and every descriptor not close-on-exec. Returns only on
/// failure.
fn exec(binary: &Path, args: &[OsString]) -> io::Error {
    let c = |bytes: &[u8]| CString::new(bytes).map_err(io::Error::other);
    let path = match c(binary.as_os_str().as_bytes()) {
        Ok(path) => path,
        Err(error) => return error,
    };
    let mut argv = vec![c"tetherd".to_owned()];
    for arg in args {
        match c(arg.as_bytes()) {
            Ok(arg) => argv.push(arg),
            Err(error) => return error,
        }
    }
    match nix::unistd::execv(&path, &argv) {
        Err(errno) => errno.into(),
        Ok(never) => match never {},
    }
}
