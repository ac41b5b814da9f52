//! Kill and forget are two things (issue 13).

use super::*;

/// `POST .../kill` ends the whole session and keeps the process: its
/// object, output and `wait` stay until the exited TTL, like any exit.
#[tokio::test]
async fn a_killed_process_stays_queryable_until_it_is_forgotten() {
    let server = TestServer::start();
    let process = server
        .sh("echo started; sleep 30 & sleep 30", json!({}))
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let mut seen = Received::default();
    attachment.until_stdout_contains("started", &mut seen).await;
    let (status, killed) = server
        .post(&format!("/v1/processes/{}/kill", process.id), json!(null))
        .await;
    assert_eq!(status, 200, "{killed}");
    assert_eq!(
        killed["status"], "exited",
        "kill answers once exited: {killed}"
    );
    assert_eq!(killed["reason"], "killed");
    assert_eq!(killed["exit_code"], 143, "TERM first, by default: {killed}");
    assert!(
        wait_session_gone(process.pid).await,
        "the background job too"
    );
    assert_eq!(
        attachment.until_exit().await.exit.unwrap().reason,
        Some(ExitReason::Killed)
    );
    // Still known: status, wait and a replaying attach.
    assert_eq!(
        server.status(&process.id).await.reason,
        Some(ExitReason::Killed)
    );
    let waited = server.wait_exit(&process.id).await;
    assert_eq!(waited.exit_code, Some(143));
    let replay = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(replay.stdout, b"started\n");
    // Killing it again changes nothing.
    let (status, again) = server
        .post(&format!("/v1/processes/{}/kill", process.id), json!(null))
        .await;
    assert_eq!((status, &again["exit_code"]), (200, &json!(143)));
    // Forgetting is DELETE.
    let response = server
        .http
        .delete(server.url(&format!("/v1/processes/{}", process.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (status, _) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!(status, 404);
}

/// `grace_ms=0` is `docker kill`: SIGKILL at once, even for a program that
/// traps TERM; exit code 137.
#[tokio::test]
async fn kill_with_no_grace_sends_sigkill_at_once() {
    let server = TestServer::start_with(&["--kill-grace-ms", "30000"]);
    let process = server
        .sh(
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            json!({}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    attachment
        .until_stdout_contains("ready", &mut Received::default())
        .await;
    let started = std::time::Instant::now();
    let (status, killed) = server
        .post(
            &format!("/v1/processes/{}/kill?grace_ms=0", process.id),
            json!(null),
        )
        .await;
    assert_eq!(status, 200, "{killed}");
    assert_eq!(
        (&killed["exit_code"], &killed["signal"]),
        (&json!(137), &json!("KILL"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for bad in ["soon", "600001"] {
        let (status, body) = server
            .post(
                &format!("/v1/processes/{}/kill?grace_ms={bad}", process.id),
                json!(null),
            )
            .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request"))
        );
    }
}

/// DELETE forgets; a running process is refused (409 `still_running`)
/// unless `force=1`, which kills it first.
#[tokio::test]
async fn delete_forgets_and_refuses_a_running_process_unless_forced() {
    let server = TestServer::start();
    let process = server.sh("sleep 30", json!({})).await;
    let url = server.url(&format!("/v1/processes/{}", process.id));
    let response = server.http.delete(&url).send().await.unwrap();
    assert_eq!(response.status(), 409);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "still_running");
    assert!(!server.status(&process.id).await.is_exited());
    let response = server
        .http
        .delete(format!("{url}?force=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        (&body["status"], &body["reason"]),
        (&json!("exited"), &json!("killed"))
    );
    assert!(wait_session_gone(process.pid).await);
    let (status, _) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!(status, 404);
}

/// An exited process's output stays until it is removed (no time limit by
/// default, as docker keeps logs until `rm`), and a process that is gone
/// says why in its 404: removed, or its TTL passed.
#[tokio::test]
async fn exited_output_stays_until_removed_and_a_gone_process_says_why() {
    let server = TestServer::start();
    let process = server.sh("echo kept", serde_json::json!({})).await;
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.exit_code, Some(0));
    let (status, info) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!((status, info["status"].as_str()), (200, Some("exited")));
    let url = server.url(&format!("/v1/processes/{}", process.id));
    assert_eq!(server.http.delete(&url).send().await.unwrap().status(), 200);
    let (status, body) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!(status, 404);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("removed"), "{message}");

    let short = TestServer::start_with(&["--exited-ttl-ms", "100"]);
    let process = short.sh("true", serde_json::json!({"name": "brief"})).await;
    short.wait_exit(&process.id).await;
    let (status, body) = tether_tests::settle_async(
        || short.get("/v1/processes/brief"),
        |(status, _)| *status == 404,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exited-ttl-ms"), "{message}");
}
