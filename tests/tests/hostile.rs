//! Hostile clients and unlucky operators: connections that never finish,
//! floods past the open-file limit, shutdown with work in flight, a token
//! that must not reach children, and query strings and paths that try to
//! mean more than they say. Every server is on loopback; every loop is
//! bounded.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::tether_protocol::{ClientFrame, ExitReason, ServerFrame};
use tether_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `127.0.0.1:PORT` of a server.
fn addr(server: &TestServer) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// Opens a connection and sends `bytes`, bounded.
async fn send_raw(server: &TestServer, bytes: &[u8]) -> TcpStream {
    let mut tcp = tokio::time::timeout(WAIT, TcpStream::connect(addr(server)))
        .await
        .expect("connect timed out")
        .expect("connect failed");
    tcp.write_all(bytes).await.unwrap();
    tcp
}

/// Reads until the server closes the connection (bounded); what it sent.
async fn read_to_close(tcp: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("the server kept the connection open");
        match read {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&all).into_owned(),
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one HTTP response of known length (bounded): its status, its head
/// in lower case, its body.
async fn read_response(tcp: &mut TcpStream) -> (u16, String, String) {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&all).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return (status, head.to_ascii_lowercase(), body.to_string());
            }
        }
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("no response within the bound")
            .unwrap();
        assert!(n > 0, "closed before a full response: {text:?}");
        all.extend_from_slice(&buf[..n]);
    }
}

