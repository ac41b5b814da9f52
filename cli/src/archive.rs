//! The tar archives of `tether cp` (`copy.rs`), on this machine's side:
//! one written from a local path into chunks for the remote `tar`'s stdin,
//! and one read from the remote `tar`'s stdout and unpacked, entry by
//! entry, trusting nothing in it. Blocking code, run on a blocking thread.

use std::ffi::OsStr;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use crate::stdout::visible;
use crate::units::format_size;

/// Bytes per chunk between the archive's thread and the socket.
const CHUNK: usize = 64 << 10;
/// Chunks in flight between them: with the credit window, what bounds
/// the client's memory.
pub const CHUNKS_IN_FLIGHT: usize = 8;

/// A `Write` that hands the archive to the async side in chunks, blocking
/// when [`CHUNKS_IN_FLIGHT`] are waiting.
pub struct ChunkWriter {
    chunks: mpsc::Sender<Vec<u8>>,
    pending: Vec<u8>,
}

impl ChunkWriter {
    pub fn new(chunks: mpsc::Sender<Vec<u8>>) -> ChunkWriter {
        ChunkWriter {
            chunks,
            pending: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(CHUNK));
        self.chunks
            .blocking_send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the remote tar ended"))
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.pending.len());
        self.pending.extend_from_slice(&data[..n]);
        if self.pending.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// A tar archive of `source` whose top entry is named `top`: symbolic
/// links kept as links, modes and times in the headers.
pub fn write_archive(source: &Path, top: &str, out: ChunkWriter) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    if std::fs::symlink_metadata(source)?.is_dir() {
        builder.append_dir_all(top, source)?;
    } else {
        builder.append_path_with_name(source, top)?;
    }
    builder.into_inner()?.flush()
}

/// `tether cp - ID:DIR`: the archive on stdin, as it is.
pub fn copy_stdin(mut out: ChunkWriter) -> io::Result<()> {
    io::copy(&mut io::stdin().lock(), &mut out)?;
    out.flush()
}

/// Unpacks an archive whose entries lie below `base` into `dir`, the top
/// entry renamed `top`. Refuses any entry elsewhere, any `..`, and any
/// write through a symbolic link. Returns the bytes of file content.
pub fn unpack(reader: impl Read, base: &str, dir: &Path, top: &OsStr) -> io::Result<u64> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let mut directories: Vec<(PathBuf, u64)> = Vec::new();
    let mut bytes = 0u64;
    let mut progress = Progress::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let relative = renamed(&entry.path()?, base, top)?;
        no_link_on_the_way(dir, &relative)?;
        let target = dir.join(&relative);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(refused(&relative, "a symbolic link is in the way"));
            }
            entry.unpack(&target)?;
            directories.push((target, entry.header().mtime().unwrap_or(0)));
        } else if kind.is_hard_link() {
            let Some(linked) = entry.link_name()? else {
                return Err(refused(&relative, "a hard link without a target"));
            };
            let linked = renamed(&linked, base, top)?;
            no_link_on_the_way(dir, &linked)?;
            let _ = std::fs::remove_file(&target);
            std::fs::hard_link(dir.join(linked), &target)?;
        } else if kind.is_file() || kind.is_symlink() || kind.is_contiguous() {
            bytes += entry.size();
            entry.unpack(&target)?;
            progress.add(entry.size() as usize);
        } else {
            eprintln!(
                "tether: cp: skipped {} (a device, a FIFO or another special file)",
                visible(&relative.display().to_string())
            );
        }
    }
    // Last, and deepest first: writing a directory's entries changed its
    // time.
    for (path, mtime) in directories.into_iter().rev() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(mtime);
        if let Ok(file) = std::fs::File::open(&path) {
            let _ = file.set_modified(time);
        }
    }
    Ok(bytes)
}

/// An entry's path with its first component (`base`) replaced by `top`;
/// an error for anything not below `base` or not plain names.
fn renamed(path: &Path, base: &str, top: &OsStr) -> io::Result<PathBuf> {
    let mut components = path.components();
    let first = components.next();
    let below_base = match first {
        Some(Component::Normal(name)) => name == OsStr::new(base),
        Some(Component::CurDir) => base == ".",
        _ => false,
    };
    if !below_base {
        return Err(refused(path, &format!("not below {base:?}")));
    }
    let mut out = PathBuf::from(top);
    for component in components {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => return Err(refused(path, "a path that leaves the copy")),
        }
    }
    Ok(out)
}

