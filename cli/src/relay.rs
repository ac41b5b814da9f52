//! Relaying between the attachment and the local side: one copy loop for
//! every output stream (`run`, `attach`, `logs`), and the stdin forwarder
//! that watches for the detach keys.

use tether_client::{Chunk, Error, OutputReader, StdinWriter};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::detach::{DetachWatcher, Typed};
use crate::replies::{InputFilter, OutputFence};

/// How a copy of one stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    /// Its end (or `until`) was reached.
    Whole,
    /// The local output was closed (`| head -1`): nothing more is read or
    /// printed, as a local program stops when its reader goes.
    OutputClosed,
}

/// Copies one stream to a local output until its end, or until offset
/// `until` (`u64::MAX`: to the end); gaps are reported on stderr. A local
/// output that closes (`| head`) ends the copy at once ([`Copied::OutputClosed`]).
/// With a `fence` (a PTY attached from a terminal), the replayed part is
/// told from the live part and the local terminal's replies to it are
/// dropped (`replies.rs`).
pub async fn copy_output(
    mut reader: OutputReader,
    mut out: impl AsyncWrite + Unpin,
    until: u64,
    mut fence: Option<OutputFence>,
) -> Result<Copied, Error> {
    let mut writable = true;
    while reader.offset() < until {
        if !writable {
            if let Some(fence) = fence.as_mut() {
                fence.ended();
            }
            return Ok(Copied::OutputClosed);
        }
        if let Some(fence) = fence.as_mut() {
            fence.reached(reader.offset(), &mut out).await;
        }
        let Some(chunk) = reader.chunk().await else {
            break;
        };
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                if let Some(fence) = fence.as_mut() {
                    fence.ended();
                }
                return Err(e);
            }
        };
        match chunk {
            Chunk::Data { offset, data } => {
                let keep = usize::try_from(until.saturating_sub(offset))
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let data = &data[..keep];
                // The replayed head, then (once the fence is out) the live
                // rest of a chunk that straddles the end of the replay.
                let replayed = fence
                    .as_ref()
                    .map_or(0, |f| f.replayed_len(offset, data.len()));
                if let Some(fence) = fence.as_mut().filter(|_| replayed > 0) {
                    fence.replayed(&data[..replayed]);
                    // The last replayed bytes and the fence in one write.
                    let bytes = fence.with_fence(&data[..replayed], offset + replayed as u64);
                    write(&mut out, &bytes, &mut writable).await;
                    fence.sent();
                }
                write(&mut out, &data[replayed..], &mut writable).await;
            }
            Chunk::Dropped { offset, length } => {
                // \r\n: the terminal may be in raw mode.
                let message = format!(
                    "\r\n[tether: {length} bytes of {} lost at offset {offset}: the server dropped them before they were read]\r\n",
                    reader.stream().as_str()
                );
                // Flushed on the same handle: tokio writes stdio from a
                // blocking thread, and the CLI may exit right after.
                let mut err = tokio::io::stderr();
                let _ = err.write_all(message.as_bytes()).await;
                let _ = err.flush().await;
            }
            Chunk::Screen { offset, data, .. } => {
                if let Some(fence) = fence.as_mut() {
                    fence.screen();
                }
                // A full reset (RIS) first: the screen is for a fresh
                // terminal. Then the fence if the screen ends the replay.
                let screen = [&b"\x1bc"[..], &data].concat();
                let bytes = match fence.as_mut() {
                    Some(fence) => fence.with_fence(&screen, offset).into_owned(),
                    None => screen,
                };
                write(&mut out, &bytes, &mut writable).await;
                if let Some(fence) = fence.as_ref() {
                    fence.sent();
                }
            }
        }
    }
    if let Some(fence) = fence.as_mut() {
        fence.ended();
    }
    Ok(if writable {
        Copied::Whole
    } else {
        Copied::OutputClosed
    })
}

/// Writes and flushes unless the output has already failed.
async fn write(out: &mut (impl AsyncWrite + Unpin), bytes: &[u8], writable: &mut bool) {
    if *writable
        && !bytes.is_empty()
        && (out.write_all(bytes).await.is_err() || out.flush().await.is_err())
    {
        *writable = false;
    }
}

/// Forwards local input to the process's stdin until end of file (then
/// closes the remote stdin) or until the detach keys are typed (then tells
/// `detached`, and leaves the remote stdin open).
pub async fn forward_input(
    mut local: impl AsyncRead + Unpin,
    mut stdin: StdinWriter,
    mut watcher: DetachWatcher,
    mut replies: Option<InputFilter>,
    detached: oneshot::Sender<()>,
) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match local.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (forward, detach) = match watcher.feed(&buf[..n]) {
            Typed::Forward(bytes) => (bytes, false),
            Typed::Detach(bytes) => (bytes, true),
        };
        // The detach keys work even while replies are being dropped.
        let forward = match replies.as_mut() {
            Some(filter) => filter.filter(&forward),
            None => &forward[..],
        };
        if !forward.is_empty() && stdin.write(forward).await.is_err() {
            return;
        }
        if detach {
            let _ = detached.send(());
            return;
        }
    }
    let _ = stdin.close().await;
}

/// Watches a terminal that is not forwarded for the detach keys alone:
/// every other key is dropped (the process reads nothing from it). Tells
/// `detached` once they are typed; returns at end of file.
pub async fn watch_keys(
    mut local: impl AsyncRead + Unpin,
    mut watcher: DetachWatcher,
    detached: oneshot::Sender<()>,
) {
    let mut buf = [0u8; 256];
    loop {
        let n = match local.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Typed::Detach(_) = watcher.feed(&buf[..n]) {
            let _ = detached.send(());
            return;
        }
    }
}
