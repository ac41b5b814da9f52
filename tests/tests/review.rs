//! Review findings: each test pins one behaviour of the contract (issues 2,
//! 3 and 8) that a careful reading of the server put in doubt. Tests that
//! fail because of a server bug are `#[ignore]`d with the reason; run them
//! with `cargo test -p tether-tests --test review -- --ignored`.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tether_protocol::{ClientFrame, ServerFrame, StreamName};
use tether_tests::{kill_session, session_members, TestServer};
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
#[ignore = "server bug: credit frames queue behind a stdin write that waits for the process (attach.rs read_client awaits act() inline); block mode + window + stdin deadlocks"]
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
#[ignore = "server bug: spawn.rs capture's block-mode room loop only honours the drain deadline when nobody is attached; the exit is never published"]
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

/// DELETE returns once the kill is requested, but a session that traps
/// TERM lives on until the kill grace. While it does, it still counts
/// against `--max-processes`: the limit bounds processes running on the
/// machine, not entries in the table.
#[tokio::test]
#[ignore = "server bug: http.rs delete forgets a process at once (table.forget) though it is still running until the kill grace; table.rs running_locked no longer counts it, so --max-processes is exceeded"]
async fn a_deleted_process_still_dying_counts_against_the_process_limit() {
    let server = TestServer::start_with(&["--max-processes", "1", "--kill-grace-ms", "15000"]);
    let stubborn = server
        .sh("trap '' TERM; sleep 30", json!({"timeout_ms": 60000}))
        .await;
    let response = server
        .http
        .delete(server.url(&format!("/v1/processes/{}", stubborn.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let deleted: serde_json::Value = response.json().await.unwrap();
    let (status, value) = server
        .post("/v1/processes", json!({"command": "sleep 30"}))
        .await;
    let alive = !session_members(stubborn.pid).is_empty();
    kill_session(stubborn.pid);
    if let Some(pid) = value["pid"].as_u64() {
        kill_session(pid as u32);
    }
    assert!(
        alive,
        "the deleted session should still be in its kill grace"
    );
    assert_eq!(
        status, 503,
        "a second process was admitted while the first (DELETE answered {}) still runs: {value}",
        deleted["status"]
    );
}
