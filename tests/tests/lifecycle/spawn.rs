//! Spawning: clear errors (a program that cannot run told apart from one
//! not found), idempotency keys, stdin and terminals by default.

use super::*;

#[tokio::test]
async fn spawn_errors_are_clear() {
    let server = TestServer::start();
    let (status, body) = server
        .post("/v1/processes", json!({"argv": ["no-such-program-xyz"]}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "spawn_failed");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no-such-program-xyz"));

    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "cwd": "/no/such/dir"}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/no/such/dir"));

    let response = server
        .http
        .post(server.url("/v1/processes"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");

    for bad in [
        json!({"argv": ["true"], "timeout_ms": -1}),
        json!({"argv": ["true"], "timeout_ms": 1.5}),
        json!({"argv": ["tr\u{0}ue"]}),
        json!({}),
        json!({"argv": ["true"], "bogus": 1}),
    ] {
        let (status, body) = server.post("/v1/processes", bad.clone()).await;
        assert_eq!(status, 400, "{bad} -> {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
    }
}

#[tokio::test]
async fn an_idempotency_key_never_starts_a_command_twice() {
    let server = TestServer::start();
    let send = |body: serde_json::Value| {
        server
            .http
            .post(server.url("/v1/processes"))
            .header("Idempotency-Key", "k-1")
            .json(&body)
            .send()
    };
    let first = send(json!({"argv": ["true"]})).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: serde_json::Value = first.json().await.unwrap();
    let again = send(json!({"argv": ["true"]})).await.unwrap();
    assert_eq!(again.status(), 200);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(first["id"], again["id"]);
    let other = send(json!({"argv": ["false"]})).await.unwrap();
    assert_eq!(other.status(), 422);
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    // The key lives as long as its process is known: forgotten, the key
    // is free for another request.
    let id = first["id"].as_str().unwrap();
    server.wait_exit(id).await;
    let url = server.url(&format!("/v1/processes/{id}"));
    assert_eq!(server.http.delete(url).send().await.unwrap().status(), 200);
    let after = send(json!({"argv": ["false"]})).await.unwrap();
    assert_eq!(
        after.status(),
        201,
        "the key of a forgotten process is free"
    );
}

#[tokio::test]
async fn concurrent_requests_with_one_idempotency_key_start_one_process() {
    let server = TestServer::start();
    let send = || {
        server
            .http
            .post(server.url("/v1/processes"))
            .header("Idempotency-Key", "k-concurrent")
            .json(&json!({"argv": ["sleep", "5"]}))
            .send()
    };
    let answers = futures_util::future::join_all((0..8).map(|_| send())).await;
    let mut ids = Vec::new();
    let mut created = 0;
    for answer in answers {
        let answer = answer.unwrap();
        created += usize::from(answer.status() == 201);
        let body: serde_json::Value = answer.json().await.unwrap();
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    assert_eq!(created, 1, "exactly one request started it");
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn stdin_defaults_to_dev_null_so_readers_cannot_hang() {
    let server = TestServer::start();
    let process = server.sh("cat; echo eof", json!({})).await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.stdout_bytes, 4);
    let (status, body) = server.post_raw_stdin(&process.id, b"x").await;
    assert_eq!(status, 409, "{body}");
}

#[tokio::test]
async fn a_pipes_process_has_no_terminal() {
    let server = TestServer::start();
    let process = server
        .sh("test -t 0 || test -t 1 || test -t 2", json!({}))
        .await;
    assert_eq!(server.wait_exit(&process.id).await.exit_code, Some(1));
}

/// "Found but cannot run" (a file without execute permission, a directory,
/// a missing cwd) is `cannot_execute`, apart from "not found"
/// (`spawn_failed`), so clients can exit 126 and 127 as a shell does.
#[tokio::test]
async fn a_program_that_cannot_run_is_told_apart_from_one_not_found() {
    let server = TestServer::start();
    for (body, code) in [
        (json!({"argv": ["/etc/passwd"]}), "cannot_execute"),
        (json!({"argv": ["/tmp"]}), "cannot_execute"),
        (
            json!({"argv": ["true"], "cwd": "/nonexistent"}),
            "cannot_execute",
        ),
        (
            json!({"argv": ["true"], "cwd": "/etc/passwd"}),
            "cannot_execute",
        ),
        (json!({"argv": ["/no/such/program"]}), "spawn_failed"),
        (
            json!({"argv": ["no-such-program-anywhere"]}),
            "spawn_failed",
        ),
    ] {
        let (status, answer) = server.post("/v1/processes", body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (422, Some(code)),
            "{body}: {answer}"
        );
    }
}
