//! A real hop between handover formats (issue 43): the tetherd of the last
//! commit that wrote format 1, built from git (`scripts/older-tetherd.sh`),
//! hands over to this one (which reads formats 1 and 2) with nothing lost;
//! this one refuses to hand over to it (it does not read format 2) before
//! anything stops.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::json;
use tether_client::{AttachOptions, Client};
use tether_tests::rust_client::bounded;
use tether_tests::{settle_async, tetherd_binary, TestServer};
use tokio::io::AsyncReadExt;

use crate::handover::{assert_numbered, counting, output_of};

/// The format-1 tetherd, built once (minutes the first time; CI builds it
/// in a step of its own before the tests).
fn older_tetherd() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/older-tetherd.sh");
            let out = std::process::Command::new("bash")
                .arg(&script)
                .output()
                .expect("run scripts/older-tetherd.sh");
            assert!(
                out.status.success(),
                "scripts/older-tetherd.sh: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// The formats a binary says it reads (`--handover-check`).
/// What a snapshot of an 80x24 terminal shows in a fresh one.
fn shown(snapshot: &str) -> (String, Vec<Vec<String>>, (u16, u16)) {
    let limits = tether_server::screen::ScreenLimits {
        scrollback_lines: 200,
    };
    let mut screen = tether_server::screen::Screen::new(80, 24, limits);
    screen.feed(snapshot.as_bytes());
    (screen.text(), screen.styles(), screen.cursor())
}

fn formats_of(binary: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new(binary)
        .arg("--handover-check")
        .output()
        .expect("run --handover-check");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    report["handover_formats"].clone()
}

#[tokio::test]
async fn a_format_1_server_hands_over_to_this_one_and_this_one_refuses_to_go_back() {
    let older = older_tetherd();
    let newer = tetherd_binary();
    assert_eq!(formats_of(&older), json!([1]));
    assert_eq!(formats_of(&newer), json!([1, 2]));

    let server = TestServer::start_binary(&older, &[]);
    // The older server knows nothing of recorded input.
    let (status, _) = server
        .post(
            "/v1/processes",
            json!({"argv": ["true"], "record_input": true}),
        )
        .await;
    assert_eq!(status, 400);
    let counter = server
        .sh(&counting(400, "0.005"), json!({"name": "counter"}))
        .await;
    let shell = server
        .spawn(json!({
            "argv": ["sh", "-c", "printf 'before the hop\\n'; exec cat"],
            "tty": true
        }))
        .await;
    let before = settle_async(
        || server.screen(&shell.id, "text"),
        |text| text.contains("before the hop"),
    )
    .await;
    assert!(before.contains("before the hop"), "{before}");
    let snapshot = server.screen(&shell.id, "ansi").await;
    let client = Client::new(&server.base).unwrap();
    let attachment = client
        .attach(&counter.id, AttachOptions::default())
        .await
        .unwrap();
    let mut stdout = attachment.stdout;

    let (status, answer) = server
        .post(
            "/v1/admin/upgrade",
            json!({"binary": newer.to_str().unwrap()}),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let line = server.next_stdout_line_async().await;
    assert!(line.starts_with("tetherd handed over from "), "{line}");

    // Carried: the attached client reads every number once; the screen.
    let mut text = String::new();
    bounded("the counter's output", stdout.read_to_string(&mut text))
        .await
        .unwrap();
    assert_numbered(&text, 400);
    assert_numbered(&output_of(&server, &counter.id).await, 400);
    assert_eq!(server.screen(&shell.id, "text").await, before);
    // The two binaries' emulators write their snapshots differently (the
    // format-1 one was avt's dump): what each shows in a fresh terminal is
    // the same, text, cursor and every cell's attributes.
    let after = server.screen(&shell.id, "ansi").await;
    assert_eq!(shown(&after), shown(&snapshot));
    // It is the newer binary now: it records input.
    let recorded = server
        .spawn(json!({"argv": ["true"], "record_input": true}))
        .await;
    assert!(recorded.records_input);

    // Back to the older binary: refused before anything stops.
    let (status, answer) = server
        .post(
            "/v1/admin/upgrade",
            json!({"binary": older.to_str().unwrap()}),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "upgrade_refused");
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("format 2"), "{message}");
    assert_eq!(
        server.status(&shell.id).await.status,
        tether_protocol::ProcessStatus::Running
    );
}
