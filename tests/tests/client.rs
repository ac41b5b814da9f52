//! The `tether-client` library against a real tetherd: independent readers
//! with credit flow control, resume across a cut TCP connection, retries of
//! `wait` and `spawn`, `exec`, stdin, dropped notices.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_client::{
    AttachOptions, Attachment, Chunk, Client, Error, ExitReason, Overflow, RetryPolicy,
    SpawnRequest, SpawnSpec,
};
use tether_tests::cut::CuttingProxy;
use tether_tests::{TestServer, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Runs a future with the standard bound.
async fn bounded<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
}

/// The text `seq 1 N` prints, generated lazily, to check a stream
/// incrementally without holding it in memory.
struct SeqCheck {
    next_number: u64,
    pending: Vec<u8>,
    position: usize,
    checked: u64,
}

impl SeqCheck {
    fn new() -> SeqCheck {
        SeqCheck {
            next_number: 1,
            pending: Vec::new(),
            position: 0,
            checked: 0,
        }
    }

    /// Asserts `data` is the next part of `seq`'s output.
    fn check(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.position == self.pending.len() {
                self.pending.clear();
                self.position = 0;
                for _ in 0..1000 {
                    self.pending
                        .extend_from_slice(format!("{}\n", self.next_number).as_bytes());
                    self.next_number += 1;
                }
            }
            let n = data.len().min(self.pending.len() - self.position);
            assert!(
                data[..n] == self.pending[self.position..self.position + n],
                "stream differs from seq output at byte {}",
                self.checked
            );
            self.position += n;
            self.checked += n as u64;
            data = &data[n..];
        }
    }
}

fn client(server: &TestServer) -> Client {
    Client::new(&server.base).unwrap()
}

fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().unwrap()
}

const MIB: u64 = 1 << 20;

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

/// Reads an HTTP request head (and whatever follows it in the same reads).
async fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    head
}

