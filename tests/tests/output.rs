//! Output capture and replay: every byte from the first, whoever is
//! attached; resume by offset; loss only as an exact `dropped` range; the
//! exit only after all of the output; `output_incomplete` when a descendant
//! holds the pipe.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason, StreamName};
use tether_tests::{kill_session, session_members, Received, TestServer};

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
async fn a_child_that_closes_stdout_early_still_delivers_stderr_and_its_exit() {
    let server = TestServer::start();
    let process = server
        .sh("echo before; exec 1>&-; sleep 0.2; echo err >&2", json!({}))
        .await;
    let received = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(received.stdout, b"before\n");
    assert_eq!(received.stderr, b"err\n");
    let exit = received.exit.unwrap();
    assert_eq!(exit.exit_code, Some(0));
    assert!(!exit.output_incomplete);
}

#[tokio::test]
async fn a_child_exiting_while_an_attachment_is_mid_stream_still_delivers_everything() {
    let server = TestServer::start();
    let process = server
        .sh(
            "read go; head -c 4000000 /dev/urandom; exit 7",
            json!({"stdin": true, "retain_bytes": 8 << 20}),
        )
        .await;
    // A flow-controlled attachment takes one window, then the process
    // exits while most of its output is still to be sent to it.
    let mut slow = server.attach(&process.id, "window=65536").await;
    slow.send(ClientFrame::Stdin {
        data: b"go\n".to_vec(),
    })
    .await;
    let mut received = Received::default();
    while received.stdout.len() < 65536 {
        let frame = slow.frame().await.expect("closed early");
        assert!(!slow.record(frame, &mut received));
    }
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.exit_code, Some(7));
    slow.credit(StreamName::Stdout, u64::MAX / 2).await;
    let rest = slow.until_exit().await;
    received.stdout.extend_from_slice(&rest.stdout);
    assert_eq!(rest.exit.unwrap(), exited);
    assert_eq!(received.stdout.len(), 4_000_000);
    let replay = server.attach(&process.id, "").await.until_exit().await;
    assert_eq!(replay.stdout, received.stdout);
}
