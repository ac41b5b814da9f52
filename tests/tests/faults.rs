//! Faults survived and bad input refused (issue 7): clients that vanish,
//! leaks after thousands of processes, floods of output, resizes and stdin,
//! and request bodies with numbers and bytes that make no sense.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ExitReason};
use tether_tests::{
    fd_count, fd_links, rss_bytes, settle, thread_count, zombie_children, Received, TestServer,
    WAIT,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::MaybeTlsStream;

/// The raw upgrade request a minimal client sends.
fn upgrade_request(server: &TestServer, id: &str) -> String {
    let addr = server.base.trim_start_matches("http://");
    format!(
        "GET /v1/processes/{id}/attach HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Waits (bounded) until the server's fd count is back to `expected`.
async fn fds_settle_to(server: &TestServer, expected: usize) {
    let pid = server.pid();
    let fds = settle(|| fd_count(pid), |n| *n <= expected).await;
    assert!(
        fds <= expected,
        "server holds {fds} fds, expected {expected}: {:?}",
        fd_links(pid)
    );
}

/// (opcode, payload) of each unmasked server frame in `bytes`.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let opcode = bytes[0] & 0x0f;
        let (len, header) = match bytes[1] & 0x7f {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        if bytes.len() < header + len {
            break;
        }
        frames.push((opcode, bytes[header..header + len].to_vec()));
        bytes = &bytes[header + len..];
    }
    frames
}

/// POST /v1/processes expecting 400 invalid_request; returns the message.
async fn rejected(server: &TestServer, body: Value) -> String {
    let (status, answer) = server.post("/v1/processes", body.clone()).await;
    assert_eq!(status, 400, "{body} gave {answer}");
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    answer["error"]["message"].as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------
// Clients that vanish
// ---------------------------------------------------------------------

#[tokio::test]
async fn a_client_that_resets_its_connection_mid_stream_is_cleaned_up_and_the_process_carries_on() {
    let server = TestServer::start();
    let process = server
        .sh(
            "yes tether | head -c 20000000; read x; echo \"still here $x\"",
            json!({"stdin": true}),
        )
        .await;
    let before = fd_count(server.pid());
    let mut attachment = server.attach(&process.id, "").await;
    let mut received = Received::default();
    attachment
        .until_stdout_contains("tether\n", &mut received)
        .await;
    // Mid-stream: RST instead of a close handshake.
    if let MaybeTlsStream::Plain(tcp) = attachment.ws.get_ref() {
        tcp.set_zero_linger().unwrap();
    }
    drop(attachment);
    fds_settle_to(&server, before).await;
    server.say(&process.id, "yes\n").await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.exit_code, Some(0));
    assert_eq!(
        exit.stdout_bytes,
        20_000_000 + "still here yes\n".len() as u64
    );
}

#[tokio::test]
async fn a_client_killed_with_sigkill_is_cleaned_up_and_the_process_carries_on() {
    let server = TestServer::start();
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let before = fd_count(server.pid());
    // A client in a process of its own (bash's /dev/tcp): it upgrades,
    // reports the status line, then idles with the socket open.
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; printf '%s' \"$REQUEST\" >&3; \
         IFS= read -r status <&3; echo \"$status\"; exec sleep 60"
    );
    let mut client = tokio::process::Command::new("bash")
        .args(["-c", &script])
        .env("REQUEST", upgrade_request(&server, &process.id))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut status = String::new();
    let mut lines = BufReader::new(client.stdout.take().unwrap());
    tokio::time::timeout(WAIT, lines.read_line(&mut status))
        .await
        .expect("the client never upgraded")
        .unwrap();
    assert!(status.starts_with("HTTP/1.1 101"), "{status:?}");
    assert!(fd_count(server.pid()) > before);
    client.start_kill().unwrap(); // SIGKILL
    client.wait().await.unwrap();
    fds_settle_to(&server, before).await;
    server.say(&process.id, "on\n").await;
    let mut attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.until_exit().await.stdout, b"got on\n");
}

