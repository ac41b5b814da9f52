//! A floor for section 12: the least a terminal server built on tokio and
//! tungstenite (tetherd's runtime and WebSocket library) pays per
//! keystroke. It relays between one WebSocket and a program on a PTY, in
//! ttyd's message format (an opening message, then `'0'` + bytes both
//! ways), so the section's ttyd client drives it the same way.
//!
//! One thread runs a current-thread runtime (tetherd's echo runs on one
//! worker too: the task that reads the socket, writes the keystroke and
//! waits again all on one thread) with two tasks: the socket's reader
//! writes each input message to the PTY master; the PTY's reader sends
//! each read as one message. Nothing else: no retention, no protocol of
//! its own, no credit, no screen, no timers. What tetherd adds over this
//! is its own code; what this adds over the bare relay thread of
//! `floors.rs` is the runtime's and the library's.
//!
//! A PTY master that refuses a write (its input queue full) is written
//! again after the task yields: that never happens for one key at a time,
//! and registering the master for writability would cost every echo two
//! more wake-ups (see tetherd's `server/src/pty.rs`).

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use futures_util::{SinkExt, StreamExt};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use crate::floors::{cooked_cat_pty, floor_thread, raw_cat_pty};
use crate::tetherd::{task_spent, Spent};

/// The server thread, its program, and where to connect.
pub struct TokioEcho {
    url: String,
    child: std::process::Child,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    /// The runtime thread's "PID/task/TID", for its CPU time.
    tid: String,
}

impl TokioEcho {
    /// `cat` on a raw PTY: every byte back is `cat`'s.
    pub fn raw() -> Result<TokioEcho> {
        let (master, child) = raw_cat_pty()?;
        TokioEcho::start(master, child)
    }

    /// `cat > /dev/null` on a PTY in cooked mode: the line discipline
    /// echoes.
    pub fn cooked() -> Result<TokioEcho> {
        let (master, child) = cooked_cat_pty()?;
        TokioEcho::start(master, child)
    }

    fn start(master: OwnedFd, child: std::process::Child) -> Result<TokioEcho> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("ws://{}/ws", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel();
        let (thread, tid) = floor_thread("tokio-floor", move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()?;
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                tokio::select! {
                    served = serve_one(listener, master) => served,
                    _ = stopped => Ok(()),
                }
            })
        })?;
        Ok(TokioEcho {
            url,
            child,
            stop: Some(stop),
            thread: Some(thread),
            tid,
        })
    }

    /// Where its WebSocket is.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What its runtime thread has spent so far, read as a server's
    /// threads are.
    pub fn spent(&self) -> Spent {
        task_spent(&Path::new("/proc").join(&self.tid))
    }
}

impl Drop for TokioEcho {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts one WebSocket (answering ttyd's `tty` subprotocol) and relays
/// until either side ends.
async fn serve_one(listener: tokio::net::TcpListener, master: OwnedFd) -> Result<()> {
    let (socket, _) = listener.accept().await?;
    socket.set_nodelay(true)?;
    let ws = tokio_tungstenite::accept_hdr_async(socket, with_tty).await?;
    let (mut sink, mut stream) = ws.split();
    // ttyd's opening message (token and size): nothing to do with it.
    stream.next().await.context("no opening message")??;
    let flags = OFlag::from_bits_truncate(fcntl(&master, FcntlArg::F_GETFL)?);
    fcntl(&master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    // SAFETY: an OwnedFd is open for as long as it is owned, and always
    // reports the same descriptor; the AsyncFd owns it until dropped.
    let master = Arc::new(unsafe { AsyncFd::register_with_interest(master, Interest::READABLE) }?);
    let input = master.clone();
    let keys = async move {
        while let Some(message) = stream.next().await {
            if let Message::Binary(bytes) = message? {
                if let Some((b'0', data)) = bytes.split_first() {
                    write_all(&input, data).await?;
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    };
    let output = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut ready = master.readable().await?;
            let read = ready.try_io(|fd| match nix::unistd::read(fd.get_ref(), &mut buf[1..]) {
                Ok(n) => Ok(n),
                // A PTY master says EIO once the program's side is closed.
                Err(nix::errno::Errno::EIO) => Ok(0),
                Err(e) => Err(std::io::Error::from(e)),
            });
            match read {
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(n)) => {
                    buf[0] = b'0';
                    sink.send(Message::Binary(buf[..=n].to_vec().into()))
                        .await?;
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_would_block) => {}
            }
        }
    };
    // The keys' task is spawned (its own task, as a server's socket reader
    // is); the output side runs in this one.
    let keys = tokio::spawn(keys);
    let ended: Result<()> = output.await;
    keys.abort();
    ended
}

/// Answers ttyd's `tty` subprotocol, which its client asks for. The
/// signature is tungstenite's, error type included.
#[allow(clippy::result_large_err)]
fn with_tty(_: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    response
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("tty"));
    Ok(response)
}

/// Writes all of `data` to the non-blocking master.
async fn write_all(master: &AsyncFd<OwnedFd>, mut data: &[u8]) -> Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(master.get_ref(), data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                tokio::task::yield_now().await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ttyd::{open_tty, ttyd_round};

    #[tokio::test]
    async fn the_tokio_floor_echoes_each_key_in_ttyds_messages_and_counts_its_own_thread() {
        let floor = TokioEcho::raw().unwrap();
        let before = floor.spent();
        let mut ws = open_tty(floor.url()).await.unwrap();
        for key in b'a'..=b'z' {
            // Waits (bounded) for an output message holding the key.
            ttyd_round(&mut ws, key).await.unwrap();
        }
        let after = floor.spent();
        assert!(after.cpu_s > before.cpu_s, "its thread did the work");
        assert!(after.switches > before.switches, "it slept between keys");
    }

    #[tokio::test]
    async fn the_tokio_floor_in_cooked_mode_is_echoed_by_the_line_discipline() {
        let floor = TokioEcho::cooked().unwrap();
        let mut ws = open_tty(floor.url()).await.unwrap();
        ttyd_round(&mut ws, b'q').await.unwrap();
    }
}
