//! [`OutputReader`]: the application's end of one output stream. Taking
//! bytes from the queue is what earns the server credit.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tether_protocol::StreamName;
use tokio::io::{AsyncRead, ReadBuf};

use super::state::{Chunk, Guard, Shared, StreamState};
use crate::error::Result;

/// Reads one output stream of an [`Attachment`](super::Attachment), as
/// bytes ([`AsyncRead`], which skips `dropped` gaps and counts them in
/// [`OutputReader::dropped`]) or as chunks ([`OutputReader::chunk`], or the
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
        let mut s = self.shared.stream(self.stream);
        if let Some(chunk) = s.queue.pop_front() {
            if let Chunk::Data { data, .. } = &chunk {
                self.consumed(&mut s, data.len() as u64);
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        if let Some(error) = s.failure.take() {
            return Poll::Ready(Some(Err(error)));
        }
        if s.at_end() {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Bytes of this stream buffered in the client, waiting to be read.
    /// Never more than the attachment's window.
    pub fn buffered(&self) -> u64 {
        self.shared.stream(self.stream).credit.queued()
    }

    /// The offset of the next byte this reader will return (or the stream's
    /// end once everything is read).
    pub fn offset(&self) -> u64 {
        let s = self.shared.stream(self.stream);
        match s.queue.front() {
            Some(Chunk::Data { offset, .. } | Chunk::Dropped { offset, .. }) => *offset,
            None => s.next,
        }
    }

    /// Bytes that `AsyncRead` skipped because the server had dropped them.
    pub fn dropped(&self) -> u64 {
        self.shared.stream(self.stream).dropped
    }

    /// Accounts for `n` bytes taken by the application and wakes the
    /// connection task when a credit grant is due.
    fn consumed(&self, s: &mut StreamState, n: u64) {
        s.credit.consumed(n);
        if s.credit.grant_wanted() {
            self.shared.credit.notify_one();
        }
    }
}

impl AsyncRead for OutputReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let mut s = this.shared.stream(this.stream);
        loop {
            match s.queue.pop_front() {
                Some(Chunk::Data { offset, mut data }) => {
                    let n = data.len().min(buf.remaining());
                    buf.put_slice(&data[..n]);
                    if n < data.len() {
                        let rest = data.split_off(n);
                        s.queue.push_front(Chunk::Data {
                            offset: offset + n as u64,
                            data: rest,
                        });
                    }
                    this.consumed(&mut s, n as u64);
                    return Poll::Ready(Ok(()));
                }
                Some(Chunk::Dropped { length, .. }) => {
                    s.dropped += length;
                    continue;
                }
                None => {}
            }
            if let Some(error) = s.failure.take() {
                return Poll::Ready(Err(std::io::Error::other(error)));
            }
            if s.at_end() {
                return Poll::Ready(Ok(()));
            }
            s.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
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
        let mut s = self.shared.stream(self.stream);
        s.credit.discard();
        s.queue.clear();
        self.shared.credit.notify_one();
    }
}
