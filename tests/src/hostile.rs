//! The Rust side of the shared hostile list (`tests/hostile/cases.json`,
//! its vocabulary in `tests/hostile/README.md`): a fake server of our own
//! that plays each `act` on loopback and counts the request heads it
//! reads. The calls run in a process of their own (`src/bin/hostile_call.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::{ProcessInfo, ServerFrame, StreamName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every act this suite can play.
pub const ACTS: &[&str] = &[
    "tcp_refused",
    "http_silent",
    "http_trickle",
    "http_endless_body",
    "http_endless_headers",
    "http_redirect_loop",
    "ws_silent",
    "ws_hello_then_close",
    "ws_ping_flood",
    "ws_huge_hello",
    "ws_oversized_message",
    "ws_endless_fragments",
    "ws_deep_nesting",
    "ws_text_frame",
    "ws_unsolicited_screen",
    "ws_dropped_past_2_64",
    "ws_offset_backwards",
    "ws_data_beyond_credit",
];

/// A fake server playing one act: its URL and the request heads it read.
pub struct Fake {
    pub base: String,
    pub requests: Arc<AtomicUsize>,
}

/// Starts the fake server for `act`; `process` fills every `hello`.
pub async fn serve(act: &str, process: ProcessInfo) -> Fake {
    let requests = Arc::new(AtomicUsize::new(0));
    if act == "tcp_refused" {
        return Fake {
            base: format!("http://127.0.0.1:{}", crate::free_port()),
            requests,
        };
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let act = act.to_string();
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (act, process, counted) = (act.clone(), process.clone(), counted.clone());
            tokio::spawn(async move {
                let _ = connection(socket, &act, process, counted).await;
            });
        }
    });
    Fake { base, requests }
}

