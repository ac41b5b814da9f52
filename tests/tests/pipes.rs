//! The core contract on pipes (issue 2): capture from the first byte,
//! replay and resume by offset, explicit loss, exits that never race
//! capture, deadlines that kill the whole session, no fixed tail latency.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason, ServerFrame, StreamName};
use tether_tests::{kill_session, session_members, wait_session_gone, Received, TestServer};

#[tokio::test]
async fn unread_output_never_blocks_and_a_late_attach_replays_every_byte() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 4194304 /dev/urandom | od -An -v | head -c 4194304; echo tail",
            json!({"retain_bytes": 8 << 20}),
        )
        .await;
    // Nobody is attached: the process must still finish.
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.stdout_bytes, 4194304 + 5);
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty());
    assert_eq!(received.stdout.len(), 4194304 + 5);
    assert!(received.stdout.ends_with(b"tail\n"));
    assert_eq!(received.exit.unwrap(), exited);
}

#[tokio::test]
async fn reattach_with_saved_offsets_gets_only_new_bytes_and_from_zero_gets_all() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo first; read go; echo second; read done",
            json!({"stdin": true}),
        )
        .await;
    let mut first = server.attach(&process.id, "").await;
    let mut received = Received::default();
    first.until_stdout_contains("first\n", &mut received).await;
    let saved = first.next;
    drop(first);

    let (status, _) = server.post_raw_stdin(&process.id, b"go\n").await;
    assert_eq!(status, 204);
    let query = format!("stdout={}&stderr={}", saved[0], saved[1]);
    let mut resumed = server.attach(&process.id, &query).await;
    let mut more = Received::default();
    resumed.until_stdout_contains("second\n", &mut more).await;
    assert_eq!(more.stdout, b"second\n");

    resumed
        .send(ClientFrame::Stdin {
            data: b"done\n".to_vec(),
        })
        .await;
    let rest = resumed.until_exit().await;
    assert!(rest.stdout.is_empty());

    let mut replay = server.attach(&process.id, "").await;
    assert_eq!(replay.until_exit().await.stdout, b"first\nsecond\n");
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
async fn stderr_keeps_flowing_while_stdout_credit_is_withheld() {
    let server = TestServer::start();
    // stdout floods; stderr gets a timestamped line every 10 ms.
    let script =
        "(i=0; while [ $i -lt 50 ]; do echo $(date +%s%N) >&2; sleep 0.01; i=$((i+1)); done) & \
                  head -c 100000000 /dev/zero; wait";
    let started = Instant::now();
    let process = server.sh(script, json!({})).await;
    let mut attachment = server.attach(&process.id, "window=65536").await;
    let mut received = Received::default();
    let mut delays = Vec::new();
    while received.stderr.iter().filter(|b| **b == b'\n').count() < 50 {
        let frame = attachment.frame().await.expect("closed early");
        if let ServerFrame::Stderr { data, .. } = &frame {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            for line in String::from_utf8_lossy(data).lines() {
                let written: u128 = line.trim().parse().unwrap();
                delays.push(now.saturating_sub(written) / 1_000_000);
            }
            attachment
                .credit(StreamName::Stderr, data.len() as u64)
                .await;
        }
        assert!(!attachment.record(frame, &mut received));
    }
    // Only the first window of stdout was sent: credit was withheld.
    assert!(received.stdout.len() <= 65536);
    delays.sort();
    let worst = delays[delays.len() - 1];
    assert!(worst < 1000, "stderr lines were delayed up to {worst} ms");
    // The process itself was never held back by the unread stdout.
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.stdout_bytes, 100_000_000);
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test]
async fn an_attachment_that_never_reads_does_not_slow_another() {
    let server = TestServer::start();
    let process = server
        .sh(
            "read go; head -c 30000000 /dev/zero",
            json!({"stdin": true, "retain_bytes": 64 << 20}),
        )
        .await;
    // A client that completes the handshake and then never reads.
    let stuck = server.attach(&process.id, "").await;
    let mut reader = server.attach(&process.id, "").await;
    reader
        .send(ClientFrame::Stdin {
            data: b"go\n".to_vec(),
        })
        .await;
    let received = reader.until_exit().await;
    assert_eq!(received.stdout.len(), 30_000_000);
    assert!(received.dropped.is_empty());
    drop(stuck);
}

#[tokio::test]
async fn stdin_reaches_the_process_while_its_output_is_backed_up() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 10000000 /dev/zero; read line; echo got:$line >&2",
            json!({"stdin": true}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "window=4096").await;
    attachment
        .send(ClientFrame::Stdin {
            data: b"hello\n".to_vec(),
        })
        .await;
    let mut received = Received::default();
    while !String::from_utf8_lossy(&received.stderr).contains("got:hello") {
        let frame = attachment.frame().await.expect("closed early");
        if let ServerFrame::Stderr { data, .. } = &frame {
            attachment
                .credit(StreamName::Stderr, data.len() as u64)
                .await;
        }
        assert!(
            !attachment.record(frame, &mut received),
            "exit before stderr arrived"
        );
    }
    assert!(received.stdout.len() <= 4096);
}

