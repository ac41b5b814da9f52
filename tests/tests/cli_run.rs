//! `tether run` against a real tetherd: streams, exit codes as a shell
//! gives them, stdin, and the one WebSocket a run is (`GET /v1/run`),
//! across lost answers, cut connections and refusals. Signals to `tether`
//! itself: `cli_signals.rs`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tether_tests::cli::{block_on, ps, tether, tether_lines, text, wait_output};
use tether_tests::cut::CuttingProxy;
use tether_tests::front::Front;
use tether_tests::{TestServer, WAIT};

#[test]
fn run_relays_both_streams_and_exits_with_the_remote_code() {
    let server = TestServer::start();
    let out = tether(
        &server.base,
        &["run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
        b"",
    );
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn run_with_a_timeout_exits_124() {
    let server = TestServer::start();
    let started = Instant::now();
    let out = tether(
        &server.base,
        &["run", "--timeout", "1s", "--", "sleep", "5"],
        b"",
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn run_forwards_stdin_env_and_cwd() {
    let server = TestServer::start();
    let out = tether(&server.base, &["run", "-i", "--", "wc", "-l"], b"a\nb\nc\n");
    assert_eq!(text(&out.stdout).trim(), "3");
    assert_eq!(out.status.code(), Some(0));
    // Without -i the process reads /dev/null and cannot hang.
    let out = tether(&server.base, &["run", "--", "cat"], b"ignored\n");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("", Some(0))
    );
    let out = tether(
        &server.base,
        &[
            "run",
            "--env",
            "GREETING=hi there",
            "--cwd",
            "/tmp",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING\" $(pwd)",
        ],
        b"",
    );
    assert_eq!(text(&out.stdout), "hi there /tmp\n");
}

#[test]
fn run_delivers_large_output_completely() {
    let server = TestServer::start();
    let out = tether(&server.base, &["run", "--", "seq", "200000"], b"");
    assert_eq!(out.status.code(), Some(0));
    let expected: String = (1..=200_000).map(|n| format!("{n}\n")).collect();
    assert!(
        out.stdout == expected.as_bytes(),
        "stdout differs ({} bytes)",
        out.stdout.len()
    );
}

#[test]
fn a_program_that_cannot_start_exits_127() {
    let server = TestServer::start();
    let out = tether(&server.base, &["run", "--", "/no/such/program"], b"");
    assert_eq!(out.status.code(), Some(127));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("tether: ") && stderr.contains("spawn_failed"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_server_gets_one_clear_line() {
    let port = tether_tests::free_port();
    let out = tether(&format!("http://127.0.0.1:{port}"), &["ps"], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tether: cannot reach the server at http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("refused"), "{stderr}");
}

#[test]
fn an_end_other_than_exit_is_explained_on_stderr() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(base, &["run", "--", "sh", "-c", "kill -KILL $$"], b"");
    assert_eq!(out.status.code(), Some(137));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tether: signal: the process was killed by SIGKILL"),
        "{stderr}"
    );

    let out = tether(
        base,
        &["run", "--timeout", "100ms", "--", "sleep", "5"],
        b"",
    );
    assert_eq!(out.status.code(), Some(124));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("tether: timeout: "), "{stderr}");

    // A kill request while `tether run` is attached.
    let (child, lines) = tether_lines(
        base,
        &["run", "--", "sh", "-c", "echo ready; exec sleep 60"],
    );
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "ready");
    let id = ps(base)
        .iter()
        .find(|p| p["status"] == "running")
        .map(|p| p["id"].as_str().unwrap().to_string())
        .unwrap();
    let out = tether(base, &["kill", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // `tether kill` is `docker kill`: SIGKILL.
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(137));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tether: killed: a kill request"),
        "{stderr}"
    );
}

#[test]
fn a_program_found_but_not_runnable_exits_126_and_one_not_found_127() {
    let server = TestServer::start();
    let base = server.base.as_str();
    for args in [
        &["run", "--", "/etc/passwd"][..],
        &["run", "--", "/tmp"][..],
        &["run", "--cwd", "/nonexistent", "--", "true"][..],
    ] {
        let out = tether(base, args, b"");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot_execute"), "{args:?}: {stderr}");
    }
    let out = tether(base, &["run", "--", "no-such-program-anywhere"], b"");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
}

#[test]
fn an_attached_run_says_when_the_server_shut_down() {
    let mut server = TestServer::start();
    let (child, lines) = tether_lines(
        &server.base,
        &["run", "--", "sh", "-c", "echo ready; exec sleep 60"],
    );
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "ready");
    assert_eq!(block_on(server.terminate()), Some(0));
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(143));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tether: killed: the server shut down"),
        "{stderr}"
    );
}

