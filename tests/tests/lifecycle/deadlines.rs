//! Deadlines, signals a process sends itself, stubborn and forking children, and the exit reported with its final fields.

use super::*;

#[tokio::test]
async fn a_deadline_kills_the_whole_session_and_reports_timeout() {
    let server = TestServer::start();
    let process = server
        .sh(
            "printf partial; sleep 30 & sleep 30",
            json!({"timeout_ms": 1000}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    let exit = received.exit.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Timeout));
    assert_eq!(exit.exit_code, Some(124));
    assert_eq!(received.stdout, b"partial");
    assert!(
        wait_session_gone(process.pid).await,
        "sleeps survived: {:?}",
        session_members(process.pid)
    );
}

#[tokio::test]
async fn a_self_inflicted_kill_is_a_signal_not_a_timeout() {
    let server = TestServer::start();
    let process = server.sh("kill -9 $$", json!({"timeout_ms": 100})).await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Signal));
    assert_eq!(exit.exit_code, Some(137));
    assert_eq!(exit.signal.as_deref(), Some("KILL"));
}

#[tokio::test]
async fn a_forced_delete_kills_the_session_with_reason_killed_and_forgets() {
    let server = TestServer::start();
    let process = server.sh("sleep 30 & sleep 30", json!({})).await;
    let mut attachment = server.attach(&process.id, "").await;
    let response = server
        .http
        .delete(server.url(&format!("/v1/processes/{}?force=1", process.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let exit = attachment.until_exit().await.exit.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Killed));
    assert!(wait_session_gone(process.pid).await);
    let (status, _) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!(status, 404);
}

/// A forced DELETE of a session that traps TERM waits (bounded by the kill grace)
/// until it has exited. While it is dying it still counts against
/// `--max-processes`: the limit bounds processes running on the machine,
/// not entries in the table.
#[tokio::test]
async fn a_deleted_process_still_dying_counts_against_the_process_limit() {
    let server = TestServer::start_with(&["--max-processes", "1", "--kill-grace-ms", "1500"]);
    let stubborn = server
        .sh(
            "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done",
            json!({"timeout_ms": 60000}),
        )
        .await;
    let mut attachment = server.attach(&stubborn.id, "").await;
    let mut seen = Received::default();
    attachment.until_stdout_contains("ready", &mut seen).await;
    let delete = {
        let request = server
            .http
            .delete(server.url(&format!("/v1/processes/{}?force=1", stubborn.id)));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    // Once the DELETE has sent TERM (the trap says so), the session lives on
    // through the grace and still holds the only slot.
    attachment
        .until_stdout_contains("got-term", &mut seen)
        .await;
    let (status, value) = server
        .post("/v1/processes", json!({"command": "sleep 30"}))
        .await;
    assert!(!session_members(stubborn.pid).is_empty());
    if let Some(pid) = value["pid"].as_u64() {
        kill_session(pid as u32);
    }
    assert_eq!(status, 503, "{value}");
    let response = delete.await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let deleted: serde_json::Value = response.json().await.unwrap();
    assert_eq!(deleted["status"], "exited");
    assert_eq!(deleted["reason"], "killed");
    assert!(session_members(stubborn.pid).is_empty());
    let (status, _) = server
        .post("/v1/processes", json!({"argv": ["true"]}))
        .await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn timestamps_have_milliseconds_and_finished_at_is_when_wait_returns() {
    let server = TestServer::start();
    let process = server.sh("sleep 0.2", json!({})).await;
    let waited = server.wait_exit(&process.id).await;
    let mut attachment = server.attach(&process.id, "").await;
    let exit = attachment.until_exit().await.exit.unwrap();
    let millis = |t: &str| {
        assert_eq!(t.len(), "2026-01-01T00:00:00.000Z".len(), "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{t}");
    };
    millis(&waited.started_at);
    let finished = waited.finished_at.clone().unwrap();
    millis(&finished);
    assert_eq!(exit.finished_at.as_deref(), Some(finished.as_str()));
    assert!(finished > waited.started_at);
    assert!(waited.duration_ms.unwrap() >= 200);
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
    server.say(&process.id, "x\n").await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert_eq!(exit.exit_code, Some(0));
}