#[tokio::test]
async fn a_half_open_connection_is_caught_by_keepalive_and_its_process_keeps_running() {
    let server =
        TestServer::start_with(&["--ping-interval-ms", "200", "--idle-timeout-ms", "1000"]);
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let before = fd_count(server.pid());
    // Completes the upgrade, then never answers a ping (reading raw bytes
    // sends nothing back).
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(upgrade_request(&server, &process.id).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut all))
        .await
        .expect("the server never closed the silent connection")
        .unwrap();
    let closed_after = started.elapsed();
    assert!(String::from_utf8_lossy(&all).starts_with("HTTP/1.1 101"));
    let frames = server_frames(&all[all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..]);
    let pings = frames.iter().filter(|(op, _)| *op == 0x9).count();
    assert!(pings >= 2, "only {pings} pings: {frames:?}");
    let close = frames
        .iter()
        .find(|(op, _)| *op == 0x8)
        .expect("no close frame");
    assert_eq!(close.1[..2], 1001u16.to_be_bytes(), "close code");
    assert!(
        closed_after >= Duration::from_millis(1000),
        "closed too early: {closed_after:?}"
    );
    fds_settle_to(&server, before).await;
    assert!(!server.status(&process.id).await.is_exited());
    server.say(&process.id, "through\n").await;
    let mut attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.until_exit().await.stdout, b"got through\n");
}

// ---------------------------------------------------------------------
// No leaks
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_short_processes_and_hundreds_of_attachments_leak_no_fds_threads_or_zombies() {
    let mut server = TestServer::start_with(&["--exited-ttl-ms", "1000"]);
    // No idle keep-alive connections: they would count as server fds.
    server.http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let server = std::sync::Arc::new(server);
    let pid = server.pid();
    let warm = server.sh("true", json!({})).await;
    server.attach(&warm.id, "").await.until_exit().await;
    let fds = fd_count(pid);
    let threads = thread_count(pid);

    let mut batches = Vec::new();
    for batch in 0..25 {
        let server = server.clone();
        batches.push(tokio::spawn(async move {
            for i in 0..40 {
                let process = server.sh(&format!("echo {batch}-{i}"), json!({})).await;
                match i % 4 {
                    // Attached to the end.
                    0 => {
                        let got = server.attach(&process.id, "").await.until_exit().await;
                        assert_eq!(got.stdout, format!("{batch}-{i}\n").as_bytes());
                    }
                    // Attached, then gone without a word.
                    1 => drop(server.attach(&process.id, "").await),
                    // Only waited for.
                    _ => assert_eq!(server.wait_exit(&process.id).await.exit_code, Some(0)),
                }
            }
        }));
    }
    for batch in batches {
        batch.await.unwrap();
    }
    fds_settle_to(&server, fds).await;
    let zombies = settle(|| zombie_children(pid), Vec::is_empty).await;
    assert!(zombies.is_empty(), "zombie children: {zombies:?}");
    let now = settle(|| thread_count(pid), |n| *n <= threads + 2).await;
    assert!(now <= threads + 2, "threads grew from {threads} to {now}");
}

#[tokio::test]
async fn endless_output_without_newlines_keeps_the_servers_memory_bounded() {
    let server = TestServer::start();
    let retention: u64 = 256 << 10;
    let process = server
        .sh(
            "yes | tr -d '\\n'",
            json!({"retain_bytes": retention, "timeout_ms": 3000}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let pid = server.pid();
    let mut peak = 0;
    let mut received = Received::default();
    // Read everything (with whatever is dropped) and sample the server's
    // memory as we go; the exit frame ends it.
    loop {
        peak = peak.max(rss_bytes(pid));
        let frame = attachment.frame().await.expect("closed before the exit");
        if attachment.record(frame, &mut received) {
            break;
        }
        if received.stdout.len() > 1 << 20 {
            assert!(!received.stdout.contains(&b'\n'));
            received.stdout.clear();
        }
    }
    let exit = received.exit.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Timeout));
    assert!(exit.stdout_bytes > 10 << 20, "{exit:?}");
    assert!(
        peak < retention * 2 + (64 << 20),
        "server RSS peaked at {peak} bytes"
    );
}