/// Refuses a path whose directories below `dir` hold a symbolic link: an
/// archive that made one must not write through it.
fn no_link_on_the_way(dir: &Path, relative: &Path) -> io::Result<()> {
    let mut at = dir.to_path_buf();
    let mut components = relative.components().peekable();
    while let Some(component) = components.next() {
        if components.peek().is_none() {
            break;
        }
        at.push(component);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refused(
                relative,
                "it would be written through a symbolic link",
            ));
        }
    }
    Ok(())
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("refused the archive's entry {}: {why}", path.display()),
    )
}

/// Bytes copied, shown on a terminal (stderr) as they go and at the end.
pub struct Progress {
    shown: bool,
    pub bytes: u64,
    started: Instant,
    last: Instant,
}

impl Progress {
    pub fn new() -> Progress {
        let now = Instant::now();
        Progress {
            shown: io::stderr().is_terminal(),
            bytes: 0,
            started: now,
            last: now,
        }
    }

    pub fn add(&mut self, n: usize) {
        self.bytes += n as u64;
        if self.shown && self.last.elapsed() >= Duration::from_millis(100) {
            self.last = Instant::now();
            eprint!("\rcopying {}   ", format_size(self.bytes));
        }
    }

    pub fn done(&self, what: &str) {
        if self.shown {
            eprintln!(
                "\rcopied {} {} in {:.1} s",
                format_size(self.bytes),
                visible(what),
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive as a lying server could send it: entries made by hand.
    fn archive(entries: &[(&[u8], tar::EntryType, &str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, link, data) in entries {
            let mut header = tar::Header::new_old();
            header.as_old_mut().name[..name.len()].copy_from_slice(name);
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            if !link.is_empty() {
                header.set_link_name(link).unwrap();
            }
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tether-cp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_archive_cannot_write_through_a_link_it_made() {
        let dir = scratch("link");
        let outside = scratch("outside");
        let bytes = archive(&[
            (b"src/", tar::EntryType::Directory, "", b""),
            (
                b"src/escape",
                tar::EntryType::Symlink,
                outside.to_str().unwrap(),
                b"",
            ),
            (b"src/escape/planted", tar::EntryType::Regular, "", b"x"),
        ]);
        let error = unpack(&bytes[..], "src", &dir, OsStr::new("src")).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!outside.join("planted").exists());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn an_archive_cannot_climb_out_or_hard_link_out() {
        let dir = scratch("climb");
        for entries in [
            vec![(
                &b"src/../planted"[..],
                tar::EntryType::Regular,
                "",
                &b"x"[..],
            )],
            vec![(&b"/tmp/planted"[..], tar::EntryType::Regular, "", &b"x"[..])],
            vec![(
                &b"src/hard"[..],
                tar::EntryType::Link,
                "/etc/passwd",
                &b""[..],
            )],
            vec![(
                &b"src/hard"[..],
                tar::EntryType::Link,
                "src/../../x",
                &b""[..],
            )],
        ] {
            let bytes = archive(&entries);
            let error = unpack(&bytes[..], "src", &dir, OsStr::new("src")).unwrap_err();
            assert!(error.to_string().contains("refused"), "{error}");
        }
        assert!(!dir.join("planted").exists() && !dir.join("src/hard").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn entries_outside_the_name_asked_for_are_refused() {
        let top = OsStr::new("copy");
        assert_eq!(
            renamed(Path::new("src/a/b"), "src", top).ok(),
            Some(PathBuf::from("copy/a/b"))
        );
        assert!(renamed(Path::new("src/../etc"), "src", top).is_err());
        assert!(renamed(Path::new("/etc/passwd"), "src", top).is_err());
        assert!(renamed(Path::new("other/a"), "src", top).is_err());
        assert_eq!(
            renamed(Path::new("./a"), ".", top).ok(),
            Some(PathBuf::from("copy/a"))
        );
    }
}
