//! Who may use the server, the limits it enforces, and how it shuts down
//! (issue 7).

use serde_json::json;
use tether_protocol::ExitReason;
use tether_tests::{binary, settle_async, wait_session_gone, Attachment, TestServer};

#[tokio::test]
async fn a_token_is_required_on_every_v1_request_when_set() {
    let server = TestServer::start_with(&["--token", "s3cret"]);
    let (status, body) = server.get("/v1/processes").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let ok = server
        .http
        .post(server.url("/v1/processes"))
        .bearer_auth("s3cret")
        .json(&json!({"argv": ["echo", "hi"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let process: tether_protocol::ProcessInfo = ok.json().await.unwrap();
    let wrong = server
        .http
        .get(server.url("/v1/processes"))
        .bearer_auth("s3creT")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // Browsers pass it in the query string of the WebSocket URL.
    let refused = tokio_tungstenite::connect_async(server.ws_url(&process.id, "")).await;
    assert!(refused.is_err());
    let mut attachment = server.attach(&process.id, "access_token=s3cret").await;
    assert_eq!(attachment.until_exit().await.stdout, b"hi\n");
    // Health and metrics stay open for probes.
    assert_eq!(
        server
            .http
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn websocket_upgrades_from_foreign_origins_are_refused() {
    let server = TestServer::start_with(&["--allow-origin", "https://ide.example"]);
    let process = server.sh("sleep 5", json!({})).await;
    let host = server.base.trim_start_matches("http://").to_string();
    let try_origin = |origin: Option<String>| {
        let url = server.ws_url(&process.id, "");
        async move {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            let mut request = url.into_client_request().unwrap();
            if let Some(origin) = origin {
                request
                    .headers_mut()
                    .insert("Origin", origin.parse().unwrap());
            }
            match tokio_tungstenite::connect_async(request).await {
                Ok(_) => 101,
                Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                    response.status().as_u16()
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    assert_eq!(try_origin(Some("https://evil.example".into())).await, 403);
    assert_eq!(try_origin(Some(format!("http://{host}"))).await, 101);
    assert_eq!(try_origin(Some("https://ide.example".into())).await, 101);
    assert_eq!(try_origin(None).await, 101);
}

#[tokio::test]
async fn children_never_inherit_the_server_token() {
    let server = TestServer::start_with_env(&[], &[("TETHER_TOKEN", "top-secret")]);
    let response = server
        .http
        .post(server.url("/v1/processes"))
        .bearer_auth("top-secret")
        .json(&json!({"argv": ["env"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let process: tether_protocol::ProcessInfo = response.json().await.unwrap();
    let mut attachment = server.attach(&process.id, "access_token=top-secret").await;
    let output = String::from_utf8(attachment.until_exit().await.stdout).unwrap();
    assert!(output.contains("PATH="));
    assert!(!output.contains("top-secret") && !output.contains("TETHER_TOKEN"));
}

#[tokio::test]
async fn listening_beyond_loopback_without_a_token_is_refused() {
    let output = std::process::Command::new(binary("tetherd"))
        .args(["--listen", "0.0.0.0:0", "--no-token"])
        .env_remove("TETHER_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("--token") && message.contains("--insecure-no-token"),
        "{message}"
    );
}

#[tokio::test]
async fn past_the_process_limit_spawns_get_503_and_running_ones_are_unharmed() {
    let server = TestServer::start_with(&["--max-processes", "2"]);
    let a = server
        .sh("read x; echo a-done", json!({"stdin": true}))
        .await;
    let _b = server.sh("sleep 30", json!({})).await;
    let (status, body) = server
        .post("/v1/processes", json!({"argv": ["true"]}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("too_many_processes"))
    );
    let mut attachment = server.attach(&a.id, "").await;
    attachment
        .send(tether_protocol::ClientFrame::Stdin {
            data: b"\n".to_vec(),
        })
        .await;
    assert_eq!(attachment.until_exit().await.stdout, b"a-done\n");
    // A slot is free again once a process exited.
    let (status, _) = server
        .post("/v1/processes", json!({"argv": ["true"]}))
        .await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn attachment_and_body_limits_answer_with_clear_errors() {
    let server = TestServer::start_with(&[
        "--max-attachments-per-process",
        "1",
        "--max-body-bytes",
        "1000",
    ]);
    let process = server.sh("sleep 5", json!({"stdin": true})).await;
    let _first = server.attach(&process.id, "").await;
    let second = tokio_tungstenite::connect_async(server.ws_url(&process.id, "")).await;
    match second {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429)
        }
        other => panic!("expected 429, got {other:?}"),
    }
    let (status, body) = server.post_raw_stdin(&process.id, &[b'x'; 5000]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );
}

#[tokio::test]
async fn read_only_viewers_never_take_the_last_slot_from_a_writer() {
    let server = TestServer::start_with(&["--max-attachments-per-process", "3"]);
    let process = server.sh("sleep 30", json!({"stdin": true})).await;
    let _viewers = [
        server.attach(&process.id, "readonly=1").await,
        server.attach(&process.id, "readonly=1").await,
    ];
    let (status, body) =
        tether_tests::refused_attach(&server.ws_url(&process.id, "readonly=1")).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.to_string().contains("kept for a writer"), "{body}");
    // The operator still gets in.
    let _operator = server.attach(&process.id, "").await;
    let (status, _) = tether_tests::refused_attach(&server.ws_url(&process.id, "")).await;
    assert_eq!(status, 429, "full now");
}

#[tokio::test]
async fn wait_is_clamped_to_the_documented_maximum() {
    let server = TestServer::start_with(&["--max-wait-ms", "300"]);
    let process = server.sh("sleep 30", json!({})).await;
    let started = std::time::Instant::now();
    let (status, body) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=60000",
            process.id
        ))
        .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("running")));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let (status, _) = server
        .get(&format!("/v1/processes/{}/wait?timeout_ms=-5", process.id))
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn sigterm_kills_every_process_reports_killed_and_exits_zero() {
    let mut server = TestServer::start_with(&["--kill-grace-ms", "300"]);
    let stubborn = server.sh("trap '' TERM; sleep 30 & wait", json!({})).await;
    let plain = server.sh("sleep 30", json!({})).await;
    let mut attachment: Attachment = server.attach(&stubborn.id, "").await;
    let waiter = {
        let url = server.url(&format!("/v1/processes/{}/wait?timeout_ms=20000", plain.id));
        tokio::spawn(async move {
            reqwest::get(url)
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    // The wait is pending before the signal: the server has counted it (its
    // handler is running, not merely queued in the listen backlog, where a
    // shutdown would reset it), and the process is still running.
    let counted = settle_async(
        || server.metrics(),
        |m| m.lines().any(|line| line == "tether_wait_requests_total 1"),
    )
    .await;
    assert!(
        counted.contains("tether_wait_requests_total 1"),
        "{counted}"
    );
    assert!(!server.status(&plain.id).await.is_exited());
    assert_eq!(server.terminate().await, Some(0));
    let exit = attachment.until_exit().await.exit.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Killed));
    let waited = waiter.await.unwrap();
    assert_eq!(waited["reason"], "killed");
    assert!(wait_session_gone(stubborn.pid).await);
    assert!(wait_session_gone(plain.pid).await);
}

#[tokio::test]
async fn metrics_count_processes_bytes_and_exit_reasons() {
    let server = TestServer::start();
    let process = server
        .sh("printf 12345; printf ab >&2; exit 1", json!({}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    attachment.until_exit().await;
    let text = server.metrics().await;
    for line in [
        "tether_processes{status=\"exited\"} 1",
        "tether_spawns_total 1",
        "tether_bytes_captured_total{stream=\"stdout\"} 5",
        "tether_bytes_captured_total{stream=\"stderr\"} 2",
        "tether_bytes_sent_total{stream=\"stdout\"} 5",
        "tether_exits_total{reason=\"exit\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn a_cross_site_post_cannot_start_a_command() {
    let server = TestServer::start();
    // What a page elsewhere can send without a preflight: a "simple" POST.
    let response = server
        .http
        .post(server.url("/v1/processes"))
        .header("Origin", "https://evil.example")
        .header("Content-Type", "text/plain")
        .body(r#"{"command":"touch /tmp/pwned"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden_origin");
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 0);
    // The server's own page may.
    let own = format!("http://{}", server.base.trim_start_matches("http://"));
    let response = server
        .http
        .post(server.url("/v1/processes"))
        .header("Origin", own)
        .json(&json!({"argv": ["true"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

#[tokio::test]
async fn a_rebound_dns_name_cannot_reach_a_server_without_a_token() {
    let server = TestServer::start();
    let rebound = server
        .http
        .post(server.url("/v1/processes"))
        .header("Host", "evil.example:7420")
        .header("Origin", "http://evil.example:7420")
        .json(&json!({"argv": ["true"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let body: serde_json::Value = rebound.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden_host");
    let local = server
        .http
        .get(server.url("/v1/processes"))
        .header("Host", "localhost")
        .send()
        .await
        .unwrap();
    assert_eq!(local.status(), 200);
    // With a token, named hosts (behind a proxy) are fine.
    let guarded = TestServer::start_with(&["--token", "t"]);
    let named = guarded
        .http
        .get(guarded.url("/v1/processes"))
        .header("Host", "tether.example.com")
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(named.status(), 200);
}

/// While it drains after SIGTERM (here: a process that ignores TERM keeps
/// it draining), `/healthz` says so, so load balancers stop sending work
/// and a client whose process was killed can tell why. (Once the drain ends
/// the listener stops accepting: a client then finds nobody to ask.)
#[tokio::test]
async fn healthz_answers_503_while_the_server_shuts_down() {
    let server = TestServer::start_with(&["--kill-grace-ms", "5000", "--drain-grace-ms", "5000"]);
    let (status, _) = server.get("/healthz").await;
    assert_eq!(status, 200);
    let stubborn = server
        .sh(
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            json!({}),
        )
        .await;
    let mut attachment = server.attach(&stubborn.id, "").await;
    attachment
        .until_stdout_contains("ready", &mut tether_tests::Received::default())
        .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (status, text) = tether_tests::settle_async(
        || async {
            let response = server
                .http
                .get(server.url("/healthz"))
                .send()
                .await
                .unwrap();
            let status = response.status();
            (status, response.text().await.unwrap())
        },
        |(status, _)| *status == 503,
    )
    .await;
    assert_eq!(status, 503, "healthz never said 503");
    assert_eq!(text, "draining\n");
}

/// Colour escapes only on a terminal: a log redirected to a file or a pipe
/// is plain text (`--log-json` is unchanged).
#[test]
fn the_log_has_no_colour_when_stderr_is_not_a_terminal() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let mut child = Command::new(binary("tetherd"))
        .args(["--listen", "127.0.0.1:0", "--no-token"])
        .env("RUST_LOG", "info")
        .env_remove("TETHER_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // Read the log on a thread, so every wait for it is bounded.
    let (tx, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("tetherd listening on ")
        .unwrap()
        .to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = runtime.block_on(async {
        reqwest::Client::new()
            .post(format!("{base}/v1/processes"))
            .json(&json!({"argv": ["true"]}))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 201);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let log = log.recv_timeout(tether_tests::WAIT).unwrap();
    let _ = child.wait();
    assert!(log.contains("spawned"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour escapes in a redirected log: {log:?}"
    );
}
