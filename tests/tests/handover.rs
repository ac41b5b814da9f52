//! The in-place handover (issue 43): tetherd becomes a new binary under
//! the same pid and ends nothing. Every process keeps running and keeps
//! its pid, every byte it writes is delivered once, input is applied once,
//! clients carry on by themselves, and a bad new binary changes nothing.

use serde_json::{json, Value};
use tether_client::{AttachOptions, Client};
use tether_tests::rust_client::bounded;
use tether_tests::scoped::{call, code, mint_as_operator, OPERATOR};
use tether_tests::settle_async;
use tether_tests::TestServer;
use tokio::io::AsyncReadExt;

/// Asks for a handover to the binary tetherd was started from and waits
/// until the new binary says it serves (its line on the same stdout).
pub(crate) async fn hand_over(server: &TestServer) -> Value {
    hand_over_with(server, json!({})).await
}

/// [`hand_over`] with this request (`binary`, `flags`).
pub(crate) async fn hand_over_with(server: &TestServer, request: Value) -> Value {
    let (status, answer) = server.post("/v1/admin/upgrade", request).await;
    assert_eq!(status, 202, "{answer}");
    let line = server.next_stdout_line_async().await;
    assert!(
        line.starts_with("tetherd handed over from ") && line.ends_with(&server.base),
        "{line}"
    );
    answer
}

/// The numbers `seq`-like loops printed, one per line, checked to be
/// exactly `from..from + count` once each, in order.
pub(crate) fn assert_numbered(text: &str, count: usize) {
    let numbers: Vec<usize> = text
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {l:?}"))
        })
        .collect();
    assert_eq!(numbers.len(), count, "lines: {}", numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(*n, i + 1, "line {i} is {n}");
    }
}

pub(crate) async fn output_of(server: &TestServer, id: &str) -> String {
    let body = server
        .http
        .get(server.url(&format!("/v1/processes/{id}/output?stream=stdout")))
        .send()
        .await
        .expect("output")
        .bytes()
        .await
        .expect("output body");
    String::from_utf8_lossy(&body).into_owned()
}

/// A shell loop that prints 1..=N, one line every `pause` seconds.
pub(crate) fn counting(n: usize, pause: &str) -> String {
    format!("i=1; while [ $i -le {n} ]; do echo $i; i=$((i+1)); sleep {pause}; done")
}

#[tokio::test]
async fn processes_keep_running_and_every_byte_arrives_once_across_five_handovers() {
    for flags in [&[][..], &["--memory-only"][..]] {
        let server = TestServer::start_with(flags);
        let pipe = server.sh(&counting(400, "0.005"), json!({})).await;
        let pty = server
            .sh(&counting(400, "0.005"), json!({"tty": true}))
            .await;
        // A Rust client reading each, resuming by itself after each 1012.
        let client = Client::new(&server.base).unwrap();
        let mut readers = Vec::new();
        for id in [&pipe.id, &pty.id] {
            let attachment = client.attach(id, AttachOptions::default()).await.unwrap();
            readers.push(tokio::spawn(async move {
                let mut stdout = attachment.stdout;
                let mut text = String::new();
                stdout.read_to_string(&mut text).await.unwrap();
                (text, attachment.exit.await.unwrap())
            }));
        }
        let cpu =
            |info: &tether_protocol::ProcessInfo| info.usage.map(|u| u.cpu_user_s + u.cpu_system_s);
        let mut used = cpu(&server.status(&pipe.id).await);
        for _ in 0..5 {
            hand_over(&server).await;
            // Same pids, still running; the bill read from the same cgroup
            // never goes back.
            for before in [&pipe, &pty] {
                let now = server.status(&before.id).await;
                assert_eq!(now.pid, before.pid);
            }
            let now = cpu(&server.status(&pipe.id).await);
            assert!(now >= used, "usage went back from {used:?} to {now:?}");
            used = now;
        }
        for (process, reader) in [&pipe, &pty].into_iter().zip(readers) {
            let (text, exit) = bounded("the client's read", reader).await.unwrap();
            assert_eq!(exit.exit_code, Some(0), "{flags:?}");
            let text = text.replace('\r', "");
            assert_numbered(&text, 400);
            let exited = server.wait_exit(&process.id).await;
            assert_eq!(
                exited.stdout_bytes,
                text.len() as u64 + if process.tty { 400 } else { 0 }
            );
            assert_numbered(
                &output_of(&server, &process.id).await.replace('\r', ""),
                400,
            );
        }
    }
}

