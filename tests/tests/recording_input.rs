//! Input in recordings (issue 44): absent unless the spawn asked
//! (`record_input`, off by default: keystrokes include passwords); when
//! asked, each keystroke once, as an `i` event before the echo it caused,
//! across a reconnect, a handover and a restart.

use serde_json::{json, Value};
use tether_client::{AttachOptions, Client};
use tether_tests::rust_client::bounded;
use tether_tests::TestServer;
use tokio::io::AsyncReadExt;

use crate::handover::hand_over;
use crate::recording::{private_dir, recording, tether_record};

/// What the `i` events say, in order.
fn inputs(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e[1] == "i")
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn input_is_absent_from_a_recording_unless_the_spawn_asked() {
    let server = TestServer::start();
    let process = server.spawn(json!({"argv": ["cat"], "tty": true})).await;
    let (_, info) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert!(info.get("records_input").is_none(), "{info}");
    server.say(&process.id, "hunter2\n").await;
    let (status, _) = server.post_raw_stdin(&process.id, b"\x04").await;
    assert_eq!(status / 100, 2);
    server.wait_exit(&process.id).await;
    let (_, events) = recording(&server, &process.id, "").await;
    assert_eq!(inputs(&events), Vec::<String>::new(), "{events:?}");
}

/// Keys typed one at a time through the Rust client (numbered input,
/// applied once), each after the echo of the one before; a handover in
/// the middle (the client reconnects and resumes); then a restart on the
/// same data directory.
#[tokio::test]
async fn asked_for_each_keystroke_is_an_i_event_once_before_its_echo_across_a_handover_and_a_restart(
) {
    let dir = private_dir();
    let args = ["--data-dir", dir.to_str().unwrap()];
    let mut server = TestServer::start_with(&args);
    let process = server
        .spawn(json!({"argv": ["cat"], "tty": true, "record_input": true}))
        .await;
    let (_, info) = server.get(&format!("/v1/processes/{}", process.id)).await;
    assert_eq!(info["records_input"], true, "{info}");
    let client = Client::new(&server.base).unwrap();
    let attachment = client
        .attach(&process.id, AttachOptions::default())
        .await
        .unwrap();
    let mut stdin = attachment.stdin;
    let mut stdout = attachment.stdout;
    let mut seen = Vec::new();
    let typed = ["a", "b", "c", "\r", "x", "y", "z", "\r"];
    for (i, key) in typed.iter().enumerate() {
        if i == 4 {
            hand_over(&server).await;
        }
        stdin.write(key.as_bytes()).await.unwrap();
        // Its echo (a PTY echoes "\r" as "\r\n").
        let echo = if *key == "\r" { "\n" } else { key };
        let before = String::from_utf8_lossy(&seen).matches(echo).count();
        bounded("the echo", async {
            let mut buf = [0u8; 256];
            while String::from_utf8_lossy(&seen).matches(echo).count() == before {
                let n = stdout.read(&mut buf).await.unwrap();
                assert!(n > 0, "stdout ended early");
                seen.extend_from_slice(&buf[..n]);
            }
        })
        .await;
    }
    stdin.close().await.unwrap();
    server.wait_exit(&process.id).await;

    let (_, events) = recording(&server, &process.id, "").await;
    assert_eq!(inputs(&events), typed, "{events:?}");
    // Each key comes before its echo: the output before a key's event
    // does not show it yet (the letters are distinct).
    let mut output = String::new();
    for event in &events {
        match (event[1].as_str(), event[2].as_str()) {
            (Some("o"), Some(text)) => output.push_str(text),
            (Some("i"), Some(key)) if key != "\r" => {
                assert!(
                    !output.contains(key),
                    "{key:?} echoed before typed: {events:?}"
                )
            }
            _ => {}
        }
    }

    server.terminate().await;
    drop(server);
    let server = TestServer::start_with(&args);
    let (_, after_restart) = recording(&server, &process.id, "").await;
    assert_eq!(inputs(&after_restart), typed, "{after_restart:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tether run --record-input`, then `tether record`: what was piped into
/// its stdin is in the recording, as `i` events.
#[tokio::test]
async fn tether_run_record_input_puts_its_stdin_in_tether_record() {
    let server = TestServer::start();
    let base = server.base.clone();
    let ran = tokio::task::spawn_blocking(move || {
        tether_tests::cli::tether(
            &base,
            &[
                "run",
                "-i",
                "--record-input",
                "--name",
                "typed",
                "--",
                "cat",
            ],
            b"piped in\n",
        )
    })
    .await
    .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "piped in\n");
    let (_, events) = tether_record(&server, &["--no-follow", "typed"]).await;
    assert_eq!(inputs(&events).concat(), "piped in\n", "{events:?}");
}
