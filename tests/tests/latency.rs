//! The tests that hold a time bound which other tests competing for the
//! CPU could break, in a binary of their own that runs after the others:
//! no fixed tail latency (issue 2: the exit frame and the wait response go
//! out as soon as the process has exited and its output is captured), and
//! floods of huge repeats delaying neither the screen nor another
//! session's echo (issue 29; beside three other tests it once took 1.08 s
//! against its 1 s bound).

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason};
use tether_tests::{Received, TestServer};

#[tokio::test]
async fn true_exits_with_no_tail_latency_on_attach_and_wait() {
    let server = TestServer::start();
    let started = Instant::now();
    let process = server.spawn(json!({"argv": ["true"]})).await;
    let waiter = {
        let url = server.url(&format!(
            "/v1/processes/{}/wait?timeout_ms=10000",
            process.id
        ));
        let http = server.http.clone();
        tokio::spawn(async move {
            let info: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
            (Instant::now(), info)
        })
    };
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    let exit_frame_at = started.elapsed();
    let exit = received.exit.unwrap();
    assert_eq!(exit.exit_code, Some(0));
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert!(
        exit_frame_at < Duration::from_millis(50),
        "exit frame took {exit_frame_at:?}"
    );
    let (returned, info) = waiter.await.unwrap();
    assert_eq!(info["status"], "exited");
    assert!(
        returned.duration_since(started) < Duration::from_millis(50),
        "wait returned after {:?}",
        returned.duration_since(started)
    );
}

/// `CSI 65535 b` without end: 8 bytes that ask for 65,535 cells each.
const REPEATS: &str = r#"
import sys
block = "x" + "\x1b[65535b" * 4096
while True:
    sys.stdout.write(block)
"#;

#[tokio::test]
async fn floods_of_huge_repeats_delay_neither_the_screen_nor_another_sessions_echo() {
    let server = TestServer::start();
    let floods: Vec<_> = futures_util::future::join_all(
        (0..2).map(|_| server.spawn(json!({"argv": ["python3", "-c", REPEATS], "tty": true}))),
    )
    .await;
    let echo = server.spawn(json!({"argv": ["cat"], "tty": true})).await;
    let mut attachment = server.attach(&echo.id, "").await;
    let mut received = Received::default();
    for round in 0..10 {
        for flood in &floods {
            let started = Instant::now();
            let response = server
                .http
                .get(server.url(&format!("/v1/processes/{}/screen", flood.id)))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            assert!(response.headers().contains_key("tether-offset"));
            response.bytes().await.unwrap();
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "round {round}: GET .../screen took {:?}",
                started.elapsed()
            );
        }
        let started = Instant::now();
        let word = format!("echo{round}");
        attachment
            .send(ClientFrame::Stdin {
                data: format!("{word}\r").into_bytes(),
            })
            .await;
        attachment.until_stdout_contains(&word, &mut received).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "round {round}: echo took {:?}",
            started.elapsed()
        );
    }
    for flood in &floods {
        server
            .post(&format!("/v1/processes/{}/kill", flood.id), json!({}))
            .await;
    }
}
