//! Relaying between the attachment and the local side: one copy loop for
//! every output stream (`run`, `attach`, `logs`), and the stdin forwarder
//! that watches for the detach keys.

use tether_client::{Chunk, Error, OutputReader, StdinWriter};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::detach::{DetachWatcher, Typed};

/// Copies one stream to a local output until its end, or until offset
/// `until` (`u64::MAX`: to the end); gaps are reported on stderr. A local
/// output that closes (`| head`) stops the printing, not the draining, so
/// the process is never held back by it.
pub async fn copy_output(
    mut reader: OutputReader,
    mut out: impl AsyncWrite + Unpin,
    until: u64,
) -> Result<(), Error> {
    let mut writable = true;
    while reader.offset() < until {
        let Some(chunk) = reader.chunk().await else {
            break;
        };
        match chunk? {
            Chunk::Data { offset, data } => {
                let keep = usize::try_from(until.saturating_sub(offset))
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                if writable
                    && (out.write_all(&data[..keep]).await.is_err() || out.flush().await.is_err())
                {
                    writable = false;
                }
            }
            Chunk::Dropped { offset, length } => {
                // \r\n: the terminal may be in raw mode.
                let message = format!(
                    "\r\n[tether: {length} bytes of {} lost at offset {offset}: the server dropped them before they were read]\r\n",
                    reader.stream().as_str()
                );
                let _ = tokio::io::stderr().write_all(message.as_bytes()).await;
            }
        }
    }
    Ok(())
}

/// Forwards local input to the process's stdin until end of file (then
/// closes the remote stdin) or until the detach keys are typed (then tells
/// `detached`, and leaves the remote stdin open).
pub async fn forward_input(
    mut local: impl AsyncRead + Unpin,
    mut stdin: StdinWriter,
    mut watcher: DetachWatcher,
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
        if !forward.is_empty() && stdin.write(&forward).await.is_err() {
            return;
        }
        if detach {
            let _ = detached.send(());
            return;
        }
    }
    let _ = stdin.close().await;
}