async fn delete(server: &TestServer, id: &str) {
    let url = server.url(&format!("/v1/processes/{id}?force=1"));
    let response = server.http.delete(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// The value of an unlabelled metric in a Prometheus text answer.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

async fn healthz(server: &TestServer) -> u16 {
    let response = tokio::time::timeout(WAIT, server.http.get(server.url("/healthz")).send())
        .await
        .expect("health check not answered within the bound")
        .expect("health check failed");
    response.status().as_u16()
}

const HALF_SENT: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

#[tokio::test]
async fn half_sent_requests_past_the_fd_limit_leave_health_checks_and_spawns_working() {
    raise_own_fd_limit(4096);
    // Soft and hard 1024: the server cannot raise its way out, and the
    // header timeout is too long to help; the connection cap must.
    let server = TestServer::start_with_fd_limit(&["--header-timeout-ms", "600000"], 1024, 1024);
    let mut flood = Vec::new();
    for _ in 0..1100 {
        flood.push(send_raw(&server, HALF_SENT).await);
    }
    assert_eq!(healthz(&server).await, 200);
    let spawned = tokio::time::timeout(WAIT, server.sh("echo alive", json!({})))
        .await
        .expect("spawn not answered within the bound");
    let info = server.wait_exit(&spawned.id).await;
    assert_eq!(info.exit_code, Some(0));
    assert!(fd_count(server.pid()) <= 1024);
    drop(flood);
}

#[tokio::test]
async fn a_half_sent_request_and_an_idle_keepalive_connection_are_closed_after_the_header_timeout()
{
    let server = TestServer::start_with(&["--header-timeout-ms", "300"]);
    let mut half = send_raw(&server, HALF_SENT).await;
    assert_eq!(read_to_close(&mut half).await, "");

    let mut idle = send_raw(&server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (status, _, body) = read_response(&mut idle).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // Kept alive, then closed for idleness.
    assert_eq!(read_to_close(&mut idle).await, "");
}

#[tokio::test]
async fn past_the_connection_cap_the_longest_waiting_connection_makes_room() {
    let server =
        TestServer::start_with(&["--max-connections", "3", "--header-timeout-ms", "600000"]);
    let mut first = send_raw(&server, HALF_SENT).await;
    let _second = send_raw(&server, HALF_SENT).await;
    let _third = send_raw(&server, HALF_SENT).await;
    assert_eq!(healthz(&server).await, 200);
    // The oldest dawdler was closed to make room.
    assert_eq!(read_to_close(&mut first).await, "");
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        counter(&metrics, "tether_connections_displaced_total") >= 1,
        "{metrics}"
    );
}

#[tokio::test]
async fn past_the_connection_cap_with_every_connection_busy_a_newcomer_gets_503() {
    let server = TestServer::start_with(&["--max-connections", "3"]);
    let process = server.sh("sleep 60", json!({})).await;
    let mut attachments = Vec::new();
    for _ in 0..3 {
        attachments.push(server.attach(&process.id, "").await);
    }
    let mut newcomer = send_raw(&server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (status, head, body) = read_response(&mut newcomer).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        head.contains("\r\ntether-error-code: too_many_connections\r\n"),
        "{head}"
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "too_many_connections");
    drop(newcomer);
    // An attachment that ends gives its slot back.
    attachments.pop().unwrap().ws.close(None).await.unwrap();
    let answered = settle(
        || {
            std::net::TcpStream::connect(addr(&server))
                .and_then(|mut tcp| {
                    use std::io::{Read, Write};
                    tcp.set_read_timeout(Some(WAIT))?;
                    tcp.write_all(
                        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    )?;
                    let mut text = String::new();
                    tcp.read_to_string(&mut text)?;
                    Ok(text)
                })
                .unwrap_or_default()
        },
        |text| text.starts_with("HTTP/1.1 200"),
    )
    .await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        counter(&metrics, "tether_connections_refused_total") >= 1,
        "{metrics}"
    );
    delete(&server, &process.id).await;
}

#[tokio::test]
async fn an_unfinished_body_is_answered_408_after_the_body_timeout() {
    let server = TestServer::start_with(&["--body-timeout-ms", "300"]);
    let mut tcp = send_raw(
        &server,
        b"POST /v1/processes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"argv\"",
    )
    .await;
    let (status, _, body) = read_response(&mut tcp).await;
    assert_eq!(status, 408, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "body_timeout");
}

#[tokio::test]
async fn sigterm_with_unfinished_requests_exits_within_the_shutdown_bound() {
    let mut server = TestServer::start_with(&[
        "--shutdown-timeout-ms",
        "1000",
        "--kill-grace-ms",
        "200",
        "--drain-timeout-ms",
        "200",
        "--close-timeout-ms",
        "200",
        "--header-timeout-ms",
        "600000",
        "--body-timeout-ms",
        "600000",
    ]);
    let process = server.sh("sleep 60", json!({})).await;
    let _half_head = send_raw(&server, HALF_SENT).await;
    let _half_body = send_raw(
        &server,
        format!(
            "POST /v1/processes/{}/stdin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nabc",
            process.id
        )
        .as_bytes(),
    )
    .await;
    // Wait (bounded) until the server holds both half-sent connections
    // open, beside the harness's own.
    let open = settle_async(
        || server.metrics(),
        |m| counter(m, "tether_connections") >= 3,
    )
    .await;
    assert!(counter(&open, "tether_connections") >= 3, "{open}");
    let started = Instant::now();
    assert_eq!(server.terminate().await, Some(0));
    // The bound is 1.6 s here (kill grace + drain + close + 1 s); the
    // generous margin only catches a wait for the clients.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn on_sigterm_slow_readers_get_all_their_output_the_exit_frame_and_a_close() {
    // Small frames so that a reader taking one every 20 ms needs seconds
    // for its 2 MB: it is still reading when the server is told to stop.
    let mut server = TestServer::start_with(&["--max-data-frame-bytes", "16384"]);
    let mut readers = Vec::new();
    for _ in 0..3 {
        let process = server
            .sh(
                "head -c 2000000 /dev/zero; sleep 60",
                json!({"retain_bytes": 4_000_000}),
            )
            .await;
        // All of it captured, so the reader is what is slow.
        let captured = settle_async(
            || server.status(&process.id),
            |info| info.stdout_bytes >= 2_000_000,
        )
        .await;
        assert!(
            captured.stdout_bytes >= 2_000_000,
            "output not captured in time"
        );
        let mut attachment = server.attach(&process.id, "").await;
        // Streaming has begun.
        let first = attachment.frame().await.expect("first frame");
        let mut received = Received::default();
        attachment.record(first, &mut received);
        readers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tick.tick().await;
                match attachment.frame_or_close().await {
                    Ok(frame) => {
                        if attachment.record(frame, &mut received) {
                            break;
                        }
                    }
                    Err(code) => panic!(
                        "closed ({code:?}) after {} bytes, before the exit frame",
                        received.stdout.len()
                    ),
                }
            }
            let close = attachment.frame_or_close().await;
            (received, close.err())
        }));
    }
    server.send_sigterm();
    for reader in readers {
        let (received, close) = reader.await.unwrap();
        let exit = received.exit.expect("exit frame");
        assert_eq!(exit.reason, Some(ExitReason::Killed));
        assert_eq!(received.stdout.len(), 2_000_000);
        assert!(received.dropped.is_empty());
        assert_eq!(close, Some(Some(1000)));
    }
    assert_eq!(server.exited().await, Some(0));
}

