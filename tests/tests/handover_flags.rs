//! New flags at a handover (issue 43): `POST /v1/admin/upgrade` with
//! `flags` (and `tether admin upgrade -- FLAGS`) gives the new binary the
//! server's flags followed by these, the last one winning; what a handover
//! cannot change, or a token on a command line, is refused with 409 before
//! anything stops.

use serde_json::json;
use tether_tests::TestServer;

use crate::handover::hand_over_with;

#[tokio::test]
async fn a_new_limit_takes_effect_in_place_and_the_process_runs_on() {
    let server = TestServer::start_with(&["--max-processes", "8"]);
    let kept = server.sh("exec sleep 600", json!({})).await;
    // Through the CLI: `tether admin upgrade -- FLAGS`.
    let base = server.base.clone();
    let upgrade = tokio::task::spawn_blocking(move || {
        tether_tests::cli::tether(
            &base,
            &["admin", "upgrade", "--", "--max-processes", "1"],
            b"",
        )
    });
    let line = server.next_stdout_line_async().await;
    assert!(line.starts_with("tetherd handed over from "), "{line}");
    let out = upgrade.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One process at most now, and one runs.
    let (status, answer) = server
        .post("/v1/processes", json!({"argv": ["true"]}))
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "too_many_processes");
    let info = server.status(&kept.id).await;
    assert_eq!(info.pid, kept.pid);
    assert!(!info.is_exited());
}

#[tokio::test]
async fn what_a_handover_cannot_change_is_refused_and_the_server_serves_on() {
    let server = TestServer::start();
    let kept = server.sh("exec sleep 600", json!({})).await;
    for (flags, says) in [
        (json!(["--data-dir", "/tmp/elsewhere"]), "--data-dir"),
        (json!(["--listen", "127.0.0.1:1"]), "--listen"),
        (json!(["--memory-only"]), "--memory-only"),
        (json!(["--no-screen"]), "--no-screen"),
        (json!(["--token", "secret"]), "--token"),
        (json!(["--token=secret"]), "--token"),
        (json!(["--handover-fd", "3"]), "--handover-fd"),
        (json!(["--no-such-flag"]), "--no-such-flag"),
        (json!(["--max-processes", "many"]), "--max-processes"),
    ] {
        let (status, answer) = server
            .post("/v1/admin/upgrade", json!({ "flags": flags }))
            .await;
        assert_eq!(status, 409, "{flags}: {answer}");
        assert_eq!(answer["error"]["code"], "upgrade_refused");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{flags}: {message}");
    }
    let info = server.status(&kept.id).await;
    assert!(!info.is_exited());
    let (_, run) = server.get("/v1/admin/server").await;
    assert_eq!(run["handovers"], 0, "{run}");
    // And a handover with allowed flags still goes through afterwards.
    hand_over_with(&server, json!({"flags": ["--exited-ttl-ms", "60000"]})).await;
    assert_eq!(server.status(&kept.id).await.pid, kept.pid);
}