#[tokio::test]
async fn eviction_is_reported_as_the_exact_dropped_range() {
    let server = TestServer::start();
    let process = server
        .sh(
            "head -c 5000 /dev/zero | tr '\\0' a; printf 0123456789 >&2",
            json!({"retain_bytes": 1000}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert_eq!(received.dropped, vec![(StreamName::Stdout, 0, 4000)]);
    assert_eq!(received.stdout, vec![b'a'; 1000]);
    assert_eq!(received.stderr, b"0123456789");
    let exit = received.exit.unwrap();
    assert_eq!(exit.stdout_bytes, 4000 + received.stdout.len() as u64);
}

#[tokio::test]
async fn a_background_descendant_holding_the_pipe_gives_output_incomplete() {
    let server = TestServer::start_with(&["--drain-timeout-ms", "500"]);
    let started = Instant::now();
    let process = server.sh("sleep 30 & echo done", json!({})).await;
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    let exit = received.exit.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(exit.output_incomplete);
    assert_eq!(exit.reason, Some(ExitReason::Exit));
    assert_eq!(received.stdout, b"done\n");
    // The background job is not killed by a normal exit.
    assert_eq!(session_members(process.pid).len(), 1);
    kill_session(process.pid);
}

#[tokio::test]
async fn bad_frames_get_clear_errors_and_harm_nobody_else() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let server = TestServer::start_with(&["--max-frame-bytes", "1024"]);
    let process = server
        .sh("read line; echo got:$line", json!({"stdin": true}))
        .await;
    let mut bystander = server.attach(&process.id, "").await;
    let cases: Vec<(Message, &str, u16)> = vec![
        (
            Message::Binary(vec![0xc1, 0xff, 0x00].into()),
            "malformed_frame",
            1007,
        ),
        (Message::Text("hello".into()), "text_message", 1003),
        (
            Message::Binary(rmp_like_map(&[("type", "launch_missiles")]).into()),
            "unknown_type",
            1008,
        ),
        (
            Message::Binary(
                ClientFrame::Stdin {
                    data: vec![0; 4096],
                }
                .encode()
                .into(),
            ),
            "frame_too_large",
            1009,
        ),
    ];
    for (message, code, close) in cases {
        let mut attachment = server.attach(&process.id, "").await;
        attachment.ws.send(message).await.unwrap();
        loop {
            match attachment.frame_or_close().await {
                Ok(ServerFrame::Error { code: got, .. }) => assert_eq!(got, code),
                Ok(_) => continue,
                Err(got) => {
                    assert_eq!(got, Some(close), "close code for {code}");
                    break;
                }
            }
        }
    }
    bystander
        .send(ClientFrame::Stdin {
            data: b"still here\n".to_vec(),
        })
        .await;
    let received = bystander.until_exit().await;
    assert_eq!(received.stdout, b"got:still here\n");
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
}

/// A MessagePack map of string pairs, built by hand.
fn rmp_like_map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = vec![0x80 | pairs.len() as u8];
    for (k, v) in pairs {
        for s in [k, v] {
            out.push(0xa0 | s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

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
async fn unknown_ids_and_unknown_routes_are_told_apart() {
    let server = TestServer::start();
    let (status, body) = server.get("/v1/processes/nope").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, body) = server.get("/v1/nothing/here").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("no_route"))
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("GET /v1/nothing/here"));
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
    assert!(server.status(&process.id).await.is_running_check());
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
async fn delete_kills_the_session_with_reason_killed_and_forgets() {
    let server = TestServer::start();
    let process = server.sh("sleep 30 & sleep 30", json!({})).await;
    let mut attachment = server.attach(&process.id, "").await;
    let response = server
        .http
        .delete(server.url(&format!("/v1/processes/{}", process.id)))
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

trait RunningCheck {
    fn is_running_check(&self) -> bool;
}
impl RunningCheck for tether_protocol::ProcessInfo {
    fn is_running_check(&self) -> bool {
        !self.is_exited()
    }
}

#[tokio::test]
async fn a_client_whose_stdin_waits_for_the_process_is_not_taken_for_dead() {
    // Pings every 100 ms, closed after 300 ms unanswered: the stdin below
    // waits for the process for over a second, with pongs unread behind it.
    let server = TestServer::start_with(&["--ping-interval-ms", "100", "--idle-timeout-ms", "300"]);
    let process = server.sh("sleep 1.5; wc -c", json!({"stdin": true})).await;
    let mut attachment = server.attach(&process.id, "").await;
    for _ in 0..100 {
        attachment
            .send(ClientFrame::Stdin {
                data: vec![b'x'; 65536],
            })
            .await;
    }
    attachment.send(ClientFrame::StdinEof).await;
    let received = attachment.until_exit().await;
    assert_eq!(String::from_utf8_lossy(&received.stdout).trim(), "6553600");
}
