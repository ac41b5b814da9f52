//! Running the `tether` CLI from synchronous tests: a command's output
//! (every wait bounded by [`WAIT`]), its stdout lines as they come, and
//! bounded polls for what has no event to wait on (files a shell writes).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::{settle_blocking, tether_binary, TestServer, WAIT};

/// `tether ARGS` against `server`, with `stdin` fed to it.
pub fn tether(server: &str, args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(tether_binary())
        .args(args)
        .env("TETHER_SERVER", server)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let output = wait_output(child);
    writer.join().unwrap();
    output
}

/// `tether ARGS` with extra environment variables.
pub fn tether_env(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(tether_binary());
    command
        .args(args)
        .env("TETHER_SERVER", server)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    wait_output(command.spawn().unwrap())
}

/// Waits for a child, bounded by [`WAIT`].
pub fn wait_output(child: std::process::Child) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("tether did not finish within {WAIT:?}");
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs an async harness call from these synchronous tests.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// `tether ARGS` left running, with its stdout lines on a channel (so
/// every wait for one is bounded) and its stderr piped.
pub fn tether_lines(
    server: &str,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(tether_binary())
        .args(args)
        .env("TETHER_SERVER", server)
        .env_remove("TETHER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    (child, lines)
}

/// The process objects `tether ps --json` lists.
pub fn ps(server: &str) -> Vec<serde_json::Value> {
    let out = tether(server, &["ps", "--json"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The body of `GET path` (a 200).
pub fn get_bytes(server: &TestServer, path: &str) -> Vec<u8> {
    block_on(async {
        let response = server.http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.bytes().await.unwrap().to_vec()
    })
}

/// Polls `probe` through the harness's [`settle_blocking`] (bounded by [`WAIT`])
/// until it gives a value: for what has no event to wait on (a tmux pane,
/// a file a shell writes). The panic names `what` and the probe's last word.
pub fn poll<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    match settle_blocking(WAIT, probe, Result::is_ok) {
        Ok(value) => value,
        Err(last) => panic!("{what}: {last}"),
    }
}

/// The content of the file `path` once a shell has written a whole line
/// to it (bounded).
pub fn wait_file(path: &Path) -> String {
    poll(
        &path.display().to_string(),
        || match std::fs::read_to_string(path) {
            Ok(content) if content.ends_with('\n') => Ok(content),
            _ => Err("never written".to_string()),
        },
    )
}
