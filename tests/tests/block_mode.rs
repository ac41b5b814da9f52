//! Block mode (`"overflow": "block"`): every byte reaches the slowest
//! reader within bounded memory, credit alone frees room for capture, and
//! the bounds still hold (send timeout, deadline, drain bound).

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tether_protocol::{ClientFrame, Overflow, ServerFrame, StreamName};
use tether_tests::{kill_session, rss_bytes, Received, TestServer};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// Lines of 16 bytes: "000000000000001\n", ... so order, gaps and repeats
/// are all visible.
fn check_sequence(data: &[u8], lines: u64) {
    assert_eq!(data.len() as u64, lines * 16, "byte count");
    for (i, line) in data.chunks(16).enumerate() {
        let expected = format!("{:015}\n", i + 1);
        assert_eq!(line, expected.as_bytes(), "line {}", i + 1);
    }
}

/// A bound for the events these tests wait on (shorter than the harness's
/// WAIT, so a hang fails with a clear message instead of a panic deep in
/// the harness).
const BOUND: Duration = Duration::from_secs(10);

/// Reads to the exit, granting back every data byte as it arrives.
async fn read_granting(attachment: &mut tether_tests::Attachment) -> tether_tests::Received {
    let mut received = tether_tests::Received::default();
    loop {
        let frame = attachment.frame().await.expect("closed before the exit");
        let credit = match &frame {
            ServerFrame::Stdout { data, .. } => Some((StreamName::Stdout, data.len())),
            ServerFrame::Stderr { data, .. } => Some((StreamName::Stderr, data.len())),
            _ => None,
        };
        if attachment.record(frame, &mut received) {
            return received;
        }
        if let Some((stream, bytes)) = credit {
            attachment.credit(stream, bytes as u64).await;
        }
    }
}

#[tokio::test]
async fn block_mode_delivers_every_byte_to_a_slow_reader_within_bounded_memory() {
    let server = TestServer::start();
    let lines = 200 * 65536; // 200 MiB
    let process = server
        .sh(
            &format!("seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 1 << 20}),
        )
        .await;
    assert_eq!(process.overflow, Overflow::Block);
    let mut attachment = server.attach(&process.id, "window=1048576").await;
    let mut received = Received::default();
    // Consume at about 100 MB/s, far below what seq produces unpaced.
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    let mut peak_rss = 0;
    loop {
        let frame = attachment.frame().await.expect("closed early");
        if let ServerFrame::Stdout { data, .. } = &frame {
            attachment
                .credit(StreamName::Stdout, data.len() as u64)
                .await;
            if received.stdout.len() % (1 << 20) < data.len() {
                pace.tick().await;
                peak_rss = peak_rss.max(rss_bytes(server.pid()));
            }
        }
        if attachment.record(frame, &mut received) {
            break;
        }
    }
    assert!(received.dropped.is_empty(), "{:?}", received.dropped);
    check_sequence(&received.stdout, lines);
    let exit = received.exit.unwrap();
    assert_eq!(exit.overflow, Overflow::Block);
    assert!(!exit.output_incomplete);
    assert!(peak_rss < 64 << 20, "server RSS reached {peak_rss} bytes");
}

#[tokio::test]
async fn block_mode_with_nobody_attached_pauses_the_program_and_loses_nothing() {
    let server = TestServer::start();
    let lines = 65536; // 1 MiB through a 64 KiB retention
    let process = server
        .sh(
            &format!("seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 65536}),
        )
        .await;
    // Still running after a while, with exactly the retention captured.
    let (_, info) = server
        .get(&format!("/v1/processes/{}/wait?timeout_ms=500", process.id))
        .await;
    assert_eq!(info["status"], "running");
    assert_eq!(info["stdout_bytes"], 65536);
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty());
    check_sequence(&received.stdout, lines);
}

#[tokio::test]
async fn block_mode_closes_a_stuck_attachment_after_the_send_timeout() {
    let server = TestServer::start_with(&["--send-timeout-ms", "1000"]);
    let lines = 4 * 65536; // 4 MiB, far more than socket buffers hold
    let process = server
        .sh(
            &format!("read go; seq -f %015.0f 1 {lines}"),
            json!({"overflow": "block", "retain_bytes": 262144, "stdin": true}),
        )
        .await;
    let _stuck = server.attach(&process.id, "").await;
    let mut reader = server.attach(&process.id, "").await;
    reader
        .send(tether_protocol::ClientFrame::Stdin {
            data: b"go\n".to_vec(),
        })
        .await;
    let received = reader.until_exit().await;
    assert!(received.dropped.is_empty());
    check_sequence(&received.stdout, lines);
}

#[tokio::test]
async fn a_deadline_fires_on_time_in_a_blocked_program() {
    let server = TestServer::start();
    let started = Instant::now();
    let process = server
        .sh(
            "yes",
            json!({"overflow": "block", "retain_bytes": 65536, "timeout_ms": 500}),
        )
        .await;
    let exit = server.wait_exit(&process.id).await;
    assert_eq!(exit.reason, Some(tether_protocol::ExitReason::Timeout));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

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
        .delete(server.url(&format!("/v1/processes/{}?force=1", process.id)))
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

#[tokio::test]
async fn block_mode_credit_alone_frees_room_for_capture() {
    // Found by the soak. window == retention: the server sends all it retains, then the
    // client's credit is the only event that frees room. Pings are rare so
    // that nothing else can.
    let server = TestServer::start_with(&["--ping-interval-ms", "60000"]);
    let process = server
        .sh(
            "head -c 1000000 /dev/zero",
            json!({"overflow": "block", "retain_bytes": 65536}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "window=65536").await;
    let received = tokio::time::timeout(Duration::from_secs(10), read_granting(&mut attachment))
        .await
        .expect("capture stalled although every sent byte was credited");
    assert_eq!(received.stdout.len(), 1_000_000);
    assert!(received.dropped.is_empty());
}

#[tokio::test]
async fn block_mode_keeps_an_exited_programs_unread_output() {
    // Found by the soak. 60000 bytes fit in 16 KiB of retention plus a
    // 64 KiB pipe, so the program exits at once with most of its output
    // still in the pipe. A client that blips away for longer than the
    // drain bound must still find every byte when it comes back.
    let server = TestServer::start_with(&["--drain-timeout-ms", "200"]);
    let process = server
        .sh(
            "head -c 60000 /dev/zero",
            json!({"overflow": "block", "retain_bytes": 16384}),
        )
        .await;
    let (_, info) = server
        .get(&format!(
            "/v1/processes/{}/wait?timeout_ms=1000",
            process.id
        ))
        .await;
    assert_eq!(info["output_incomplete"], false, "{info}");
    let mut attachment = server.attach(&process.id, "").await;
    let received = attachment.until_exit().await;
    assert!(received.dropped.is_empty());
    assert_eq!(received.stdout.len(), 60000);
    assert!(!received.exit.unwrap().output_incomplete);
}
