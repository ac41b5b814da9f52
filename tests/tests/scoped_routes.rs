//! Scoped tokens on every route beyond the first ones: the output stream
//! (raw and Server-Sent Events), the screen and `screen=1` attach need
//! `read`; `kill`, `DELETE ?force` and `PATCH` need `kill`; `POST /v1/exec`,
//! `GET /v1/run` and every page of the list need the operator; a name or an id of another
//! node reaches nothing but the token's own process; and a token for a
//! process recovered from a data directory dies when it is forgotten.
//! Each refusal is a 403 with the code saying why, and leaves the process
//! as it was.

use serde_json::{json, Value};
use tether_protocol::{ExitReason, ServerFrame};
use tether_tests::scoped::*;
use tether_tests::*;

async fn mint(server: &TestServer, id: &str, rights: &[&str]) -> String {
    let body = mint_as_operator(server, id, rights, 60_000).await;
    body["token"].as_str().unwrap().to_string()
}

async fn operator_status(server: &TestServer, id: &str) -> Value {
    let (status, info) = call(
        server,
        "GET",
        &format!("/v1/processes/{id}"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 200, "{info}");
    info
}

/// Waits (bounded) until the operator sees `id`'s stdout reach `bytes`.
async fn until_stdout_bytes(server: &TestServer, id: &str, bytes: u64) {
    let info = settle_async(
        || operator_status(server, id),
        |info| info["stdout_bytes"].as_u64().unwrap_or(0) >= bytes,
    )
    .await;
    assert!(
        info["stdout_bytes"].as_u64().unwrap_or(0) >= bytes,
        "{info}"
    );
}

fn server() -> TestServer {
    TestServer::start_with(&["--token", OPERATOR])
}

#[tokio::test]
async fn read_covers_the_output_stream_its_events_the_screen_and_a_screen_attach() {
    let server = server();
    let a = spawn_as_operator(
        &server,
        json!({"command": "printf 'screen-marker\\n'; sleep 30", "tty": true}),
    )
    .await;
    let a = a["id"].as_str().unwrap().to_string();
    until_stdout_bytes(&server, &a, 14).await;
    let token = mint(&server, &a, &["read"]).await;
    let t = Some(token.as_str());

    let (status, raw) = call_text(
        &server,
        "GET",
        &format!("/v1/processes/{a}/output"),
        t,
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains("screen-marker"), "{raw:?}");

    let (status, events) = call_text(
        &server,
        "GET",
        &format!("/v1/processes/{a}/output"),
        t,
        None,
        Some("text/event-stream"),
    )
    .await;
    assert_eq!(status, 200, "{events}");
    assert!(events.contains("event: stdout\n"), "{events:?}");

    let (status, screen) = call_text(
        &server,
        "GET",
        &format!("/v1/processes/{a}/screen"),
        t,
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{screen}");
    assert!(screen.contains("screen-marker"), "{screen:?}");

    let mut attachment = Attachment::connect(&format!(
        "{}&access_token={token}",
        server.ws_url(&a, "screen=1")
    ))
    .await;
    match attachment.frame().await {
        Some(ServerFrame::Screen { data, .. }) => {
            assert!(String::from_utf8_lossy(&data).contains("screen-marker"));
        }
        other => panic!("expected a screen frame right after hello, got {other:?}"),
    }
    assert_eq!(operator_status(&server, &a).await["status"], "running");
}

#[tokio::test]
async fn kill_and_forced_delete_need_the_kill_right_and_leave_the_process_running_without_it() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let a = a["id"].as_str().unwrap().to_string();
    let reader = mint(&server, &a, &["read", "write"]).await;
    for (method, path) in [
        ("POST", format!("/v1/processes/{a}/kill")),
        ("POST", format!("/v1/processes/{a}/kill?grace_ms=0")),
        ("DELETE", format!("/v1/processes/{a}?force=1")),
        ("DELETE", format!("/v1/processes/{a}")),
        // A shorter unattached timeout would end it.
        ("PATCH", format!("/v1/processes/{a}")),
    ] {
        let body = (method == "PATCH").then(|| json!({"unattached_timeout_ms": 1}));
        let (status, answer) = call(&server, method, &path, Some(&reader), body).await;
        assert_eq!(
            (status, code(&answer)),
            (403, "missing_right"),
            "{method} {path}: {answer}"
        );
    }
    assert_eq!(operator_status(&server, &a).await["status"], "running");

    let killer = mint(&server, &a, &["kill"]).await;
    let (status, info) = call(
        &server,
        "PATCH",
        &format!("/v1/processes/{a}"),
        Some(&killer),
        Some(json!({"unattached_timeout_ms": 600_000})),
    )
    .await;
    assert_eq!(
        (status, &info["status"]),
        (200, &json!("running")),
        "{info}"
    );
    let (status, info) = call(
        &server,
        "POST",
        &format!("/v1/processes/{a}/kill?grace_ms=0"),
        Some(&killer),
        None,
    )
    .await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["status"], "exited");
    assert_eq!(info["reason"], "killed");

    let b = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let b = b["id"].as_str().unwrap().to_string();
    let killer = mint(&server, &b, &["kill"]).await;
    let (status, info) = call(
        &server,
        "DELETE",
        &format!("/v1/processes/{b}?force=1"),
        Some(&killer),
        None,
    )
    .await;
    assert_eq!(status, 200, "{info}");
    let (status, _) = call(
        &server,
        "GET",
        &format!("/v1/processes/{b}"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 404, "forgotten");
    // Forgotten, its token is dead.
    let (status, answer) = call(
        &server,
        "GET",
        &format!("/v1/processes/{b}"),
        Some(&killer),
        None,
    )
    .await;
    assert_eq!((status, code(&answer)), (401, "token_process_gone"));
}

#[tokio::test]
async fn exec_and_every_page_of_the_list_are_the_operators() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let a = a["id"].as_str().unwrap().to_string();
    spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let token = mint(&server, &a, &["read", "write", "kill"]).await;
    let t = Some(token.as_str());
    let marker = std::env::temp_dir().join(format!("tether-exec-refused-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let (status, answer) = call(
        &server,
        "POST",
        "/v1/exec",
        t,
        Some(json!({"argv": ["touch", marker.to_str().unwrap()]})),
    )
    .await;
    assert_eq!((status, code(&answer)), (403, "out_of_scope"), "{answer}");
    // Nor spawn and attach in one WebSocket.
    let mut run = reqwest::Url::parse(&server.url("/v1/run")).unwrap();
    run.query_pairs_mut().append_pair(
        "request",
        &json!({"argv": ["touch", marker.to_str().unwrap()]}).to_string(),
    );
    let path = format!("{}?{}", run.path(), run.query().unwrap_or_default());
    let (status, answer) = call(&server, "GET", &path, t, None).await;
    assert_eq!((status, code(&answer)), (403, "out_of_scope"), "{answer}");
    for path in [
        "/v1/processes?limit=1".to_string(),
        format!("/v1/processes?after={a}"),
        format!("/v1/processes?after={a}&limit=1"),
    ] {
        let (status, answer) = call(&server, "GET", &path, t, None).await;
        assert_eq!((status, code(&answer)), (403, "out_of_scope"), "{path}");
    }
    // Nothing ran: still the two processes, and no file.
    let (status, list) = call(&server, "GET", "/v1/processes", Some(OPERATOR), None).await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    assert!(!marker.exists());

    // The operator may.
    let (status, result) = call(
        &server,
        "POST",
        "/v1/exec",
        Some(OPERATOR),
        Some(json!({"command": "echo exec-ok"})),
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["stdout"]["data"], "exec-ok\n");
}

#[tokio::test]
async fn a_name_reaches_the_tokens_own_process_only_and_other_names_look_like_nothing() {
    let server = TestServer::start_with(&["--token", OPERATOR, "--node", "n1"]);
    let alpha = spawn_as_operator(
        &server,
        json!({"command": "echo alpha-out; sleep 30", "name": "alpha", "tty": true}),
    )
    .await;
    let alpha_id = alpha["id"].as_str().unwrap().to_string();
    spawn_as_operator(
        &server,
        json!({"command": "echo beta-out; sleep 30", "name": "beta", "tty": true}),
    )
    .await;
    until_stdout_bytes(&server, &alpha_id, 9).await;
    let token = mint(&server, "alpha", &["read", "write", "kill"]).await;
    let t = Some(token.as_str());

    let (status, info) = call(&server, "GET", "/v1/processes/alpha", t, None).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["id"], alpha_id.as_str());
    let (status, raw) =
        call_text(&server, "GET", "/v1/processes/alpha/output", t, None, None).await;
    assert_eq!(status, 200);
    assert!(raw.contains("alpha-out"), "{raw:?}");

    // Another name, a name that does not exist, an id of another node, a
    // prefix of its own id: all the same refusal.
    let other_node = format!("n2.{}", "0".repeat(32));
    let prefix = alpha_id[..8].to_string();
    for target in ["beta", "gamma", other_node.as_str(), prefix.as_str()] {
        for (method, path) in [
            ("GET", format!("/v1/processes/{target}")),
            ("GET", format!("/v1/processes/{target}/output")),
            ("GET", format!("/v1/processes/{target}/screen")),
            ("POST", format!("/v1/processes/{target}/kill")),
            ("DELETE", format!("/v1/processes/{target}?force=1")),
        ] {
            let (status, answer) = call(&server, method, &path, t, None).await;
            assert_eq!(
                (status, code(&answer)),
                (403, "out_of_scope"),
                "{method} {path}: {answer}"
            );
            assert!(!answer.to_string().contains("beta-out"));
        }
    }
    let (status, body) = refused_attach(&format!(
        "{}&access_token={token}",
        server.ws_url("beta", "screen=1")
    ))
    .await;
    assert_eq!((status, code(&body)), (403, "out_of_scope"));
    assert_eq!(operator_status(&server, "beta").await["status"], "running");

    // The CLI with that token: `status` by name works (it cannot list, so
    // the name goes to the server as it is); `ps` is refused.
    let cli = |args: &[&str]| {
        std::process::Command::new(binary("tether"))
            .args(["--server", &server.base, "--token", &token])
            .args(args)
            .env_remove("TETHER_TOKEN")
            .env_remove("TETHER_TOKEN_FILE")
            .output()
            .unwrap()
    };
    let status = cli(&["status", "alpha"]);
    assert!(status.status.success(), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stdout).contains(&alpha_id));
    let logs = cli(&["logs", "alpha"]);
    assert!(logs.status.success(), "{logs:?}");
    assert!(String::from_utf8_lossy(&logs.stdout).contains("alpha-out"));
    let ps = cli(&["ps"]);
    assert!(!ps.status.success());
    assert!(
        String::from_utf8_lossy(&ps.stderr).contains("out_of_scope"),
        "{ps:?}"
    );
}

