//! Signals sent to `tether run` itself: relayed to the remote process by
//! default (as a local program would get them), or, with `--no-signals`,
//! a detach that leaves the process running (docker's `--sig-proxy=false`).

#![allow(clippy::unwrap_used)]

use tether_tests::cli::{block_on, get_bytes, tether, tether_lines, text, wait_output};
use tether_tests::{TestServer, WAIT};

#[test]
fn signals_to_tether_reach_the_remote_process() {
    let server = TestServer::start();
    // Lines arrive through a channel, so every wait is bounded.
    let (child, lines) = tether_lines(
        &server.base,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 0.05; done",
        ],
    );
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "got-int");
    let status = wait_output(child).status;
    assert_eq!(status.code(), Some(5));
}

/// `run --no-signals`: a signal to tether detaches it (exit 0, said on
/// stderr) and never reaches the process, which runs on.
#[test]
fn run_with_no_signals_detaches_on_a_signal_and_leaves_the_process_running() {
    let server = TestServer::start();
    let (child, lines) = tether_lines(
        &server.base,
        &[
            "run",
            "--no-signals",
            "--name",
            "unsignalled",
            "--",
            "sh",
            "-c",
            "trap 'echo got-int' INT; echo ready; while :; do sleep 0.05; done",
        ],
    );
    assert_eq!(lines.recv_timeout(WAIT).unwrap(), "ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("tether: detached"),
        "{}",
        text(&out.stderr)
    );
    let info = block_on(server.status("unsignalled"));
    assert!(!info.is_exited(), "{info:?}");
    let output = get_bytes(&server, "/v1/processes/unsignalled/output");
    assert_eq!(
        String::from_utf8_lossy(&output),
        "ready\n",
        "no signal reached it"
    );
    // Not with -d, which has no signals to handle.
    let out = tether(
        &server.base,
        &["run", "-d", "--no-signals", "--", "true"],
        b"",
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
}
