//! Every byte the server holds on a client's or a process's behalf is
//! bounded: list answers, retained buffers, request metadata, queued stdin.

use serde_json::{json, Value};
use tether_tests::*;

async fn list_page(server: &TestServer, query: &str) -> (u16, Value, Option<String>, usize) {
    let response = server
        .http
        .get(server.url(&format!("/v1/processes?{query}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let next = response
        .headers()
        .get("tether-next-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    let size = text.len();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        next,
        size,
    )
}

#[tokio::test]
async fn the_process_list_comes_in_pages_that_follow_on() {
    let server = TestServer::start();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let process = server.spawn(json!({"argv": ["true"]})).await;
        server.wait_exit(&process.id).await;
        ids.push(process.id);
    }
    let mut seen = Vec::new();
    let mut query = "limit=2".to_string();
    let mut pages = 0;
    loop {
        let (status, page, next, _) = list_page(&server, &query).await;
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().unwrap().clone();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|p| p["id"].as_str().unwrap().to_string()));
        pages += 1;
        match next {
            Some(after) => {
                assert_eq!(Some(&after), seen.last());
                query = format!("limit=2&after={after}");
            }
            None => break,
        }
        assert!(pages < 10, "pages never end");
    }
    assert_eq!(seen, ids, "every process once, oldest first");
    assert_eq!(pages, 3);
    for bad in ["limit=0", "limit=1001", "limit=x"] {
        assert_eq!(list_page(&server, bad).await.0, 400, "{bad}");
    }
    assert_eq!(list_page(&server, "after=nosuchid").await.0, 404);
}

#[tokio::test]
async fn a_list_of_processes_with_huge_argv_is_cut_at_the_byte_bound() {
    let server = TestServer::start();
    // 7 x 120 KB: each argument under Linux's 128 KiB per-string limit.
    let mut argv = vec!["true".to_string()];
    argv.extend(std::iter::repeat_n("x".repeat(120_000), 7));
    for _ in 0..6 {
        let process = server.spawn(json!({ "argv": argv })).await;
        server.wait_exit(&process.id).await;
    }
    let (status, page, next, size) = list_page(&server, "").await;
    assert_eq!(status, 200);
    let listed = page.as_array().unwrap().len();
    assert!(listed < 6, "{listed} processes in one answer");
    assert!(size <= (4 << 20) + 1_000_000, "{size} bytes");
    let after = next.expect("a next page");
    let (_, rest, next, _) = list_page(&server, &format!("after={after}")).await;
    assert_eq!(listed + rest.as_array().unwrap().len(), 6);
    assert!(next.is_none());
}

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn attachments_withholding_credit_cannot_keep_forgotten_buffers_past_the_retention_budget() {
    let server = TestServer::start_with(&["--retain-total", &(64 * MIB).to_string()]);
    let baseline = rss_bytes(server.pid());
    let mut holders = Vec::new();
    let mut peak = 0;
    for round in 0..10 {
        let process = server
            .sh(
                "head -c 16000000 /dev/urandom",
                json!({"retain_bytes": 16 * MIB}),
            )
            .await;
        // One credit byte: the rest stays retained for this attachment.
        let mut holder = server.attach(&process.id, "window=1").await;
        server.wait_exit(&process.id).await;
        let url = server.url(&format!("/v1/processes/{}", process.id));
        let response = server.http.delete(url).send().await.unwrap();
        assert_eq!(response.status(), 200, "round {round}");
        peak = peak.max(rss_bytes(server.pid()));
        // What the holder was not sent is reported, not silently gone.
        let mut received = Received::default();
        let exit = loop {
            match holder.frame().await {
                Some(frame) => {
                    if holder.record(frame, &mut received) {
                        break received.exit.take().unwrap();
                    }
                }
                None => panic!("closed before the exit frame"),
            }
        };
        let dropped: u64 = received.dropped.iter().map(|d| d.2).sum();
        assert_eq!(
            received.stdout.len() as u64 + dropped,
            exit.stdout_bytes,
            "round {round}: every byte delivered or reported dropped"
        );
        holders.push(holder);
    }
    assert!(
        peak < baseline + 64 * MIB + 48 * MIB,
        "server memory peaked at {} MiB (baseline {} MiB, budget 64 MiB)",
        peak / MIB,
        baseline / MIB
    );
}