/// One connection: each request head read is counted and answered as the
/// act says.
async fn connection(
    mut socket: TcpStream,
    act: &str,
    process: ProcessInfo,
    counted: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    loop {
        let Some(head) = read_head(&mut socket).await? else {
            return Ok(());
        };
        counted.fetch_add(1, Ordering::Relaxed);
        let upgrade = head.to_ascii_lowercase().contains("upgrade: websocket");
        if act.starts_with("ws_") {
            if !upgrade {
                // A `wait` or a `get` beside the attachment: held.
                return hold(socket).await;
            }
            return websocket(socket, &head, act, process).await;
        }
        match act {
            "http_silent" => return hold(socket).await,
            "http_trickle" => {
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000\r\n\r\n")
                    .await?;
                loop {
                    socket.write_all(b"x").await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            "http_endless_body" => {
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                    .await?;
                let mut chunk = format!("{:x}\r\n", 64 << 10).into_bytes();
                chunk.extend(std::iter::repeat_n(b'[', 64 << 10));
                chunk.extend_from_slice(b"\r\n");
                loop {
                    socket.write_all(&chunk).await?;
                }
            }
            "http_endless_headers" => {
                socket.write_all(b"HTTP/1.1 200 OK\r\n").await?;
                let line = format!("x-filler: {}\r\n", "a".repeat(88));
                loop {
                    socket.write_all(line.as_bytes()).await?;
                }
            }
            "http_redirect_loop" => {
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let reply = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: {path}\r\ncontent-length: 0\r\n\r\n"
                );
                socket.write_all(reply.as_bytes()).await?;
            }
            other => panic!("no act {other}"),
        }
    }
}

/// Reads one request head, or `None` at the end of the connection.
async fn read_head(socket: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
        if head.len() > 64 << 10 {
            return Ok(None);
        }
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// Holds the connection, unanswered, until the client closes it.
async fn hold(mut socket: TcpStream) -> std::io::Result<()> {
    let mut sink = [0u8; 4096];
    while socket.read(&mut sink).await? > 0 {}
    Ok(())
}

/// A server frame (unmasked) of `opcode`, with FIN when `fin`.
fn ws_frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![if fin { 0x80 | opcode } else { opcode }];
    match payload.len() {
        n if n < 126 => frame.push(n as u8),
        n if n <= usize::from(u16::MAX) => {
            frame.push(126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(payload);
    frame
}

fn binary(payload: &[u8]) -> Vec<u8> {
    ws_frame(0x2, true, payload)
}

/// A `hello` of `process` whose argv is `count` empty strings, built
/// without holding them: the encoded empty argv spliced.
fn hello_with_argv(mut process: ProcessInfo, count: u32) -> Vec<u8> {
    process.argv = Vec::new();
    let bytes = ServerFrame::Hello {
        version: tether_protocol::PROTOCOL_VERSION,
        process,
        stdout: 0,
        stderr: 0,
    }
    .encode();
    let key = b"\xa4argv\x90";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("an argv in the hello")
        + key.len()
        - 1;
    let mut out = bytes[..at].to_vec();
    out.push(0xdd);
    out.extend_from_slice(&count.to_be_bytes());
    out.extend(std::iter::repeat_n(0xa0, count as usize));
    out.extend_from_slice(&bytes[at + 1..]);
    out
}

fn exited(mut process: ProcessInfo, stdout_bytes: u64) -> Vec<u8> {
    process.status = tether_protocol::ProcessStatus::Exited;
    process.exit_code = Some(0);
    process.reason = Some(tether_protocol::ExitReason::Exit);
    process.stdout_bytes = stdout_bytes;
    ServerFrame::Exit { process }.encode()
}

/// The WebSocket acts: the upgrade, a valid hello (and `input_ack` when
/// the URL asks for numbered input), then what the act says.
async fn websocket(
    mut socket: TcpStream,
    head: &str,
    act: &str,
    process: ProcessInfo,
) -> std::io::Result<()> {
    let key = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    socket
        .write_all(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-accept: {accept}\r\nsec-websocket-protocol: tether.v1\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    if act == "ws_silent" {
        return hold(socket).await;
    }
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let hello = match act {
        "ws_huge_hello" => hello_with_argv(process.clone(), 1_500_000),
        "ws_oversized_message" => hello_with_argv(process.clone(), 60_000_000),
        _ => ServerFrame::Hello {
            version: tether_protocol::PROTOCOL_VERSION,
            process: process.clone(),
            stdout: 0,
            stderr: 0,
        }
        .encode(),
    };
    socket.write_all(&binary(&hello)).await?;
    if path.contains("input=") {
        let ack = ServerFrame::InputAck { applied: 0 }.encode();
        socket.write_all(&binary(&ack)).await?;
    }
    let window: u64 = path
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("window=")?.parse().ok())
        .unwrap_or(256 << 10);
    let stdout = |offset: u64, data: &[u8]| {
        binary(&ServerFrame::encode_data(StreamName::Stdout, offset, data))
    };
    let (reader, mut writer) = socket.into_split();
    // The client's messages are read (and dropped) beside, except by the
    // ping flood, which never reads.
    if act != "ws_ping_flood" {
        tokio::spawn(async move {
            let mut reader = reader;
            let mut sink = [0u8; 4096];
            while matches!(reader.read(&mut sink).await, Ok(n) if n > 0) {}
        });
    }
    match act {
        "ws_hello_then_close" => {
            writer
                .write_all(&ws_frame(0x8, true, &1000u16.to_be_bytes()))
                .await?;
            return Ok(());
        }
        "ws_ping_flood" => {
            let ping = ws_frame(0x9, true, &[7u8; 125]);
            let pings: Vec<u8> = ping
                .iter()
                .copied()
                .cycle()
                .take(ping.len() * 256)
                .collect();
            loop {
                writer.write_all(&pings).await?;
            }
        }
        "ws_endless_fragments" => {
            let chunk = vec![0u8; 64 << 10];
            writer.write_all(&ws_frame(0x2, false, &chunk)).await?;
            let more = ws_frame(0x0, false, &chunk);
            loop {
                writer.write_all(&more).await?;
            }
        }
        "ws_deep_nesting" => {
            let mut nested = vec![0x91u8; 2_000_000];
            nested.push(0xc0);
            writer.write_all(&binary(&nested)).await?;
        }
        "ws_text_frame" => {
            writer
                .write_all(&ws_frame(0x1, true, b"{\"type\":\"stdout\"}"))
                .await?;
        }
        "ws_unsolicited_screen" => {
            writer.write_all(&stdout(0, b"abc")).await?;
            let screen = ServerFrame::Screen {
                offset: 3,
                cols: 80,
                rows: 24,
                data: b"\x1b[Hfake".to_vec(),
            };
            writer.write_all(&binary(&screen.encode())).await?;
            writer.write_all(&binary(&exited(process, 3))).await?;
        }
        "ws_dropped_past_2_64" => {
            let dropped = ServerFrame::Dropped {
                stream: StreamName::Stdout,
                offset: 0,
                length: u64::MAX,
            };
            writer.write_all(&binary(&dropped.encode())).await?;
            writer.write_all(&stdout(u64::MAX, b"wrapped")).await?;
            writer.write_all(&binary(&exited(process, 7))).await?;
        }
        "ws_offset_backwards" => {
            writer.write_all(&stdout(0, b"abc")).await?;
            writer.write_all(&stdout(1, b"bc")).await?;
            writer.write_all(&binary(&exited(process, 3))).await?;
        }
        "ws_data_beyond_credit" => {
            let size = 2 * window + 1;
            writer
                .write_all(&stdout(0, &vec![b'x'; size as usize]))
                .await?;
            writer.write_all(&binary(&exited(process, size))).await?;
        }
        "ws_huge_hello" | "ws_oversized_message" => {}
        other => panic!("no act {other}"),
    }
    // Then nothing: the client must end by itself.
    std::future::pending::<()>().await;
    Ok(())
}