/// A front that answers the first `failures` requests with 503 and then
/// forwards connections to `target`.
async fn flaky_front(target: SocketAddr, failures: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let head = read_head(&mut inbound).await;
                if count.fetch_add(1, Ordering::SeqCst) < failures {
                    let body = r#"{"error":{"code":"overloaded","message":"try again"}}"#;
                    let response = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = inbound.write_all(response.as_bytes()).await;
                    return;
                }
                let mut outbound = TcpStream::connect(target).await.unwrap();
                outbound.write_all(&head).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (base, seen)
}

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
    let deadline = Instant::now() + WAIT;
    while seen.load(Ordering::SeqCst) < 4 {
        assert!(Instant::now() < deadline, "wait did not retry");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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

#[tokio::test]
async fn wait_against_a_gone_server_fails_after_its_budget() {
    let port = tether_tests::free_port();
    let budget = Duration::from_millis(800);
    let client = Client::new(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .with_retry(RetryPolicy {
            budget,
            ..RetryPolicy::default()
        });
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

#[tokio::test]
async fn run_starts_and_attaches_in_one_websocket_from_the_first_byte() {
    let server = TestServer::start();
    let client = client(&server);
    let attachment = bounded(
        "run",
        client.run(
            SpawnRequest::command("echo out; echo err >&2; exit 3"),
            AttachOptions::default(),
        ),
    )
    .await
    .unwrap();
    let process = attachment.process().clone();
    let Attachment {
        mut stdout,
        mut stderr,
        exit,
        ..
    } = attachment;
    let (mut out, mut err) = (String::new(), String::new());
    bounded("stdout", stdout.read_to_string(&mut out))
        .await
        .unwrap();
    bounded("stderr", stderr.read_to_string(&mut err))
        .await
        .unwrap();
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    let info = bounded("exit", exit).await.unwrap();
    assert_eq!(
        (info.id.as_str(), info.exit_code),
        (process.id.as_str(), Some(3))
    );
    assert_eq!(client.get(&process.id).await.unwrap().exit_code, Some(3));

    // A run that cannot start is the spawn's error, and starts nothing.
    let failed = client
        .run(
            SpawnRequest::argv(["no-such-program-xyz"]),
            AttachOptions::default(),
        )
        .await;
    assert!(
        matches!(&failed, Err(Error::Http { status: 422, .. })),
        "{:?}",
        failed.err()
    );
    let screen = AttachOptions {
        screen: true,
        ..AttachOptions::default()
    };
    assert!(matches!(
        client.run(SpawnRequest::command("true"), screen).await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_run_cut_mid_stream_resumes_by_the_id_its_hello_gave() {
    let server = TestServer::start();
    let proxy = CuttingProxy::start(addr_of(&server.base)).await;
    let client = Client::new(&proxy.base).unwrap();
    let lines = 300_000;
    let options = AttachOptions {
        window: 16 * 1024,
        ..AttachOptions::default()
    };
    let attachment = bounded(
        "run",
        client.run(
            SpawnRequest::command(format!("seq {lines}"))
                .overflow(Overflow::Block)
                .retain_bytes(64 * 1024),
            options,
        ),
    )
    .await
    .unwrap();
    let id = attachment.process().id.clone();
    let Attachment {
        mut stdout,
        control,
        exit,
        ..
    } = attachment;
    let mut check = SeqCheck::new();
    let mut buf = vec![0u8; 8 * 1024];
    let mut cut = false;
    bounded("stdout through a cut", async {
        loop {
            let n = stdout.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            check.check(&buf[..n]);
            if !cut && check.checked >= 200_000 {
                assert!(proxy.cut() > 0, "nothing to cut");
                cut = true;
            }
        }
    })
    .await;
    assert!(cut, "the cut happened mid-stream");
    let info = bounded("exit", exit).await.unwrap();
    assert_eq!(check.checked, info.stdout_bytes, "no gap, no duplicate");
    assert_eq!((info.id, info.exit_code), (id, Some(0)));
    assert!(control.connections() >= 2, "resumed by attach");
    // One process: the resume attached, it did not run the command again.
    let (_, list) = server.get("/v1/processes").await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn a_refused_run_is_the_spawns_error_with_its_code() {
    let server = TestServer::start();
    let client = client(&server);
    let code = |result: Result<Attachment, Error>| match result {
        Ok(_) => panic!("the run was not refused"),
        Err(e) => (e.status(), e.code().map(str::to_string)),
    };
    let run = |spec: SpawnRequest| client.run(spec, AttachOptions::default());
    assert_eq!(
        code(run(SpawnRequest::argv(["/no/such/program"])).await),
        (Some(422), Some("spawn_failed".into()))
    );
    assert_eq!(
        code(run(SpawnRequest::argv(["/etc/passwd"])).await),
        (Some(422), Some("cannot_execute".into()))
    );
    let first = client
        .spawn(SpawnRequest::command("sleep 30").name("taken"))
        .await
        .unwrap();
    assert_eq!(
        code(run(SpawnRequest::command("true").name("taken")).await),
        (Some(409), Some("name_taken".into()))
    );
    let list = client.list().await.unwrap();
    assert_eq!(list.len(), 1, "a refused run started nothing");
    assert_eq!(list[0].id, first.id);
    client.kill(&first.id).await.unwrap();
}

/// A proxy may send a refusal's head and body apart, and a WebSocket
/// client keeps only what came with the head: the code is in a header too.
#[test]
fn a_refused_run_keeps_its_code_when_only_the_head_arrives() {
    let server = TestServer::start();
    // Front runs a runtime of its own, so this test is not async itself.
    let front = tether_tests::front::Front::head_only(
        server.base.trim_start_matches("http://").parse().unwrap(),
    );
    let client = Client::new(&front.base).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (argv, code) in [
        ("/no/such/program", "spawn_failed"),
        ("/etc/passwd", "cannot_execute"),
    ] {
        let run = client.run(SpawnRequest::argv([argv]), AttachOptions::default());
        let Err(e) = runtime.block_on(run) else {
            panic!("the run of {argv} was not refused");
        };
        assert_eq!((e.status(), e.code()), (Some(422), Some(code)), "{e}");
    }
}

#[tokio::test]
async fn a_runs_first_connection_has_a_budget_of_its_own() {
    let port = tether_tests::free_port();
    let client = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let options = AttachOptions {
        first_connect: Some(RetryPolicy {
            budget: Duration::from_millis(300),
            ..RetryPolicy::default()
        }),
        ..AttachOptions::default()
    };
    let started = Instant::now();
    let error = bounded("run", client.run(SpawnRequest::command("true"), options))
        .await
        .unwrap_err();
    // Not the 30 s of `reconnect`.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, Error::BudgetExhausted { .. }) && error.is_unreachable(),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_attachment_whose_output_flows_makes_no_wait_request() {
    let server = TestServer::start();
    let client = client(&server);
    let Attachment {
        mut stdout, exit, ..
    } = bounded(
        "run",
        client.run(SpawnRequest::command("seq 1000"), AttachOptions::default()),
    )
    .await
    .unwrap();
    let mut out = String::new();
    bounded("stdout", stdout.read_to_string(&mut out))
        .await
        .unwrap();
    assert_eq!(out.lines().count(), 1000);
    assert_eq!(bounded("exit", exit).await.unwrap().exit_code, Some(0));
    let metrics = server.metrics().await;
    assert!(
        metrics.lines().any(|l| l == "tether_wait_requests_total 0"),
        "{metrics}"
    );
}
