//! One policy per operation on a process (signal, resize, stdin): HTTP and
//! the WebSocket give the same answer with the same code and message, and a
//! refusal over WebSocket is an `error` frame after which the attachment
//! carries on.

use serde_json::{json, Value};
use tether_protocol::{ClientFrame, ExitReason, ServerFrame};
use tether_tests::{Attachment, TestServer};

/// The next `error` frame's code and message.
async fn error_frame(attachment: &mut Attachment) -> (String, String) {
    loop {
        match attachment.frame().await {
            Some(ServerFrame::Error { code, message }) => return (code, message),
            Some(ServerFrame::Stdout { .. } | ServerFrame::Stderr { .. }) => continue,
            other => panic!("expected an error frame, got {other:?}"),
        }
    }
}

fn http_error(body: &Value) -> (String, String) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Ends `read x` and checks the attachment is still served to the exit.
async fn finish_read(attachment: &mut Attachment) {
    attachment
        .send(ClientFrame::Stdin {
            data: b"x\n".to_vec(),
        })
        .await;
    let exit = attachment.until_exit().await.exit.unwrap();
    assert_eq!(exit.exit_code, Some(0));
}

#[tokio::test]
async fn resizing_a_pipes_process_is_refused_alike_over_http_and_websocket() {
    let server = TestServer::start();
    let process = server.sh("read x", json!({"stdin": true})).await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/resize", process.id),
            json!({"cols": 100, "rows": 30}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let over_http = http_error(&body);
    assert_eq!(over_http.0, "invalid_request");
    assert!(over_http.1.contains("has no terminal"), "{}", over_http.1);

    let mut attachment = server.attach(&process.id, "").await;
    attachment
        .send(ClientFrame::Resize {
            cols: 100,
            rows: 30,
        })
        .await;
    assert_eq!(error_frame(&mut attachment).await, over_http);
    finish_read(&mut attachment).await;
}

#[tokio::test]
async fn an_unknown_signal_is_refused_alike_over_http_and_websocket() {
    let server = TestServer::start();
    let process = server.sh("read x", json!({"stdin": true})).await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/signal", process.id),
            json!({"signal": "BOGUS"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let over_http = http_error(&body);
    assert_eq!(over_http.0, "invalid_request");
    assert!(over_http.1.contains("TERM"), "names the accepted signals");

    let mut attachment = server.attach(&process.id, "").await;
    attachment
        .send(ClientFrame::Signal {
            signal: "BOGUS".into(),
        })
        .await;
    assert_eq!(error_frame(&mut attachment).await, over_http);
    finish_read(&mut attachment).await;
}

#[tokio::test]
async fn a_signal_by_number_is_the_same_signal_by_name_on_every_path() {
    let server = TestServer::start();
    let by_http = server.sh("sleep 30", json!({})).await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/signal", by_http.id),
            json!({"signal": "15"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let exit = server.wait_exit(&by_http.id).await;
    assert_eq!(
        (exit.reason, exit.signal.as_deref()),
        (Some(ExitReason::Signal), Some("TERM"))
    );

    let by_frame = server.sh("sleep 30", json!({})).await;
    let mut attachment = server.attach(&by_frame.id, "").await;
    attachment
        .send(ClientFrame::Signal {
            signal: "sigterm".into(),
        })
        .await;
    let exit = attachment.until_exit().await.exit.unwrap();
    assert_eq!(
        (exit.reason, exit.signal.as_deref()),
        (Some(ExitReason::Signal), Some("TERM"))
    );
}

#[tokio::test]
async fn a_terminal_size_out_of_range_is_refused_alike_at_spawn_resize_and_over_websocket() {
    let server = TestServer::start();
    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "tty": true, "cols": 0, "rows": 24}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let at_spawn = http_error(&body);
    assert_eq!(at_spawn.0, "invalid_request");

    let process = server
        .spawn(json!({"command": "read x", "tty": true}))
        .await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/resize", process.id),
            json!({"cols": 0, "rows": 24}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(http_error(&body), at_spawn);

    let mut attachment = server.attach(&process.id, "").await;
    attachment
        .send(ClientFrame::Resize { cols: 0, rows: 24 })
        .await;
    assert_eq!(error_frame(&mut attachment).await, at_spawn);
    attachment
        .send(ClientFrame::Stdin {
            data: b"x\r".to_vec(),
        })
        .await;
    attachment.until_exit().await;
}

#[tokio::test]
async fn signals_go_to_running_processes_only_and_bad_names_are_rejected() {
    let server = TestServer::start();
    let process = server.sh("sleep 30", json!({})).await;
    let path = format!("/v1/processes/{}/signal", process.id);
    let (status, body) = server.post(&path, json!({"signal": "BOGUS"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    assert!(!server.status(&process.id).await.is_exited());
    let (status, _) = server.post(&path, json!({"signal": "TERM"})).await;
    assert_eq!(status, 200);
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(ExitReason::Signal));
    assert_eq!(exit.signal.as_deref(), Some("TERM"));
    assert_eq!(exit.exit_code, Some(143));
    let (status, body) = server.post(&path, json!({"signal": "TERM"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("not_running"))
    );
}
