//! Review findings: each test pins one behaviour of the contract (issues 2,
//! 3 and 8) that a careful reading of the server found broken, and that is
//! fixed now: credit behind unread stdin, the drain bound in block mode, and
//! DELETE of a process that is still dying.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tether_protocol::{ClientFrame, ServerFrame, StreamName};
use tether_tests::{kill_session, session_members, Received, TestServer};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// A bound for the events these tests wait on (shorter than the harness's
/// WAIT, so a hang fails with a clear message instead of a panic deep in
/// the harness).
const BOUND: Duration = Duration::from_secs(10);

/// Block mode, a credit window and stdin together, as `tether run -- cat`
/// with piped input uses them: the client sends stdin and grants credit for
/// what it receives, over one socket. Credit frames that arrive behind stdin
/// the process has not read yet must still reach the writer, or the program
/// (blocked on stdout, which waits for credit) never reads its stdin again.
#[tokio::test]
async fn block_mode_credit_is_not_stuck_behind_stdin_the_process_has_not_read() {
    let server = TestServer::start();
    let process = server
        .spawn(json!({
            "argv": ["cat"],
            "stdin": true,
            "overflow": "block",
            "retain_bytes": 65536,
            "timeout_ms": 60000,
        }))
        .await;
    let attachment = server.attach(&process.id, "window=65536").await;
    let (mut sink, mut stream) = attachment.ws.split();
    let input: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let (credit_tx, mut credit_rx) = mpsc::unbounded_channel::<u64>();
    let sender = {
        let input = input.clone();
        tokio::spawn(async move {
            let mut chunks = input.chunks(16 << 10);
            let mut eof_sent = false;
            loop {
                // Credit first, always: the client does its part.
                tokio::select! {
                    biased;
                    credit = credit_rx.recv() => match credit {
                        Some(bytes) => {
                            let frame = ClientFrame::Credit { stream: StreamName::Stdout, bytes };
                            if sink.send(Message::Binary(frame.encode().into())).await.is_err() {
                                return;
                            }
                        }
                        None => return,
                    },
                    _ = std::future::ready(()), if !eof_sent => {
                        let frame = match chunks.next() {
                            Some(chunk) => ClientFrame::Stdin { data: chunk.to_vec() },
                            None => {
                                eof_sent = true;
                                ClientFrame::StdinEof
                            }
                        };
                        if sink.send(Message::Binary(frame.encode().into())).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    };
    let mut output = Vec::new();
    let mut exited = false;
    let result = tokio::time::timeout(BOUND, async {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Binary(bytes) = message else {
                continue;
            };
            match ServerFrame::decode(&bytes).unwrap() {
                ServerFrame::Stdout { data, .. } => {
                    output.extend_from_slice(&data);
                    let _ = credit_tx.send(data.len() as u64);
                }
                ServerFrame::Exit { .. } => {
                    exited = true;
                    return;
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
    })
    .await;
    sender.abort();
    let got = output.len();
    let _ = server
        .http
        .delete(server.url(&format!("/v1/processes/{}", process.id)))
        .send()
        .await;
    assert!(
        result.is_ok() && exited,
        "cat echoed {got} of {} bytes and then stalled: the client kept granting credit",
        input.len()
    );
    assert_eq!(output, input);
}

/// Block mode, a descendant keeps the pipe open and writing after the
/// program exited, and the one attachment withholds credit: the drain bound
/// still applies, so the process counts as exited with `output_incomplete`
/// (wait "reports completion regardless of any attachment").
#[tokio::test]
async fn block_mode_drain_bound_holds_while_an_attachment_withholds_credit() {
    let server = TestServer::start();
    let process = server
        .sh(
            "yes & read x; exit 0",
            json!({"overflow": "block", "retain_bytes": 4096, "stdin": true}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "window=1").await;
    // The leader exits once told to; `yes` keeps writing.
    attachment
        .send(ClientFrame::Stdin {
            data: b"go\n".to_vec(),
        })
        .await;
    let (status, value) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=8000",
            process.id
        ))
        .await;
    kill_session(process.pid);
    assert_eq!(status, 200);
    assert_eq!(
        value["status"], "exited",
        "the leader exited long ago (drain bound 1 s), yet: {value}"
    );
    assert_eq!(value["output_incomplete"], true);
}

/// DELETE of a session that traps TERM waits (bounded by the kill grace)
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
            .delete(server.url(&format!("/v1/processes/{}", stubborn.id)));
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
