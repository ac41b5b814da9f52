//! [`OutputReader`]: the application's end of one output stream. Taking
//! bytes from the queue is what earns the server credit.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tether_protocol::StreamName;
use tokio::io::{AsyncRead, ReadBuf};

use super::state::{Chunk, Guard, Shared};
use crate::error::Result;

/// Reads one output stream of an [`Attachment`](super::Attachment), as
/// bytes ([`AsyncRead`], which skips `dropped` gaps and counts them in
/// [`OutputReader::dropped`], and yields a screen's bytes in place of the
/// output before it) or as chunks ([`OutputReader::chunk`], or the
/// [`futures_util::Stream`] of them, which report them). End of file comes
/// once the process has exited and every byte of this stream has been
/// read, whatever happens to the other stream.
///
/// ```no_run
/// # async fn demo(mut reader: tether_client::OutputReader) -> Result<(), tether_client::Error> {
/// use tether_client::Chunk;
///
/// while let Some(chunk) = reader.chunk().await {
///     match chunk? {
///         Chunk::Data { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
///         Chunk::Dropped { length, .. } => eprintln!("[{length} bytes lost]"),
///         Chunk::Screen { data, .. } => print!("\x1bc{}", String::from_utf8_lossy(&data)),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct OutputReader {
    stream: StreamName,
    shared: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl OutputReader {
    pub(crate) fn new(stream: StreamName, shared: Arc<Shared>, guard: Arc<Guard>) -> Self {
        OutputReader {
            stream,
            shared,
            _guard: guard,
        }
    }

    /// Which stream this reads.
    pub fn stream(&self) -> StreamName {
        self.stream
    }

    /// The next chunk: data or a `dropped` notice. `None` at the end of the
    /// stream; an error once if the attachment failed (after every chunk
    /// received before the failure).
    pub async fn chunk(&mut self) -> Option<Result<Chunk>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// Poll form of [`OutputReader::chunk`].
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Chunk>>> {
        self.shared.poll_chunk(self.stream, cx)
    }

    /// Bytes of this stream buffered in the client, waiting to be read.
    /// Never more than the attachment's window.
    pub fn buffered(&self) -> u64 {
        self.shared.buffered(self.stream)
    }

    /// The offset of the next byte this reader will return (or the stream's
    /// end once everything is read).
    pub fn offset(&self) -> u64 {
        self.shared.read_offset(self.stream)
    }

    /// Bytes that `AsyncRead` skipped because the server had dropped them.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped(self.stream)
    }
}

impl AsyncRead for OutputReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.shared.poll_read(self.stream, cx, buf)
    }
}

/// The chunk stream: the same items as [`OutputReader::chunk`].
impl futures_util::Stream for OutputReader {
    type Item = Result<Chunk>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Chunk>>> {
        self.get_mut().poll_chunk(cx)
    }
}

impl Drop for OutputReader {
    fn drop(&mut self) {
        self.shared.discard(self.stream);
    }
}
