//! The `tether-client` library's attachments against a real tetherd:
//! independent readers with credit flow control, resume across a cut TCP
//! connection, dropped and evicted output as explicit notices, block mode,
//! read-only attachments and the reconnect budget.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tether_client::{
    AttachOptions, Attachment, Chunk, Client, Error, Overflow, RetryPolicy, SpawnRequest, SpawnSpec,
};
use tether_tests::cut::CuttingProxy;
use tether_tests::rust_client::{addr_of, bounded, client, SeqCheck, MIB};
use tether_tests::TestServer;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn reading_only_stdout_leaves_unread_stderr_on_the_server() {
    let server = TestServer::start();
    let client = client(&server);
    let size = 20 * MIB;
    let process = client
        .spawn(
            SpawnRequest::command(format!(
                "(seq 3000000 | head -c {size}) >&2 & seq 3000000 | head -c {size}; wait"
            ))
            .retain_bytes(24 * MIB),
        )
        .await
        .unwrap();
    let window = 256 * 1024;
    let options = AttachOptions {
        window,
        ..AttachOptions::default()
    };
    let Attachment {
        mut stdout,
        mut stderr,
        exit,
        ..
    } = client.attach(&process.id, options).await.unwrap();

    // Read stdout only, to its end. The process finishes meanwhile, with
    // 20 MiB of stderr nobody has read.
    let mut check = SeqCheck::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut max_buffered = 0;
    bounded("reading stdout", async {
        loop {
            let n = stdout.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            check.check(&buf[..n]);
            max_buffered = max_buffered.max(stderr.buffered()).max(stdout.buffered());
        }
    })
    .await;
    assert_eq!(check.checked, size, "stdout complete");
    assert!(
        max_buffered <= window,
        "client buffered {max_buffered} bytes, window {window}"
    );
    // The exit is known although stderr has not been read...
    let info = exit.get().expect("exit known at stdout's end").unwrap();
    assert_eq!((info.exit_code, info.stderr_bytes), (Some(0), size));
    // ...and stderr waits on the server: the client holds at most a window.
    assert!(
        stderr.buffered() <= window,
        "stderr buffered {}",
        stderr.buffered()
    );

    let mut check = SeqCheck::new();
    bounded("reading stderr", async {
        loop {
            let n = stderr.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            check.check(&buf[..n]);
            assert!(stderr.buffered() <= window);
        }
    })
    .await;
    assert_eq!(check.checked, size, "stderr complete");
    assert_eq!((stdout.dropped(), stderr.dropped()), (0, 0));
}

#[tokio::test]
async fn a_cut_connection_resumes_with_every_byte_once() {
    let server = TestServer::start();
    let proxy = CuttingProxy::start(addr_of(&server.base)).await;
    let client = Client::new(&proxy.base).unwrap();
    // Block mode with small retention: the program is paced by this
    // attachment, so plenty is still unsent whenever the cut comes.
    let lines = 400_000;
    let process = client
        .spawn(
            SpawnRequest::command(format!("seq {lines}; seq {lines} >&2"))
                .overflow(Overflow::Block)
                .retain_bytes(64 * 1024),
        )
        .await
        .unwrap();
    let expected = {
        let mut len = 0u64;
        for n in 1..=lines {
            len += format!("{n}\n").len() as u64;
        }
        len
    };
    let options = AttachOptions {
        window: 16 * 1024,
        ..AttachOptions::default()
    };
    let Attachment {
        mut stdout,
        mut stderr,
        control,
        exit,
        ..
    } = client.attach(&process.id, options).await.unwrap();
    let cuts = [200_000u64, 1_000_000, 2_000_000];
    let mut check = SeqCheck::new();
    let mut buf = vec![0u8; 8 * 1024];
    let mut next_cut = 0;
    // In block mode the process cannot finish (so stdout cannot end)
    // before stderr is read: read stdout up to its known length.
    bounded("stdout through cuts", async {
        while check.checked < expected {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "stdout ended early at {}", check.checked);
            check.check(&buf[..n]);
            if next_cut < cuts.len() && check.checked >= cuts[next_cut] {
                assert!(proxy.cut() > 0, "nothing to cut");
                next_cut += 1;
            }
        }
    })
    .await;
    assert_eq!(next_cut, cuts.len(), "every cut happened mid-stream");
    assert_eq!(check.checked, expected, "stdout: no gap, no duplicate");
    // One more cut while stderr is pending, then read it all.
    proxy.cut();
    let mut check = SeqCheck::new();
    bounded("stderr after a cut", async {
        loop {
            let n = stderr.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            check.check(&buf[..n]);
        }
    })
    .await;
    assert_eq!(check.checked, expected, "stderr: no gap, no duplicate");
    assert_eq!(
        bounded("stdout end", stdout.read(&mut buf)).await.unwrap(),
        0
    );
    assert_eq!((stdout.dropped(), stderr.dropped()), (0, 0));
    let info = bounded("exit", exit).await.unwrap();
    assert_eq!(info.exit_code, Some(0));
    assert!(
        control.connections() >= 4,
        "resumed {} times",
        control.connections() - 1
    );
    assert!(proxy.accepted.load(Ordering::SeqCst) >= 4);
}

