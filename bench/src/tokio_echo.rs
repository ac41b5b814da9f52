//! A floor for section 12: the least a terminal server built on tokio and
//! tungstenite (tetherd's runtime and WebSocket library) pays per
//! keystroke. It relays between one WebSocket and a program on a PTY, in
//! ttyd's message format (an opening message, then `'0'` + bytes both
//! ways), so the section's ttyd client drives it the same way.
//!
//! It is a process of its own, as a server is: this binary started with
//! [`CHILD_ENV`] (an in-process floor shares the harness's address space
//! with its client, and a switch between the two threads is cheaper than
//! between two processes: on the machine of docs/BENCHMARKS.md that made it
//! several microseconds kinder than any server could be). Its main thread
//! runs a current-thread runtime (tetherd's echo runs on one worker too:
//! the task that reads the socket, writes the keystroke and waits again all
//! on one thread) with two tasks: the socket's reader writes each input
//! message to the PTY master; the PTY's reader sends each read as one
//! message. Nothing else: no retention, no protocol of its own, no credit,
//! no screen, no timers. What tetherd adds over this is its own code; what
//! this adds over the bare relay thread of `floors.rs` is the runtime's,
//! the library's, and a process's.
//!
//! A PTY master that refuses a write (its input queue full) is written
//! again after the task yields: that never happens for one key at a time,
//! and registering the master for writability would cost every echo two
//! more wake-ups (see tetherd's `server/src/pty.rs`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use crate::floors::{cooked_cat_pty, raw_cat_pty};
use crate::tetherd::{dies_with_harness, spent, Spent};

/// Set (to `raw` or `cooked`) in the environment of `tether-bench`, it
/// makes the process the floor's server ([`serve_child`]) instead of the
/// harness.
pub const CHILD_ENV: &str = "TETHER_BENCH_TOKIO_FLOOR";

/// The floor's server process, and where to connect.
pub struct TokioEcho {
    url: String,
    child: Child,
}

impl TokioEcho {
    /// `cat` on a raw PTY: every byte back is `cat`'s.
    pub fn raw() -> Result<TokioEcho> {
        TokioEcho::start("raw")
    }

    /// `cat > /dev/null` on a PTY in cooked mode: the line discipline
    /// echoes.
    pub fn cooked() -> Result<TokioEcho> {
        TokioEcho::start("cooked")
    }

    fn start(kind: &str) -> Result<TokioEcho> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .env(CHILD_ENV, kind)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        dies_with_harness(&mut command);
        let mut child = command.spawn().context("start the tokio floor")?;
        // Its first line is its port (it is listening by then); a floor
        // that failed first ends its output instead.
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the tokio floor did not start (it said {line:?})");
        };
        eprintln!("   tokio floor pid {} on port {port}", child.id());
        Ok(TokioEcho {
            url: format!("ws://127.0.0.1:{port}/ws"),
            child,
        })
    }

    /// Where its WebSocket is.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What its process has spent so far, read as a server's is.
    pub fn spent(&self) -> Spent {
        spent(self.child.id())
    }
}

impl Drop for TokioEcho {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor's process: starts its program (`raw` or `cooked` cat), says
/// its port on stdout, serves one WebSocket until either side ends, and
/// takes its program with it.
pub fn serve_child(kind: &str) -> Result<()> {
    let (master, mut program) = match kind {
        "raw" => raw_cat_pty()?,
        "cooked" => cooked_cat_pty()?,
        other => bail!("{CHILD_ENV}={other:?}: raw or cooked"),
    };
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", listener.local_addr()?.port())?;
    stdout.flush()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        serve_one(listener, master).await
    });
    let _ = program.kill();
    let _ = program.wait();
    served
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
        // A client that goes without a Close has ended it all the same.
        while let Some(Ok(message)) = stream.next().await {
            if let Message::Binary(bytes) = message {
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
    // is); the output side runs in this one. Either side's end is the end.
    let mut keys = tokio::spawn(keys);
    let ended: Result<()> = tokio::select! {
        ended = output => ended,
        ended = &mut keys => ended.unwrap_or_else(|e| Err(e.into())),
    };
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
    use crate::ttyd_protocol::{open_tty, ttyd_round};

    /// The floor's server in this process (a unit test's binary is not
    /// `tether-bench`, so it cannot start itself as the floor's process;
    /// CI's quick run of section 12 does).
    async fn floor_here(
        pty: fn() -> Result<(OwnedFd, Child)>,
    ) -> (String, Child, tokio::task::JoinHandle<Result<()>>) {
        let (master, program) = pty().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        (url, program, tokio::spawn(serve_one(listener, master)))
    }

    #[tokio::test]
    async fn the_tokio_floor_echoes_each_key_in_ttyds_messages() {
        let (url, mut program, served) = floor_here(raw_cat_pty).await;
        let mut ws = open_tty(&url).await.unwrap();
        for key in b'a'..=b'z' {
            // Waits (bounded) for an output message holding the key.
            ttyd_round(&mut ws, key).await.unwrap();
        }
        let _ = program.kill();
        let _ = program.wait();
        // The program's end ends the floor (EIO from the master).
        served.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_tokio_floor_in_cooked_mode_is_echoed_by_the_line_discipline() {
        let (url, mut program, served) = floor_here(cooked_cat_pty).await;
        let mut ws = open_tty(&url).await.unwrap();
        ttyd_round(&mut ws, b'q').await.unwrap();
        drop(ws);
        // The socket's end ends the floor.
        served.await.unwrap().unwrap();
        let _ = program.kill();
        let _ = program.wait();
    }
}
