//! [`Front`]: a TCP forwarder in front of a server that records the request
//! line each connection opens with (so a test can tell which requests, and
//! how many connections, a client made) and can lose the answer to the
//! first connection (the request reaches the server, the client sees its
//! connection close unanswered) or pass on only the head of every answer. It runs on a runtime of its own, so that
//! synchronous tests can use it while they wait for a child process (it
//! cannot be started from inside an async test, which has a runtime).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head recorded; past it, the bytes are forwarded as
/// they are.
const MAX_HEAD: usize = 64 << 10;

/// A recording TCP forwarder to one server.
pub struct Front {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    lines: Arc<Mutex<Vec<String>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Front {
    /// Forwards a free loopback port to `target`.
    pub fn start(target: SocketAddr) -> Front {
        Front::start_with(target, Answer::Whole, Answer::Whole)
    }

    /// As [`Front::start`], but the first connection's request is
    /// forwarded and its answer lost: once the server has answered, both
    /// ends are closed without passing anything on.
    pub fn losing_first_answer(target: SocketAddr) -> Front {
        Front::start_with(target, Answer::Lost, Answer::Whole)
    }

    /// As [`Front::start`], but of every answer only the head (status line
    /// and headers) is passed on, then the connection is closed: what a
    /// client sees when a proxy sends the head and the body separately and
    /// the client stops reading at the head.
    pub fn head_only(target: SocketAddr) -> Front {
        Front::start_with(target, Answer::HeadOnly, Answer::HeadOnly)
    }

    fn start_with(target: SocketAddr, first: Answer, rest: Answer) -> Front {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let recorded = lines.clone();
        runtime.spawn(async move {
            let mut answer = first;
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(forward(inbound, target, recorded.clone(), answer));
                answer = rest;
            }
        });
        Front {
            base,
            lines,
            runtime: Some(runtime),
        }
    }

    /// The request line of each connection so far, in the order they were
    /// read, without the query (`GET /v1/run`, `POST /v1/processes`).
    pub fn request_lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What a [`Front`] passes on of one connection's answer.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Whole,
    Lost,
    HeadOnly,
}

/// Reads the request head, records its line, then relays both ways (or
/// drops the answer, or passes on only its head).
async fn forward(
    mut inbound: TcpStream,
    target: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    answer: Answer,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        match inbound.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut words = line.split(' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    lines.lock().unwrap().push(format!("{method} {path}"));
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    if outbound.write_all(&head).await.is_err() {
        return;
    }
    match answer {
        Answer::Whole => {
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        }
        Answer::Lost => {
            let (mut in_read, _in_write) = inbound.split();
            let (mut out_read, mut out_write) = outbound.split();
            let mut answer = [0u8; 1];
            tokio::select! {
                _ = tokio::io::copy(&mut in_read, &mut out_write) => {}
                _ = out_read.read(&mut answer) => {}
            }
            // Both ends dropped: the client's connection closes unanswered.
        }
        Answer::HeadOnly => {
            let mut answer = Vec::new();
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.len() < MAX_HEAD {
                match outbound.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
            }
            let end = answer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(answer.len(), |at| at + 4);
            let _ = inbound.write_all(&answer[..end]).await;
            let _ = inbound.flush().await;
            // Both ends dropped: the body never comes.
        }
    }
}
