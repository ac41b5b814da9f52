//! Faults survived and bad input refused (issue 7): clients that vanish,
//! children that misbehave, leaks after thousands of processes, and
//! requests with numbers, offsets and bytes that make no sense.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ExitReason, ServerFrame, StreamName};
use tether_tests::{
    fd_count, fd_links, refused_attach, rss_bytes, session_members, settle, thread_count,
    wait_session_gone, zombie_children, Received, TestServer, WAIT,
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

/// Sends `line` to the process's stdin over HTTP.
async fn say(server: &TestServer, id: &str, line: &str) {
    let (status, body) = server.post_raw_stdin(id, line.as_bytes()).await;
    assert_eq!(status, 204, "{body}");
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
    say(&server, &process.id, "yes\n").await;
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
    say(&server, &process.id, "on\n").await;
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
    say(&server, &process.id, "through\n").await;
    let mut attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.until_exit().await.stdout, b"got through\n");
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

// ---------------------------------------------------------------------
// Children that misbehave
// ---------------------------------------------------------------------

#[tokio::test]
async fn a_child_that_closes_stdout_early_still_delivers_stderr_and_its_exit() {
    let server = TestServer::start();
    let process = server
        .sh("echo before; exec 1>&-; sleep 0.2; echo err >&2", json!({}))
        .await;
    let received = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(received.stdout, b"before\n");
    assert_eq!(received.stderr, b"err\n");
    let exit = received.exit.unwrap();
    assert_eq!(exit.exit_code, Some(0));
    assert!(!exit.output_incomplete);
}

#[tokio::test]
async fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = TestServer::start_with(&["--kill-grace-ms", "300"]);
    let process = server
        .sh("trap '' TERM; sleep 30", json!({"timeout_ms": 300}))
        .await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Timeout));
    assert_eq!(exit.exit_code, Some(124));
    assert_eq!(exit.signal.as_deref(), Some("KILL"));
    assert!(exit.duration_ms.unwrap() < 3000, "{exit:?}");
    assert!(
        wait_session_gone(process.pid).await,
        "survivors: {:?}",
        session_members(process.pid)
    );
}

#[tokio::test]
async fn a_child_that_forks_a_thousand_children_loses_them_all_to_the_deadline() {
    let server = TestServer::start_with(&["--kill-grace-ms", "300"]);
    let process = server
        .sh(
            "for i in $(seq 1000); do sleep 30 & done; echo forked; wait",
            json!({"timeout_ms": 8000}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let mut received = Received::default();
    attachment
        .until_stdout_contains("forked\n", &mut received)
        .await;
    let members = session_members(process.pid).len();
    assert!(members > 1000, "only {members} in the session");
    let exit = attachment.until_exit().await.exit.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Timeout));
    assert!(
        wait_session_gone(process.pid).await,
        "{} survivors",
        session_members(process.pid).len()
    );
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

#[tokio::test]
async fn a_child_exiting_while_an_attachment_is_mid_stream_still_delivers_everything() {
    let server = TestServer::start();
    let process = server
        .sh(
            "read go; head -c 4000000 /dev/urandom; exit 7",
            json!({"stdin": true, "retain_bytes": 8 << 20}),
        )
        .await;
    // A flow-controlled attachment takes one window, then the process
    // exits while most of its output is still to be sent to it.
    let mut slow = server.attach(&process.id, "window=65536").await;
    slow.send(ClientFrame::Stdin {
        data: b"go\n".to_vec(),
    })
    .await;
    let mut received = Received::default();
    while received.stdout.len() < 65536 {
        let frame = slow.frame().await.expect("closed early");
        assert!(!slow.record(frame, &mut received));
    }
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.exit_code, Some(7));
    slow.credit(StreamName::Stdout, u64::MAX / 2).await;
    let rest = slow.until_exit().await;
    received.stdout.extend_from_slice(&rest.stdout);
    assert_eq!(rest.exit.unwrap(), exited);
    assert_eq!(received.stdout.len(), 4_000_000);
    let replay = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(replay.stdout, received.stdout);
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

/// POST /v1/processes expecting 400 invalid_request; returns the message.
async fn rejected(server: &TestServer, body: Value) -> String {
    let (status, answer) = server.post("/v1/processes", body.clone()).await;
    assert_eq!(status, 400, "{body} gave {answer}");
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    answer["error"]["message"].as_str().unwrap().to_string()
}

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
    say(&server, id, "x\n").await;
    assert_eq!(server.wait_exit(id).await.exit_code, Some(0));
}

#[tokio::test]
async fn a_deadline_of_u64_max_milliseconds_is_accepted_and_never_fires() {
    // u64::MAX milliseconds is valid JSON for an unsigned field: accepted,
    // and it neither fires nor breaks the server.
    let server = TestServer::start();
    let process = server
        .sh(
            "read x; echo ok",
            json!({"stdin": true, "timeout_ms": u64::MAX}),
        )
        .await;
    say(&server, &process.id, "x\n").await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert_eq!(exit.exit_code, Some(0));
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
