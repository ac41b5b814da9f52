//! The time bounds of a connection before its upgrade: a request body must
//! arrive within the body timeout of its head ([`DeadlineBody`]), and a
//! response write may stall at most the send timeout (`GuardedIo`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::{ConnState, Registration, UPGRADED};
use crate::transport::Conn;

/// A request body that must arrive in full within the body timeout of its
/// head.
pub struct DeadlineBody {
    inner: Incoming,
    /// Told when the body has been read whole (see `ConnState::hold_end_of_stream`).
    state: Arc<ConnState>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    /// Armed on the first poll that has to wait, so a request without a
    /// body costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    pub(super) fn new(inner: Incoming, timeout: Duration, state: Arc<ConnState>) -> DeadlineBody {
        if inner.is_end_stream() {
            state.request_read_whole();
        }
        DeadlineBody {
            inner,
            state,
            deadline: tokio::time::Instant::now() + timeout,
            timeout,
            sleep: None,
        }
    }
}

/// The error a body that took longer than the body timeout ends with.
#[derive(Debug, thiserror::Error)]
#[error("request body did not arrive within {0:?} (--body-timeout-ms)")]
pub struct BodyTimedOut(pub Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if matches!(frame, None | Some(Ok(_))) && this.inner.is_end_stream() {
                    this.state.request_read_whole();
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// True when a body error (at any depth of its sources) is the body
/// timeout.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<BodyTimedOut>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// The connection's socket: holds its registration (so it counts until the
/// socket is closed, upgraded or not), and fails a write that has stalled
/// for the send timeout before the upgrade.
pub(super) struct GuardedIo {
    io: Conn,
    state: Arc<ConnState>,
    _registration: Registration,
    stall_after: Duration,
    stall: Option<Pin<Box<Sleep>>>,
}

impl GuardedIo {
    pub(super) fn new(
        io: Conn,
        state: Arc<ConnState>,
        registration: Registration,
        stall_after: Duration,
    ) -> GuardedIo {
        GuardedIo {
            io,
            state,
            _registration: registration,
            stall_after,
            stall: None,
        }
    }

    /// Called when a write could not proceed: true once it has waited the
    /// whole send timeout.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        if self.state.is(UPGRADED) {
            self.stall = None;
            return false;
        }
        let after = self.stall_after;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(after)));
        stall.as_mut().poll(cx).is_ready()
    }

    fn write_result<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no response bytes for the send timeout",
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.stall = None;
                ready
            }
        }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.io).poll_read(cx, buf);
        let end_of_stream = matches!(poll, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0;
        if end_of_stream {
            self.state.client_finished();
            // A client that shut down its writing side after a complete
            // request (legal HTTP/1.1) still reads: hyper, told of the end
            // now, would drop the request unanswered. So it hears of it
            // once the answer is written; a client that closed altogether
            // is noticed when a write of that answer fails.
            if self.state.hold_end_of_stream(cx.waker()) {
                return Poll::Pending;
            }
        }
        poll
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.write_result(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.write_result(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.write_result(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
