//! Lossless block mode and the contract details of issue 8: subprotocol
//! echo, credit accounting, timestamps, and the server closing TCP itself.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::{Overflow, ServerFrame, StreamName};
use tether_tests::{rss_bytes, Received, TestServer, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Lines of 16 bytes: "000000000000001\n", ... so order, gaps and repeats
/// are all visible.
fn check_sequence(data: &[u8], lines: u64) {
    assert_eq!(data.len() as u64, lines * 16, "byte count");
    for (i, line) in data.chunks(16).enumerate() {
        let expected = format!("{:015}\n", i + 1);
        assert_eq!(line, expected.as_bytes(), "line {}", i + 1);
    }
}

#[tokio::test]
async fn block_mode_delivers_every_byte_to_a_slow_reader_within_bounded_memory() {
    let server = TestServer::start();
    let lines = 200 * 65536; // 200 MiB
    let process = server
        .sh(
            &format!("seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 1 << 20}),
        )
        .await;
    assert_eq!(process.overflow, Overflow::Block);
    let mut attachment = server.attach(&process.id, "window=1048576").await;
    let mut received = Received::default();
    // Consume at about 100 MB/s, far below what seq produces unpaced.
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    let mut peak_rss = 0;
    loop {
        let frame = attachment.frame().await.expect("closed early");
        if let ServerFrame::Stdout { data, .. } = &frame {
            attachment
                .credit(StreamName::Stdout, data.len() as u64)
                .await;
            if received.stdout.len() % (1 << 20) < data.len() {
                pace.tick().await;
                peak_rss = peak_rss.max(rss_bytes(server.pid()));
            }
        }
        if attachment.record(frame, &mut received) {
            break;
        }
    }
    assert!(received.dropped.is_empty(), "{:?}", received.dropped);
    check_sequence(&received.stdout, lines);
    let exit = received.exit.unwrap();
    assert_eq!(exit.overflow, Overflow::Block);
    assert!(!exit.output_incomplete);
    assert!(peak_rss < 64 << 20, "server RSS reached {peak_rss} bytes");
}

#[tokio::test]
async fn block_mode_with_nobody_attached_pauses_the_program_and_loses_nothing() {
    let server = TestServer::start();
    let lines = 65536; // 1 MiB through a 64 KiB retention
    let process = server
        .sh(
            &format!("seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 65536}),
        )
        .await;
    // Still running after a while, with exactly the retention captured.
    let (_, info) = server
        .get(&format!("/v1/processes/{}/wait?timeout_ms=500", process.id))
        .await;
    assert_eq!(info["status"], "running");
    assert_eq!(info["stdout_bytes"], 65536);
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty());
    check_sequence(&received.stdout, lines);
}

#[tokio::test]
async fn block_mode_closes_a_stuck_attachment_after_the_send_timeout() {
    let server = TestServer::start_with(&["--send-timeout-ms", "1000"]);
    let lines = 4 * 65536; // 4 MiB, far more than socket buffers hold
    let process = server
        .sh(
            &format!("read go; seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 262144, "stdin": true}),
        )
        .await;
    let _stuck = server.attach(&process.id, "").await;
    let mut reader = server.attach(&process.id, "").await;
    reader
        .send(tether_protocol::ClientFrame::Stdin {
            data: b"go\n".to_vec(),
        })
        .await;
    let received = reader.until_exit().await;
    assert!(received.dropped.is_empty());
    check_sequence(&received.stdout, lines);
}

#[tokio::test]
async fn a_deadline_fires_on_time_in_a_blocked_program() {
    let server = TestServer::start();
    let started = Instant::now();
    let process = server
        .sh(
            "yes",
            json!({"overflow": "block", "retain_bytes": 65536, "timeout_ms": 500}),
        )
        .await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(tether_protocol::ExitReason::Timeout));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
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
async fn credit_counts_data_bytes_only_never_dropped_notices() {
    let server = TestServer::start();
    let process = server
        .sh("head -c 5000 /dev/zero", json!({"retain_bytes": 1000}))
        .await;
    server.wait_exit(&process.id).await;
    // A window of exactly the retained 1000 bytes: the 4000 dropped bytes
    // before them must not use it up.
    let mut attachment = server.attach(&process.id, "window=1000").await;
    let received = attachment.until_exit().await;
    assert_eq!(received.dropped, vec![(StreamName::Stdout, 0, 4000)]);
    assert_eq!(received.stdout.len(), 1000);
}

#[tokio::test]
async fn credit_beyond_u32_is_accepted() {
    let server = TestServer::start();
    let process = server.sh("head -c 100000 /dev/zero", json!({})).await;
    let mut attachment = server.attach(&process.id, "window=10").await;
    attachment.credit(StreamName::Stdout, u64::MAX).await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout.len(), 100000);
}

#[tokio::test]
async fn timestamps_have_milliseconds_and_finished_at_is_when_wait_returns() {
    let server = TestServer::start();
    let process = server.sh("sleep 0.2", json!({})).await;
    let waited = server.wait_exit(&process.id).await;
    let mut attachment = server.attach(&process.id, "").await;
    let exit = attachment.until_exit().await.exit.unwrap();
    let millis = |t: &str| {
        assert_eq!(t.len(), "2026-01-01T00:00:00.000Z".len(), "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{t}");
    };
    millis(&waited.started_at);
    let finished = waited.finished_at.clone().unwrap();
    millis(&finished);
    assert_eq!(exit.finished_at.as_deref(), Some(finished.as_str()));
    assert!(finished > waited.started_at);
    assert!(waited.duration_ms.unwrap() >= 200);
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
