//! `tether run -d`: a detached program never waits for a reader (drop mode
//! by default, `--block` when asked), its log stays readable while it runs,
//! and a closed stdout (`| head`) ends the CLI quietly.

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tether_tests::cli::{block_on, tether, text, wait_output};
use tether_tests::{settle_async, tether_binary, TestServer};

/// How long a detached chatty program must keep running.
const RUNNING_FOR: Duration = Duration::from_secs(5);

#[test]
fn a_detached_chatty_program_runs_on_with_nobody_attached() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let retain: u64 = 1 << 20;
    let out = tether(
        base,
        &["run", "-d", "--retain", &retain.to_string(), "--", "yes"],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let started = Instant::now();

    // In block mode `yes` would stop once its retention (and a window) was
    // full; in drop mode it goes on far past that, still running after
    // RUNNING_FOR. Polled (bounded) on the server's counters.
    let info = block_on(settle_async(
        || server.status(&id),
        |info| started.elapsed() >= RUNNING_FOR && info.stdout_bytes > 16 * retain,
    ));
    assert!(
        started.elapsed() >= RUNNING_FOR,
        "never got past {RUNNING_FOR:?}"
    );
    assert!(!info.is_exited(), "{info:?}");
    assert!(
        info.stdout_bytes > 16 * retain,
        "stalled at {} bytes",
        info.stdout_bytes
    );
    let later = block_on(settle_async(
        || server.status(&id),
        |later| later.stdout_bytes > info.stdout_bytes,
    ));
    assert!(
        later.stdout_bytes > info.stdout_bytes && !later.is_exited(),
        "no longer writing: {later:?}"
    );

    // `tether logs ID | head -c 100`: the retained tail, and the CLI ends
    // quietly when its reader goes.
    let mut logs = Command::new(tether_binary())
        .args(["logs", &id])
        .env("TETHER_SERVER", base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = Vec::new();
    logs.stdout
        .take()
        .unwrap()
        .take(100)
        .read_to_end(&mut head)
        .unwrap();
    let head = String::from_utf8_lossy(&head).into_owned();
    if head.len() < 100 {
        let out = wait_output(logs);
        panic!("logs gave {head:?}; {:?} {}", out.status, text(&out.stderr));
    }
    assert!(
        head.trim_start_matches('\n')
            .split('\n')
            .all(|line| line.is_empty() || line == "y"),
        "{head:?}"
    );
    let out = wait_output(logs);
    // Its reader gone, `logs` stops with the shell's status for that.
    assert!(
        matches!(out.status.code(), Some(141)) || out.status.code().is_none(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );

    let out = tether(base, &["rm", "-f", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_detached_run_blocks_only_when_asked_and_the_help_says_what_it_keeps() {
    let server = TestServer::start();
    let out = tether(&server.base, &["run", "-d", "--", "true"], b"");
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(
        block_on(server.status(&id)).overflow,
        tether_tests::tether_protocol::Overflow::Drop
    );
    let out = tether(&server.base, &["run", "-d", "--block", "--", "true"], b"");
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(
        block_on(server.status(&id)).overflow,
        tether_tests::tether_protocol::Overflow::Block
    );
    let out = tether(&server.base, &["run", "--help"], b"");
    let help = text(&out.stdout);
    for needle in ["--block", "never waits for a reader", "on disk"] {
        assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
    }
}

#[test]
fn a_closed_stdout_ends_every_listing_quietly() {
    let server = TestServer::start();
    for i in 0..3 {
        let out = tether(
            &server.base,
            &["run", "-d", "--name", &format!("p{i}"), "--", "sleep", "30"],
            b"",
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    // `tether ARGS | true` in bash: the reader is gone before tether writes
    // (it asks the server first), so every write meets a closed pipe;
    // tether's own status comes from PIPESTATUS.
    let dir = tether_tests::fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for args in ["ps", "ps -q", "ps --json", "status p0", "--help"] {
        let script = format!("{t} {args} | true; ", t = tether_binary().display());
        let status = dir.join("status");
        let out = Command::new("bash")
            .args([
                "-c",
                &format!("{script}echo ${{PIPESTATUS[0]}} > {}", status.display()),
            ])
            .env("TETHER_SERVER", &server.base)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let code = std::fs::read_to_string(&status).unwrap();
        assert!(
            code.trim() == "0" || code.trim() == "141",
            "{args}: exit {code}: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("panicked"),
            "{args}: {}",
            text(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shell pipeline with `tether` in it as a local program: `head -1`
/// ends the pipeline at once. `run` stops with 141 and its program gets
/// SIGPIPE, as `yes | head -1` ends `yes`; `attach` and `logs -f` stop
/// with 141 and leave the program running. Nothing more is printed.
#[test]
fn a_closed_stdout_ends_run_attach_and_logs_at_once_as_in_a_shell() {
    let server = TestServer::start();
    let tether = tether_binary();
    let pipeline = |command: &str| {
        let script = format!("{command} | head -1; echo \"status ${{PIPESTATUS[0]}}\" >&2");
        let child = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("TETHER_SERVER", &server.base)
            .env("TETHER_BIN", &tether)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_output(child);
        (text(&out.stdout), text(&out.stderr))
    };
    let (stdout, stderr) = pipeline("\"$TETHER_BIN\" run -- yes");
    assert_eq!(stdout, "y\n");
    assert_eq!(stderr, "status 141\n", "quiet, with the shell's status");
    let id = tether_tests::cli::ps(&server.base)
        .into_iter()
        .find(|p| p["argv"][0] == "yes")
        .map(|p| p["id"].as_str().unwrap().to_string())
        .unwrap();
    let ended = block_on(settle_async(
        || block_on_status(&server, &id),
        |info| info["status"] == "exited",
    ));
    assert_eq!(ended["signal"], "PIPE", "{ended}");

    let out = tether_tests::cli::tether(
        &server.base,
        &["run", "-d", "--name", "chatty", "--", "yes"],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for command in [
        "\"$TETHER_BIN\" attach chatty",
        "\"$TETHER_BIN\" logs -f chatty",
    ] {
        let (stdout, stderr) = pipeline(command);
        assert_eq!(stdout, "y\n", "{command}");
        assert_eq!(
            stderr, "status 141\n",
            "{command}: quiet, with the shell's status"
        );
    }
    let chatty = block_on(server.get("/v1/processes/chatty")).1;
    assert_eq!(
        chatty["status"], "running",
        "attach and logs leave it running"
    );
}

async fn block_on_status(server: &TestServer, id: &str) -> serde_json::Value {
    server.get(&format!("/v1/processes/{id}")).await.1
}

/// A detach names the process the way the user can type it again: by its
/// name when it has one.
#[test]
fn a_detach_suggests_the_process_s_name() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--name",
            "web",
            "--",
            "sh",
            "-c",
            "echo ready; sleep 60",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (child, lines) = tether_tests::cli::tether_lines(base, &["attach", "--no-signals", "web"]);
    assert_eq!(
        lines.recv_timeout(tether_tests::WAIT).unwrap(),
        "ready",
        "the replayed output"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("re-attach with: tether attach web)"),
        "{}",
        text(&out.stderr)
    );
}
