//! The end of an unattached process (issue 13).

use super::*;

/// With `unattached_timeout_ms`, a process nobody attaches to is ended
/// (the whole session, reason `unattached`).
#[tokio::test]
async fn a_process_nobody_attaches_to_ends_after_its_unattached_timeout() {
    let server = TestServer::start();
    let process = server
        .sh("sleep 30 & sleep 30", json!({"unattached_timeout_ms": 300}))
        .await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Unattached));
    assert_eq!(exit.exit_code, Some(143));
    assert!(wait_session_gone(process.pid).await);
    // 0 means never, as for timeout_ms.
    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "unattached_timeout_ms": 0}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// An attached process is never ended, however long it stays attached;
/// the timer starts afresh when the last attachment goes.
#[tokio::test]
async fn an_attached_process_is_never_ended_and_the_timer_restarts_at_detach() {
    let server = TestServer::start();
    let process = server
        .sh("sleep 30", json!({"unattached_timeout_ms": 400}))
        .await;
    let attachment = server.attach(&process.id, "readonly=1").await;
    // Attached for three times the timeout: still running.
    let (status, value) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=1200",
            process.id
        ))
        .await;
    assert_eq!(
        (status, &value["status"]),
        (200, &json!("running")),
        "{value}"
    );
    drop(attachment);
    // Detached: it runs on for the timeout counted from the detach, not
    // from the spawn (1.2 s ago), then ends.
    let detached = std::time::Instant::now();
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Unattached));
    assert!(
        detached.elapsed() >= Duration::from_millis(300),
        "ended {:?} after the detach",
        detached.elapsed()
    );
}
