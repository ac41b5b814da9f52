//! The terminal screen inside the server's bounds (issue 29): a maximum
//! terminal size on every entry point, each screen's memory in the
//! retention budget and given back when its process is forgotten, a
//! `screen=1` attachment to a flooding terminal answered with one snapshot,
//! and sequences that ask for far more work than they can show (`CSI 65535
//! b`) kept from delaying the screen or anyone's echo.

use std::time::{Duration, Instant};

use crate::kube::support::{text, ChannelClient, Session};
use serde_json::json;
use tether_protocol::{ClientFrame, ServerFrame};
use tether_server::screen::{memory_bound, ScreenLimits};
use tether_tests::{rss_bytes, settle, Received, TestServer};

const MIB: u64 = 1 << 20;

/// The server's default `--screen-scrollback`.
const LIMITS: ScreenLimits = ScreenLimits {
    scrollback_lines: 200,
};

/// `ws://HOST/api/v1/namespaces/n/pods/p/exec?command=...&REST`.
fn exec_url(server: &TestServer, argv: &[&str], rest: &str) -> String {
    let encode = |a: &str| -> String {
        a.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let command: Vec<String> = argv
        .iter()
        .map(|a| format!("command={}", encode(a)))
        .collect();
    format!(
        "{}/api/v1/namespaces/n/pods/p/exec?{}&{rest}",
        server.base.replacen("http://", "ws://", 1),
        command.join("&")
    )
}

#[tokio::test]
async fn a_terminal_beyond_the_cell_limit_is_refused_on_every_entry_point() {
    let server = TestServer::start_with(&["--max-term-cells", "10000"]);
    // Spawn.
    let (status, body) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "tty": true, "cols": 101, "rows": 100}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-term-cells"),
        "{body}"
    );

    let process = server
        .spawn(json!({"argv": ["sh", "-c", "read x; stty size"], "tty": true, "cols": 100, "rows": 100}))
        .await;
    // HTTP resize.
    let path = format!("/v1/processes/{}/resize", process.id);
    let (status, body) = server
        .post(&path, json!({"cols": 4096, "rows": 4096}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    // WebSocket resize frame: an error frame, the attachment carries on.
    let mut attachment = server.attach(&process.id, "").await;
    attachment
        .send(ClientFrame::Resize {
            cols: 200,
            rows: 51,
        })
        .await;
    match attachment.frame().await {
        Some(ServerFrame::Error { code, message }) => {
            assert_eq!(code, "invalid_request");
            assert!(message.contains("--max-term-cells"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    attachment
        .send(ClientFrame::Stdin {
            data: b"\r".to_vec(),
        })
        .await;
    let received = attachment.until_exit().await;
    // Neither resize reached the terminal.
    assert!(
        String::from_utf8_lossy(&received.stdout).contains("100 100"),
        "{received:?}"
    );

    // The Kubernetes resize channel: refused (logged, as the kubelet
    // does), the session carries on at its size.
    let url = exec_url(
        &server,
        &["sh", "-c", "read a; stty size"],
        "stdin=true&stdout=true&tty=true",
    );
    let mut client = ChannelClient::connect(&url, "v5.channel.k8s.io").await;
    client.send(4, br#"{"Width":30,"Height":20}"#).await;
    client.send(4, br#"{"Width":4096,"Height":4096}"#).await;
    client.send(0, b"go\r").await;
    let session = client.finish(Session::default()).await;
    assert!(text(&session.stdout).contains("20 30"), "{session:?}");
}

/// Fills the visible screen, the scrollback and the alternate screen with
/// cells that each have their own colours (the costliest snapshot), then
/// waits.
const FILL: &str = r#"
import sys, time
cols, rows = int(sys.argv[1]), int(sys.argv[2])
def fill(lines):
    out = []
    for y in range(lines):
        for x in range(cols):
            out.append("\x1b[38;2;%d;%d;%dm\x1b[48;5;%dm%s" % (x % 256, y % 256, (x * y) % 256, (x + y) % 256, chr(0x4e00 + (x * 7 + y) % 2000) if x % 5 == 0 else "x"))
        out.append("\r\n")
    sys.stdout.write("".join(out))
fill(rows + 300)
sys.stdout.write("\x1b[?1049h")
fill(rows)
sys.stdout.write("filled")
sys.stdout.flush()
time.sleep(120)
"#;

#[tokio::test]
async fn four_terminals_resized_to_the_maximum_stay_inside_the_memory_budget_and_give_it_back() {
    let budget = 64 * MIB;
    let server = TestServer::start_with(&["--retain-total", &budget.to_string()]);
    let baseline = rss_bytes(server.pid());
    let (big_cols, big_rows) = (400u16, 150u16);
    let big = memory_bound(big_cols, big_rows, LIMITS);
    let mut processes = Vec::new();
    let mut accepted = 0;
    for i in 0..4 {
        let process = server
            .spawn(json!({"argv": ["sh", "-c", "read size; exec python3 -c \"$0\" $size", FILL], "tty": true, "retain_bytes": MIB}))
            .await;
        let path = format!("/v1/processes/{}/resize", process.id);
        // The maximum (1,000,000 cells) does not fit a 64 MiB budget.
        let (status, body) = server
            .post(&path, json!({"cols": 1000, "rows": 1000}))
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (503, Some("retention_exhausted")),
            "{i}: {body}"
        );
        // Beyond the cell limit: 400, whatever the budget.
        let (status, _) = server
            .post(&path, json!({"cols": 4096, "rows": 4096}))
            .await;
        assert_eq!(status, 400);
        // A large one fits while the budget lasts.
        let (status, body) = server
            .post(&path, json!({"cols": big_cols, "rows": big_rows}))
            .await;
        let size = if status == 204 {
            accepted += 1;
            format!("{big_cols} {big_rows}\n")
        } else {
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (503, Some("retention_exhausted")),
                "{i}: {body}"
            );
            "80 24\n".to_string()
        };
        server.post_raw_stdin(&process.id, size.as_bytes()).await;
        processes.push(process);
    }
    // About 16 MiB each with its window: not all four fit in 64 MiB.
    assert!(
        (1..4).contains(&accepted),
        "{accepted} accepted, screen bound {big}"
    );
    let mut peak = 0;
    for process in &processes {
        let mut attachment = server.attach(&process.id, "stdout=0").await;
        let mut received = Received::default();
        attachment
            .until_stdout_contains("filled", &mut received)
            .await;
        // Caught up: the whole screen is in the emulator.
        let response = server
            .http
            .get(server.url(&format!("/v1/processes/{}/screen?format=ansi", process.id)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.bytes().await.unwrap().len() > 1000);
        peak = peak.max(rss_bytes(server.pid()));
    }
    assert!(
        peak < baseline + budget + 48 * MIB,
        "server memory peaked at {} MiB (baseline {} MiB, budget 64 MiB)",
        peak / MIB,
        baseline / MIB
    );
    for process in &processes {
        let url = server.url(&format!("/v1/processes/{}?force=1", process.id));
        let response = server.http.delete(url).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let after = settle(|| rss_bytes(server.pid()), |rss| *rss < baseline + 24 * MIB).await;
    assert!(
        after < baseline + 24 * MIB,
        "server memory {} MiB after the terminals were forgotten (baseline {} MiB, peak {} MiB)",
        after / MIB,
        baseline / MIB,
        peak / MIB
    );
}

/// Colour without end, as fast as the PTY takes it.
const FLOOD: &str = r#"
import sys
line = "".join("\x1b[3%dm%s" % (i % 8, "=" * 7) for i in range(120)) + "\r\n"
block = line * 64
while True:
    sys.stdout.write(block)
"#;

#[tokio::test]
async fn a_screen_attachment_to_a_large_flooding_terminal_gets_its_frame_with_bounded_memory() {
    let server = TestServer::start_with(&["--memory-only"]);
    let baseline = rss_bytes(server.pid());
    let (cols, rows) = (1000u16, 1000u16);
    let process = server
        .spawn(json!({"argv": ["python3", "-c", FLOOD], "tty": true, "cols": cols, "rows": rows, "retain_bytes": 64 << 10}))
        .await;
    let mut peak = 0;
    for round in 0..3 {
        // Well under way: the retention has been overrun many times.
        let floor = (round + 1) * 16 * MIB;
        let flooded = tether_tests::settle_async(
            || server.status(&process.id),
            |info| info.stdout_bytes > floor,
        )
        .await;
        assert!(flooded.stdout_bytes > floor);
        let started = Instant::now();
        let mut attachment = server.attach(&process.id, "screen=1").await;
        let frame = tokio::time::timeout(Duration::from_secs(10), attachment.frame())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no screen frame in 10 s"));
        match frame {
            Some(ServerFrame::Screen {
                cols: c, rows: r, ..
            }) => assert_eq!((c, r), (cols.into(), rows.into())),
            other => panic!("round {round}: expected a screen frame, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "round {round}: {:?}",
            started.elapsed()
        );
        peak = peak.max(rss_bytes(server.pid()));
        drop(attachment);
    }
    let bound = memory_bound(cols, rows, LIMITS);
    assert!(
        peak < baseline + 2 * bound + 64 * MIB,
        "server memory peaked at {} MiB (baseline {} MiB, screen bound {} MiB)",
        peak / MIB,
        baseline / MIB,
        bound / MIB
    );
    server
        .post(&format!("/v1/processes/{}/kill", process.id), json!({}))
        .await;
}

/// Reading a screen needs only the read right, and the snapshot of a large
/// screen is large: each request holds room for its answer until it is
/// sent (the first one the screen's own room, the others room of their own
/// in the memory budget), and past the budget is refused with 503, never
/// piled up. Here the answers are not read at all, so each one holds its
/// room for as long as the test lets it.
#[tokio::test]
async fn unread_snapshots_of_a_large_screen_stay_inside_the_memory_budget() {
    use nix::sys::socket::{setsockopt, sockopt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let budget = 64 * MIB;
    let server = TestServer::start_with(&["--retain-total", &budget.to_string()]);
    let baseline = rss_bytes(server.pid());
    let process = server
        .spawn(json!({"argv": ["python3", "-c", FILL, "400", "150"], "tty": true, "cols": 400, "rows": 150, "retain_bytes": MIB}))
        .await;
    let mut attachment = server.attach(&process.id, "stdout=0").await;
    let mut received = Received::default();
    attachment
        .until_stdout_contains("filled", &mut received)
        .await;
    let host = server.base.trim_start_matches("http://").to_string();
    let request = format!(
        "GET /v1/processes/{}/screen?format=ansi HTTP/1.1\r\nhost: {host}\r\n\r\n",
        process.id
    );
    let mut sockets = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..32 {
        let mut socket = tokio::net::TcpStream::connect(&host).await.unwrap();
        // A small window: the kernel cannot take the answer off the server.
        setsockopt(&socket, sockopt::RcvBuf, &4096).unwrap();
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n") {
            let n = tokio::time::timeout(tether_tests::WAIT, socket.read(&mut byte))
                .await
                .expect("no status line within the bound")
                .unwrap();
            assert_eq!(n, 1, "closed before a status line");
            head.push(byte[0]);
        }
        statuses.push(String::from_utf8_lossy(&head).into_owned());
        sockets.push(socket);
    }
    let peak = rss_bytes(server.pid());
    let served = statuses.iter().filter(|s| s.contains(" 200 ")).count();
    let refused = statuses.iter().filter(|s| s.contains(" 503 ")).count();
    assert_eq!(served + refused, 32, "{statuses:?}");
    assert!(
        served >= 1 && refused >= 1,
        "{served} served, {refused} refused"
    );
    assert!(
        peak < baseline + budget + 32 * MIB,
        "server memory {} MiB with {served} snapshots unread (baseline {} MiB, budget 64 MiB)",
        peak / MIB,
        baseline / MIB
    );
    // Their clients gone, the room is given back.
    drop(sockets);
    let again = settle_async_status(&server, &process.id).await;
    assert_eq!(again, 200);
}

/// The status of a screen request, once it is no longer refused (bounded).
async fn settle_async_status(server: &TestServer, id: &str) -> u16 {
    let url = server.url(&format!("/v1/processes/{id}/screen?format=ansi"));
    tether_tests::settle_async(
        || async {
            server
                .http
                .get(url.clone())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        },
        |status| *status == 200,
    )
    .await
}
