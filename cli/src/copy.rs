//! `tether cp`: files to and from the filesystem a process sees, as
//! `docker cp` and `kubectl cp` do.
//!
//! Built on what the server already offers, as `kubectl cp` is: a `tar`
//! run beside the process (a spawn's `beside`: that process's user, group
//! and working directory, so a relative path means what it means to the
//! process and the copy has no more rights than the process's user). The
//! archive rides on that `tar`'s stdin or stdout with the attachment's
//! credit flow control, so memory stays bounded whatever the size: a
//! blocking thread writes or reads the archive through a channel of a few
//! chunks. Spawning needs the operator's token; a token scoped to one
//! process cannot copy.
//!
//! What the server sends is not trusted: every entry of a downloaded
//! archive must lie below the name asked for, with no `..`, no absolute
//! path and no symbolic link on its way, so a lying server writes nothing
//! outside the destination.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use tether_client::tether_protocol::Overflow;
use tether_client::{AttachOptions, Attachment, Client, Error, SpawnRequest};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::archive::{copy_stdin, unpack, write_archive, ChunkWriter, Progress, CHUNKS_IN_FLIGHT};
use crate::resolve::resolve;
use crate::stdout::visible;

/// Exit status of a copy that failed (a missing file, a refused entry,
/// the remote `tar` failing), as `docker cp` exits.
pub const COPY_FAILED: i32 = 1;

/// The attachment's credit window: large enough to keep a fast link busy.
const WINDOW: u64 = 4 << 20;
/// The most of the remote `tar`'s stderr kept for the error message.
const MAX_TAR_ERRORS: usize = 16 << 10;

/// One side of a copy as written on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// A path on this machine.
    Local(PathBuf),
    /// `-`: a tar archive on stdin (as the source) or stdout (as the
    /// destination).
    Stdio,
    /// `ID:PATH`: a path as the process named by ID (an id, a unique
    /// prefix or a name) sees it.
    Remote { process: String, path: String },
}

impl Side {
    /// Reads one side: `-`, `ID:PATH`, else a local path. A local path
    /// with a colon in its first component is written `./a:b` (or
    /// absolute), as with `docker cp`.
    pub fn parse(text: &str) -> Side {
        if text == "-" {
            return Side::Stdio;
        }
        match text.split_once(':') {
            Some((process, path))
                if !process.is_empty() && !process.contains('/') && !text.starts_with('.') =>
            {
                Side::Remote {
                    process: process.to_string(),
                    path: path.to_string(),
                }
            }
            _ => Side::Local(PathBuf::from(text)),
        }
    }
}

/// A copy that could not be done, said in one line; the client's own
/// errors (unreachable, refused) pass through as they are.
enum Failure {
    Copy(String),
    Client(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Client(e)
    }
}

fn failed<T>(message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Copy(message.into()))
}

/// `tether cp SRC DEST`: the exit status, or the client's error.
pub async fn copy(client: &Client, quick: &Client, source: Side, dest: Side) -> Result<i32, Error> {
    let done = match (source, dest) {
        (Side::Remote { .. }, Side::Remote { .. }) => {
            return Err(Error::InvalidArgument(
                "copy between a process and this machine: one side is ID:PATH, the other a local path or -".into(),
            ))
        }
        (Side::Local(_) | Side::Stdio, Side::Local(_) | Side::Stdio) => {
            return Err(Error::InvalidArgument(
                "one side of a copy must be ID:PATH (a process id, prefix or name, a colon, a path)"
                    .into(),
            ))
        }
        (local, Side::Remote { process, path }) => {
            let source = match local {
                Side::Local(path) => Some(path),
                _ => None,
            };
            upload(client, quick, source, &process, &path).await
        }
        (Side::Remote { process, path }, local) => {
            let dest = match local {
                Side::Local(path) => Some(path),
                _ => None,
            };
            download(client, quick, &process, &path, dest).await
        }
    };
    match done {
        Ok(()) => Ok(0),
        Err(Failure::Client(e)) => Err(e),
        Err(Failure::Copy(message)) => {
            // The remote tar's lines, each shown (never obeyed).
            for line in message.lines() {
                eprintln!("tether: cp: {}", visible(line));
            }
            Ok(COPY_FAILED)
        }
    }
}

/// What a remote path names, asked of a shell beside the process.
#[derive(Debug, PartialEq, Eq)]
enum RemoteKind {
    Directory,
    Other,
    Missing,
}

