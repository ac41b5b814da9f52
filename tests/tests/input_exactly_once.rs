//! Numbered input (`input=ID`): every stdin byte, end of file, signal and
//! resize is applied once, in order, across connections cut at random
//! moments (mid-frame included); duplicates and gaps are dropped by the
//! server; a resume after the stream expired is refused, never duplicated.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tether_client::{AttachOptions, Client, RetryPolicy, SpawnRequest, SpawnSpec};
use tether_protocol::{ClientFrame, InputAction, ServerFrame};
use tether_tests::cut::{CuttingProxy, RandomCuts};
use tether_tests::{fresh_dir, refused_attach, settle, Attachment, TestServer, WAIT};
use tokio::io::AsyncReadExt;

const LINES: usize = 10_000;

fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().unwrap()
}

/// Quick reconnects: the test cuts a connection every few kilobytes.
fn cut_tolerant() -> AttachOptions {
    AttachOptions {
        reconnect: RetryPolicy {
            budget: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(40),
        },
        ..AttachOptions::default()
    }
}

fn numbered_lines() -> Vec<Vec<u8>> {
    (0..LINES)
        .map(|i| format!("line {i:05} of the exactly-once test\n").into_bytes())
        .collect()
}

fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

/// Sends every line (with `every`: a resize and a SIGUSR1 after every that
/// many lines) through a proxy that cuts each connection after a few
/// kilobytes, and returns how many cuts there were.
async fn send_through_cuts(
    server: &TestServer,
    spec: SpawnRequest,
    ready: Option<&str>,
    every: Option<usize>,
    close: bool,
) -> (usize, u32) {
    let direct = Client::new(&server.base).unwrap();
    let process = direct.spawn(spec).await.unwrap();
    let proxy = RandomCuts::start(addr_of(&server.base), 0x5eed_1234, 700, 6_000).await;
    let client = Client::new(&proxy.base).unwrap();
    let mut attachment = client.attach(&process.id, cut_tolerant()).await.unwrap();
    if let Some(ready) = ready {
        // The program has set up its terminal: read its marker (through
        // the cuts: output resumes from its offset).
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains(ready) {
            let n = tokio::time::timeout(WAIT, attachment.stdout.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "output ended before {ready:?}");
            seen.extend_from_slice(&buf[..n]);
        }
    }
    let mut cols = 20u32;
    let sending = async {
        for (i, line) in numbered_lines().iter().enumerate() {
            attachment.stdin.write(line).await.unwrap();
            // Never after the last line: the program may be exiting by
            // then, and a signal during its exit would end it.
            if every.is_some_and(|every| i % every == every - 1 && i + 1 < LINES) {
                cols += 1;
                attachment.control.resize(cols as u16, 30).await.unwrap();
                attachment.control.signal("USR1").await.unwrap();
            }
        }
        if close {
            attachment.stdin.close().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), sending)
        .await
        .expect("sending did not finish");
    let mut exit = attachment.exit.clone();
    let info = tokio::time::timeout(Duration::from_secs(120), exit.wait())
        .await
        .expect("no exit")
        .unwrap();
    assert_eq!(info.exit_code, Some(0), "{info:?}");
    (proxy.cut_count(), cols)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_lines_reach_cat_once_each_in_order_across_random_cuts() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let spec = SpawnRequest::argv(["sh", "-c", &format!("cat > '{}'", got.display())]).with_stdin();
    let (cuts, _) = send_through_cuts(&server, spec, None, None, true).await;
    assert!(
        read_file(&got) == numbered_lines().concat(),
        "cat did not get each line once in order after {cuts} cuts"
    );
    assert!(cuts >= 200, "only {cuts} cuts");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_pty_gets_every_line_once_and_signals_and_resizes_in_order_across_cuts() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let (data, events) = (dir.join("data"), dir.join("events"));
    let total: usize = numbered_lines().iter().map(Vec::len).sum();
    // Raw mode (no echo, no line discipline); input to one file, and each
    // SIGUSR1 and SIGWINCH (with the size it finds) to another.
    let program = format!(
        r#"
import fcntl, os, signal, struct, sys, termios, tty
tty.setraw(0)
events = os.open({events:?}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
data = os.open({data:?}, os.O_WRONLY | os.O_CREAT)
def usr1(*_): os.write(events, b"usr1\n")
# Python runs a handler for a signal that comes while another handler runs
# inside it, between two of its steps: a size read before a newer one would
# be written after it. So a handler that finds one running leaves it a note,
# and the running one reads the size again.
busy, again = False, False
def winch(*_):
    global busy, again
    if busy:
        again = True
        return
    busy = True
    while True:
        again = False
        rows, cols = struct.unpack("HHHH", fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))[:2]
        os.write(events, b"winch %d %d\n" % (cols, rows))
        if not again:
            break
    busy = False
signal.signal(signal.SIGUSR1, usr1)
signal.signal(signal.SIGWINCH, winch)
os.write(1, b"READY\r\n")
left = {total}
while left > 0:
    got = os.read(0, 65536)
    os.write(data, got)
    left -= len(got)
"#,
        events = events.display().to_string(),
        data = data.display().to_string(),
    );
    let spec = SpawnRequest::argv(["python3", "-c", &program]).tty(80, 24);
    let every = 50;
    let (cuts, last_cols) =
        send_through_cuts(&server, spec, Some("READY"), Some(every), false).await;
    assert!(
        read_file(&data) == numbered_lines().concat(),
        "the program did not get each line once in order after {cuts} cuts"
    );
    assert!(cuts >= 200, "only {cuts} cuts");
    let events = String::from_utf8(read_file(&events)).unwrap();
    let sizes: Vec<u32> = events
        .lines()
        .filter_map(|l| l.strip_prefix("winch "))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    // Signals of one kind may merge while pending, so fewer may be seen,
    // and two may find the same size (the second resize applied before the
    // first signal's handler ran); a size applied twice (an old one after a
    // newer) would go back.
    assert!(
        sizes.windows(2).all(|w| w[0] <= w[1]),
        "sizes went back: {sizes:?}"
    );
    let sent = (LINES / every - 1) as u32;
    assert_eq!(sizes.last().copied(), Some(last_cols), "{sizes:?}");
    let usr1 = events.lines().filter(|l| *l == "usr1").count() as u32;
    assert!((1..=sent).contains(&usr1), "{usr1} of {sent} SIGUSR1 seen");
    assert!(sizes.len() as u32 <= sent);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn input_ack(attachment: &mut Attachment) -> u64 {
    loop {
        match attachment.frame().await {
            Some(ServerFrame::InputAck { applied }) => return applied,
            Some(ServerFrame::Error { code, message }) => panic!("{code}: {message}"),
            Some(_) => continue,
            None => panic!("closed before input_ack"),
        }
    }
}

fn input(seq: u64, data: &[u8]) -> ClientFrame {
    ClientFrame::Input {
        seq,
        action: InputAction::Stdin {
            data: data.to_vec(),
        },
    }
}

#[tokio::test]
async fn the_server_drops_duplicates_and_gaps_and_answers_a_resume_with_where_it_stands() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let process = server
        .sh(
            &format!("cat > '{}'", got.display()),
            serde_json::json!({"stdin": true}),
        )
        .await;
    let url = server.ws_url(&process.id, "input=tab-1");
    let mut first = Attachment::connect(&url).await;
    assert_eq!(input_ack(&mut first).await, 0, "a new stream starts at 0");
    first.send(input(0, b"ab")).await;
    first.send(input(0, b"ab")).await; // a duplicate: dropped
    first.send(input(1, b"bcd")).await; // overlaps: only "cd" is new
    first.send(input(9, b"zz")).await; // past a gap: dropped, reported
    let mut acked = 0;
    let mut refused = None;
    while acked < 4 || refused.is_none() {
        match first.frame().await.unwrap() {
            ServerFrame::InputAck { applied } => acked = applied,
            ServerFrame::Error { code, .. } => refused = Some(code),
            _ => {}
        }
    }
    assert_eq!((acked, refused.as_deref()), (4, Some("input_out_of_order")));
    // Unnumbered input on a numbered attachment is refused, not applied.
    first
        .send(ClientFrame::Stdin {
            data: b"unnumbered".to_vec(),
        })
        .await;
    match first.frame().await.unwrap() {
        ServerFrame::Error { code, .. } => assert_eq!(code, "invalid_request"),
        other => panic!("{other:?}"),
    }
    drop(first);
    // A resume hears where the stream stands and resends from there.
    let mut second = Attachment::connect(&format!("{url}&input_resume=1")).await;
    assert_eq!(input_ack(&mut second).await, 4);
    second.send(input(2, b"cdef")).await;
    second
        .send(ClientFrame::Input {
            seq: 6,
            action: InputAction::StdinEof,
        })
        .await;
    second
        .send(ClientFrame::Input {
            seq: 6,
            action: InputAction::StdinEof,
        })
        .await;
    let received = second.until_exit().await;
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
    assert_eq!(read_file(&got), b"abcdef");
    // An old client: input frames without input= are refused, the
    // unnumbered frames work as before (the other tests' whole suite).
    let other = server.sh("cat", serde_json::json!({"stdin": true})).await;
    let mut old = Attachment::connect(&server.ws_url(&other.id, "")).await;
    old.send(input(0, b"x")).await;
    match old.frame().await.unwrap() {
        ServerFrame::Error { code, .. } => assert_eq!(code, "invalid_request"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_resume_after_the_stream_expired_is_refused_and_nothing_is_applied_twice() {
    let server = TestServer::start_with(&["--input-ttl-ms", "200"]);
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let process = server
        .sh(
            &format!("cat > '{}'", got.display()),
            serde_json::json!({"stdin": true}),
        )
        .await;
    let proxy = CuttingProxy::start(addr_of(&server.base)).await;
    let client = Client::new(&proxy.base).unwrap();
    let mut attachment = client.attach(&process.id, cut_tolerant()).await.unwrap();
    attachment.stdin.write(b"once\n").await.unwrap();
    settle(|| read_file(&got), |g| g == b"once\n").await;
    // The connection goes away and stays away past the stream's TTL
    // (the TTL is the feature under test: only time passing shows it).
    proxy.pause();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.resume();
    let error = tokio::time::timeout(WAIT, attachment.exit.clone().wait())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), Some("input_expired"), "{error:?}");
    assert!(attachment.stdin.write(b"more\n").await.is_err());
    assert_eq!(read_file(&got), b"once\n");
    // The same refusal for any client that resumes an unknown stream:
    // after hello (browsers cannot read a refused upgrade), an error frame
    // and Close 1008.
    let mut late =
        Attachment::connect(&server.ws_url(&process.id, "input=gone&input_resume=1")).await;
    match late.frame_or_close().await {
        Ok(ServerFrame::Error { code, .. }) => assert_eq!(code, "input_expired"),
        other => panic!("{other:?}"),
    }
    assert_eq!(late.frame_or_close().await.err(), Some(Some(1008)));
    let (status, _) = refused_attach(&server.ws_url(&process.id, "input=a%20b")).await;
    assert_eq!(status, 400);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_process_keeps_a_bounded_number_of_input_streams() {
    let server = TestServer::start_with(&["--max-input-streams", "2"]);
    let process = server.sh("cat", serde_json::json!({"stdin": true})).await;
    let _a = Attachment::connect(&server.ws_url(&process.id, "input=a")).await;
    let _b = Attachment::connect(&server.ws_url(&process.id, "input=b")).await;
    let (status, body) = refused_attach(&server.ws_url(&process.id, "input=c")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_input_streams"))
    );
    // A stream already known is resumed whatever the count.
    let _again = Attachment::connect(&server.ws_url(&process.id, "input=a&input_resume=1")).await;
}

/// A read-only viewer cannot touch a writer's input: naming the writer's
/// stream reaches a stream of its own (a resume of the writer's is refused
/// as unknown), and its input, refused for want of the write right, moves
/// no position. The writer's next input arrives once, not dropped as a
/// duplicate.
#[tokio::test]
async fn a_viewer_can_neither_resume_nor_advance_a_writers_input_stream() {
    use tether_tests::scoped::{mint_as_operator, OPERATOR};
    let server = TestServer::start_with(&["--token", OPERATOR]);
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("got");
    let (status, process) = tether_tests::scoped::call(
        &server,
        "POST",
        "/v1/processes",
        Some(OPERATOR),
        Some(serde_json::json!({"argv": ["sh", "-c", format!("cat > '{}'", got.display())], "stdin": true})),
    )
    .await;
    assert_eq!(status, 201, "{process}");
    let id = process["id"].as_str().unwrap();
    let viewer = mint_as_operator(&server, id, &["read"], 60_000).await;
    let viewer = viewer["token"].as_str().unwrap();
    let writer_url = format!(
        "{}&access_token={OPERATOR}",
        server.ws_url(id, "input=tab-1")
    );
    let mut writer = Attachment::connect(&writer_url).await;
    assert_eq!(input_ack(&mut writer).await, 0);
    writer.send(input(0, b"one\n")).await;
    while input_ack(&mut writer).await < 4 {}

    // The viewer resumes "tab-1": not its stream, so unknown to it.
    let resumed = format!(
        "{}&access_token={viewer}",
        server.ws_url(id, "input=tab-1&input_resume=1")
    );
    let mut refused = Attachment::connect(&resumed).await;
    match refused.frame().await {
        Some(ServerFrame::Error { code, .. }) => assert_eq!(code, "input_expired"),
        other => panic!("{other:?}"),
    }
    // It names "tab-1" anew and sends at the writer's next position: a
    // stream of its own, and a refusal that changes nothing.
    let fresh = format!("{}&access_token={viewer}", server.ws_url(id, "input=tab-1"));
    let mut intruder = Attachment::connect(&fresh).await;
    assert_eq!(input_ack(&mut intruder).await, 0, "a stream of its own");
    intruder.send(input(4, b"evil\n")).await;
    intruder.send(input(0, b"evil\n")).await;
    let mut codes = Vec::new();
    while codes.len() < 2 {
        match intruder.frame().await {
            Some(ServerFrame::Error { code, .. }) => codes.push(code),
            Some(_) => {}
            None => panic!("closed"),
        }
    }
    assert_eq!(codes, ["missing_right", "missing_right"]);
    // The writer's next line is applied, once.
    writer.send(input(4, b"two\n")).await;
    writer
        .send(ClientFrame::Input {
            seq: 8,
            action: InputAction::StdinEof,
        })
        .await;
    let received = writer.until_exit().await;
    assert_eq!(received.exit.unwrap().exit_code, Some(0));
    assert_eq!(read_file(&got), b"one\ntwo\n");
    let _ = std::fs::remove_dir_all(&dir);
}