fn front(server: &TestServer) -> Front {
    Front::start(server.base.trim_start_matches("http://").parse().unwrap())
}

/// The value of the unlabelled counter `name` in the server's `/metrics`.
fn counter(server: &TestServer, name: &str) -> u64 {
    let metrics = block_on(server.metrics());
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[test]
fn run_is_one_connection_and_one_request() {
    let server = TestServer::start();
    let front = front(&server);
    let out = tether(
        &front.base,
        &["run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
        b"",
    );
    assert_eq!(
        (text(&out.stdout).as_str(), text(&out.stderr).as_str()),
        ("out\n", "err\n")
    );
    assert_eq!(out.status.code(), Some(7));
    // No POST before the attachment, no long-poll beside it.
    assert_eq!(front.request_lines(), ["GET /v1/run"]);
    assert_eq!(counter(&server, "tether_spawns_total"), 1);
    assert_eq!(counter(&server, "tether_attaches_total"), 1);
    assert_eq!(counter(&server, "tether_wait_requests_total"), 0);
}

#[test]
fn run_detached_still_posts_and_prints_the_id() {
    let server = TestServer::start();
    let front = front(&server);
    let out = tether(&front.base, &["run", "-d", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(front.request_lines(), ["POST /v1/processes"]);
    assert_eq!(block_on(server.wait_exit(&id)).exit_code, Some(0));
    assert_eq!(counter(&server, "tether_attaches_total"), 0);
}

#[test]
fn run_delivers_output_from_the_first_byte_of_a_command_that_exits_at_once() {
    let server = TestServer::start();
    let out = tether(
        &server.base,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "printf first; seq 30000; printf last >&2; exit 3",
        ],
        b"",
    );
    let mut expected = String::from("first");
    for i in 1..=30000 {
        expected.push_str(&format!("{i}\n"));
    }
    assert!(
        out.stdout == expected.as_bytes(),
        "stdout differs ({} bytes of {})",
        out.stdout.len(),
        expected.len()
    );
    assert_eq!(text(&out.stderr), "last");
    assert_eq!(out.status.code(), Some(3));
    // --retain clamps the credit window, so block mode paces the program
    // through a retention far smaller than its output, with nothing lost.
    let out = tether(
        &server.base,
        &["run", "--retain", "4096", "--", "seq", "30000"],
        b"",
    );
    assert!(
        out.stdout == expected.as_bytes()[5..],
        "stdout differs with --retain ({} bytes)",
        out.stdout.len()
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_run_refused_at_its_upgrade_exits_as_a_shell_would() {
    let server = TestServer::start();
    let front = front(&server);
    let out = tether(&front.base, &["run", "--", "/no/such/program"], b"");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.starts_with("tether: ") && stderr.contains("spawn_failed"),
        "{stderr}"
    );
    let out = tether(&front.base, &["run", "--", "/etc/passwd"], b"");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("cannot_execute"), "{stderr}");
    // Each was one refused upgrade request: nothing started.
    assert_eq!(front.request_lines(), ["GET /v1/run", "GET /v1/run"]);
    assert_eq!(counter(&server, "tether_spawns_total"), 0);
    assert!(ps(&server.base).is_empty());
}

#[test]
fn a_name_already_taken_is_one_clear_error_and_starts_nothing() {
    let server = TestServer::start();
    let out = tether(
        &server.base,
        &["run", "-d", "--name", "web", "--", "sleep", "30"],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = text(&out.stdout).trim().to_string();
    let out = tether(
        &server.base,
        &["run", "--name", "web", "--", "sh", "-c", "echo ran"],
        b"",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tether: ") && stderr.contains("409 name_taken"),
        "{stderr}"
    );
    assert!(stderr.contains("web"), "{stderr}");
    assert_eq!(text(&out.stdout), "");
    let listed = ps(&server.base);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], first.as_str());
    assert_eq!(
        tether(&server.base, &["kill", "web"], b"").status.code(),
        Some(0)
    );
}

#[test]
fn a_run_whose_first_answer_is_lost_starts_the_command_once() {
    let server = TestServer::start();
    let front =
        Front::losing_first_answer(server.base.trim_start_matches("http://").parse().unwrap());
    let marker = format!("once-{}", std::process::id());
    let out = tether(
        &front.base,
        &["run", "--", "sh", "-c", &format!("echo {marker}; exit 6")],
        b"",
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{marker}\n"));
    // The retry carried the same Idempotency-Key: it attached to the
    // process the lost answer had started.
    assert_eq!(front.request_lines(), ["GET /v1/run", "GET /v1/run"]);
    assert_eq!(counter(&server, "tether_spawns_total"), 1);
    assert_eq!(ps(&server.base).len(), 1);
}

#[test]
fn a_run_dropped_mid_way_resumes_the_same_process() {
    let server = TestServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let proxy = runtime.block_on(CuttingProxy::start(
        server.base.trim_start_matches("http://").parse().unwrap(),
    ));
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let script = format!(
        "echo before; while [ ! -e {} ]; do sleep 0.05; done; echo after; exit 4",
        go.display()
    );
    let (child, lines) = tether_lines(&proxy.base, &["run", "--", "sh", "-c", &script]);
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "before");
    assert!(proxy.cut() > 0, "nothing to cut");
    std::fs::write(&go, b"").unwrap();
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "after");
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(proxy.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    // The resume attached by id: the command ran once.
    assert_eq!(ps(&server.base).len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_without_a_server_fails_fast_with_one_line() {
    let port = tether_tests::free_port();
    let started = Instant::now();
    let out = tether(
        &format!("http://127.0.0.1:{port}"),
        &["run", "--", "true"],
        b"",
    );
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tether: cannot reach the server at http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(Connection refused (os error 111)); is tetherd running?"),
        "{stderr}"
    );
    // The first contact's short budget, not the 30 s of a reconnect.
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
}

#[test]
fn a_run_too_long_for_a_url_is_posted_then_attached() {
    let server = TestServer::start();
    let front = front(&server);
    let script = format!(": {}; echo long-ok", "x".repeat(10_000));
    let out = tether(&front.base, &["run", "--", "sh", "-c", &script], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "long-ok\n");
    let lines = front.request_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "POST /v1/processes");
    assert!(
        lines[1].starts_with("GET /v1/processes/") && lines[1].ends_with("/attach"),
        "{lines:?}"
    );
}

/// A mistyped option before the program is a usage error that starts
/// nothing: exit 125, the closest option suggested, no spawn seen by the
/// server. Options after the program are the program's.
#[test]
fn a_mistyped_option_starts_nothing_and_the_closest_one_is_suggested() {
    let server = TestServer::start();
    let out = tether(
        &server.base,
        &["run", "--memroy", "512M", "--", "python3", "-c", "pass"],
        b"",
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("'--memory'"),
        "{}",
        text(&out.stderr)
    );
    assert!(ps(&server.base).is_empty(), "the server saw a spawn");
    // After the program, dashes are the program's; before it, `--`.
    let out = tether(
        &server.base,
        &["run", "sh", "-c", "echo $0 --memroy", "-x"],
        b"",
    );
    assert_eq!(text(&out.stdout), "-x --memroy\n", "{}", text(&out.stderr));
    let out = tether(&server.base, &["run", "--", "-no-such-program"], b"");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
}
