//! The Rust client and the CLI against a server that lies (issue 48): a
//! fake server of our own on loopback sends what tetherd never would, and
//! the client ends with a clear error within its bounds, never holds what
//! the server pushes, never reports a loss as a success, and never lets
//! the server's text drive the terminal.

use std::process::{Command, Stdio};
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use tether_client::{AttachOptions, Client, RetryPolicy};
use tether_protocol::{ServerFrame, StreamName};
use tether_tests::cli::text;
use tether_tests::{tether_binary, TestServer, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::Message;

/// A server that answers every HTTP request with `head` and then `body`
/// repeated without end (or once, when `endless` is false).
async fn lying_http(head: &'static str, body: Vec<u8>, endless: bool) -> String {
    let body = std::sync::Arc::new(body);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    if socket.write_all(&body).await.is_err() || !endless {
                        return;
                    }
                }
            });
        }
    });
    base
}

/// `tether ARGS` against `base` under `/usr/bin/time -v`: its output and
/// its peak memory.
fn tether_measured(base: &str, args: &[&str]) -> (std::process::Output, u64) {
    let output = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(tether_binary())
        .args(args)
        .env("TETHER_SERVER", base)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("/usr/bin/time (Debian package `time`, installed by scripts/test.sh)");
    let report = text(&output.stderr);
    let peak = report
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes):")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no peak memory in {report}"))
        * 1024;
    (output, peak)
}

/// [`tether_measured`] on a blocking thread: the lying server runs on this
/// test's runtime meanwhile.
async fn measured_off_the_runtime(base: String, args: &[&str]) -> (std::process::Output, u64) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tether_measured(&base, &args)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn an_endless_answer_is_cut_at_the_bound_in_the_library_and_the_cli() {
    const MIB: u64 = 1 << 20;
    // A JSON array that never closes, 4 KiB a chunk, without end.
    let data = vec![b'['; 4096];
    let mut chunk = format!("{:x}\r\n", data.len()).into_bytes();
    chunk.extend_from_slice(&data);
    chunk.extend_from_slice(b"\r\n");
    let base = lying_http(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        chunk,
        true,
    )
    .await;
    // The library, with its default bound.
    let started = Instant::now();
    let error = Client::new(&base)
        .unwrap()
        .with_retry(RetryPolicy::none())
        .list()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("longer than"), "{error}");
    assert!(started.elapsed() < WAIT, "{:?}", started.elapsed());
    // The CLI: a clear error, and its memory at the bound, not the answer.
    let (out, peak) = measured_off_the_runtime(base, &["ps"]).await;
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("longer than"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        peak < 64 * MIB + 48 * MIB,
        "tether peaked at {} MiB",
        peak / MIB
    );
}

#[tokio::test]
async fn server_text_is_shown_to_the_terminal_never_obeyed() {
    let base = lying_http(
        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
        br#"{"error":{"code":"not_found","message":"\u001b]0;owned\u0007\u001b]52;c;eA==\u0007\u001b[2J"}}"#.to_vec(),
        false,
    )
    .await;
    let (out, _) =
        measured_off_the_runtime(base, &["status", "0123456789abcdef0123456789abcdef"]).await;
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    assert!(stderr.contains("\\u{1b}]0;owned"), "{stderr}");
}

/// A WebSocket server that answers an attach with `hello` (a real
/// process's, from a real tetherd) and then `frames`.
// tungstenite's callback returns its own (large) error response type.
#[allow(clippy::result_large_err)]
async fn lying_attach(hello: ServerFrame, frames: Vec<ServerFrame>) -> String {
    let messages = frames
        .iter()
        .map(|frame| Message::Binary(frame.encode().into()))
        .collect();
    lying_attach_messages(hello, messages).await
}

/// [`lying_attach`] with any WebSocket messages after the `hello`.
#[allow(clippy::result_large_err)]
async fn lying_attach_messages(hello: ServerFrame, frames: Vec<Message>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let Ok((socket, _)) = listener.accept().await else {
            return;
        };
        let agree = |_: &Request, mut response: Response| {
            response
                .headers_mut()
                .insert("sec-websocket-protocol", "tether.v1".parse().unwrap());
            Ok(response)
        };
        let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(socket, agree).await else {
            return;
        };
        let _ = ws.send(Message::Binary(hello.encode().into())).await;
        for frame in frames {
            let _ = ws.send(frame).await;
        }
        // Then nothing: the client must end by itself.
        while ws.next().await.is_some() {}
    });
    base
}

/// A `hello` as tetherd sends it, for a real running process (the server
/// is kept for the test's life).
async fn real_hello() -> (TestServer, ServerFrame) {
    let real = TestServer::start();
    let process = real
        .spawn(serde_json::json!({"argv": ["sleep", "30"]}))
        .await;
    let hello = ServerFrame::Hello {
        version: tether_protocol::PROTOCOL_VERSION,
        process,
        stdout: 0,
        stderr: 0,
    };
    (real, hello)
}