#[tokio::test]
async fn numbered_input_sent_across_a_handover_is_applied_once_in_order() {
    let server = TestServer::start();
    let cat = server.spawn(json!({"argv": ["cat"], "stdin": true})).await;
    let client = Client::new(&server.base).unwrap();
    let attachment = client
        .attach(&cat.id, AttachOptions::default())
        .await
        .unwrap();
    let mut stdin = attachment.stdin;
    let mut stdout = attachment.stdout;
    let writer = tokio::spawn(async move {
        for i in 1..=300 {
            stdin.write(format!("{i}\n").as_bytes()).await.unwrap();
            tokio::task::yield_now().await;
        }
        stdin.close().await.unwrap();
    });
    hand_over(&server).await;
    hand_over(&server).await;
    bounded("the writer", writer).await.unwrap();
    let mut text = String::new();
    bounded("cat's output", stdout.read_to_string(&mut text))
        .await
        .unwrap();
    assert_numbered(&text, 300);
}

#[tokio::test]
async fn a_process_that_exits_during_the_handover_keeps_its_code_and_output() {
    let server = TestServer::start();
    // Exits as soon as it is told, with everything it printed in its pipe.
    let process = server
        .sh("read go; seq 1 20000; exit 7", json!({"stdin": true}))
        .await;
    server.say(&process.id, "go\n").await;
    hand_over(&server).await;
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.exit_code, Some(7));
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Exit));
    assert!(!exited.output_incomplete);
    assert_numbered(&output_of(&server, &process.id).await, 20000);
}

#[tokio::test]
async fn the_screen_tokens_and_names_are_the_same_after_a_handover() {
    let server = TestServer::start();
    let shell = server
        .spawn(json!({
            "argv": ["sh", "-c", "printf 'top line\\n\\033[31mred\\033[0m\\n'; exec cat"],
            "tty": true, "name": "kept"
        }))
        .await;
    let minted = mint_as_operator(&server, &shell.id, &["read"], 600_000).await;
    let token = minted["token"].as_str().expect("a token").to_string();
    let before = settle_async(
        || server.screen(&shell.id, "text"),
        |text| text.contains("red"),
    )
    .await;
    assert!(
        before.contains("top line") && before.contains("red"),
        "{before}"
    );
    let snapshot = server.screen(&shell.id, "ansi").await;
    hand_over(&server).await;
    assert_eq!(server.screen(&shell.id, "text").await, before);
    // The snapshot: the same cells, attributes and cursor.
    assert_eq!(server.screen(&shell.id, "ansi").await, snapshot);
    // The name still names it; the scoped token minted before still reads.
    assert_eq!(server.status("kept").await.id, shell.id);
    let status = server
        .http
        .get(server.url(&format!("/v1/processes/{}", shell.id)))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_bad_new_binary_is_refused_and_the_server_serves_on_unchanged() {
    let server = TestServer::start();
    let process = server.sh("exec cat", json!({"stdin": true})).await;
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, [0x7f, b'E', b'L', b'F', 0, 1, 2, 3]).unwrap();
    let newer = dir.join("newer");
    std::fs::write(
        &newer,
        "#!/bin/sh\necho '{\"program\":\"tetherd\",\"handover_formats\":[99]}'\n",
    )
    .unwrap();
    let older = dir.join("older");
    // What a tetherd from before handovers answers: an unknown flag.
    std::fs::write(
        &older,
        "#!/bin/sh\necho 'error: unexpected argument' >&2; exit 2\n",
    )
    .unwrap();
    let not_executable = dir.join("plain");
    std::fs::write(&not_executable, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    for file in [&garbage, &newer, &older] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cases = [
        (garbage.display().to_string(), "cannot run it"),
        (newer.display().to_string(), "formats [99]"),
        (older.display().to_string(), "--handover-check failed"),
        (not_executable.display().to_string(), "cannot run it"),
        (dir.join("missing").display().to_string(), "cannot run it"),
    ];
    for (binary, why) in cases {
        let (status, answer) = server
            .post("/v1/admin/upgrade", json!({"binary": binary}))
            .await;
        assert_eq!(status, 409, "{binary}: {answer}");
        assert_eq!(answer["error"]["code"], "upgrade_refused");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(why), "{binary}: {message}");
    }
    // Untouched: the same process, still taking input, and spawns work.
    server.say(&process.id, "still here").await;
    let mut attachment = server.attach(&process.id, "").await;
    let mut received = Default::default();
    attachment
        .until_stdout_contains("still here", &mut received)
        .await;
    let fresh = server.sh("echo fine", json!({})).await;
    assert_eq!(server.wait_exit(&fresh.id).await.exit_code, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn spawns_racing_a_handover_run_once_or_are_refused_and_no_child_holds_a_carried_descriptor()
{
    let server = TestServer::start();
    let before = server.sh("exec sleep 600", json!({})).await;
    let fds_of = |pid: u32| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|dir| {
                dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .map(|target| target.display().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let held_before = fds_of(before.pid);
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let url = server.url("/v1/processes");
            tokio::spawn(async move {
                // A connection of its own each, as separate clients.
                let http = reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                let body = json!({"argv": ["sleep", "600"], "name": format!("racer-{i}")});
                match http.post(url).json(&body).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let retry = response.headers().get("retry-after").is_some();
                        (i, Some(status), retry)
                    }
                    Err(_) => (i, None, false),
                }
            })
        })
        .collect();
    hand_over(&server).await;
    for racer in racers {
        let (i, status, retry) = bounded("a racing spawn", racer).await.unwrap();
        let (found, info) = server.get(&format!("/v1/processes/racer-{i}")).await;
        match status {
            Some(201) => assert_eq!(found, 200, "racer {i} ran: it is listed"),
            Some(503) => {
                assert!(retry, "racer {i}: a 503 says when to retry");
                assert_eq!(found, 404, "racer {i} was refused: it never ran ({info})");
            }
            // Cut with the old binary's connections: it ran at most once.
            None => assert!(found == 200 || found == 404),
            Some(other) => panic!("racer {i}: {other}"),
        }
    }
    // The process from before holds what it held; one spawned after holds
    // nothing of the server's (no socket, pidfd, memfd or log).
    assert_eq!(fds_of(before.pid), held_before);
    let after = server.sh("exec sleep 600", json!({})).await;
    let held = fds_of(after.pid);
    let servers = ["socket:", "anon_inode:", "/memfd:", "tetherd"];
    assert!(
        !held.iter().any(|t| servers.iter().any(|s| t.contains(s))),
        "a child holds {held:?}"
    );
}