#[tokio::test]
async fn dropped_output_is_an_explicit_notice() {
    let server = TestServer::start();
    let client = client(&server);
    let process = client
        .spawn(SpawnRequest::command("seq 100000").retain_bytes(1000))
        .await
        .unwrap();
    let done = client.wait(&process.id).await.unwrap();
    let total = done.stdout_bytes;
    let attachment = client
        .attach(&process.id, AttachOptions::default())
        .await
        .unwrap();
    let mut stdout = attachment.stdout;
    let first = bounded("first chunk", stdout.chunk())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        Chunk::Dropped {
            offset: 0,
            length: total - 1000
        }
    );
    let mut tail = Vec::new();
    while let Some(chunk) = bounded("chunk", stdout.chunk()).await {
        match chunk.unwrap() {
            Chunk::Data { offset, data } => {
                assert_eq!(offset, total - 1000 + tail.len() as u64);
                tail.extend_from_slice(&data);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(tail.len(), 1000);
    assert!(tail.ends_with(b"\n99999\n100000\n"));

    // AsyncRead skips the gap and counts it.
    let mut stdout = client
        .attach(&process.id, AttachOptions::default())
        .await
        .unwrap()
        .stdout;
    let mut all = Vec::new();
    bounded("read", stdout.read_to_end(&mut all)).await.unwrap();
    assert_eq!((all.len() as u64, stdout.dropped()), (1000, total - 1000));
}

#[tokio::test]
async fn a_read_only_attachment_refuses_input_locally() {
    let server = TestServer::start();
    let client = client(&server);
    let process = client
        .spawn(SpawnRequest::command("read x; echo got $x").with_stdin())
        .await
        .unwrap();
    let options = AttachOptions {
        readonly: true,
        ..AttachOptions::default()
    };
    let mut attachment = client.attach(&process.id, options).await.unwrap();
    assert!(matches!(
        attachment.stdin.write(b"x\n").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(attachment.control.signal("TERM").await.is_err());
    client
        .write_stdin(&process.id, b"y\n".to_vec())
        .await
        .unwrap();
    let mut out = String::new();
    bounded("output", attachment.stdout.read_to_string(&mut out))
        .await
        .unwrap();
    assert_eq!(out, "got y\n");
}

#[tokio::test]
async fn an_attachment_fails_clearly_when_its_reconnect_budget_runs_out() {
    let server = TestServer::start();
    let proxy = CuttingProxy::start(addr_of(&server.base)).await;
    let client = Client::new(&proxy.base).unwrap();
    let process = client
        .spawn(SpawnRequest::command("echo first; read x; echo second").with_stdin())
        .await
        .unwrap();
    let budget = Duration::from_millis(700);
    let options = AttachOptions {
        reconnect: RetryPolicy {
            budget,
            ..RetryPolicy::default()
        },
        ..AttachOptions::default()
    };
    let Attachment {
        mut stdout, exit, ..
    } = client.attach(&process.id, options).await.unwrap();
    let mut line = [0u8; 6];
    bounded("first line", stdout.read_exact(&mut line))
        .await
        .unwrap();
    assert_eq!(&line, b"first\n");
    proxy.stop().await;
    let started = Instant::now();
    let mut rest = Vec::new();
    let error = bounded("failure", stdout.read_to_end(&mut rest))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() >= budget,
        "gave up after {:?}",
        started.elapsed()
    );
    let inner = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<Error>())
        .cloned();
    assert!(
        matches!(inner, Some(Error::BudgetExhausted { .. })),
        "{error:?}"
    );
    let exit_error = bounded("exit", exit).await.unwrap_err();
    assert!(
        matches!(exit_error, Error::BudgetExhausted { .. }),
        "{exit_error:?}"
    );
    assert!(exit_error.is_unreachable(), "{exit_error}");
    // The process itself is unaffected.
    assert!(!server.status(&process.id).await.is_exited());
}

#[tokio::test]
async fn dropped_readers_do_not_hold_back_the_exit() {
    let server = TestServer::start();
    let client = client(&server);
    // Block mode, 4 MiB per stream, retention far smaller: the process
    // can finish only if the attachment takes everything.
    let process = client
        .spawn(
            SpawnRequest::command("head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2")
                .overflow(Overflow::Block)
                .retain_bytes(256 * 1024),
        )
        .await
        .unwrap();
    let options = AttachOptions {
        window: 64 * 1024,
        ..AttachOptions::default()
    };
    let Attachment {
        stdout,
        stderr,
        exit,
        ..
    } = client.attach(&process.id, options).await.unwrap();
    drop(stdout);
    drop(stderr);
    let info = bounded("exit", exit).await.unwrap();
    assert_eq!(
        (info.exit_code, info.stdout_bytes, info.stderr_bytes),
        (Some(0), 4 << 20, 4 << 20)
    );
}

#[tokio::test]
async fn output_evicted_while_disconnected_resumes_as_a_dropped_notice() {
    let server = TestServer::start();
    let proxy = CuttingProxy::start(addr_of(&server.base)).await;
    let client = Client::new(&proxy.base).unwrap();
    let process = client
        .spawn(
            SpawnRequest::command("echo start; read x; seq 100000")
                .with_stdin()
                .retain_bytes(4096),
        )
        .await
        .unwrap();
    let Attachment {
        mut stdout, exit, ..
    } = client
        .attach(&process.id, AttachOptions::default())
        .await
        .unwrap();
    let first = bounded("start", stdout.chunk()).await.unwrap().unwrap();
    assert_eq!(
        first,
        Chunk::Data {
            offset: 0,
            data: "start\n".into()
        }
    );
    // Disconnected, and held so: the process writes far more than its
    // retention and exits meanwhile.
    proxy.pause();
    assert!(proxy.cut() > 0);
    let (status, _) = server
        .post(
            &format!("/v1/processes/{}/stdin/close", process.id),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 204);
    let done = server.wait_exit(&process.id).await;
    let total = done.stdout_bytes;
    proxy.resume();
    let gap = bounded("gap", stdout.chunk()).await.unwrap().unwrap();
    assert_eq!(
        gap,
        Chunk::Dropped {
            offset: 6,
            length: total - 4096 - 6
        }
    );
    let mut tail = Vec::new();
    while let Some(chunk) = bounded("tail", stdout.chunk()).await {
        match chunk.unwrap() {
            Chunk::Data { offset, data } => {
                assert_eq!(offset, total - 4096 + tail.len() as u64);
                tail.extend_from_slice(&data);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(tail.len(), 4096);
    assert!(tail.ends_with(b"\n99999\n100000\n"));
    assert_eq!(bounded("exit", exit).await.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn block_mode_with_a_window_larger_than_retention_delivers_everything() {
    // Retention full of bytes sent but not yet credited must be freed by
    // credit alone (a server once stalled here after one retention's worth).
    let server = TestServer::start();
    let client = client(&server);
    let process = client
        .spawn(
            SpawnRequest::command("seq 400000")
                .overflow(Overflow::Block)
                .retain_bytes(16 * 1024),
        )
        .await
        .unwrap();
    let options = AttachOptions {
        window: 256 * 1024,
        ..AttachOptions::default()
    };
    let mut stdout = client.attach(&process.id, options).await.unwrap().stdout;
    let mut check = SeqCheck::new();
    let mut buf = vec![0u8; 16 * 1024];
    bounded("stdout", async {
        loop {
            let n = stdout.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            check.check(&buf[..n]);
        }
    })
    .await;
    assert_eq!(check.next_number, 400_001);
}