async fn probe(client: &Client, beside: &str, path: &str) -> Result<RemoteKind, Failure> {
    let script = r#"if [ -d "$1" ]; then echo directory; elif [ -e "$1" ] || [ -L "$1" ]; then echo other; else echo missing; fi"#;
    let out = client
        .exec(beside_spec(
            beside,
            &["/bin/sh", "-c", script, "tether-cp", path],
        ))
        .await?;
    match (out.exit_code, out.stdout.as_slice()) {
        (0, b"directory\n") => Ok(RemoteKind::Directory),
        (0, b"other\n") => Ok(RemoteKind::Other),
        (0, b"missing\n") => Ok(RemoteKind::Missing),
        _ => failed(format!(
            "cannot look at {path:?} beside {beside}: {}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        )),
    }
}

fn beside_spec(beside: &str, argv: &[&str]) -> SpawnRequest {
    SpawnRequest {
        argv: Some(argv.iter().map(|a| a.to_string()).collect()),
        beside: Some(beside.to_string()),
        overflow: Overflow::Block,
        ..SpawnRequest::default()
    }
}

/// The last component of a remote path and the directory that holds it
/// (`.` for a bare name, `/` for one just below the root).
fn split_remote(path: &str) -> (String, String) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", base)) => ("/".into(), base.into()),
        Some((parent, base)) => (parent.into(), base.into()),
        None => (".".into(), trimmed.into()),
    }
}

async fn upload(
    client: &Client,
    quick: &Client,
    source: Option<PathBuf>,
    process: &str,
    path: &str,
) -> Result<(), Failure> {
    if path.is_empty() {
        return Err(
            Error::InvalidArgument("the destination path after ID: is empty".into()).into(),
        );
    }
    let id = resolve(quick, process).await?;
    // Where the archive is unpacked, and the name its top entry takes.
    let (dir, top) = match &source {
        // An archive from stdin is unpacked into PATH, a directory.
        None => (path.to_string(), None),
        Some(local) => {
            if let Err(e) = std::fs::symlink_metadata(local) {
                return failed(format!("{}: {e}", local.display()));
            }
            let Some(name) = local_name(local) else {
                return failed(format!("{}: name a file or a directory", local.display()));
            };
            match probe(quick, &id, path).await? {
                RemoteKind::Directory => (path.to_string(), Some(name)),
                _ if path.ends_with('/') => {
                    return failed(format!("{process}:{path}: no such directory"))
                }
                _ => {
                    let (parent, base) = split_remote(path);
                    (parent, Some(base))
                }
            }
        }
    };
    let spec = SpawnRequest {
        stdin: true,
        ..beside_spec(
            &id,
            &["tar", "-x", "-p", "--no-same-owner", "-f", "-", "-C", &dir],
        )
    };
    let attachment = client.run(spec, options()).await?;
    let Attachment {
        stdout,
        stderr,
        mut stdin,
        exit,
        ..
    } = attachment;
    drop(stdout);
    let errors = tokio::spawn(read_bounded(stderr));
    let (chunks, mut received) = mpsc::channel::<Vec<u8>>(CHUNKS_IN_FLIGHT);
    let built = tokio::task::spawn_blocking(move || {
        let out = ChunkWriter::new(chunks);
        match (source, top) {
            (Some(source), Some(top)) => write_archive(&source, &top, out),
            _ => copy_stdin(out),
        }
    });
    let mut progress = Progress::new();
    let feeding = async {
        while let Some(chunk) = received.recv().await {
            stdin.write(&chunk).await?;
            progress.add(chunk.len());
        }
        stdin.close().await
    };
    let mut early_exit = exit.clone();
    tokio::select! {
        fed = feeding => fed?,
        // The remote tar ended before the archive did (a bad directory):
        // its error says why.
        _ = early_exit.wait() => {}
    }
    let info = exit.await?;
    let errors = errors.await.unwrap_or_default();
    if info.exit_code != Some(0) {
        return failed(format!(
            "tar beside {process} failed (exit {}): {}",
            crate::exit::exit_code(&info),
            errors.trim_end()
        ));
    }
    match built.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return failed(format!("reading what to copy: {e}")),
        Err(e) => return failed(format!("reading what to copy: {e}")),
    }
    progress.done(&format!("to {process}:{path}"));
    Ok(())
}

/// The name a local source takes on the other side: its last component
/// (of the absolute path for `.`).
fn local_name(local: &Path) -> Option<String> {
    let name = match local.file_name() {
        Some(name) => name.to_os_string(),
        None => std::fs::canonicalize(local)
            .ok()?
            .file_name()?
            .to_os_string(),
    };
    name.into_string().ok()
}

