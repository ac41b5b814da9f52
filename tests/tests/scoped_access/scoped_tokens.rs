//! Scoped tokens: one process, some rights, an expiry, dead with their process.

use super::*;

fn server() -> TestServer {
    TestServer::start_with(&["--token", OPERATOR])
}

#[tokio::test]
async fn a_read_only_token_reads_its_process_and_can_change_nothing() {
    let server = server();
    let a = spawn_as_operator(
        &server,
        json!({"command": "echo ready; read line; echo \"got $line\"", "stdin": true}),
    )
    .await;
    let token = mint(&server, &a, &["read"], 60_000).await;
    let t = Some(token.as_str());

    let (status, body) = call(&server, "GET", &format!("/v1/processes/{a}"), t, None).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(
        &server,
        "GET",
        &format!("/v1/processes/{a}/wait?timeout_ms=1"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 200);

    // Attach and read (token as a subprotocol, as browsers send it).
    let mut attachment = Attachment::connect_offering(
        &server.ws_url(&a, ""),
        &format!("tether.v1, tether.bearer.{token}"),
    )
    .await;
    assert_eq!(attachment.protocol.as_deref(), Some("tether.v1"));
    let mut received = Received::default();
    attachment
        .until_stdout_contains("ready\n", &mut received)
        .await;
    // Frames that act are refused on the attachment, which carries on.
    attachment
        .send(ClientFrame::Stdin {
            data: b"from-reader\n".to_vec(),
        })
        .await;
    match attachment.frame().await {
        Some(ServerFrame::Error { code, .. }) => assert_eq!(code, "missing_right"),
        other => panic!("expected an error frame, got {other:?}"),
    }

    // Every route that acts: 403 missing_right.
    for (method, path, body) in [
        ("POST", format!("/v1/processes/{a}/stdin"), None),
        ("POST", format!("/v1/processes/{a}/stdin/close"), None),
        (
            "POST",
            format!("/v1/processes/{a}/resize"),
            Some(json!({"cols": 100, "rows": 30})),
        ),
        (
            "POST",
            format!("/v1/processes/{a}/signal"),
            Some(json!({"signal": "KILL"})),
        ),
        ("DELETE", format!("/v1/processes/{a}"), None),
    ] {
        let (status, answer) = call(&server, method, &path, t, body).await;
        assert_eq!(
            (status, code(&answer)),
            (403, "missing_right"),
            "{method} {path}: {answer}"
        );
    }

    // A is untouched: running, its stdin open, nothing from the reader in it.
    let (_, info) = call(
        &server,
        "GET",
        &format!("/v1/processes/{a}"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(info["status"], "running", "{info}");
    let response = server
        .http
        .post(server.url(&format!("/v1/processes/{a}/stdin")))
        .bearer_auth(OPERATOR)
        .body("from-operator\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let received = attachment.until_exit().await;
    assert_eq!(
        String::from_utf8_lossy(&received.stdout),
        "got from-operator\n"
    );
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn a_token_never_reaches_another_process_spawns_lists_or_mints() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let b = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let token = mint(&server, &a, &["read", "write", "kill"], 60_000).await;
    let t = Some(token.as_str());
    for (method, path, body) in [
        ("GET", format!("/v1/processes/{b}"), None),
        ("GET", format!("/v1/processes/{b}/wait?timeout_ms=1"), None),
        (
            "POST",
            format!("/v1/processes/{b}/signal"),
            Some(json!({"signal": "TERM"})),
        ),
        ("DELETE", format!("/v1/processes/{b}"), None),
        // Not even whether an id exists.
        ("GET", "/v1/processes/does-not-exist".to_string(), None),
        ("GET", "/v1/processes".to_string(), None),
        (
            "POST",
            "/v1/processes".to_string(),
            Some(json!({"argv": ["true"]})),
        ),
        (
            "POST",
            format!("/v1/processes/{a}/tokens"),
            Some(json!({"rights": ["read"]})),
        ),
        (
            "POST",
            format!("/v1/processes/{b}/tokens"),
            Some(json!({"rights": ["read"]})),
        ),
    ] {
        let (status, answer) = call(&server, method, &path, t, body).await;
        assert_eq!(
            (status, code(&answer)),
            (403, "out_of_scope"),
            "{method} {path}: {answer}"
        );
    }
    let (status, body) =
        refused_attach(&format!("{}&access_token={token}", server.ws_url(&b, ""))).await;
    assert_eq!((status, code(&body)), (403, "out_of_scope"));
    // B runs on; a forged token is no token.
    assert_eq!(
        call(
            &server,
            "GET",
            &format!("/v1/processes/{b}"),
            Some(OPERATOR),
            None
        )
        .await
        .1["status"],
        "running"
    );
    let forged = format!("{}x", &token[..token.len() - 1]);
    let (status, answer) = call(
        &server,
        "GET",
        &format!("/v1/processes/{a}"),
        Some(&forged),
        None,
    )
    .await;
    assert_eq!((status, code(&answer)), (401, "unauthorized"));
}

#[tokio::test]
async fn a_write_token_types_and_signals_but_cannot_kill() {
    let server = server();
    let a = spawn_as_operator(
        &server,
        json!({"command": "read line; echo \"got $line\"; sleep 30", "stdin": true}),
    )
    .await;
    let token = mint(&server, &a, &["write"], 60_000).await;
    let mut attachment = server.attach(&a, &format!("access_token={token}")).await;
    attachment
        .send(ClientFrame::Stdin {
            data: b"typed\n".to_vec(),
        })
        .await;
    let mut received = Received::default();
    attachment
        .until_stdout_contains("got typed\n", &mut received)
        .await;
    let (status, body) = call(
        &server,
        "DELETE",
        &format!("/v1/processes/{a}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!((status, code(&body)), (403, "missing_right"));
    let (status, _) = call(
        &server,
        "POST",
        &format!("/v1/processes/{a}/signal"),
        Some(&token),
        Some(json!({"signal": "TERM"})),
    )
    .await;
    assert_eq!(status, 200);
    let received = attachment.until_exit().await;
    assert_eq!(received.exit.unwrap().signal.as_deref(), Some("TERM"));
}

#[tokio::test]
async fn after_its_expiry_every_request_with_the_token_is_refused() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"], "stdin": true})).await;
    let token = mint(&server, &a, &["read", "write", "kill"], 1500).await;
    let t = Some(token.as_str());
    let (status, _) = call(&server, "GET", &format!("/v1/processes/{a}"), t, None).await;
    assert_eq!(status, 200, "the token works before its expiry");
    // Wait for the expiry, bounded.
    let path = format!("/v1/processes/{a}");
    let (status, _) =
        settle_async(|| call(&server, "GET", &path, t, None), |(s, _)| *s == 401).await;
    assert_eq!(status, 401, "the token never expired");
    for (method, path, body) in [
        ("GET", format!("/v1/processes/{a}"), None),
        ("GET", format!("/v1/processes/{a}/wait?timeout_ms=1"), None),
        ("POST", format!("/v1/processes/{a}/stdin"), None),
        (
            "POST",
            format!("/v1/processes/{a}/signal"),
            Some(json!({"signal": "TERM"})),
        ),
        ("DELETE", format!("/v1/processes/{a}"), None),
        ("GET", "/v1/processes".to_string(), None),
    ] {
        let (status, answer) = call(&server, method, &path, t, body).await;
        assert_eq!(
            (status, code(&answer)),
            (401, "token_expired"),
            "{method} {path}: {answer}"
        );
    }
    let (status, body) = refused_attach(&server.ws_url(&a, &format!("access_token={token}"))).await;
    assert_eq!((status, code(&body)), (401, "token_expired"));
    assert_eq!(
        call(
            &server,
            "GET",
            &format!("/v1/processes/{a}"),
            Some(OPERATOR),
            None
        )
        .await
        .1["status"],
        "running"
    );
}

#[tokio::test]
async fn streams_opened_before_the_expiry_stay_open_on_websocket_and_sse_alike() {
    let server = server();
    let flag = TempDir::new("expiry");
    let go = flag.0.join("go");
    let command = format!(
        "echo early; while [ ! -e {} ]; do sleep 0.05; done; echo late",
        go.display()
    );
    let a = spawn_as_operator(&server, json!({"command": command})).await;
    let token = mint(&server, &a, &["read"], 1500).await;
    let mut attachment =
        Attachment::connect(&server.ws_url(&a, &format!("access_token={token}"))).await;
    let sse = reqwest::Client::new()
        .get(server.url(&format!("/v1/processes/{a}/output?follow=1")))
        .header("Accept", "text/event-stream")
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    let path = format!("/v1/processes/{a}");
    let (status, _) = settle_async(
        || call(&server, "GET", &path, Some(&token), None),
        |(s, _)| *s == 401,
    )
    .await;
    assert_eq!(status, 401, "the token never expired");
    // Printed after the expiry: both streams still deliver it, then the end.
    std::fs::write(&go, b"").unwrap();
    let received = attachment.until_exit().await;
    assert_eq!(received.stdout, b"early\nlate\n");
    let body = tokio::time::timeout(WAIT, sse.text())
        .await
        .unwrap()
        .unwrap();
    let mut stdout = Vec::new();
    for event in body.split("\n\n") {
        if event.starts_with("event: stdout\n") {
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            use base64::Engine;
            stdout.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap(),
            );
        }
    }
    assert_eq!(stdout, b"early\nlate\n", "{body}");
    assert!(body.contains("event: exit"), "{body}");
}

#[tokio::test]
async fn a_token_dies_with_the_process_it_names() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let token = mint(&server, &a, &["read", "kill"], 60_000).await;
    let (status, _) = call(
        &server,
        "DELETE",
        &format!("/v1/processes/{a}?force=1"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 200);
    for path in [format!("/v1/processes/{a}"), "/v1/processes".to_string()] {
        let (status, body) = call(&server, "GET", &path, Some(&token), None).await;
        assert_eq!(
            (status, code(&body)),
            (401, "token_process_gone"),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn the_kubernetes_routes_make_the_same_decision() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let b = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    let token = mint(&server, &a, &["read"], 60_000).await;
    let t = Some(token.as_str());
    let pod = |id: &str| format!("/api/v1/namespaces/default/pods/{id}");
    let (status, body) = call(&server, "GET", &pod(&a), t, None).await;
    assert_eq!(status, 200, "{body}");
    for path in [
        pod(&b),
        format!("{}/attach?stdout=true", pod(&b)),
        format!("{}/exec?command=true&stdout=true", pod(&a)),
    ] {
        let (status, body) = call(&server, "GET", &path, t, None).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["kind"], "Status", "{body}");
    }
}

#[tokio::test]
async fn a_token_of_another_server_is_no_token() {
    let one = server();
    let two = server();
    let a = spawn_as_operator(&one, json!({"argv": ["sleep", "30"]})).await;
    let token = mint(&one, &a, &["read"], 60_000).await;
    let (status, body) = call(&two, "GET", "/v1/processes", Some(&token), None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"));
}

#[tokio::test]
async fn mint_checks_its_request() {
    let server = server();
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "30"]})).await;
    for body in [
        json!({"rights": ["root"]}),
        json!({"ttl_ms": 0}),
        json!({"ttl_ms": 10u64 * 365 * 24 * 3_600_000}),
        json!({"rights": "read"}),
    ] {
        let (status, answer) = call(
            &server,
            "POST",
            &format!("/v1/processes/{a}/tokens"),
            Some(OPERATOR),
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (status, code(&answer)),
            (400, "invalid_request"),
            "{body}: {answer}"
        );
    }
    let (status, answer) = call(
        &server,
        "POST",
        "/v1/processes/nope/tokens",
        Some(OPERATOR),
        Some(json!({})),
    )
    .await;
    assert_eq!((status, code(&answer)), (404, "not_found"));
}

#[tokio::test]
async fn tether_share_prints_a_link_whose_token_reads_or_writes() {
    let server = server();
    // Long enough to outlive three CLI runs on a loaded machine; the
    // server ends it when the test drops it.
    let a = spawn_as_operator(&server, json!({"argv": ["sleep", "600"], "stdin": true})).await;
    let env = [
        ("TETHER_SERVER", server.base.as_str()),
        ("TETHER_TOKEN", OPERATOR),
    ];
    let token_of = |output: std::process::Output| -> String {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let link = String::from_utf8(output.stdout).unwrap();
        let prefix = format!("{}/#session={a}&token=", server.base);
        link.trim()
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{link}"))
            .to_string()
    };
    let read = token_of(cli(&env, &["share", &a, "--ttl", "10m"]));
    let write = token_of(cli(&env, &["share", &a, "--write"]));
    let stdin = format!("/v1/processes/{a}/stdin");
    assert_eq!(
        call(
            &server,
            "GET",
            &format!("/v1/processes/{a}"),
            Some(&read),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(&server, "POST", &stdin, Some(&read), None).await.0,
        403
    );
    assert_eq!(
        call(&server, "POST", &stdin, Some(&write), None).await.0,
        204
    );
}
