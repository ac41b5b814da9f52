//! For the `tether-client` library's tests: the standard bound on a
//! future, a lazy check of `seq`'s output, and a front that answers 503
//! before it forwards.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tether_client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{TestServer, WAIT};

/// Runs a future with the standard bound.
pub async fn bounded<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
}

/// The text `seq 1 N` prints, generated lazily, to check a stream
/// incrementally without holding it in memory.
pub struct SeqCheck {
    pub next_number: u64,
    pending: Vec<u8>,
    position: usize,
    pub checked: u64,
}

impl Default for SeqCheck {
    fn default() -> SeqCheck {
        SeqCheck::new()
    }
}

impl SeqCheck {
    pub fn new() -> SeqCheck {
        SeqCheck {
            next_number: 1,
            pending: Vec::new(),
            position: 0,
            checked: 0,
        }
    }

    /// Asserts `data` is the next part of `seq`'s output.
    pub fn check(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.position == self.pending.len() {
                self.pending.clear();
                self.position = 0;
                for _ in 0..1000 {
                    self.pending
                        .extend_from_slice(format!("{}\n", self.next_number).as_bytes());
                    self.next_number += 1;
                }
            }
            let n = data.len().min(self.pending.len() - self.position);
            assert!(
                data[..n] == self.pending[self.position..self.position + n],
                "stream differs from seq output at byte {}",
                self.checked
            );
            self.position += n;
            self.checked += n as u64;
            data = &data[n..];
        }
    }
}

pub fn client(server: &TestServer) -> Client {
    Client::new(&server.base).unwrap()
}

pub fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().unwrap()
}

pub const MIB: u64 = 1 << 20;

/// Reads an HTTP request head (and whatever follows it in the same reads).
pub async fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    head
}

/// A front that answers the first `failures` requests with 503 and then
/// forwards connections to `target`.
pub async fn flaky_front(target: SocketAddr, failures: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let head = read_head(&mut inbound).await;
                if count.fetch_add(1, Ordering::SeqCst) < failures {
                    let body = r#"{"error":{"code":"overloaded","message":"try again"}}"#;
                    let response = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = inbound.write_all(response.as_bytes()).await;
                    return;
                }
                let mut outbound = TcpStream::connect(target).await.unwrap();
                outbound.write_all(&head).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (base, seen)
}