#[tokio::test]
async fn four_hundred_processes_fit_under_a_1024_soft_limit_with_a_higher_hard_limit() {
    // At 16384 the defaults are sized to 956 running processes (6
    // descriptors each, 2 per exited one still known, see limits.rs).
    let mut server = TestServer::start_with_fd_limit(&[], 1024, 16384);
    for i in 0..400 {
        let (status, body) = server
            .post(
                "/v1/processes",
                json!({"argv": ["sleep", "60"], "stdin": i % 2 == 0}),
            )
            .await;
        assert_eq!(status, 201, "spawn {i}: {body}");
    }
    // Children get the limit tetherd was started with back.
    let child = server.sh("ulimit -n", json!({})).await;
    let mut attachment = server.attach(&child.id, "").await;
    assert_eq!(attachment.until_exit().await.stdout, b"1024\n");
    assert_eq!(server.terminate().await, Some(0));
}

/// What a child sees of its parent's command line and environment.
async fn parents_proc_entries(server: &TestServer, token: &str) -> String {
    let process: tether_tests::tether_protocol::ProcessInfo = {
        let response = server
            .http
            .post(server.url("/v1/processes"))
            .bearer_auth(token)
            .json(&json!({
                "command": "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; tr '\\0' ' ' < /proc/$PPID/environ"
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json().await.unwrap()
    };
    let url = format!(
        "{}&access_token={token}",
        server.ws_url(&process.id, "readonly=1")
    );
    let mut attachment = Attachment::connect(&url).await;
    let received = attachment.until_exit().await;
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
    String::from_utf8_lossy(&received.stdout).into_owned()
}

#[tokio::test]
async fn a_child_cannot_find_the_token_in_its_parents_cmdline_or_environ() {
    let token = "s3cret-token-in-argv";
    let server = TestServer::start_with(&["--token", token]);
    let seen = parents_proc_entries(&server, token).await;
    assert!(seen.contains("--token"), "{seen}");
    assert!(!seen.contains(token), "{seen}");

    let token = "s3cret-token-in-env";
    let server = TestServer::start_with_env(&[], &[("TETHER_TOKEN", token)]);
    let seen = parents_proc_entries(&server, token).await;
    assert!(!seen.contains(token), "{seen}");
}

#[tokio::test]
async fn a_token_file_sets_the_token_without_showing_it() {
    let dir = std::env::temp_dir().join(format!("tether-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "from-a-file-123\n").unwrap();
    let server = TestServer::start_with(&["--token-file", file.to_str().unwrap()]);
    let (status, _) = server.get("/v1/processes").await;
    assert_eq!(status, 401);
    let seen = parents_proc_entries(&server, "from-a-file-123").await;
    assert!(!seen.contains("from-a-file-123"), "{seen}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn readonly_accepts_only_the_documented_booleans() {
    let server = TestServer::start();
    let process = server.sh("cat", json!({"stdin": true})).await;
    for bad in ["yes", "TRUE", "", "2", "on"] {
        let (status, body) =
            refused_attach(&server.ws_url(&process.id, &format!("readonly={bad}"))).await;
        assert_eq!(status, 400, "readonly={bad}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("readonly"));
    }
    let mut reader = server.attach(&process.id, "readonly=true").await;
    reader
        .send(ClientFrame::Stdin {
            data: b"x".to_vec(),
        })
        .await;
    match reader.frame().await {
        Some(ServerFrame::Error { message, .. }) => assert!(message.contains("read-only")),
        other => panic!("expected a read-only error, got {other:?}"),
    }
    let mut writer = server.attach(&process.id, "readonly=0").await;
    writer
        .send(ClientFrame::Stdin {
            data: b"echo\n".to_vec(),
        })
        .await;
    let mut received = Received::default();
    writer.until_stdout_contains("echo", &mut received).await;
    assert_eq!(received.stdout, b"echo\n");
    delete(&server, &process.id).await;
}

#[tokio::test]
async fn a_symlink_out_of_the_web_root_is_404_and_one_inside_is_served() {
    let root = std::env::temp_dir().join(format!("tether-web-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("index.html"), "<p>terminal</p>").unwrap();
    std::fs::write(root.join("sub/inner.txt"), "inner").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    std::os::unix::fs::symlink("sub/inner.txt", root.join("inside.txt")).unwrap();
    let server = TestServer::start_with(&["--web-root", root.to_str().unwrap()]);
    let get = |path: &str| {
        let url = server.url(path);
        let http = server.http.clone();
        async move {
            let response = http.get(url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get("/").await, (200, "<p>terminal</p>".into()));
    assert_eq!(get("/inside.txt").await, (200, "inner".into()));
    for escape in ["/link.txt", "/etc/passwd", "/etc/hostname", "/%6cink.txt"] {
        let (status, body) = get(escape).await;
        assert_eq!(status, 404, "{escape}: {body}");
        assert!(!body.contains("root:"), "{escape}: {body}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn an_attachment_is_not_closed_by_the_http_header_timeout() {
    let server = TestServer::start_with(&["--header-timeout-ms", "200"]);
    let process = server.sh("sleep 1; echo late", json!({})).await;
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"late\n");
}

/// A masked client WebSocket frame (binary, FIN) carrying `payload`.
fn client_ws_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x82];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n <= u16::MAX as usize => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [0x11, 0x22, 0x33, 0x44];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[tokio::test]
async fn a_silent_client_is_closed_for_idleness_even_with_its_stdin_budget_spent() {
    let server =
        TestServer::start_with(&["--ping-interval-ms", "200", "--idle-timeout-ms", "1000"]);
    // Never reads stdin: whatever is sent stays queued.
    let process = server.sh("sleep 60", json!({"stdin": true})).await;
    let tcp = send_raw(
        &server,
        format!(
            "GET /v1/processes/{}/attach HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n",
            process.id,
            addr(&server)
        )
        .as_bytes(),
    )
    .await;
    let (mut read, mut write) = tcp.into_split();
    // Just enough stdin to spend the attachment's budget, then silence
    // (raw reads never answer a ping). With ~1 MiB frames: one in the
    // writer, 16 in the process's queue (README: 16 messages), 4 in the
    // attachment's 4 MiB budget; the 22nd waits for the budget. (One more
    // would be a message held for the process: not silence.)
    let flood = tokio::spawn(async move {
        let frame = client_ws_frame(
            &ClientFrame::Stdin {
                data: vec![b'x'; 1_048_000],
            }
            .encode(),
        );
        for _ in 0..22 {
            if write.write_all(&frame).await.is_err() {
                return;
            }
        }
        // Keep the write side open: silence, not a close.
        std::future::pending::<()>().await;
    });
    // Closed: an end of file, or a reset (the server closes with our
    // flood unread).
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let read = tokio::time::timeout(WAIT, read.read(&mut buf))
            .await
            .expect("the silent client was never closed");
        match read {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{e}"),
        }
    }
    flood.abort();
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(!server.status(&process.id).await.is_exited());
    delete(&server, &process.id).await;
}

#[tokio::test]
async fn with_user_children_run_as_that_user_and_cannot_read_the_servers_proc() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs root, as CI runs it"
    );
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody");
    let token = "token-kept-from-nobody";
    let server = TestServer::start_with(&["--token", token, "--user", "nobody"]);
    let response = server
        .http
        .post(server.url("/v1/processes"))
        .bearer_auth(token)
        .json(&json!({
            "command": "id -u; id -g; cat /proc/$PPID/environ >/dev/null 2>&1 && echo environ readable; \
                        head -c 1 /proc/$PPID/mem >/dev/null 2>&1 && echo mem readable; ulimit -n",
            "cwd": "/"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let process: tether_tests::tether_protocol::ProcessInfo = response.json().await.unwrap();
    let url = format!(
        "{}&access_token={token}",
        server.ws_url(&process.id, "readonly=1")
    );
    let received = Attachment::connect(&url).await.until_exit().await;
    let out = String::from_utf8_lossy(&received.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], nobody.uid.to_string(), "{out}");
    assert_eq!(lines[1], nobody.gid.to_string(), "{out}");
    assert!(!out.contains("readable"), "{out}");
    assert!(!out.contains(token), "{out}");
}
