//! The process behind an exec: a tether process with its names, retention and exit.

use super::*;

#[tokio::test]
async fn an_exec_is_a_tether_process_with_its_names_retention_and_exit() {
    let server = TestServer::start();
    let query = format!(
        "{}&container=web&stdout=true&stderr=true",
        command_query(&["sh", "-c", "echo kept; exit 3"])
    );
    let client = ChannelClient::connect(
        &pod_url(&server, "prod", "web-1", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let session = client.finish(Session::default()).await;
    assert_eq!(text(&session.stdout), "kept\n");

    let process = only_process(&server).await;
    assert_eq!(process.exit_code, Some(3));
    assert_eq!(process.reason, Some(ExitReason::Exit));
    let names = process.kubernetes.clone().expect("kubernetes names");
    assert_eq!(
        (names.namespace.as_str(), names.pod.as_str()),
        ("prod", "web-1")
    );
    assert_eq!(names.container.as_deref(), Some("web"));
    // Its output stays retained and replayable through /v1.
    let replay = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(replay.stdout, b"kept\n");
}

#[tokio::test]
async fn signals_and_deadlines_end_with_their_exit_codes_and_say_so() {
    let server = TestServer::start_with(&["--kube-exec-timeout-ms", "300"]);
    let run = |argv: &'static [&'static str]| {
        let url = pod_url(
            &server,
            "n",
            "p",
            "exec",
            &format!("{}&stdout=true", command_query(argv)),
        );
        async move {
            let client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
            client.finish(Session::default()).await.status()
        }
    };
    let killed = run(&["sh", "-c", "kill -TERM $$"]).await;
    assert_eq!(killed["reason"], "NonZeroExitCode");
    assert_eq!(killed["details"]["causes"][0]["message"], "143");
    assert!(killed["message"].as_str().unwrap().contains("signal TERM"));
    let timed_out = run(&["sleep", "30"]).await;
    assert_eq!(timed_out["status"], "Failure");
    assert_eq!(timed_out["details"]["causes"][0]["message"], "124");
    assert!(
        timed_out["message"].as_str().unwrap().contains("timed out"),
        "{timed_out}"
    );
}

#[tokio::test]
async fn an_exec_that_cannot_start_is_one_failure_status_then_close_1000() {
    let server = TestServer::start();
    let query = format!("{}&stdout=true", command_query(&["/no/such/program"]));
    let client = ChannelClient::connect(
        &pod_url(&server, "n", "p", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let session = client.finish(Session::default()).await;
    let status = session.status();
    assert_eq!(status["status"], "Failure");
    assert!(
        status["message"].as_str().unwrap().contains("not found"),
        "{status}"
    );
    assert_eq!(session.close_code, Some(1000));
}

#[tokio::test]
async fn a_foreign_origin_is_refused_with_a_status() {
    let server = TestServer::start();
    let response = server
        .http
        .get(server.url("/api/v1/namespaces/n/pods/p/exec?command=true&stdout=1"))
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list, json!([]), "nothing was started");
}

#[tokio::test]
async fn attach_reports_output_dropped_before_it_as_text_never_a_silent_gap() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 5000 /dev/zero | tr '\\0' a; echo; echo tail",
            json!({"retain_bytes": 1024}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let url = pod_url(
        &server,
        "default",
        &process.id,
        "attach",
        "stdout=true&stderr=true",
    );
    let client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    let session = client.finish(Session::default()).await;
    assert!(text(&session.stdout).ends_with("a\ntail\n"));
    let notice = text(&session.stderr);
    assert!(
        notice.contains("bytes of stdout") && notice.contains("dropped"),
        "{notice}"
    );
    let dropped: u64 = notice
        .split("[tether: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(dropped + session.stdout.len() as u64, 5006);
}

#[tokio::test]
async fn attach_joins_an_existing_process_and_an_unknown_pod_is_a_404_status() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo ready; read x; echo got $x; exit 5",
            json!({"stdin": true}),
        )
        .await;
    let url = pod_url(
        &server,
        "default",
        &process.id,
        "attach",
        "stdin=true&stdout=true&stderr=true",
    );
    let mut client = ChannelClient::connect(&url, ALL_PROTOCOLS[0]).await;
    let mut session = Session::default();
    client.read_until(&mut session, "ready\n").await;
    client.send(0, b"hi\n").await;
    let session = client.finish(session).await;
    assert_eq!(text(&session.stdout), "ready\ngot hi\n");
    assert_eq!(session.status()["details"]["causes"][0]["message"], "5");

    let response = server
        .http
        .get(server.url("/api/v1/namespaces/default/pods/nope/attach?stdout=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);
}

#[tokio::test]
async fn a_client_that_stops_reading_paces_the_program_and_loses_nothing() {
    // Retention far below the output, so that block mode must pace it.
    let server = TestServer::start_with(&["--retain-bytes", "1048576"]);
    let total: usize = 48 << 20;
    let query = format!(
        "{}&stdout=true",
        command_query(&["head", "-c", &total.to_string(), "/dev/zero"])
    );
    let mut client = ChannelClient::connect(
        &pod_url(&server, "d", "p", "exec", &query),
        ALL_PROTOCOLS[0],
    )
    .await;
    let mut session = Session::default();
    client.next(&mut session).await;
    // Not reading: retention and the socket buffers fill, and the program
    // waits on its write instead of finishing. (Drop mode would finish in
    // milliseconds; a second is a generous bound.)
    let (_, list) = server.get("/v1/processes").await;
    let id = list[0]["id"].as_str().unwrap().to_string();
    let (_, waited) = server
        .get(&format!("/v1/processes/{id}/wait?timeout_ms=1000"))
        .await;
    assert_eq!(waited["status"], "running", "{waited}");
    let session = client.finish(session).await;
    assert_eq!(session.stdout.len(), total);
    assert_eq!(
        session.status(),
        json!({"metadata": {}, "status": "Success"})
    );
}
