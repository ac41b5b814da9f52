//! `POST /v1/exec` inside the budgets: a server maximum for
//! `max_output_bytes`, the buffered output reserved against
//! `--retain-total` (503 when it does not fit, never silently cut), JSON
//! that never grows a byte into six, stdin from the request, and a long
//! command answered at once and kept busy (a proxy's read timeout).

use base64::Engine;
use serde_json::{json, Value};
use tether_tests::TestServer;

const MIB: u64 = 1 << 20;

fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap()
        * 1024
}

async fn exec(server: &TestServer, body: Value) -> (u16, Value) {
    server.post("/v1/exec", body).await
}

fn decoded(stream: &Value) -> Vec<u8> {
    let data = stream["data"].as_str().unwrap();
    match stream["encoding"].as_str().unwrap() {
        "utf8" => data.as_bytes().to_vec(),
        _ => base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    }
}

#[tokio::test]
async fn large_exec_output_stays_inside_the_memory_budget_complete_or_refused() {
    let server = TestServer::start_with(&[
        "--retain-total",
        "134217728",
        "--max-exec-output-bytes",
        "33554432",
    ]);
    // Three times the cap per stream does not fit in 128 MiB: refused
    // before the command starts.
    let (status, answer) = exec(
        &server,
        json!({"command": "echo never", "max_output_bytes": 32 * MIB}),
    )
    .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "retention_exhausted");
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 0, "nothing started: {list}");
    // Above the server's maximum: a 400 that names the flag.
    let (status, answer) = exec(
        &server,
        json!({"command": "true", "max_output_bytes": 64 * MIB}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.to_string().contains("--max-exec-output-bytes"),
        "{answer}"
    );

    // 16 MiB of NULs: base64 (4/3), never six bytes each, and complete.
    exec(&server, json!({"command": "true"})).await; // warm
    let before = peak_rss(server.pid());
    let (status, answer) = exec(
        &server,
        json!({"command": "head -c 16777216 /dev/zero", "max_output_bytes": 16 * MIB}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["stdout"]["encoding"], "base64");
    assert_eq!(answer["stdout"]["truncated"], false);
    assert_eq!(answer["stdout"]["dropped"], 0);
    let bytes = decoded(&answer["stdout"]);
    assert_eq!(bytes.len() as u64, 16 * MIB);
    assert!(bytes.iter().all(|b| *b == 0));
    let grew = peak_rss(server.pid()).saturating_sub(before);
    // Kept (16) + base64 (21) + the body (21) and a fixed overhead; six
    // bytes per NUL would be 96 MiB of body alone.
    assert!(grew < 80 * MIB, "peak RSS grew {} MiB", grew / MIB);
}

#[tokio::test]
async fn exec_text_with_control_characters_is_base64_and_clean_text_stays_text() {
    let server = TestServer::start();
    let (_, answer) = exec(&server, json!({"command": "printf 'a\\033[1mb\\tc\\n'"})).await;
    assert_eq!(answer["stdout"]["encoding"], "base64");
    assert_eq!(decoded(&answer["stdout"]), b"a\x1b[1mb\tc\n");
    let (_, answer) = exec(
        &server,
        json!({"command": "printf 'caf\\303\\251\\tok\\r\\n'"}),
    )
    .await;
    assert_eq!(answer["stdout"]["encoding"], "utf8");
    assert_eq!(answer["stdout"]["data"], "café\tok\r\n");
}

#[tokio::test]
async fn exec_feeds_input_to_stdin_then_closes_it() {
    let server = TestServer::start();
    let (status, answer) = exec(&server, json!({"argv": ["cat"], "input": "hello\nworld\n"})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stdout"]["data"], "hello\nworld\n");
    assert_eq!(answer["exit_code"], 0, "stdin was closed: cat ended");
    let binary = base64::engine::general_purpose::STANDARD.encode(b"\x00\xff\x01");
    let (_, answer) = exec(&server, json!({"argv": ["cat"], "input_base64": binary})).await;
    assert_eq!(decoded(&answer["stdout"]), b"\x00\xff\x01");
    // Empty input: stdin open and closed at once.
    let (_, answer) = exec(&server, json!({"argv": ["wc", "-c"], "input": ""})).await;
    assert_eq!(answer["stdout"]["data"].as_str().unwrap().trim(), "0");
    for body in [
        json!({"argv": ["cat"], "input": "a", "input_base64": "YQ=="}),
        json!({"argv": ["cat"], "input": 7}),
        json!({"argv": ["cat"], "input_base64": "not base64!"}),
    ] {
        let (status, answer) = exec(&server, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
    }
}

/// A command still running after a ping interval is answered at once and
/// its connection kept busy until the document: through nginx with a 1 s
/// read timeout, a 3 s command comes back whole (without the spaces nginx
/// would answer 504 and the command would be killed).
#[tokio::test]
async fn a_long_exec_is_kept_busy_so_a_proxys_read_timeout_does_not_cut_it() {
    let server = TestServer::start_with(&["--ping-interval-ms", "300"]);
    let upstream = server.base.trim_start_matches("http://").to_string();
    let nginx = tether_tests::nginx::Nginx::start(|_, port| {
        format!(
            "server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://{upstream}; \
             proxy_http_version 1.1; proxy_buffering off; proxy_read_timeout 1s; }} }}"
        )
    })
    .await;
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/exec", nginx.base))
        .json(&json!({"command": "sleep 3; echo done"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // The answer started before the exit.
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list[0]["status"], "running", "{list}");
    let text = answer.text().await.unwrap();
    assert!(text.starts_with(' '), "{text:?}");
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&value["exit_code"], &value["reason"]),
        (&json!(0), &json!("exit")),
        "{value}"
    );
    assert_eq!(decoded(&value["stdout"]), b"done\n");

    // A quick one is answered whole, as before.
    let quick = reqwest::Client::new()
        .post(server.url("/v1/exec"))
        .json(&json!({"command": "echo quick"}))
        .send()
        .await
        .unwrap();
    assert!(quick.content_length().is_some(), "{:?}", quick.headers());
}

/// A client that goes away after the answer started still kills the
/// command (noticed at the next space, within a ping interval).
#[tokio::test]
async fn a_client_gone_after_the_answer_started_still_kills_the_command() {
    let server = TestServer::start_with(&["--ping-interval-ms", "300"]);
    let answer = reqwest::Client::new()
        .post(server.url("/v1/exec"))
        .json(&json!({"command": "exec sleep 30"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let (_, list) = server.get("/v1/processes").await;
    let id = list[0]["id"].as_str().unwrap().to_string();
    drop(answer);
    let exited = server.wait_exit(&id).await;
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Killed));
}

/// The `host:` a raw request to `server` must name.
fn host(server: &TestServer) -> &str {
    server.base.trim_start_matches("http://")
}

/// Sends `request` on a raw socket, shuts down the writing side (a legal
/// HTTP/1.1 half-close) and reads the whole answer, within a bound.
async fn half_closed(server: &TestServer, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    socket.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(tether_tests::WAIT, socket.read_to_end(&mut answer))
        .await
        .expect("no answer within the bound")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A client that shuts down its writing side after a complete request is
/// still there to read: it gets its answer, and its command is not
/// killed (only a closed or reset connection counts as going away).
#[tokio::test]
async fn a_client_that_half_closes_after_its_request_is_answered() {
    let server = TestServer::start();
    let body = json!({"command": "echo hi; sleep 0.5; echo bye"}).to_string();
    let answer = half_closed(
        &server,
        format!(
            "POST /v1/exec HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            host(&server),
            body.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"exit_code\":0"), "{answer}");
    assert!(answer.contains("hi\\nbye\\n"), "{answer}");

    let health = half_closed(
        &server,
        format!("GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n", host(&server)),
    )
    .await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

/// A client that closed altogether, before any answer, still has its
/// command ended within moments, as before half-closes were answered.
#[tokio::test]
async fn a_client_that_closes_before_the_answer_still_kills_the_command_at_once() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start();
    let body = json!({"command": "exec sleep 30"}).to_string();
    let address = server.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /v1/exec HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        host(&server),
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let listed = async {
        loop {
            let (_, list) = server.get("/v1/processes").await;
            if let Some(id) = list[0]["id"].as_str() {
                return id.to_string();
            }
            tokio::task::yield_now().await;
        }
    };
    let id = tokio::time::timeout(tether_tests::WAIT, listed)
        .await
        .expect("the exec's process was never listed");
    let closed_at = std::time::Instant::now();
    drop(socket);
    let exited = server.wait_exit(&id).await;
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Killed));
    // Well within the 20 s ping interval that would otherwise be the
    // first write: a generous bound that catches waiting for it.
    assert!(
        closed_at.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        closed_at.elapsed()
    );
}