#[tokio::test]
async fn argv_and_idempotency_keys_count_against_the_retention_budget() {
    let server = TestServer::start_with(&["--retain-total", &(4 * MIB).to_string()]);
    let baseline = rss_bytes(server.pid());
    let mut argv = vec!["true".to_string()];
    argv.extend(std::iter::repeat_n("a".repeat(60_000), 7));
    for i in 0..50 {
        let response = server
            .http
            .post(server.url("/v1/processes"))
            // The longest key allowed (256 bytes; longer is a 400).
            .header("Idempotency-Key", format!("{i:03}-{}", "k".repeat(252)))
            .json(&json!({"argv": argv, "retain_bytes": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "spawn {i}");
        let process: tether_tests::tether_protocol::ProcessInfo = response.json().await.unwrap();
        server.wait_exit(&process.id).await;
    }
    let rss = rss_bytes(server.pid());
    assert!(
        rss < baseline + 4 * MIB + 24 * MIB,
        "server memory {} MiB after 50 big spawns (baseline {} MiB, budget 4 MiB)",
        rss / MIB,
        baseline / MIB
    );
}

#[tokio::test]
async fn stdin_posted_to_a_process_that_does_not_read_is_bounded_with_a_clear_429() {
    let server = TestServer::start();
    let process = server.sh("sleep 60", json!({"stdin": true})).await;
    let megabyte = vec![b'x'; MIB as usize];
    let mut posts = Vec::new();
    for _ in 0..64 {
        let http = server.http.clone();
        let url = server.url(&format!("/v1/processes/{}/stdin", process.id));
        let body = megabyte.clone();
        posts.push(tokio::spawn(async move {
            let response = tokio::time::timeout(WAIT, http.post(url).body(body).send())
                .await
                .expect("a stdin POST was parked instead of answered")
                .unwrap();
            let status = response.status().as_u16();
            let closes = response
                .headers()
                .get("connection")
                .is_some_and(|v| v == "close");
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body, closes)
        }));
    }
    let mut accepted = 0;
    let mut refused = 0;
    for post in posts {
        let (status, body, closes) = post.await.unwrap();
        match status {
            204 => accepted += 1,
            429 => {
                assert_eq!(body["error"]["code"], "stdin_busy", "{body}");
                // Its body was never read: the connection cannot be reused,
                // and the client is told so.
                assert!(closes, "a 429 before the body without Connection: close");
                refused += 1;
            }
            other => panic!("stdin POST answered {other}: {body}"),
        }
    }
    assert!(refused > 0);
    assert!(accepted as u64 * MIB <= 4 * MIB, "{accepted} MiB queued");
    let url = server.url(&format!("/v1/processes/{}?force=1", process.id));
    server.http.delete(url).send().await.unwrap();
}

/// The descriptor budget that sizes the defaults to the open-file limit
/// (`server/src/limits.rs`: 6 per running process, 2 per exited process
/// still known) covers what processes really hold, counted in /proc. A
/// process's cgroup costs nothing once it is launched.
#[tokio::test]
async fn the_descriptor_budget_covers_running_and_exited_processes() {
    const PER_RUNNING: usize = 6;
    const PER_EXITED: usize = 2;
    const N: usize = 10;
    // Slack for the test's own HTTP connection and a spawn in progress.
    const SLACK: usize = 4;
    let server = TestServer::start();
    let pid = server.pid();
    server.sh("true", json!({})).await;
    let base = fd_count(pid);

    let mut running = Vec::new();
    for _ in 0..N {
        running.push(
            server
                .spawn(json!({"argv": ["sleep", "60"], "stdin": true}))
                .await,
        );
    }
    let pipes = fd_count(pid) - base;
    assert!(
        pipes <= N * PER_RUNNING + SLACK,
        "{N} pipe processes hold {pipes} descriptors: {:?}",
        fd_links(pid)
    );
    assert!(
        pipes >= N * 3,
        "{N} pipe processes hold only {pipes}: is this counting the right server?"
    );

    let before_ptys = fd_count(pid);
    for _ in 0..N {
        running.push(
            server
                .spawn(json!({"argv": ["sleep", "60"], "tty": true}))
                .await,
        );
    }
    let ptys = fd_count(pid) - before_ptys;
    assert!(
        ptys <= N * PER_RUNNING + SLACK,
        "{N} PTYs hold {ptys}: {:?}",
        fd_links(pid)
    );

    let before_exited = fd_count(pid);
    for tty in [false, true] {
        for _ in 0..N / 2 {
            let info = server.spawn(json!({"argv": ["true"], "tty": tty})).await;
            server.wait_exit(&info.id).await;
        }
    }
    let exited = fd_count(pid).saturating_sub(before_exited);
    assert!(
        exited <= N * PER_EXITED + SLACK,
        "{N} exited processes hold {exited}: {:?}",
        fd_links(pid)
    );
    drop(running);
}

/// The `tether_worker_threads` gauge of a server's `/metrics`.
async fn worker_gauge(server: &TestServer) -> usize {
    server
        .metrics()
        .await
        .lines()
        .find_map(|line| line.strip_prefix("tether_worker_threads "))
        .and_then(|value| value.parse().ok())
        .expect("no tether_worker_threads gauge")
}

#[tokio::test]
async fn the_runtime_has_the_worker_threads_asked_for_and_half_the_cpus_by_default() {
    let asked = TestServer::start_with(&["--worker-threads", "3"]);
    assert_eq!(worker_gauge(&asked).await, 3);
    let from_env = TestServer::start_with_env(&[], &[("TETHER_WORKER_THREADS", "2")]);
    assert_eq!(worker_gauge(&from_env).await, 2);
    // available_parallelism sees the same affinity and quota as the server.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default = TestServer::start();
    assert_eq!(worker_gauge(&default).await, cpus.div_ceil(2));
}

#[tokio::test]
async fn a_full_table_forgets_the_oldest_exit_first_whatever_order_they_started_in() {
    let server = TestServer::start_with(&["--max-known-processes", "3"]);
    // Started first, exits last.
    let first_started = server.sh("sleep 300", json!({})).await;
    let first_exit = server.spawn(json!({"argv": ["true"]})).await;
    server.wait_exit(&first_exit.id).await;
    let second_exit = server.spawn(json!({"argv": ["true"]})).await;
    server.wait_exit(&second_exit.id).await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/kill?grace_ms=0", first_started.id),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_exit(&first_started.id).await;

    let known = |id: &str| {
        let path = format!("/v1/processes/{id}");
        let server = &server;
        async move { server.get(&path).await.0 == 200 }
    };
    // Each spawn into the full table forgets one process: the one that
    // exited longest ago.
    server.spawn(json!({"argv": ["true"]})).await;
    assert!(
        !known(&first_exit.id).await,
        "the oldest exit is forgotten first"
    );
    assert!(known(&second_exit.id).await && known(&first_started.id).await);
    server.spawn(json!({"argv": ["true"]})).await;
    assert!(!known(&second_exit.id).await, "then the next oldest");
    assert!(
        known(&first_started.id).await,
        "the first started, last exited, stays"
    );
}

/// Spawns `count` short commands one after the other, each to its exit,
/// and returns their ids, oldest first.
async fn run_to_exit(server: &TestServer, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..count {
        let process = server
            .spawn(json!({"argv": ["printf", format!("out-{i}")]}))
            .await;
        server.wait_exit(&process.id).await;
        ids.push(process.id);
    }
    ids
}

#[tokio::test]
async fn an_exited_process_counts_against_the_budget_for_what_it_holds_not_its_windows() {
    // A running pipe process reserves its two windows (2 x 1 MiB) and its
    // logs' capacity on disk (2 x 64 MiB): each budget here has room for
    // two of them, and not three.
    let memory = TestServer::start_with(&["--retain-total", &(5 * MIB).to_string()]);
    let disk = TestServer::start_with(&["--retain-disk-total", &(300 * MIB).to_string()]);
    for server in [&memory, &disk] {
        let ids = run_to_exit(server, 12).await;
        // Once exited, each holds a few bytes and its argv: none of the
        // twelve was forgotten to make room for the next.
        for (i, id) in ids.iter().enumerate() {
            let (status, body) = server.get(&format!("/v1/processes/{id}")).await;
            assert_eq!(status, 200, "process {i} forgotten: {body}");
        }
        let first = server
            .http
            .get(server.url(&format!("/v1/processes/{}/output", ids[0])))
            .send()
            .await
            .unwrap();
        assert_eq!(first.text().await.unwrap(), "out-0");
        // A running process still holds its full reservation: two fit,
        // the third is refused. Forgetting the exited ones could not make
        // room for it, so the refusal forgets none of them.
        for _ in 0..2 {
            server.sh("sleep 60", json!({})).await;
        }
        let (status, body) = server
            .post("/v1/processes", json!({"argv": ["sleep", "60"]}))
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (503, Some("retention_exhausted")),
            "{body}"
        );
        for (i, id) in ids.iter().enumerate() {
            let (status, body) = server.get(&format!("/v1/processes/{id}")).await;
            assert_eq!(status, 200, "process {i} forgotten by a refusal: {body}");
        }
    }
}

