//! Behind a reverse proxy (issue 7): Debian's nginx, with a plain WebSocket
//! proxy configuration (the one in `docs/nginx.conf.example`, with a short
//! `proxy_read_timeout` so the tests are quick), in front of a real tetherd.
//! Every request of the harness goes through nginx.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason, ProcessInfo};
use tether_tests::nginx::Nginx;
use tether_tests::{Attachment, Received, TestServer, WAIT};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// nginx's `proxy_read_timeout` in these tests.
const PROXY_TIMEOUT: Duration = Duration::from_secs(2);

/// The server block of `docs/nginx.conf.example`, with the test's ports and
/// `proxy_read_timeout`, and `extra` directives in the server block.
fn site(port: u16, upstream: &str, extra: &str) -> String {
    let timeout = PROXY_TIMEOUT.as_secs();
    format!(
        r#"
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}

    server {{
        listen 127.0.0.1:{port};
        {extra}

        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout {timeout}s;
            proxy_send_timeout {timeout}s;
        }}
    }}
"#
    )
}

/// A tetherd with `flags`, and nginx in front of it. The server's `base`
/// is nginx's, so every harness call (HTTP and attach) goes through it.
async fn behind_nginx(flags: &[&str]) -> (TestServer, Nginx) {
    behind_nginx_with(flags, "").await
}

/// [`behind_nginx`] with `extra` directives in nginx's server block.
async fn behind_nginx_with(flags: &[&str], extra: &str) -> (TestServer, Nginx) {
    let mut server = TestServer::start_with(flags);
    let upstream = server.base.trim_start_matches("http://").to_string();
    let nginx = Nginx::start(|_, port| site(port, &upstream, extra)).await;
    server.base = nginx.base.clone();
    (server, nginx)
}

/// Reads the socket for `quiet`, answering pings (tungstenite queues the
/// pong), and returns how many pings came. Panics on any data frame or on
/// the connection closing: the attachment must stay open and silent.
async fn stay_idle_for(attachment: &mut Attachment, quiet: Duration) -> usize {
    let mut pings = 0;
    let result = tokio::time::timeout(quiet, async {
        loop {
            match attachment.ws.next().await {
                Some(Ok(Message::Ping(_))) => pings += 1,
                Some(Ok(Message::Pong(_))) => {}
                other => panic!("the idle attachment got {other:?}"),
            }
        }
    })
    .await;
    assert!(result.is_err(), "the loop only ends by the timer");
    pings
}

