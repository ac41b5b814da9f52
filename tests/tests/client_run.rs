//! The `tether-client` library's `run`: start and attach in one WebSocket
//! from the first byte, resume by the id its hello gave, refusals that keep
//! the spawn's error code, and a first connection with a budget of its own.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tether_client::{
    AttachOptions, Attachment, Client, Error, Overflow, RetryPolicy, SpawnRequest, SpawnSpec,
};
use tether_tests::cut::CuttingProxy;
use tether_tests::rust_client::{addr_of, bounded, client, SeqCheck};
use tether_tests::TestServer;
use tokio::io::AsyncReadExt;

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