// ---------------------------------------------------------------------
// Storms of frames
// ---------------------------------------------------------------------

#[tokio::test]
async fn a_resize_storm_on_a_pty_is_absorbed_and_the_last_size_wins() {
    let server = TestServer::start();
    let process = server
        .spawn(json!({"command": "read x; stty size", "tty": true}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    for i in 0..1000u32 {
        attachment
            .send(ClientFrame::Resize {
                cols: 20 + i % 200,
                rows: 5 + i % 60,
            })
            .await;
    }
    attachment
        .send(ClientFrame::Resize {
            cols: 123,
            rows: 45,
        })
        .await;
    attachment
        .send(ClientFrame::Stdin {
            data: b"go\n".to_vec(),
        })
        .await;
    let received = attachment.until_exit().await;
    let text = String::from_utf8_lossy(&received.stdout);
    assert!(text.contains("45 123"), "{text:?}");
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn a_thousand_stdin_frames_a_second_to_cat_come_back_in_order() {
    let server = TestServer::start();
    let process = server.spawn(json!({"argv": ["cat"], "stdin": true})).await;
    let mut attachment = server.attach(&process.id, "").await;
    let mut expected = Vec::new();
    // The rate is the workload: one frame per millisecond for a second.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let started = Instant::now();
    for i in 0..1000 {
        tick.tick().await;
        let line = format!("line {i:04}\n").into_bytes();
        expected.extend_from_slice(&line);
        attachment.send(ClientFrame::Stdin { data: line }).await;
    }
    let took = started.elapsed();
    attachment.send(ClientFrame::StdinEof).await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, expected);
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
    assert!(took < Duration::from_secs(3), "sending took {took:?}");
}

// ---------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------

#[tokio::test]
async fn nul_bytes_in_env_argv_or_cwd_are_rejected_with_400() {
    let server = TestServer::start();
    let message = rejected(&server, json!({"argv": ["true"], "env": {"A": "x\u{0}y"}})).await;
    assert!(message.contains("NUL"), "{message}");
    rejected(&server, json!({"argv": ["true"], "env": {"A\u{0}B": "x"}})).await;
    rejected(&server, json!({"argv": ["echo", "a\u{0}b"]})).await;
    rejected(&server, json!({"command": "true", "cwd": "/tmp\u{0}"})).await;
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list, json!([]), "nothing was started");
}

#[tokio::test]
async fn huge_and_negative_numbers_are_rejected_with_400() {
    let server = TestServer::start();
    for body in [
        json!({"command": "true", "timeout_ms": 1e30}),
        json!({"command": "true", "timeout_ms": -1}),
        json!({"command": "true", "timeout_ms": 1.5}),
        json!({"command": "true", "timeout_ms": "100"}),
        json!({"command": "true", "retain_bytes": 1e30}),
        json!({"command": "true", "retain_bytes": -5}),
        json!({"command": "true", "tty": true, "cols": -1}),
        json!({"command": "true", "tty": true, "rows": 70000}),
        json!({"command": "true", "tty": true, "cols": 0}),
    ] {
        rejected(&server, body).await;
    }
    let process = server.sh("read x", json!({"stdin": true})).await;
    let id = &process.id;
    for query in [
        "timeout_ms=-5",
        "timeout_ms=1e30",
        "timeout_ms=99999999999999999999999",
    ] {
        let (status, body) = server
            .get(&format!("/v1/processes/{id}/wait?{query}"))
            .await;
        assert_eq!(status, 400, "wait?{query}: {body}");
    }
    let (status, body) = server
        .post(
            &format!("/v1/processes/{id}/resize"),
            json!({"cols": -1, "rows": 10}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    // The process was never disturbed.
    server.say(id, "x\n").await;
    assert_eq!(server.wait_exit(id).await.exit_code, Some(0));
}
