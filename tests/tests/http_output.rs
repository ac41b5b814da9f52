//! Output and one-shot exec over plain HTTP, for clients that cannot open a
//! WebSocket: `POST /v1/exec` answers a command's whole result in one
//! request; `GET .../output` is the raw bytes of a stream (real curl prints
//! it live), or Server-Sent Events that resume from `Last-Event-ID` with no
//! gap and no repeat.

use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tether_tests::{TestServer, WAIT};
use tokio::io::AsyncReadExt;

async fn exec(server: &TestServer, body: Value) -> Value {
    let (status, answer) = server.post("/v1/exec", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn exec_of_true_answers_with_no_fixed_delay() {
    let server = TestServer::start();
    exec(&server, json!({"argv": ["true"]})).await; // warm
    let started = Instant::now();
    let answer = exec(&server, json!({"argv": ["true"]})).await;
    let took = started.elapsed();
    assert_eq!(answer["exit_code"], 0);
    assert_eq!(answer["status"], "exited");
    // Generous, but it catches a fixed one-second delay.
    assert!(
        took < Duration::from_millis(500),
        "exec of true took {took:?}"
    );
}

#[tokio::test]
async fn exec_answers_both_streams_and_the_exit_code() {
    let server = TestServer::start();
    let answer = exec(
        &server,
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert_eq!(answer["exit_code"], 3);
    assert_eq!(answer["reason"], "exit");
    assert_eq!(answer["stdout"]["data"], "out\n");
    assert_eq!(answer["stdout"]["encoding"], "utf8");
    assert_eq!(answer["stderr"]["data"], "err\n");
    assert_eq!(answer["stdout"]["truncated"], false);
}

#[tokio::test]
async fn exec_deadline_answers_timeout_with_what_was_printed_before_it() {
    let server = TestServer::start();
    let answer = exec(
        &server,
        json!({"command": "echo before; exec sleep 30", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(answer["reason"], "timeout");
    assert_eq!(answer["exit_code"], 124);
    assert_eq!(answer["stdout"]["data"], "before\n");
}

#[tokio::test]
async fn exec_binary_output_is_base64_and_byte_exact_and_the_cap_is_reported() {
    let server = TestServer::start();
    let answer = exec(
        &server,
        json!({"command": "printf '\\377\\000\\001abc'; head -c 5000 /dev/zero >&2", "max_output_bytes": 4096}),
    )
    .await;
    assert_eq!(answer["stdout"]["encoding"], "base64");
    let data = answer["stdout"]["data"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    assert_eq!(bytes, b"\xff\x00\x01abc");
    assert_eq!(answer["max_output_bytes"], 4096);
    assert_eq!(answer["stderr"]["bytes"], 4096);
    assert_eq!(answer["stderr"]["truncated"], true);
    assert_eq!(answer["stderr_bytes"], 5000);
}

#[tokio::test]
async fn exec_refuses_bad_fields_with_a_json_error() {
    let server = TestServer::start();
    for body in [
        json!({"argv": ["true"], "max_output_bytes": -1}),
        json!({"argv": ["true"], "kill_on_disconnect": "yes"}),
        json!({"argv": ["true"], "nonsense": 1}),
        json!({}),
    ] {
        let (status, answer) = server.post("/v1/exec", body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
    }
}

#[tokio::test]
async fn curl_prints_live_output_as_it_is_written_and_ends_at_the_exit() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo one; read go; echo two; exit 5",
            json!({"stdin": true}),
        )
        .await;
    let url = server.url(&format!("/v1/processes/{}/output?follow=1", process.id));
    let mut curl = tokio::process::Command::new("curl")
        .args(["-sN", "-D", "-", "-H", "TE: trailers", &url])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("curl is installed");
    let mut stdout = curl.stdout.take().unwrap();
    let mut printed = Vec::new();
    let mut buf = [0u8; 4096];
    // "one" is printed while the program still waits for its input.
    while !String::from_utf8_lossy(&printed).contains("\r\n\r\none\n") {
        let n = tokio::time::timeout(WAIT, stdout.read(&mut buf))
            .await
            .expect("curl printed nothing")
            .unwrap();
        assert!(
            n > 0,
            "curl ended early: {}",
            String::from_utf8_lossy(&printed)
        );
        printed.extend_from_slice(&buf[..n]);
    }
    assert!(server.status(&process.id).await.status == tether_protocol::ProcessStatus::Running);
    server.say(&process.id, "go\n").await;
    tokio::time::timeout(WAIT, stdout.read_to_end(&mut printed))
        .await
        .expect("curl did not end at the exit")
        .unwrap();
    let status = tokio::time::timeout(WAIT, curl.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let printed = String::from_utf8_lossy(&printed);
    let (_, rest) = printed.split_once("\r\n\r\n").unwrap();
    let (body, trailers) = rest.split_at(8);
    assert_eq!(body, "one\ntwo\n");
    for trailer in [
        "tether-next-offset: 8",
        "tether-status: exited",
        "tether-exit-code: 5",
        "tether-dropped-bytes: 0",
    ] {
        assert!(
            trailers.contains(trailer),
            "{trailer} missing in {trailers:?}"
        );
    }
}

/// A small SSE client: events as (event, id, data).
struct Events {
    response: reqwest::Response,
    pending: String,
}

impl Events {
    async fn open(server: &TestServer, id: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = server
            .http
            .get(server.url(&format!("/v1/processes/{id}/output?follow=1")))
            .header("accept", "text/event-stream");
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last);
        }
        request.send().await.unwrap()
    }

    async fn next(&mut self) -> Option<(String, String, String)> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_string())
                };
                if let Some(event) = field("event:") {
                    return Some((event, field("id:")?, field("data:")?));
                }
                continue; // retry: or a keepalive comment
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("no event within the bound")
                .unwrap()?;
            self.pending.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[tokio::test]
async fn server_sent_events_resume_from_last_event_id_with_no_gap_and_no_repeat() {
    let server = TestServer::start();
    let process = server
        .sh(
            "for i in $(seq 1 300); do echo out-$i; done; read go; \
             for i in $(seq 301 3000); do echo out-$i; echo err-$i >&2; done",
            json!({"stdin": true}),
        )
        .await;
    let decode = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap()
    };
    let mut received = [Vec::new(), Vec::new()];
    let mut events = Events {
        response: Events::open(&server, &process.id, None).await,
        pending: String::new(),
    };
    let (event, mut last_id, data) = events.next().await.unwrap();
    assert_eq!(event, "stdout");
    received[0].extend(decode(&data));
    // Cut the connection, let the program print on, and resume.
    drop(events);
    server.say(&process.id, "go\n").await;
    let mut connections = 1;
    let exit = loop {
        let response = Events::open(&server, &process.id, Some(&last_id)).await;
        assert_eq!(response.status(), 200);
        connections += 1;
        let mut events = Events {
            response,
            pending: String::new(),
        };
        // Take one event per connection, then cut it again.
        let mut taken = 0;
        let mut exit = None;
        while let Some((event, id, data)) = events.next().await {
            match event.as_str() {
                "stdout" => received[0].extend(decode(&data)),
                "stderr" => received[1].extend(decode(&data)),
                "exit" => {
                    exit = Some((id.clone(), data));
                }
                other => panic!("unexpected {other} event: {data}"),
            }
            let offsets: Vec<&str> = id.split(',').collect();
            assert_eq!(offsets[0], received[0].len().to_string(), "stdout id");
            assert_eq!(offsets[1], received[1].len().to_string(), "stderr id");
            last_id = id;
            taken += 1;
            if exit.is_some() || taken == 1 {
                break;
            }
        }
        if let Some(exit) = exit {
            break exit;
        }
    };
    assert!(connections > 2);
    let expected_out: String = (1..=3000).map(|i| format!("out-{i}\n")).collect();
    let expected_err: String = (301..=3000).map(|i| format!("err-{i}\n")).collect();
    assert!(
        received[0] == expected_out.as_bytes(),
        "stdout has a gap or a repeat"
    );
    assert!(
        received[1] == expected_err.as_bytes(),
        "stderr has a gap or a repeat"
    );
    let (id, data) = exit;
    assert!(id.ends_with(",exit"));
    let info: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(info["status"], "exited");
    // Reconnecting after the exit is told to stop (204 ends an EventSource).
    let after = Events::open(&server, &process.id, Some(&id)).await;
    assert_eq!(after.status(), 204);
    let junk = Events::open(&server, &process.id, Some("nonsense")).await;
    assert_eq!(junk.status(), 400);
}

#[tokio::test]
async fn output_refuses_bad_queries_with_a_json_error() {
    let server = TestServer::start();
    let process = server.sh("echo hi", json!({})).await;
    server.wait_exit(&process.id).await;
    for query in [
        "stream=both",
        "stream=nope",
        "offset=x",
        "offset=99",
        "follow=yes",
    ] {
        let (status, answer) = server
            .get(&format!("/v1/processes/{}/output?{query}", process.id))
            .await;
        assert_eq!(status, 400, "{query} -> {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
    }
    let (status, _) = server.get("/v1/processes/nope/output").await;
    assert_eq!(status, 404);
}

/// The process of the only exec request so far (the list has just it).
async fn only_process(server: &TestServer) -> String {
    let (_, list) = server.get("/v1/processes").await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    list[0]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn an_exec_client_that_goes_away_kills_the_command_unless_it_asked_to_keep_it() {
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    // The default: an interrupted client leaves nothing running.
    let server = TestServer::start();
    let gone = impatient
        .post(server.url("/v1/exec"))
        .json(&json!({"command": "exec sleep 30"}))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    let exited = server.wait_exit(&only_process(&server).await).await;
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Killed));

    let server = TestServer::start();
    let gone = impatient
        .post(server.url("/v1/exec"))
        .json(&json!({"command": "sleep 1; echo done", "kill_on_disconnect": false}))
        .send()
        .await;
    assert!(gone.is_err());
    let exited = server.wait_exit(&only_process(&server).await).await;
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Exit));
    assert_eq!(exited.stdout_bytes, 5);
}