fn options() -> AttachOptions {
    AttachOptions {
        window: WINDOW,
        ..AttachOptions::default()
    }
}

async fn download(
    client: &Client,
    quick: &Client,
    process: &str,
    path: &str,
    dest: Option<PathBuf>,
) -> Result<(), Failure> {
    let (parent, base) = split_remote(path);
    if base.is_empty() || base == ".." {
        return Err(Error::InvalidArgument(format!(
            "{process}:{path}: name a file or a directory below /"
        ))
        .into());
    }
    // Where it goes and under which name, decided before anything runs.
    let into = match &dest {
        None => None,
        Some(dest) if dest.is_dir() => Some((dest.clone(), OsStr::new(&base).to_os_string())),
        Some(dest) => {
            let Some(name) = dest.file_name() else {
                return failed(format!("{}: name a file or a directory", dest.display()));
            };
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            if !parent.is_dir() {
                return failed(format!("{}: no such directory", parent.display()));
            }
            Some((parent, name.to_os_string()))
        }
    };
    let id = resolve(quick, process).await?;
    let spec = beside_spec(&id, &["tar", "-c", "-f", "-", "-C", &parent, "--", &base]);
    let attachment = client.run(spec, options()).await?;
    let process_id = attachment.process().id.clone();
    let Attachment {
        mut stdout,
        stderr,
        stdin,
        exit,
        ..
    } = attachment;
    drop(stdin);
    let errors = tokio::spawn(read_bounded(stderr));
    let unpacked: io::Result<u64> = match into {
        None => to_stdout(&mut stdout).await,
        Some((dir, top)) => {
            let reader = tokio_util::io::SyncIoBridge::new(stdout);
            let base = base.clone();
            tokio::task::spawn_blocking(move || unpack(reader, &base, &dir, &top))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e.to_string())))
        }
    };
    if unpacked.is_err() {
        // Stop the remote tar, which would otherwise wait for a reader.
        let _ = quick.kill(&process_id).await;
    }
    let info = exit.await?;
    let errors = errors.await.unwrap_or_default();
    if info.exit_code != Some(0) && unpacked.is_ok() {
        return failed(format!(
            "tar beside {process} failed (exit {}): {}",
            crate::exit::exit_code(&info),
            errors.trim_end()
        ));
    }
    match unpacked {
        Ok(bytes) => {
            let mut progress = Progress::new();
            progress.bytes = bytes;
            let target = match &dest {
                Some(dest) => dest.display().to_string(),
                None => "stdout".into(),
            };
            progress.done(&format!("from {process}:{path} to {target}"));
            Ok(())
        }
        Err(e) => failed(format!("{process}:{path}: {e}")),
    }
}

/// The archive as it comes, to stdout (`tether cp ID:PATH -`).
async fn to_stdout(stdout: &mut tether_client::OutputReader) -> io::Result<u64> {
    let mut out = tokio::io::stdout();
    let copied = tokio::io::copy(stdout, &mut out).await?;
    tokio::io::AsyncWriteExt::flush(&mut out).await?;
    Ok(copied)
}

/// Up to [`MAX_TAR_ERRORS`] of what the remote tar says; the rest is read
/// and dropped (it must be read: the attachment credits what is read).
async fn read_bounded(mut reader: tether_client::OutputReader) -> String {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = MAX_TAR_ERRORS.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_read_as_docker_cp_reads_them() {
        assert_eq!(Side::parse("-"), Side::Stdio);
        assert_eq!(
            Side::parse("web:/tmp/a"),
            Side::Remote {
                process: "web".into(),
                path: "/tmp/a".into()
            }
        );
        assert_eq!(Side::parse("./a:b"), Side::Local("./a:b".into()));
        assert_eq!(Side::parse("/x/a:b"), Side::Local("/x/a:b".into()));
        assert_eq!(Side::parse("notes.txt"), Side::Local("notes.txt".into()));
    }

    #[test]
    fn a_remote_path_splits_into_its_directory_and_name() {
        assert_eq!(split_remote("a"), (".".into(), "a".into()));
        assert_eq!(split_remote("/a"), ("/".into(), "a".into()));
        assert_eq!(split_remote("x/y/"), ("x".into(), "y".into()));
        assert_eq!(split_remote("."), (".".into(), ".".into()));
    }
}
