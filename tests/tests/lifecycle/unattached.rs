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

/// `PATCH /v1/processes/{id}` changes the unattached timeout of a running
/// process: set where there was none, it ends the process (counted from the
/// change); set to 0, a process that would have ended runs on.
#[tokio::test]
async fn patch_sets_and_clears_the_unattached_timeout_of_a_running_process() {
    let server = TestServer::start();
    let patch = |id: String, ms: u64| {
        let server = &server;
        async move {
            tether_tests::scoped::call(
                server,
                "PATCH",
                &format!("/v1/processes/{id}"),
                None,
                Some(json!({"unattached_timeout_ms": ms})),
            )
            .await
        }
    };
    // None at spawn; 300 ms from the PATCH on.
    let never = server.sh("sleep 30", json!({})).await;
    let set = std::time::Instant::now();
    let (status, info) = patch(never.id.clone(), 300).await;
    assert_eq!(
        (status, &info["status"]),
        (200, &json!("running")),
        "{info}"
    );
    let exit = server.wait_exit(&never.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Unattached));
    assert!(
        set.elapsed() >= Duration::from_millis(250),
        "ended {:?} after the PATCH",
        set.elapsed()
    );

    // 1 s at spawn, cleared at once: still running a second past it.
    let cleared = server
        .sh("sleep 30", json!({"unattached_timeout_ms": 1000}))
        .await;
    let (status, info) = patch(cleared.id.clone(), 0).await;
    assert_eq!(status, 200, "{info}");
    let (status, value) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=2000",
            cleared.id
        ))
        .await;
    assert_eq!(
        (status, &value["status"]),
        (200, &json!("running")),
        "{value}"
    );
    // An attachment still holds it whatever the timeout; it counts afresh
    // from the detach.
    let attachment = server.attach(&cleared.id, "readonly=1").await;
    let (status, _) = patch(cleared.id.clone(), 200).await;
    assert_eq!(status, 200);
    let (_, value) = server
        .get(&format!("/v1/processes/{}/wait?timeout_ms=700", cleared.id))
        .await;
    assert_eq!(value["status"], json!("running"), "{value}");
    drop(attachment);
    let exit = server.wait_exit(&cleared.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Unattached));
}

/// A bad PATCH is a clear 400, an unknown process a 404, an exited one a
/// 409, and nothing changes.
#[tokio::test]
async fn a_bad_patch_is_refused_with_the_servers_codes() {
    let server = TestServer::start();
    let process = server.sh("sleep 30", json!({})).await;
    let path = format!("/v1/processes/{}", process.id);
    let call = |path: String, body: Option<serde_json::Value>| {
        let server = &server;
        async move { tether_tests::scoped::call(server, "PATCH", &path, None, body).await }
    };
    for body in [
        json!({"unattached_timeout_ms": -1}),
        json!({"unattached_timeout_ms": "10"}),
        json!({"unattached_timeout_ms": 10, "timeout_ms": 5}),
        json!({}),
        json!([]),
    ] {
        let (status, answer) = call(path.clone(), Some(body.clone())).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (400, &json!("invalid_request")),
            "{body}: {answer}"
        );
    }
    let (status, answer) = call(path.clone(), None).await;
    assert_eq!(status, 400, "no body: {answer}");
    let (status, answer) = call(
        "/v1/processes/no-such-process".into(),
        Some(json!({"unattached_timeout_ms": 10})),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("not_found"))
    );
    assert_eq!(
        server.status(&process.id).await.status,
        ProcessStatus::Running
    );

    let done = server.sh("true", json!({})).await;
    server.wait_exit(&done.id).await;
    let (status, answer) = call(
        format!("/v1/processes/{}", done.id),
        Some(json!({"unattached_timeout_ms": 10})),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (409, &json!("not_running")),
        "{answer}"
    );
}