#[tokio::test]
async fn attach_output_stdin_and_exit_work_through_the_proxy() {
    let (server, _nginx) = behind_nginx(&[]).await;
    let process = server
        .sh(
            "echo hello; read line; echo \"got $line\"; echo oops >&2; exit 3",
            json!({"stdin": true}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    assert_eq!(attachment.protocol.as_deref(), Some("tether.v1"));
    let mut received = Received::default();
    attachment
        .until_stdout_contains("hello\n", &mut received)
        .await;
    attachment
        .send(ClientFrame::Stdin {
            data: b"world\n".to_vec(),
        })
        .await;
    let rest = attachment.until_exit().await;
    assert_eq!(rest.stdout, b"got world\n");
    assert_eq!(rest.stderr, b"oops\n");
    let exit = rest.exit.unwrap();
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert_eq!(attachment.frame_or_close().await.err(), Some(Some(1000)));
    assert_eq!(server.wait_exit(&process.id).await, exit);
}

#[tokio::test]
async fn a_browser_page_served_through_the_proxy_may_attach() {
    // The proxy passes the client's Host on, so an Origin naming the
    // proxy's own address is the server's own origin.
    let (server, nginx) = behind_nginx(&[]).await;
    let process = server.sh("echo hi", json!({})).await;
    let mut request = server
        .ws_url(&process.id, "")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Origin", nginx.base.parse().unwrap());
    let (mut ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade with the proxy's origin");
    assert_eq!(response.status(), 101);
    assert!(matches!(ws.next().await, Some(Ok(Message::Binary(_)))));
}

#[tokio::test]
async fn an_idle_attachment_survives_the_proxy_timeout_thanks_to_pings() {
    let (server, _nginx) = behind_nginx(&["--ping-interval-ms", "500"]).await;
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    // Three proxy timeouts with no output at all: only pings cross nginx.
    let pings = stay_idle_for(&mut attachment, PROXY_TIMEOUT * 3).await;
    assert!(pings >= 6, "only {pings} pings in {:?}", PROXY_TIMEOUT * 3);
    attachment
        .send(ClientFrame::Stdin {
            data: b"late\n".to_vec(),
        })
        .await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"got late\n");
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn without_pings_the_proxy_would_cut_an_idle_attachment() {
    // The control for the test above: with pings rarer than the proxy's
    // read timeout, nginx closes the silent connection. The process is
    // unaffected.
    let (server, _nginx) = behind_nginx(&["--ping-interval-ms", "60000"]).await;
    let process = server
        .sh("read x; echo \"got $x\"", json!({"stdin": true}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let started = Instant::now();
    let end = tokio::time::timeout(WAIT, async {
        loop {
            match attachment.ws.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("nginx never cut the idle connection");
    assert!(
        !matches!(end, Some(Ok(Message::Binary(_)))),
        "unexpected data: {end:?}"
    );
    assert!(started.elapsed() >= PROXY_TIMEOUT - Duration::from_millis(100));
    assert!(!server.status(&process.id).await.is_exited());
    let (status, _) = server.post_raw_stdin(&process.id, b"x\n").await;
    assert_eq!(status, 204);
    assert_eq!(server.wait_exit(&process.id).await.exit_code, Some(0));
}

#[tokio::test]
async fn a_wait_longer_than_the_proxy_timeout_is_served_by_the_wait_maximum_and_a_client_loop() {
    // --max-wait-ms below proxy_read_timeout: each long-poll returns
    // `running` before nginx would give up, and the client asks again.
    let (server, _nginx) = behind_nginx(&["--max-wait-ms", "1000"]).await;
    let process = server.sh("read x; exit 5", json!({"stdin": true})).await;
    let started = Instant::now();
    let mut polls = 0;
    let exited: ProcessInfo = loop {
        let asked = Instant::now();
        let (status, body) = server
            .get(&format!(
                "/v1/processes/{}/wait?timeout_ms=30000",
                process.id
            ))
            .await;
        assert_eq!(status, 200, "the proxy answered {status}: {body}");
        assert!(asked.elapsed() < PROXY_TIMEOUT, "{:?}", asked.elapsed());
        let info: ProcessInfo = serde_json::from_value(body).unwrap();
        if info.is_exited() {
            break info;
        }
        polls += 1;
        // The process ends (on our word) after three proxy timeouts.
        if started.elapsed() >= PROXY_TIMEOUT * 3 {
            let (status, _) = server.post_raw_stdin(&process.id, b"go\n").await;
            assert_eq!(status, 204);
        }
        assert!(started.elapsed() < WAIT, "never exited");
    };
    assert_eq!(exited.exit_code, Some(5));
    assert!(polls >= 5, "only {polls} polls before the exit");
}

#[tokio::test]
async fn without_the_wait_maximum_the_proxy_would_time_the_wait_out() {
    // The control for the test above: a long-poll longer than
    // proxy_read_timeout becomes nginx's 504.
    let (server, _nginx) = behind_nginx(&[]).await;
    let process = server.sh("read x", json!({"stdin": true})).await;
    let (status, _) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=10000",
            process.id
        ))
        .await;
    assert_eq!(status, 504);
    let (status, _) = server.post_raw_stdin(&process.id, b"x\n").await;
    assert_eq!(status, 204);
    server.wait_exit(&process.id).await;
}

/// `tether --server BASE ARGS`: its status, stdout and stderr.
async fn tether(base: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(tether_tests::tether_binary())
            .arg("--server")
            .arg(base)
            .args(args)
            .env_remove("TETHER_TOKEN")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("tether in time")
    .expect("tether");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn tether_run_through_the_proxy_keeps_its_exit_statuses() {
    let (server, _nginx) = behind_nginx(&[]).await;
    let (status, out, err) = tether(
        &server.base,
        &["run", "--", "sh", "-c", "echo via-nginx; exit 5"],
    )
    .await;
    assert_eq!((status, out.as_str()), (Some(5), "via-nginx\n"), "{err}");
    // A spawn refused at the upgrade: nginx passes the JSON error on whole.
    let (status, _, err) = tether(&server.base, &["run", "--", "/no/such/program"]).await;
    assert_eq!(status, Some(127), "{err}");
    assert!(err.contains("spawn_failed"), "{err}");
    let (status, _, err) = tether(&server.base, &["run", "--", "/etc/passwd"]).await;
    assert_eq!(status, Some(126), "{err}");
    assert!(err.contains("cannot_execute"), "{err}");
}

#[tokio::test]
async fn a_run_the_proxy_refuses_as_too_long_is_posted_then_attached() {
    // Request lines over 1 KiB get 414 from this nginx.
    let (server, _nginx) = behind_nginx_with(&[], "large_client_header_buffers 4 1k;").await;
    let script = format!(": {}; echo long-ok", "x".repeat(2000));
    let (status, out, err) = tether(&server.base, &["run", "--", "sh", "-c", &script]).await;
    assert_eq!((status, out.as_str()), (Some(0), "long-ok\n"), "{err}");
    // The refused upgrade started nothing: one process, the posted one.
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}
