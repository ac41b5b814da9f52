//! HTTP input applied once per `Idempotency-Key`: `POST .../stdin`,
//! `.../stdin/close`, `.../signal` and `.../resize` retried after a lost
//! answer do nothing twice; the same key with another request is a 422.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tether_tests::{fresh_dir, settle, settle_async, TestServer};

async fn post(
    server: &TestServer,
    path: &str,
    key: Option<&str>,
    body: &'static [u8],
) -> (u16, String) {
    let mut request = server.http.post(server.url(path)).body(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn stdin_and_its_close_with_a_key_are_applied_once_however_often_retried() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let process = server
        .sh(
            &format!("cat > '{}'", got.display()),
            serde_json::json!({"stdin": true}),
        )
        .await;
    let stdin = format!("/v1/processes/{}/stdin", process.id);
    for _ in 0..3 {
        assert_eq!(post(&server, &stdin, Some("line-1"), b"one\n").await.0, 204);
    }
    assert_eq!(post(&server, &stdin, Some("line-2"), b"two\n").await.0, 204);
    // The same key with another body: refused, nothing written.
    let (status, body) = post(&server, &stdin, Some("line-2"), b"other\n").await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("idempotency_conflict"), "{body}");
    let close = format!("/v1/processes/{}/stdin/close", process.id);
    assert_eq!(post(&server, &close, Some("eof"), b"").await.0, 204);
    // A retry of the close: answered as the first, not stdin_unavailable.
    assert_eq!(post(&server, &close, Some("eof"), b"").await.0, 204);
    assert_eq!(post(&server, &close, None, b"").await.0, 409);
    let info = server.wait_exit(&process.id).await;
    assert_eq!(info.exit_code, Some(0));
    assert_eq!(read(&got), "one\ntwo\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_signal_or_a_resize_with_a_key_is_carried_out_once() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let process = server
        .sh(
            &format!(
                "trap 'echo usr1 >> {}' USR1; echo ready; while :; do sleep 0.02 & wait; done",
                got.display()
            ),
            serde_json::json!({}),
        )
        .await;
    // The trap is set once the shell says so (an earlier USR1 would end it).
    let output = server.url(&format!(
        "/v1/processes/{}/output?stream=stdout",
        process.id
    ));
    settle_async(
        || async {
            server
                .http
                .get(&output)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        },
        |text| text == "ready\n",
    )
    .await;
    let signal = format!("/v1/processes/{}/signal", process.id);
    let usr1 = br#"{"signal":"USR1"}"#;
    for _ in 0..3 {
        assert_eq!(post(&server, &signal, Some("sig-1"), usr1).await.0, 200);
    }
    settle(|| read(&got), |g| g == "usr1\n").await;
    assert_eq!(post(&server, &signal, None, usr1).await.0, 200);
    settle(|| read(&got), |g| g == "usr1\nusr1\n").await;
    assert_eq!(
        read(&got),
        "usr1\nusr1\n",
        "one signal per key, one without"
    );
    let (status, body) = post(&server, &signal, Some("sig-1"), br#"{"signal":"USR2"}"#).await;
    assert_eq!(status, 422, "{body}");
    let pty = server
        .spawn(serde_json::json!({"argv": ["cat"], "tty": true}))
        .await;
    let resize = format!("/v1/processes/{}/resize", pty.id);
    let size = br#"{"cols":100,"rows":30}"#;
    assert_eq!(post(&server, &resize, Some("size-1"), size).await.0, 204);
    assert_eq!(post(&server, &resize, Some("size-1"), size).await.0, 204);
    let other = br#"{"cols":90,"rows":30}"#;
    assert_eq!(post(&server, &resize, Some("size-1"), other).await.0, 422);
    let _ = std::fs::remove_dir_all(&dir);
}
