//! The attachment's wire contract: the subprotocol, offsets and windows
//! checked before the upgrade, frames that make no sense (each refused with
//! its own code, harming nobody else), unknown ids and routes, and the close
//! handshake.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::{ClientFrame, ServerFrame};
use tether_tests::{refused_attach, TestServer, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::MaybeTlsStream;

/// A MessagePack map of string pairs, built by hand.
fn rmp_like_map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = vec![0x80 | pairs.len() as u8];
    for (k, v) in pairs {
        for s in [k, v] {
            out.push(0xa0 | s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// A MessagePack map of string keys to small values.
fn frame_map(pairs: &[(&str, Scalar)]) -> Vec<u8> {
    let mut out = vec![0x80 | pairs.len() as u8];
    for (key, value) in pairs {
        push_str(&mut out, key);
        match value {
            Scalar::Str(s) => push_str(&mut out, s),
            Scalar::Int(n) => {
                out.push(0xd3);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    }
    out
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(0xa0 | s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

enum Scalar {
    Str(String),
    Int(i64),
}

impl From<&str> for Scalar {
    fn from(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }
}

impl From<i64> for Scalar {
    fn from(n: i64) -> Scalar {
        Scalar::Int(n)
    }
}

/// Sends raw bytes as one binary WebSocket message.
trait SendBinary {
    async fn send_binary(&mut self, bytes: Vec<u8>);
}

impl SendBinary for tokio_tungstenite::WebSocketStream<MaybeTlsStream<TcpStream>> {
    async fn send_binary(&mut self, bytes: Vec<u8>) {
        use futures_util::SinkExt;
        self.send(tokio_tungstenite::tungstenite::Message::Binary(
            bytes.into(),
        ))
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn the_server_names_the_subprotocol_it_accepted() {
    let server = TestServer::start();
    let process = server.sh("true", json!({})).await;
    let attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.protocol.as_deref(), Some("tether.v1"));
    // A client that offers no subprotocol is accepted too.
    let (_, response) = tokio_tungstenite::connect_async(server.ws_url(&process.id, ""))
        .await
        .unwrap();
    assert!(response.headers().get("sec-websocket-protocol").is_none());
}

#[tokio::test]
async fn the_server_shuts_the_connection_itself_after_the_close_handshake() {
    let server = TestServer::start_with(&["--close-timeout-ms", "300"]);
    let process = server.sh("true", json!({})).await;
    server.wait_exit(&process.id).await;
    // A raw client that completes the upgrade, then never answers the
    // server's Close.
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /v1/processes/{}/attach HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        process.id
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut all)).await;
    assert!(read.is_ok(), "the server never closed the connection");
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The close frame (opcode 0x88) with code 1000 came before the end.
    let close = all
        .windows(4)
        .any(|w| w[0] == 0x88 && w[2..] == [0x03, 0xe8]);
    assert!(close, "no close frame seen");
}

#[tokio::test]
async fn bad_frames_get_clear_errors_and_harm_nobody_else() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let server = TestServer::start_with(&["--max-frame-bytes", "1024"]);
    let process = server
        .sh("read line; echo got:$line", json!({"stdin": true}))
        .await;
    let mut bystander = server.attach(&process.id, "").await;
    let cases: Vec<(Message, &str, u16)> = vec![
        (
            Message::Binary(vec![0xc1, 0xff, 0x00].into()),
            "malformed_frame",
            1007,
        ),
        (Message::Text("hello".into()), "text_message", 1003),
        (
            Message::Binary(rmp_like_map(&[("type", "launch_missiles")]).into()),
            "unknown_type",
            1008,
        ),
        (
            Message::Binary(
                ClientFrame::Stdin {
                    data: vec![0; 4096],
                }
                .encode()
                .into(),
            ),
            "frame_too_large",
            1009,
        ),
    ];
    for (message, code, close) in cases {
        let mut attachment = server.attach(&process.id, "").await;
        attachment.ws.send(message).await.unwrap();
        loop {
            match attachment.frame_or_close().await {
                Ok(ServerFrame::Error { code: got, .. }) => assert_eq!(got, code),
                Ok(_) => continue,
                Err(got) => {
                    assert_eq!(got, Some(close), "close code for {code}");
                    break;
                }
            }
        }
    }
    bystander
        .send(ClientFrame::Stdin {
            data: b"still here\n".to_vec(),
        })
        .await;
    let received = bystander.until_exit().await;
    assert_eq!(received.stdout, b"got:still here\n");
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn unknown_ids_and_unknown_routes_are_told_apart() {
    let server = TestServer::start();
    let (status, body) = server.get("/v1/processes/nope").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, body) = server.get("/v1/nothing/here").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("no_route"))
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("GET /v1/nothing/here"));
}

#[tokio::test]
async fn an_offset_beyond_the_end_is_refused_before_the_upgrade() {
    let server = TestServer::start();
    let process = server.sh("printf abc; printf de >&2", json!({})).await;
    server.wait_exit(&process.id).await;
    for query in [
        "stdout=4",
        "stderr=3",
        "stdout=18446744073709551615",
        "stdout=18446744073709551616",
        "stdout=-1",
    ] {
        let (status, body) = refused_attach(&server.ws_url(&process.id, query)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{query}: {body}");
    }
    // Exactly the end is fine: nothing more, then the exit.
    let mut attachment = server.attach(&process.id, "stdout=3&stderr=2").await;
    let received = attachment.until_exit().await;
    assert!(received.stdout.is_empty() && received.stderr.is_empty());
}

#[tokio::test]
async fn a_window_of_zero_or_nonsense_is_refused_before_the_upgrade() {
    let server = TestServer::start();
    let process = server.sh("echo hi", json!({})).await;
    for query in ["window=0", "window=-1", "window=lots"] {
        let (status, body) = refused_attach(&server.ws_url(&process.id, query)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
    }
    // The largest window is just "no limit".
    let mut attachment = server
        .attach(&process.id, "window=18446744073709551615")
        .await;
    assert_eq!(attachment.until_exit().await.stdout, b"hi\n");
}

#[tokio::test]
async fn negative_numbers_in_frames_close_only_that_attachment() {
    let server = TestServer::start();
    let process = server
        .spawn(json!({"command": "read x; echo \"got $x\"", "tty": true}))
        .await;
    let mut witness = server.attach(&process.id, "").await;
    for bad in [
        frame_map(&[
            ("type", "resize".into()),
            ("cols", (-1).into()),
            ("rows", 10.into()),
        ]),
        frame_map(&[
            ("type", "credit".into()),
            ("stream", "stdout".into()),
            ("bytes", (-5).into()),
        ]),
    ] {
        let mut attachment = server.attach(&process.id, "").await;
        attachment.ws.send_binary(bad).await;
        match attachment.frame_or_close().await {
            Ok(ServerFrame::Error { code, .. }) => assert_eq!(code, "invalid_frame"),
            other => panic!("expected an error frame, got {other:?}"),
        }
        assert_eq!(attachment.frame_or_close().await.err(), Some(Some(1008)));
    }
    witness
        .send(ClientFrame::Stdin {
            data: b"fine\n".to_vec(),
        })
        .await;
    let received = witness.until_exit().await;
    assert!(String::from_utf8_lossy(&received.stdout).contains("got fine"));
}

#[tokio::test]
async fn a_wrong_method_is_405_method_not_allowed() {
    let server = TestServer::start();
    let response = server
        .http
        .put(server.url("/v1/processes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PUT /v1/processes"),
        "{body}"
    );
}

/// A client that floods pings and never reads the pongs: the server
/// closes it (more than 64 pings a second: 1008 `ping_flood`) before a
/// pong per ping piles up in its write buffer, and its memory stays where
/// it was (unbounded, it grew by 147 MiB in 3 s).
#[tokio::test]
async fn a_ping_flood_that_never_reads_its_pongs_leaves_the_server_s_memory_bounded() {
    const MIB: u64 = 1 << 20;
    let server = TestServer::start();
    let process = server.sh("sleep 60", json!({})).await;
    let mut tcp = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(
        format!(
            "GET /v1/processes/{}/attach HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tether.v1\r\n\r\n",
            process.id,
            server.base.trim_start_matches("http://")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let before = tether_tests::rss_bytes(server.pid());
    let (_read, mut write) = tcp.into_split();
    let mut ping = vec![0x89, 0x80 | 125, 0x11, 0x22, 0x33, 0x44];
    ping.extend((0..125).map(|i| 7u8 ^ [0x11, 0x22, 0x33, 0x44][i % 4]));
    let pings: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 512)
        .collect();
    let flood = tokio::spawn(async move { while write.write_all(&pings).await.is_ok() {} });
    // Three seconds of it (unbounded, the server grew by tens of MiB a
    // second), the pongs never read.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = tether_tests::rss_bytes(server.pid());
    flood.abort();
    assert!(
        after < before + 48 * MIB,
        "the server grew from {} to {} MiB",
        before / MIB,
        after / MIB
    );
    let health = server
        .http
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}
