//! `GET /v1/processes/{id}/recording` (issue 44): an asciicast of what
//! retention holds, with the times the output was written, both streams in
//! order, resizes, lost ranges as markers, the exit; v2 played by the real
//! asciinema; `follow=1` streaming a running process to its exit.

use serde_json::{json, Value};
use tether_tests::*;

/// The recording's lines: its header and its events.
pub(crate) async fn recording(server: &TestServer, id: &str, query: &str) -> (Value, Vec<Value>) {
    let response = server
        .http
        .get(server.url(&format!("/v1/processes/{id}/recording{query}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-asciicast"
    );
    let text = response.text().await.unwrap();
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().expect("a header");
    (header, lines.collect())
}

/// `tether record ARGS...` (which must succeed): the recording's header
/// and events.
pub(crate) async fn tether_record(server: &TestServer, args: &[&str]) -> (Value, Vec<Value>) {
    let base = server.base.clone();
    let args: Vec<String> = ["record"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tether_tests::cli::tether(&base, &args, b"")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = serde_json::from_str(lines.next().expect("a header")).unwrap();
    (
        header,
        lines.map(|l| serde_json::from_str(l).unwrap()).collect(),
    )
}

fn output_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e[1] == "o")
        .map(|e| e[2].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_recording_has_the_output_of_both_streams_in_order_with_its_times_and_exit() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo one; sleep 0.4; echo two >&2; sleep 0.4; printf 'caf\\303\\251\\n'; exit 3",
            json!({"name": "job"}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let (header, events) = recording(&server, "job", "").await;
    assert_eq!(header["version"], 3, "{header}");
    assert_eq!(header["title"], "job");
    assert_eq!(output_of(&events), "one\ntwo\ncafé\n", "{events:?}");
    let o: Vec<&Value> = events.iter().filter(|e| e[1] == "o").collect();
    // v3 counts each event from the one before: the sleeps show.
    for later in &o[1..] {
        let interval = later[0].as_f64().unwrap();
        assert!(
            interval >= 0.3,
            "{later} came too soon after the one before"
        );
    }
    let exit = events.last().unwrap();
    assert_eq!((exit[1].as_str(), exit[2].as_str()), (Some("x"), Some("3")));

    // v2: times from the start, never going back.
    let (header, events) = recording(&server, &process.id, "?version=2").await;
    assert_eq!(
        (header["version"].clone(), header["width"].clone()),
        (json!(2), json!(80))
    );
    let times: Vec<f64> = events.iter().map(|e| e[0].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(times[times.len() - 1] >= 0.7, "{times:?}");
    assert!(events.iter().all(|e| e[1] != "x"), "no exit event in v2");

    let (status, body) = server
        .get(&format!("/v1/processes/{}/recording?version=4", process.id))
        .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn asciinema_plays_the_v2_recording() {
    let server = TestServer::start();
    let process = server
        .sh(
            "printf 'hello\\n'; sleep 0.2; printf 'world\\n'",
            json!({"tty": true}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let cast = server
        .http
        .get(server.url(&format!("/v1/processes/{}/recording?version=2", process.id)))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let file = fresh_dir().with_extension("cast");
    std::fs::write(&file, &cast).unwrap();
    let asciinema = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/asciinema-venv/bin/asciinema"
    );
    let out = std::process::Command::new(asciinema)
        .arg("cat")
        .arg(&file)
        .output()
        .expect("target/asciinema-venv (scripts/test.sh makes it)");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\r\nworld\r\n");
}

#[tokio::test]
async fn a_pty_recording_has_its_size_resizes_and_title() {
    let server = TestServer::start();
    let process = server
        .sh(
            "printf '\\033]2;sizes\\007'; read go; stty size; sleep 0.1",
            json!({"tty": true, "cols": 90, "rows": 20, "name": "named"}),
        )
        .await;
    let (status, body) = server
        .post(
            &format!("/v1/processes/{}/resize", process.id),
            json!({"cols": 100, "rows": 30}),
        )
        .await;
    assert!(status / 100 == 2, "{status} {body}");
    server.say(&process.id, "go\n").await;
    server.wait_exit(&process.id).await;
    let (header, events) = recording(&server, &process.id, "").await;
    assert_eq!(header["term"], json!({"cols": 90, "rows": 20}), "{header}");
    // The terminal's title (OSC 2), before the process's name.
    assert_eq!(header["title"], "sizes", "{header}");
    let resize = events
        .iter()
        .position(|e| e[1] == "r")
        .expect("a resize event");
    assert_eq!(events[resize][2], "100x30");
    let size_printed = events
        .iter()
        .position(|e| e[1] == "o" && e[2].as_str().unwrap().contains("30 100"))
        .expect("stty's answer");
    assert!(resize < size_printed, "{events:?}");
}

#[tokio::test]
async fn lost_output_is_a_marker_that_names_the_range() {
    let server = TestServer::start_with(&["--memory-only"]);
    let process = server
        .sh(
            "head -c 300000 /dev/zero | tr '\\0' x; echo; echo end",
            json!({"retain_bytes": 65536}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let (_, events) = recording(&server, &process.id, "").await;
    let marker = events.iter().find(|e| e[1] == "m").expect("a marker");
    let label = marker[2].as_str().unwrap();
    assert!(
        label.contains("lost") && label.contains("stdout"),
        "{label}"
    );
    assert!(output_of(&events).ends_with("end\n"));
}

#[tokio::test]
async fn follow_records_a_running_process_to_its_exit() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo first; read line; echo \"got $line\"",
            json!({"stdin": true}),
        )
        .await;
    let response = server
        .http
        .get(server.url(&format!("/v1/processes/{}/recording?follow=1", process.id)))
        .send()
        .await
        .unwrap();
    let mut response = response;
    let mut text = String::new();
    let mut said = false;
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(chunk) = response.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if !said && text.contains("first") {
                said = true;
                server.say(&process.id, "later\n").await;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the recording did not end with the process: {text}"
    );
    let events: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(output_of(&events), "first\ngot later\n");
    assert_eq!(events.last().unwrap()[1], "x");
}

/// `tether record ID > FILE` follows a running process to its exit; the
/// file is what asciinema plays.
#[tokio::test]
async fn tether_record_follows_a_running_process_to_its_exit() {
    let server = TestServer::start();
    let process = server
        .sh("echo begin; sleep 0.5; echo done", json!({"name": "rec"}))
        .await;
    let (header, events) = tether_record(&server, &["--format-version", "2", "rec"]).await;
    assert_eq!(header["version"], 2);
    assert_eq!(output_of(&events), "begin\ndone\n", "{events:?}");
    assert_eq!(server.status(&process.id).await.exit_code, Some(0));
}

/// `tether logs --since` (and `offsets?since=`, `output?since=`): only
/// what was written from a time on, from the time index.
#[tokio::test]
async fn logs_since_a_time_print_only_what_was_written_from_then() {
    let server = TestServer::start();
    let process = server
        .sh("echo old; sleep 0.6; echo new; echo late >&2", json!({}))
        .await;
    let info = server.wait_exit(&process.id).await;
    let started = humantime::parse_rfc3339(&info.started_at).unwrap();
    let between = started + std::time::Duration::from_millis(300);
    let since = humantime::format_rfc3339_millis(between).to_string();
    let (status, offsets) = server
        .get(&format!(
            "/v1/processes/{}/offsets?since={since}",
            process.id
        ))
        .await;
    assert_eq!(status, 200, "{offsets}");
    assert_eq!(offsets, json!({"stdout": 4, "stderr": 0}));
    let body = server
        .http
        .get(server.url(&format!(
            "/v1/processes/{}/output?stream=stdout&since={since}",
            process.id
        )))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "new\n");
    let base = server.base.clone();
    let id = process.id.clone();
    let out = tokio::task::spawn_blocking(move || {
        tether_tests::cli::tether(&base, &["logs", "--since", &since, &id], b"")
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "new\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "late\n");
    // --until: only what came before that time.
    let base = server.base.clone();
    let id = process.id.clone();
    let until = humantime::format_rfc3339_millis(between).to_string();
    let out = tokio::task::spawn_blocking(move || {
        tether_tests::cli::tether(&base, &["logs", "--until", &until, &id], b"")
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "old\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    // Server-Sent Events take since= too.
    let events = server
        .http
        .get(server.url(&format!(
            "/v1/processes/{}/output?since={}",
            process.id,
            humantime::format_rfc3339_millis(between)
        )))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // base64 of "new\n" and of "late\n"; not of "old\n".
    assert!(
        events.contains("bmV3Cg==") && events.contains("bGF0ZQo="),
        "{events}"
    );
    assert!(!events.contains("b2xkCg=="), "{events}");
    let (status, _) = server
        .get(&format!(
            "/v1/processes/{}/offsets?since=yesterday",
            process.id
        ))
        .await;
    assert_eq!(status, 400);
}

/// `tether logs -t`: each line after the time it was written, in order,
/// the sleep between two lines showing; `times` answers the index.
#[tokio::test]
async fn logs_with_timestamps_stamp_each_line_with_when_it_was_written() {
    let server = TestServer::start();
    let process = server
        .sh(
            "echo first; sleep 0.5; echo second; echo oops >&2",
            json!({}),
        )
        .await;
    server.wait_exit(&process.id).await;
    let (status, times) = server
        .get(&format!("/v1/processes/{}/times", process.id))
        .await;
    assert_eq!(status, 200, "{times}");
    assert_eq!(times["stdout"].as_array().unwrap().len(), 2, "{times}");
    let base = server.base.clone();
    let id = process.id.clone();
    let out = tokio::task::spawn_blocking(move || {
        tether_tests::cli::tether(&base, &["logs", "-t", &id], b"")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stamps: Vec<std::time::SystemTime> = stdout
        .lines()
        .map(|line| {
            let (time, text) = line.split_once(' ').unwrap();
            assert!(["first", "second"].contains(&text), "{stdout}");
            humantime::parse_rfc3339(time).unwrap()
        })
        .collect();
    assert_eq!(stamps.len(), 2, "{stdout}");
    let gap = stamps[1].duration_since(stamps[0]).unwrap();
    assert!(
        gap >= std::time::Duration::from_millis(400),
        "{gap:?}: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(stderr.ends_with(" oops\n"), "{stderr}");
}

/// A fresh directory for `--data-dir`, private to this user.
pub(crate) fn private_dir() -> std::path::PathBuf {
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

/// The recording of a process of an earlier run that printed `before`,
/// then `after` half a second later: both, and `after` at its time.
async fn assert_before_and_after_keep_their_times(server: &TestServer, id: &str) {
    let (_, events) = recording(server, id, "").await;
    assert_eq!(output_of(&events), "before\nafter\n", "{events:?}");
    let after = events.iter().find(|e| e[2] == "after\n").unwrap();
    assert!(after[0].as_f64().unwrap() >= 0.4, "{events:?}");
}

/// With `--data-dir`, the time index is written beside the logs at the
/// exit and read back after a restart: a recording of a process of the
/// earlier run still has its times.
#[tokio::test]
async fn a_recording_keeps_its_times_across_a_restart_with_a_data_dir() {
    let (dir, process) = ran_on_a_data_dir("echo before; sleep 0.5; echo after").await;
    let server = TestServer::start_with(&["--data-dir", dir.to_str().unwrap()]);
    assert_before_and_after_keep_their_times(&server, &process.id).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server on a fresh private data directory ran `command` to its exit
/// and stopped: the directory, and the process to read back from it.
async fn ran_on_a_data_dir(command: &str) -> (std::path::PathBuf, tether_protocol::ProcessInfo) {
    let dir = private_dir();
    let mut server = TestServer::start_with(&["--data-dir", dir.to_str().unwrap()]);
    let process = server.sh(command, json!({})).await;
    server.wait_exit(&process.id).await;
    server.terminate().await;
    (dir, process)
}

/// A corrupt `ID.times` is said (the log names the process) and ignored:
/// the restarted server answers the recording with every byte, at the
/// last time known, instead of trusting or hanging on it.
#[tokio::test]
async fn a_corrupt_time_index_is_reported_and_ignored_after_a_restart() {
    let (dir, process) = ran_on_a_data_dir("echo kept; echo too").await;
    let times = dir.join(format!("{}.times", process.id));
    assert!(times.exists(), "no {}", times.display());
    std::fs::write(&times, b"{\"stdout\": [[0, 1], [\"garbage").unwrap();

    let log = dir.with_extension("stderr");
    let server = TestServer::start_exact(
        &["--data-dir", dir.to_str().unwrap(), "--no-token"],
        &[],
        Some(&log),
    );
    let (_, events) = recording(&server, &process.id, "").await;
    assert_eq!(output_of(&events), "kept\ntoo\n", "{events:?}");
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.contains("time index corrupt") && said.contains(&process.id),
        "{said}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log);
}

/// A running process's time index is written beside its logs now and then
/// (every 5 s, when output came), so a crash loses at most that much: after
/// `kill -9` and a restart, the recording of the `lost` process has the
/// times its output was written at.
#[tokio::test]
async fn a_running_process_keeps_its_times_across_a_crash_with_a_data_dir() {
    let dir = private_dir();
    let args = ["--data-dir", dir.to_str().unwrap()];
    let mut server = TestServer::start_with(&args);
    let process = server
        .sh(
            "echo before; sleep 0.5; echo after; exec sleep 600",
            json!({}),
        )
        .await;
    let times = dir.join(format!("{}.times", process.id));
    let saved = tether_tests::settle_within(
        std::time::Duration::from_secs(15),
        || std::fs::read_to_string(&times).unwrap_or_default(),
        |text| text.matches('[').count() >= 3,
    )
    .await;
    assert!(!saved.is_empty(), "no {}", times.display());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    server.exited().await;
    drop(server);

    let server = TestServer::start_with(&args);
    let lost = server.status(&process.id).await;
    assert_eq!(lost.reason, Some(tether_protocol::ExitReason::Lost));
    assert_before_and_after_keep_their_times(&server, &process.id).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The process object says when its oldest and newest retained bytes were
/// written (`first_retained_at`, `last_retained_at`), from the same index:
/// absent before any output, apart by the sleep between two writes, and
/// the first moving on when the oldest output is evicted.
#[tokio::test]
async fn the_process_object_says_when_its_first_and_last_retained_bytes_were_written() {
    let ms = |time: &Option<String>| {
        let time = time.as_deref().expect("a time");
        let time = humantime::parse_rfc3339(time).unwrap();
        time.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let server = TestServer::start_with(&["--memory-only"]);
    let silent = server.sh("read line", json!({})).await;
    let info = server.status(&silent.id).await;
    assert_eq!(
        (info.first_retained_at, info.last_retained_at),
        (None, None)
    );

    let process = server
        .sh("echo one; sleep 0.5; echo two >&2", json!({}))
        .await;
    let info = server.wait_exit(&process.id).await;
    let (started, finished) = (ms(&Some(info.started_at.clone())), ms(&info.finished_at));
    let (first, last) = (ms(&info.first_retained_at), ms(&info.last_retained_at));
    // Each at most one spacing (10 ms at first) early.
    assert!(first >= started - 10 && first < started + 400, "{info:?}");
    assert!(last - first >= 450 && last <= finished, "{info:?}");
    // As the list says it too.
    let (_, list) = server.get("/v1/processes").await;
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == process.id.as_str())
        .unwrap()
        .clone();
    assert_eq!(listed["first_retained_at"], json!(info.first_retained_at));

    // The first line evicted: the first retained byte is one written later.
    let evicted = server
        .sh(
            "echo early; sleep 0.5; head -c 300000 /dev/zero | tr '\\0' x",
            json!({"retain_bytes": 65536}),
        )
        .await;
    let info = server.wait_exit(&evicted.id).await;
    let started = ms(&Some(info.started_at.clone()));
    assert!(
        ms(&info.first_retained_at) >= started + 450,
        "the first retained byte is after the sleep: {info:?}"
    );
}
