//! The `tether-client` library's requests against a real tetherd: retries
//! of `wait` and `spawn`, `exec`, stdin, and errors that carry the status,
//! code and message.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tether_client::{
    AttachOptions, Attachment, Client, Error, ExitReason, Overflow, RetryPolicy, SpawnRequest,
    SpawnSpec,
};
use tether_tests::rust_client::{addr_of, bounded, client, flaky_front, SeqCheck};
use tether_tests::{settle, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn wait_retries_503s_and_returns_the_real_exit() {
    let server = TestServer::start();
    let process = server
        .sh("read line; exit 5", serde_json::json!({"stdin": true}))
        .await;
    let (front, seen) = flaky_front(addr_of(&server.base), 3).await;
    let client = Client::new(&front).unwrap().with_retry(RetryPolicy {
        budget: Duration::from_secs(10),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
    });
    let id = process.id.clone();
    let waiter = tokio::spawn(async move { client.wait(&id).await });
    // Once the retries are through, the long-poll reaches the server.
    let tries = settle(|| seen.load(Ordering::SeqCst), |n| *n >= 4).await;
    assert!(tries >= 4, "wait did not retry ({tries} requests)");
    assert!(!waiter.is_finished(), "a 503 was reported as the exit");
    let (status, _) = server
        .post(
            &format!("/v1/processes/{}/stdin/close", process.id),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 204);
    let info = bounded("wait", waiter).await.unwrap().unwrap();
    assert_eq!(
        (info.exit_code, info.reason),
        (Some(5), Some(ExitReason::Exit))
    );
}

/// A server that answered and then went away (a restart) is retried for
/// the whole budget; one that never answered, only briefly
/// (`tls_clients::a_client_against_a_closed_port_fails_at_once`).
#[tokio::test]
async fn wait_against_a_gone_server_fails_after_its_budget() {
    let server = TestServer::start();
    let budget = Duration::from_millis(800);
    let client = Client::new(&server.base).unwrap().with_retry(RetryPolicy {
        budget,
        ..RetryPolicy::default()
    });
    bounded("list", client.list()).await.unwrap();
    drop(server);
    let started = Instant::now();
    let error = bounded("wait", client.wait("nothing")).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= budget,
        "gave up after {elapsed:?}, before its budget"
    );
    assert!(
        elapsed < budget + Duration::from_secs(3),
        "took {elapsed:?}"
    );
    match &error {
        Error::BudgetExhausted { attempts, last, .. } => {
            assert!(*attempts >= 2, "{attempts} attempts");
            assert!(matches!(**last, Error::Transport { .. }), "{last:?}");
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    assert!(error.is_unreachable());
    let text = error.to_string();
    assert!(
        text.contains("cannot reach tetherd") && text.contains("refused"),
        "{text}"
    );
}

#[tokio::test]
async fn wait_fails_fast_on_an_unknown_process() {
    let server = TestServer::start();
    let started = Instant::now();
    let error = client(&server).wait("no-such-process").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(error.is_not_found(), "{error:?}");
    assert_eq!(error.status(), Some(404));
    assert!(!error.is_transient());
}

#[tokio::test]
async fn a_retried_spawn_starts_the_command_once() {
    let server = TestServer::start();
    let target = addr_of(&server.base);
    // The first request reaches the server, but its answer is lost.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut outbound = TcpStream::connect(target).await.unwrap();
            if std::mem::take(&mut first) {
                tokio::spawn(async move {
                    let (mut in_read, _in_write) = inbound.split();
                    let (mut out_read, mut out_write) = outbound.split();
                    let forward = tokio::io::copy(&mut in_read, &mut out_write);
                    let mut answer = [0u8; 1];
                    tokio::select! {
                        _ = forward => {}
                        _ = out_read.read(&mut answer) => {}
                    }
                    // Drop both: the client sees its connection close
                    // without an answer.
                });
            } else {
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        }
    });
    let client = Client::new(&front).unwrap().with_retry(RetryPolicy {
        budget: Duration::from_secs(10),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
    });
    let marker = format!("echo idempotent-{}", std::process::id());
    let info = bounded("spawn", client.spawn(SpawnRequest::command(marker.clone())))
        .await
        .unwrap();
    let list = client.list().await.unwrap();
    let same: Vec<_> = list
        .iter()
        .filter(|p| p.argv.last() == Some(&marker))
        .collect();
    assert_eq!(same.len(), 1, "the command started {} times", same.len());
    assert_eq!(same[0].id, info.id);
}

