//! `GET /v1/run`: spawn and attach in one WebSocket.

use super::*;

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
