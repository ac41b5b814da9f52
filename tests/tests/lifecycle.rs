//! A process's life: spawn and its errors, idempotency keys, names,
//! deadlines, the unattached timeout, signals it sends itself, kill and
//! DELETE (two things), stubborn and forking children, and the exit
//! reported with its final fields.

use std::time::Duration;

use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason};
use tether_tests::{
    kill_session, session_members, wait_session_gone, Attachment, Received, TestServer,
};

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

// ---- Kill and forget are two things (issue 13) ----

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

// ---- Names (issue 13) ----

#[tokio::test]
async fn a_name_is_unique_and_works_wherever_the_id_does() {
    let server = TestServer::start();
    let process = server
        .spawn(json!({"command": "echo hi; read x", "stdin": true, "name": "build-1"}))
        .await;
    assert_eq!(process.name.as_deref(), Some("build-1"));
    let by_name = server.status("build-1").await;
    assert_eq!(by_name.id, process.id);
    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "name": "build-1"}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("name_taken")),
        "{body}"
    );
    for bad in ["", "has space", "a/b", &"x".repeat(65), &"0".repeat(32)] {
        let (status, body) = server
            .post("/v1/processes", json!({"argv": ["true"], "name": bad}))
            .await;
        assert_eq!(status, 400, "{bad:?}: {body}");
    }
    // stdin, attach and wait by name.
    let (status, _) = server.post_raw_stdin("build-1", b"go\n").await;
    assert_eq!(status, 204);
    let received = server.attach("build-1", "").await.until_exit().await;
    assert_eq!(received.stdout, b"hi\n");
    let (status, waited) = server.get("/v1/processes/build-1/wait").await;
    assert_eq!((status, &waited["exit_code"]), (200, &json!(0)));
    // Forgotten, the name is free.
    let response = server
        .http
        .delete(server.url("/v1/processes/build-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let again = server
        .spawn(json!({"argv": ["true"], "name": "build-1"}))
        .await;
    assert_ne!(again.id, process.id);
}

// ---- The end of an unattached process (issue 13) ----

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

/// `ws://.../v1/run?request=JSON`.
fn run_url(server: &TestServer, request: serde_json::Value) -> String {
    let mut url = reqwest::Url::parse(&server.url("/v1/run")).unwrap();
    url.query_pairs_mut()
        .append_pair("request", &request.to_string());
    url.as_str().replacen("http", "ws", 1)
}

#[tokio::test]
async fn run_spawns_and_attaches_in_one_websocket_from_the_first_byte() {
    let server = TestServer::start();
    let command = json!({"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]});
    let mut attachment = Attachment::connect(&run_url(&server, command)).await;
    let (process, stdout, stderr) = attachment.hello.clone();
    assert_eq!((stdout, stderr), (0, 0), "from the first byte");
    assert_eq!(process.argv[0], "sh");
    let received = attachment.until_exit().await;
    assert_eq!(
        (received.stdout.as_slice(), received.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    let exit = received.exit.expect("exit frame");
    assert_eq!(
        (exit.id.as_str(), exit.exit_code),
        (process.id.as_str(), Some(3))
    );
    // A process like any other: known by the id `hello` gave.
    assert_eq!(server.status(&process.id).await.exit_code, Some(3));

    // Stdin through the same socket.
    let mut cat =
        Attachment::connect(&run_url(&server, json!({"argv": ["cat"], "stdin": true}))).await;
    cat.send(ClientFrame::Stdin {
        data: b"typed\n".to_vec(),
    })
    .await;
    cat.send(ClientFrame::StdinEof).await;
    let received = cat.until_exit().await;
    assert_eq!(received.stdout, b"typed\n");
    assert_eq!(received.exit.and_then(|e| e.exit_code), Some(0));
}

#[tokio::test]
async fn run_refuses_bad_requests_before_starting_anything() {
    let server = TestServer::start();
    let marker = std::env::temp_dir().join(format!("tether-run-refused-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let touch = json!({"argv": ["touch", marker.to_str().unwrap()]});
    // A plain GET, not a WebSocket: refused before the spawn.
    let plain = run_url(&server, touch.clone()).replacen("ws", "http", 1);
    let response = server.http.get(plain).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");

    let refused = |url: String| async move {
        match tokio_tungstenite::connect_async(url).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                response.status().as_u16()
            }
            Err(e) => panic!("expected an HTTP refusal, got {e}"),
            Ok(_) => panic!("expected a refusal, got a WebSocket"),
        }
    };
    let base = server.url("/v1/run").replacen("http", "ws", 1);
    assert_eq!(refused(base.clone()).await, 400, "no request=");
    assert_eq!(
        refused(format!("{base}?request=%7Bnot")).await,
        400,
        "not JSON"
    );
    assert_eq!(
        refused(run_url(&server, json!({"argv": ["true"], "bogus": 1}))).await,
        400
    );
    assert_eq!(
        refused(run_url(&server, json!({"argv": ["no-such-program-xyz"]}))).await,
        422,
        "a spawn that fails is the spawn's error"
    );
    let mut windowless = run_url(&server, touch);
    windowless.push_str("&window=0");
    assert_eq!(refused(windowless).await, 400);
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    assert!(!marker.exists());
}