#[tokio::test]
async fn exec_collects_output_and_reports_timeouts() {
    let server = TestServer::start();
    let client = client(&server);
    let out = client
        .exec(SpawnRequest::command("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(
        (
            out.exit_code,
            out.reason,
            out.stdout.as_slice(),
            out.stderr.as_slice()
        ),
        (3, ExitReason::Exit, &b"out\n"[..], &b"err\n"[..])
    );
    assert!(!out.success());
    assert_eq!(out.process.overflow, Overflow::Block);

    let out = bounded(
        "exec with a deadline",
        client.exec(
            SpawnRequest::command("printf partial; sleep 30").timeout(Duration::from_millis(500)),
        ),
    )
    .await
    .unwrap();
    assert_eq!((out.exit_code, out.reason), (124, ExitReason::Timeout));
    assert!(out.timed_out());
    assert_eq!(out.stdout, b"partial");

    // Block mode: far more than retention, every byte delivered.
    let out = bounded(
        "exec with a large output",
        client.exec(SpawnRequest::command("seq 300000").retain_bytes(16 * 1024)),
    )
    .await
    .unwrap();
    let mut check = SeqCheck::new();
    check.check(&out.stdout);
    assert_eq!(check.next_number, 300_001, "all of seq's output");
    assert_eq!(out.dropped, 0);
    assert!(out.success());
}

#[tokio::test]
async fn stdin_writes_and_eof_reach_the_process() {
    let server = TestServer::start();
    let client = client(&server);
    let process = client
        .spawn(SpawnRequest::argv(["cat"]).with_stdin())
        .await
        .unwrap();
    let Attachment {
        mut stdout,
        mut stdin,
        exit,
        ..
    } = client
        .attach(&process.id, AttachOptions::default())
        .await
        .unwrap();
    stdin.write(b"hello\n").await.unwrap();
    let mut line = [0u8; 6];
    bounded("echo", stdout.read_exact(&mut line)).await.unwrap();
    assert_eq!(&line, b"hello\n");
    // AsyncWrite, then shutdown closes stdin.
    stdin.write_all(b"world\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut rest = String::new();
    bounded("rest", stdout.read_to_string(&mut rest))
        .await
        .unwrap();
    assert_eq!(rest, "world\n");
    let info = bounded("exit", exit).await.unwrap();
    assert_eq!(info.exit_code, Some(0));
}

#[tokio::test]
async fn errors_carry_status_code_and_message() {
    let server = TestServer::start();
    let client = client(&server);
    let error = client.get("nope").await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    let error = client
        .spawn(SpawnRequest::argv(["/no/such/program"]))
        .await
        .unwrap_err();
    assert_eq!(
        (error.status(), error.code()),
        (Some(422), Some("spawn_failed"))
    );
    assert!(!error.is_transient());
    let error = client
        .attach("nope", AttachOptions::default())
        .await
        .unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    let done = client.exec(SpawnRequest::command("true")).await.unwrap();
    let error = client.signal(&done.process.id, "TERM").await.unwrap_err();
    assert_eq!(
        (error.status(), error.code()),
        (Some(409), Some("not_running"))
    );
    assert!(matches!(
        Client::new("ftp://example.com"),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn set_unattached_timeout_ends_an_unattached_process_and_none_keeps_it() {
    let server = TestServer::start();
    let client = client(&server);
    let ending = client
        .spawn(SpawnRequest::argv(["sleep", "30"]))
        .await
        .unwrap();
    let info = client
        .set_unattached_timeout(&ending.id, Some(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(info.id, ending.id);
    let exit = bounded("wait", client.wait(&ending.id)).await.unwrap();
    assert_eq!(exit.reason, Some(ExitReason::Unattached));

    let mut request = SpawnRequest::argv(["sleep", "30"]);
    request.unattached_timeout_ms = Some(1000);
    let kept = client.spawn(request).await.unwrap();
    client.set_unattached_timeout(&kept.id, None).await.unwrap();
    let still = client
        .wait_timeout(&kept.id, Duration::from_millis(2000))
        .await
        .unwrap();
    assert_eq!(still.status, tether_client::ProcessStatus::Running);
    client.remove(&kept.id, true).await.unwrap();
    let error = client
        .set_unattached_timeout(&ending.id, None)
        .await
        .unwrap_err();
    assert_eq!(
        (error.status(), error.code()),
        (Some(409), Some("not_running"))
    );
}
