//! Each subprotocol, with a channel client of our own.

use super::*;

#[tokio::test]
async fn each_subprotocol_frames_streams_and_ends_with_one_status_then_close_1000() {
    let server = TestServer::start();
    let query = format!(
        "{}&stdout=true&stderr=true",
        command_query(&["sh", "-c", "echo out; echo err >&2; exit 3"])
    );
    for protocol in ALL_PROTOCOLS {
        let client =
            ChannelClient::connect(&pod_url(&server, "n", "p", "exec", &query), protocol).await;
        assert_eq!(client.protocol, protocol);
        let session = client.finish(Session::default()).await;
        assert_eq!(text(&session.stdout), "out\n", "{protocol}");
        assert_eq!(text(&session.stderr), "err\n", "{protocol}");
        assert_eq!(session.close_code, Some(1000), "{protocol}");
        assert_eq!(session.statuses.len(), 1, "{protocol}: {session:?}");
        if protocol == "channel.k8s.io" {
            // v1 carries a failure as text.
            assert!(text(&session.statuses[0]).contains("exit code 3"));
        } else {
            let status = session.status();
            assert_eq!(status["status"], "Failure", "{protocol}");
            assert_eq!(status["reason"], "NonZeroExitCode");
            assert_eq!(
                status["details"]["causes"],
                json!([{"reason": "ExitCode", "message": "3"}])
            );
        }
    }
}

#[tokio::test]
async fn success_is_a_success_status_except_in_v1_where_it_is_silence() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["true"]));
    for protocol in ALL_PROTOCOLS {
        let client =
            ChannelClient::connect(&pod_url(&server, "n", "p", "exec", &query), protocol).await;
        let session = client.finish(Session::default()).await;
        assert_eq!(session.close_code, Some(1000), "{protocol}");
        if protocol == "channel.k8s.io" {
            assert!(session.statuses.is_empty(), "{session:?}");
        } else {
            assert_eq!(
                session.status(),
                json!({"metadata": {}, "status": "Success"}),
                "{protocol}"
            );
        }
    }
}

#[tokio::test]
async fn the_best_offered_subprotocol_wins_and_none_is_refused() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["true"]));
    let url = pod_url(&server, "n", "p", "exec", &query);
    let client = ChannelClient::connect(&url, "channel.k8s.io, v4.channel.k8s.io").await;
    assert_eq!(client.protocol, "v4.channel.k8s.io");
    client.finish(Session::default()).await;

    let response = server
        .http
        .get(server.url(&format!("/api/v1/namespaces/n/pods/p/exec?{query}")))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("Sec-WebSocket-Protocol", "tether.v1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let status: Value = response.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("v5.channel.k8s.io"),
        "{status}"
    );
}

#[tokio::test]
async fn v5_closes_stdin_with_channel_255_and_base64_carries_stdin() {
    let server = TestServer::start();
    let query = format!("{}&stdin=true&stdout=true", command_query(&["cat"]));
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(0, b"through v5").await;
    client.close_stdin().await;
    let session = client.finish(Session::default()).await;
    assert_eq!(text(&session.stdout), "through v5");

    // v4 has no way to end stdin; the program ends it itself.
    let query = format!(
        "{}&stdin=true&stdout=true",
        command_query(&["head", "-c", "11"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v4.base64.channel.k8s.io").await;
    client.send(0, b"\x00\xffbase64 in").await;
    let session = client.finish(Session::default()).await;
    assert_eq!(session.stdout, b"\x00\xffbase64 in");
}

#[tokio::test]
async fn a_tty_exec_takes_resizes_on_channel_4_and_bad_ones_end_it_clearly() {
    let server = TestServer::start();
    let query = format!(
        "{}&stdin=true&stdout=true&tty=true",
        command_query(&["sh", "-c", "read a; stty size"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(4, br#"{"Width":77,"Height":22}"#).await;
    client.send(0, b"go\r").await;
    let session = client.finish(Session::default()).await;
    assert!(text(&session.stdout).contains("22 77"), "{session:?}");

    let query = format!(
        "{}&stdin=true&stdout=true&tty=true",
        command_query(&["cat"])
    );
    let url = pod_url(&server, "n", "p", "exec", &query);
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(4, b"{\"Width\": \"wide\"}").await;
    let session = client.finish(Session::default()).await;
    let status = session.status();
    assert_eq!(status["status"], "Failure");
    assert!(
        status["message"].as_str().unwrap().contains("resize"),
        "{status}"
    );
    assert_eq!(session.close_code, Some(1007));
}