/// Attaches to `base` with no retries and reads stdout to its end: how
/// that ended (bounded by [`WAIT`]).
async fn read_to_the_end(base: &str) -> Result<(), tether_client::Error> {
    let client = Client::new(base).unwrap().with_retry(RetryPolicy::none());
    let options = AttachOptions {
        reconnect: RetryPolicy::none(),
        ..AttachOptions::default()
    };
    let attachment = client.attach("any", options).await.unwrap();
    let mut stdout = attachment.stdout;
    tokio::time::timeout(WAIT, async {
        loop {
            match stdout.chunk().await {
                Some(Ok(_)) => continue,
                Some(Err(error)) => return Err(error),
                None => return Ok(()),
            }
        }
    })
    .await
    .expect("the attachment never ended")
}

#[tokio::test]
async fn a_dropped_range_past_two_to_the_64_is_a_protocol_error_not_a_success() {
    let (_real, hello) = real_hello().await;
    let base = lying_attach(
        hello,
        vec![
            ServerFrame::InputAck { applied: 0 },
            ServerFrame::Dropped {
                stream: StreamName::Stdout,
                offset: 0,
                length: u64::MAX,
            },
            ServerFrame::Stdout {
                offset: u64::MAX,
                data: b"wrapped".to_vec(),
            },
        ],
    )
    .await;
    let outcome = read_to_the_end(&base).await;
    let error = outcome.expect_err("a range past 2^64 read as a success");
    assert!(error.to_string().contains("2^64"), "{error}");
}

/// A server that answers `GET /v1/processes/{id}` with `process` and an
/// attach with its `hello`, then floods pings without end; with
/// `read_pongs` false it never reads, so every pong the client queues
/// stays with the client.
#[allow(clippy::result_large_err)]
async fn ping_flood(process: tether_protocol::ProcessInfo, read_pongs: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let process = process.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let Ok(n) = socket.peek(&mut head).await else {
                    return;
                };
                let request = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
                if !request.contains("upgrade: websocket") {
                    let _ = socket.read(&mut head).await;
                    let body = serde_json::to_vec(&process).unwrap();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                    return;
                }
                let agree = |_: &Request, mut response: Response| {
                    response
                        .headers_mut()
                        .insert("sec-websocket-protocol", "tether.v1".parse().unwrap());
                    Ok(response)
                };
                let Ok(ws) = tokio_tungstenite::accept_hdr_async(socket, agree).await else {
                    return;
                };
                let (mut sink, mut stream) = ws.split();
                let hello = ServerFrame::Hello {
                    version: tether_protocol::PROTOCOL_VERSION,
                    process,
                    stdout: 0,
                    stderr: 0,
                };
                let _ = sink.send(Message::Binary(hello.encode().into())).await;
                if read_pongs {
                    tokio::spawn(async move { while stream.next().await.is_some() {} });
                } else {
                    // Held, never read.
                    tokio::spawn(async move {
                        let _stream = stream;
                        std::future::pending::<()>().await
                    });
                }
                let ping = Message::Ping(vec![7u8; 125].into());
                // Until the client is gone; yielding, so that the test's
                // own task runs on this one-thread runtime meanwhile.
                while sink.feed(ping.clone()).await.is_ok() && sink.flush().await.is_ok() {
                    tokio::task::yield_now().await;
                }
            });
        }
    });
    base
}

#[tokio::test]
async fn a_ping_flood_leaves_the_client_s_memory_bounded() {
    const MIB: u64 = 1 << 20;
    let real = TestServer::start();
    let process = real
        .spawn(serde_json::json!({"argv": ["sleep", "30"]}))
        .await;
    for read_pongs in [true, false] {
        let base = ping_flood(process.clone(), read_pongs).await;
        let id = process.id.clone();
        // Three seconds of the flood (unbounded, it grew by 40 MiB a
        // second), then the attachment is ended from
        // outside (it has no deadline: pings are traffic); its peak is
        // read from /proc before.
        let (out, peak) = tokio::task::spawn_blocking(move || {
            let mut child = Command::new(tether_binary())
                .args(["attach", &id])
                .env("TETHER_SERVER", &base)
                .env_remove("TETHER_TOKEN")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_secs(3));
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let peak = status
                .lines()
                .find_map(|l| {
                    l.strip_prefix("VmHWM:")?
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or_else(|| {
                    panic!(
                        "tether ended before the flood was measured: {}",
                        text(&out.stderr)
                    )
                })
                * 1024;
            (out, peak)
        })
        .await
        .unwrap();
        assert!(
            peak < 64 * MIB,
            "read_pongs {read_pongs}: tether peaked at {} MiB ({})",
            peak / MIB,
            text(&out.stderr)
        );
    }
}

/// The protocol is binary MessagePack: a text message is an error, not
/// something to skip, in the library as in the other clients.
#[tokio::test]
async fn a_text_message_is_a_protocol_error() {
    let (_real, hello) = real_hello().await;
    let base = lying_attach_messages(
        hello,
        vec![
            Message::Binary(ServerFrame::InputAck { applied: 0 }.encode().into()),
            Message::Text("{\"type\":\"stdout\"}".into()),
        ],
    )
    .await;
    let outcome = read_to_the_end(&base).await;
    let error = outcome.expect_err("a text message was skipped");
    assert!(error.to_string().contains("text message"), "{error}");
}