#[tokio::test]
async fn a_handover_naming_another_token_file_rotates_the_token() {
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let (old, new) = (dir.join("old-token"), dir.join("new-token"));
    std::fs::write(&old, "old-secret-token\n").unwrap();
    std::fs::write(&new, "new-secret-token\n").unwrap();
    let server = TestServer::start_with(&["--token-file", old.to_str().unwrap()]);
    let http = reqwest::Client::new();
    let call = |token: &'static str| {
        let http = http.clone();
        let url = server.url("/v1/admin/server");
        async move {
            http.get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(call("old-secret-token").await, 200);
    let asked = http
        .post(server.url("/v1/admin/upgrade"))
        .bearer_auth("old-secret-token")
        .json(&json!({"flags": ["--token-file", new.to_str().unwrap()]}))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 202);
    let line = server.next_stdout_line_async().await;
    assert!(line.starts_with("tetherd handed over from "), "{line}");
    assert_eq!(call("new-secret-token").await, 200);
    assert_eq!(call("old-secret-token").await, 401);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Running without a token is what a handover cannot change, either way:
/// a server started with `--no-token` is not given a `--token-file` (it
/// would come up with a token, refusing every client that reconnects
/// without one, `--no-token` still among its flags), and a server with a
/// token file is not given `--no-token`.
#[tokio::test]
async fn a_token_is_neither_given_nor_taken_away_at_a_handover() {
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "a-token-for-later\n").unwrap();
    let file = file.to_str().unwrap();

    // Without a token (the harness's `--no-token`).
    let open = TestServer::start();
    let kept = open.sh("exec sleep 600", json!({})).await;
    for flags in [
        json!(["--token-file", file]),
        json!([format!("--token-file={file}")]),
    ] {
        let (status, answer) = open
            .post("/v1/admin/upgrade", json!({ "flags": flags }))
            .await;
        assert_eq!(status, 409, "{flags}: {answer}");
        assert_eq!(answer["error"]["code"], "upgrade_refused");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("--no-token cannot change") && message.contains("--token-file"),
            "{flags}: {message}"
        );
    }
    // Still without a token, the same server, nothing handed over.
    let (status, run) = open.get("/v1/admin/server").await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["handovers"], 0, "{run}");
    assert!(!open.status(&kept.id).await.is_exited());

    // With a token file.
    let tokened = TestServer::start_with(&["--token-file", file]);
    let asked = reqwest::Client::new()
        .post(tokened.url("/v1/admin/upgrade"))
        .bearer_auth("a-token-for-later")
        .json(&json!({"flags": ["--no-token"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 409);
    let answer: serde_json::Value = asked.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "upgrade_refused");
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("--no-token cannot change"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server with a generated token keeps it at a handover: handed
/// `--token-file`, it would come up with that file's token while its
/// runtime entry (where `tether` on this machine finds the token) still
/// held the generated one, so the next `tether ps` there got 401, as would
/// every client that had the generated token (the `open:` link).
#[tokio::test]
async fn a_generated_token_is_not_replaced_by_a_token_file_at_a_handover() {
    let dir = tether_tests::fresh_dir();
    let xdg = dir.join("runtime");
    std::fs::create_dir_all(&xdg).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "a-token-from-a-file\n").unwrap();
    let (xdg, file) = (xdg.to_str().unwrap(), file.to_str().unwrap());
    let server = TestServer::start_exact(&[], &[("XDG_RUNTIME_DIR", xdg)], None);
    // "token: generated, in ENTRY", then "open: URL/#token=TOKEN".
    let lines = [server.next_stdout_line(), server.next_stdout_line()];
    let generated = lines
        .iter()
        .find_map(|l| l.split_once("#token="))
        .map(|(_, token)| token.to_string())
        .unwrap_or_else(|| panic!("no generated token printed: {lines:?}"));
    let ps = || {
        let base = server.base.clone();
        let xdg = xdg.to_string();
        tokio::task::spawn_blocking(move || {
            tether_tests::cli::tether_env(&base, &["ps"], &[("XDG_RUNTIME_DIR", &xdg)])
        })
    };
    let out = ps().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        tether_tests::cli::text(&out.stderr)
    );

    let http = reqwest::Client::new();
    for flags in [
        json!(["--token-file", file]),
        json!([format!("--token-file={file}")]),
    ] {
        let asked = http
            .post(server.url("/v1/admin/upgrade"))
            .bearer_auth(&generated)
            .json(&json!({ "flags": flags }))
            .send()
            .await
            .unwrap();
        let status = asked.status().as_u16();
        let answer: serde_json::Value = asked.json().await.unwrap_or_default();
        assert_eq!(status, 409, "{flags}: {answer}");
        assert_eq!(answer["error"]["code"], "upgrade_refused");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("--token-file") && message.contains("generated"),
            "{flags}: {message}"
        );
    }
    // The same server, its generated token and its entry: `tether` on this
    // machine still gets in.
    let out = ps().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        tether_tests::cli::text(&out.stderr)
    );
    let run: serde_json::Value = http
        .get(server.url("/v1/admin/server"))
        .bearer_auth(&generated)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or_default();
    assert_eq!(run["handovers"], 0, "{run}");
    drop(server);

    // Generated into $TETHER_TOKEN_FILE, and that very file handed over:
    // refused too (the server removes its generated token's file at exit,
    // and would have taken the file its flags name with it).
    let named = dir.join("named");
    let named = named.to_str().unwrap();
    let server = TestServer::start_exact(&[], &[("TETHER_TOKEN_FILE", named)], None);
    let line = server.next_stdout_line();
    assert!(line.contains(named), "{line}");
    let generated = std::fs::read_to_string(named).unwrap_or_default();
    let asked = http
        .post(server.url("/v1/admin/upgrade"))
        .bearer_auth(generated.trim())
        .json(&json!({ "flags": ["--token-file", named] }))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 409);
    let answer: serde_json::Value = asked.json().await.unwrap_or_default();
    assert_eq!(answer["error"]["code"], "upgrade_refused", "{answer}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