#[tokio::test]
async fn exited_processes_holding_output_are_forgotten_oldest_first_when_a_spawn_needs_their_room()
{
    // Each exited one keeps its last mebibyte of stdout; a running one
    // reserves its two 1 MiB windows.
    let server = TestServer::start_with(&["--retain-total", &(11 * MIB / 2).to_string()]);
    let mut exited = Vec::new();
    for _ in 0..2 {
        let process = server.sh("head -c 1500000 /dev/zero", json!({})).await;
        server.wait_exit(&process.id).await;
        exited.push(process.id);
    }
    server.sh("sleep 60", json!({})).await;
    // 1 + 1 + 2 MiB held, 2 more wanted: the oldest exit makes room.
    let (status, body) = server
        .post("/v1/processes", json!({"argv": ["sleep", "60"]}))
        .await;
    assert_eq!(status, 201, "{body}");
    let known = |id: &String| {
        let path = format!("/v1/processes/{id}");
        let server = &server;
        async move { server.get(&path).await.0 == 200 }
    };
    assert!(!known(&exited[0]).await, "the oldest exit made room");
    assert!(known(&exited[1]).await, "one was enough");
}

/// Stdin queued for a process by its attachments is bounded per process,
/// whatever their number: 32 attachments flooding a process that never
/// reads its stdin hold about the process's 8 MiB, not 32 times an
/// attachment's 4 MiB.
#[tokio::test]
async fn stdin_queued_by_many_attachments_is_bounded_per_process() {
    use tether_protocol::ClientFrame;
    let server = TestServer::start();
    let process = server.sh("sleep 60", json!({"stdin": true})).await;
    let baseline = rss_bytes(server.pid());
    let mut floods = Vec::new();
    for _ in 0..32 {
        let mut attachment = server.attach(&process.id, "").await;
        floods.push(tokio::spawn(async move {
            // Until the server stops taking frames (the send waits): far
            // more than an attachment's own budget.
            for _ in 0..96 {
                let frame = ClientFrame::Stdin {
                    data: vec![b'x'; 64 << 10],
                };
                let sent =
                    tokio::time::timeout(std::time::Duration::from_secs(3), attachment.send(frame));
                if sent.await.is_err() {
                    break;
                }
            }
            attachment
        }));
    }
    let mut attachments = Vec::new();
    for flood in floods {
        attachments.push(flood.await.unwrap());
    }
    let held = rss_bytes(server.pid()).saturating_sub(baseline);
    assert!(
        held < 48 * MIB,
        "server memory grew {} MiB with 32 attachments' stdin queued (one attachment may queue 4 MiB, a process 8 MiB)",
        held / MIB
    );
    drop(attachments);
    let url = server.url(&format!("/v1/processes/{}?force=1", process.id));
    let response = server.http.delete(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// Queued stdin is counted in the memory budget: when the budget has no
/// room, a frame that would wait for the process is refused with an
/// `error` frame `retention_exhausted` (nothing is forgotten to make room),
/// never held past the budget.
#[tokio::test]
async fn stdin_queued_past_the_memory_budget_is_refused_with_an_error_frame() {
    use tether_protocol::{ClientFrame, ServerFrame};
    // 4 MiB in all, the process's windows (2 x 256 KiB) taken: far less
    // room than the 8 MiB its attachments may queue.
    let server = TestServer::start_with(&["--retain-total", "4194304"]);
    let process = server
        .sh(
            "sleep 60",
            json!({"stdin": true, "retain_bytes": 256 << 10}),
        )
        .await;
    let mut attachments = Vec::new();
    for _ in 0..3 {
        let mut attachment = server.attach(&process.id, "").await;
        for _ in 0..64 {
            let frame = ClientFrame::Stdin {
                data: vec![b'x'; 64 << 10],
            };
            let sent =
                tokio::time::timeout(std::time::Duration::from_secs(2), attachment.send(frame));
            if sent.await.is_err() {
                break;
            }
        }
        attachments.push(attachment);
    }
    let mut codes = Vec::new();
    for attachment in &mut attachments {
        while let Ok(Some(frame)) =
            tokio::time::timeout(std::time::Duration::from_secs(2), attachment.frame()).await
        {
            if let ServerFrame::Error { code, .. } = frame {
                codes.push(code);
            }
        }
    }
    assert!(
        codes.iter().any(|c| c == "retention_exhausted"),
        "no refusal past a 4 MiB budget: {codes:?}"
    );
    drop(attachments);
    let url = server.url(&format!("/v1/processes/{}?force=1", process.id));
    assert_eq!(server.http.delete(url).send().await.unwrap().status(), 200);
}