#[tokio::test]
async fn a_token_for_a_recovered_process_reads_it_and_dies_when_it_is_forgotten() {
    let dir = fresh_dir();
    let dir_arg = dir.to_str().unwrap().to_string();
    let args = ["--token", OPERATOR, "--data-dir", dir_arg.as_str()];
    let first = TestServer::start_with(&args);
    let done = spawn_as_operator(&first, json!({"command": "echo from-the-first-run"})).await;
    let done = done["id"].as_str().unwrap().to_string();
    let (status, info) = call(
        &first,
        "GET",
        &format!("/v1/processes/{done}/wait?timeout_ms=10000"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!((status, info["status"].as_str()), (200, Some("exited")));
    let old_token = mint(&first, &done, &["read"]).await;
    drop(first);

    let second = TestServer::start_with(&args);
    // A token of the earlier run was signed with a key that died with it.
    let (status, answer) = call(
        &second,
        "GET",
        &format!("/v1/processes/{done}"),
        Some(&old_token),
        None,
    )
    .await;
    assert_eq!((status, code(&answer)), (401, "unauthorized"), "{answer}");

    let token = mint(&second, &done, &["read"]).await;
    let (status, raw) = call_text(
        &second,
        "GET",
        &format!("/v1/processes/{done}/output"),
        Some(&token),
        None,
        None,
    )
    .await;
    assert_eq!((status, raw.as_str()), (200, "from-the-first-run\n"));
    let mut attachment = Attachment::connect(&format!(
        "{}&access_token={token}",
        second.ws_url(&done, "")
    ))
    .await;
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"from-the-first-run\n");
    assert!(matches!(
        received.exit,
        Some(ref info) if info.reason == Some(ExitReason::Exit)
    ));
    let (status, answer) = call(
        &second,
        "DELETE",
        &format!("/v1/processes/{done}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!((status, code(&answer)), (403, "missing_right"));

    let (status, _) = call(
        &second,
        "DELETE",
        &format!("/v1/processes/{done}"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 200);
    for path in [
        format!("/v1/processes/{done}"),
        format!("/v1/processes/{done}/output"),
    ] {
        let (status, answer) = call(&second, "GET", &path, Some(&token), None).await;
        assert_eq!(
            (status, code(&answer)),
            (401, "token_process_gone"),
            "{path}"
        );
    }
    let (status, _) = refused_attach(&format!(
        "{}&access_token={token}",
        second.ws_url(&done, "")
    ))
    .await;
    assert_eq!(status, 401);
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