#[tokio::test]
async fn sigusr2_hands_over_like_the_route() {
    let server = TestServer::start();
    let process = server.sh(&counting(100, "0.01"), json!({})).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.pid() as i32),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .unwrap();
    let line = server.next_stdout_line_async().await;
    assert!(line.starts_with("tetherd handed over from "), "{line}");
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.exit_code, Some(0));
    assert_numbered(&output_of(&server, &process.id).await, 100);
}

#[tokio::test]
async fn only_the_operator_may_ask_for_a_handover() {
    let server = TestServer::start_with(&["--token", OPERATOR]);
    let process = server_sh_as_operator(&server).await;
    let minted = mint_as_operator(&server, &process, &["read", "write", "kill"], 600_000).await;
    let scoped = minted["token"].as_str().expect("a token");
    let (status, body) = call(&server, "POST", "/v1/admin/upgrade", Some(scoped), None).await;
    assert_eq!((status, code(&body)), (403, "out_of_scope"), "{body}");
    let (status, _) = call(&server, "POST", "/v1/admin/upgrade", None, None).await;
    assert_eq!(status, 401);
}

async fn server_sh_as_operator(server: &TestServer) -> String {
    let (status, body) = call(
        server,
        "POST",
        "/v1/processes",
        Some(OPERATOR),
        Some(json!({"argv": ["sleep", "600"]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_terminal_session_in_tether_survives_tether_admin_upgrade_untouched() {
    use tether_tests::cli::{tether, text};
    use tether_tests::tmux::Tmux;
    let server = TestServer::start();
    let (tmux, dir) = Tmux::start("handover", &server.base, "");
    tmux.until("the prompt", |p| p.contains("prompt>"));
    tmux.type_line("echo before-$((20+1))");
    tmux.until("the first answer", |p| {
        p.lines().any(|l| l.trim() == "before-21")
    });
    for round in 0..2 {
        let out = tether(&server.base, &["admin", "upgrade"], b"");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let said = text(&out.stdout);
        assert!(said.contains("every process carried on"), "{said}");
        // The same shell, typed into as before: the session reconnected
        // by itself and its keystrokes reach the same program.
        tmux.type_line(&format!("echo after-{round}-$((40+2))"));
        tmux.until("an answer after the handover", |p| {
            p.lines().any(|l| l.trim() == format!("after-{round}-42"))
        });
    }
    // Nothing was repeated on the screen: each answer shows once.
    let pane = tmux.pane();
    assert_eq!(
        pane.lines().filter(|l| l.trim() == "before-21").count(),
        1,
        "{pane}"
    );
    tmux.type_line("exit 5");
    assert_eq!(tether_tests::cli::wait_file(&dir.join("rc")), "5\n");
}

#[tokio::test]
async fn a_handover_near_the_open_file_limit_is_refused_before_anything_stops() {
    // Room for the processes themselves, not for a second copy of each
    // one's descriptors.
    let server = TestServer::start_with_fd_limit(&["--max-processes", "100"], 256, 256);
    let mut running = Vec::new();
    for _ in 0..50 {
        running.push(server.sh("exec sleep 600", json!({})).await);
    }
    let (status, answer) = server.post("/v1/admin/upgrade", json!({})).await;
    assert_eq!(status, 409, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("more descriptors"), "{message}");
    // Nothing stopped: each is still running and can be killed.
    for process in &running {
        assert_eq!(
            server.status(&process.id).await.status,
            tether_protocol::ProcessStatus::Running
        );
    }
    let last = running.last().map(|p| p.id.clone()).unwrap_or_default();
    let (status, _) = server
        .post(&format!("/v1/processes/{last}/kill?grace_ms=0"), json!({}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_deadline_keeps_counting_from_the_spawn_across_a_handover() {
    let server = TestServer::start();
    let process = server
        .sh(
            "sleep 2; echo half; exec sleep 600",
            json!({"timeout_ms": 4000}),
        )
        .await;
    let mut attachment = server.attach(&process.id, "").await;
    let mut received = Default::default();
    attachment
        .until_stdout_contains("half", &mut received)
        .await;
    hand_over(&server).await;
    let exited = server.wait_exit(&process.id).await;
    assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Timeout));
    assert_eq!(exited.exit_code, Some(124));
    // Counted afresh from the handover it would have run 6 s at least.
    let ms = exited.duration_ms.unwrap_or(0);
    assert!((4000..5500).contains(&ms), "ran {ms} ms");
}

#[tokio::test]
async fn an_exec_in_flight_is_answered_restarting_and_its_process_killed_or_kept_as_it_asked() {
    let server = TestServer::start();
    for kill_on_disconnect in [false, true] {
        let url = server.url("/v1/exec");
        let body = json!({"command": "echo started; exec sleep 600", "kill_on_disconnect": kill_on_disconnect});
        let exec = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let response = http.post(url).json(&body).send().await.expect("an answer");
            let status = response.status().as_u16();
            let retry = response.headers().get("retry-after").is_some();
            (
                status,
                retry,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        });
        // The exec's process is running before the handover begins.
        let listed = settle_async(
            || async { server.get("/v1/processes").await.1 },
            |l: &Value| {
                l.as_array().is_some_and(|all| {
                    all.iter()
                        .any(|p| p["status"] == "running" && p["stdout_bytes"] == 8)
                })
            },
        )
        .await;
        let id = listed
            .as_array()
            .and_then(|all| all.iter().find(|p| p["status"] == "running"))
            .and_then(|p| p["id"].as_str())
            .unwrap_or_default()
            .to_string();
        hand_over(&server).await;
        let (status, retry, answer) = bounded("the exec's answer", exec).await.unwrap();
        assert_eq!((status, retry), (503, true), "{answer}");
        assert_eq!(answer["error"]["code"], "restarting");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(&id), "{message}");
        if kill_on_disconnect {
            let exited = server.wait_exit(&id).await;
            assert_eq!(exited.reason, Some(tether_protocol::ExitReason::Killed));
        } else {
            assert!(message.contains("runs on"), "{message}");
            assert!(!server.status(&id).await.is_exited());
            let (status, _) = server
                .post(&format!("/v1/processes/{id}/kill?grace_ms=0"), json!({}))
                .await;
            assert_eq!(status, 200);
        }
    }
}
