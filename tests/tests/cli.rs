//! The `tether` CLI against a real tetherd: exit codes, streams, stdin,
//! the subcommands, and `run -t` driven through a real terminal (tmux).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tether_tests::cut::CuttingProxy;
use tether_tests::front::Front;
use tether_tests::{tether_binary, TestServer, WAIT};

/// `tether ARGS` against `server`, with `stdin` fed to it.
fn tether(server: &str, args: &[&str], stdin: &[u8]) -> Output {
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
fn tether_env(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
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
fn wait_output(child: std::process::Child) -> Output {
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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

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
fn subcommands_detach_wait_logs_ps_signal_kill() {
    let server = TestServer::start();
    let base = server.base.as_str();
    // A detached process that waits for a signal.
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--",
            "sh",
            "-c",
            "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.05; done",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert!(!id.is_empty());
    // Wait (bounded) until it is ready, through `logs`.
    let deadline = Instant::now() + WAIT;
    loop {
        let logs = tether(base, &["logs", &id], b"");
        if text(&logs.stdout) == "ready\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ready: {:?}",
            text(&logs.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ps = tether(base, &["ps"], b"");
    let ps_text = text(&ps.stdout);
    assert!(
        ps_text
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("running")),
        "{ps_text}"
    );
    let out = tether(base, &["signal", &id, "BOGUS"], b"");
    assert_eq!(out.status.code(), Some(125));
    let out = tether(base, &["signal", &id, "USR1"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("3", Some(3))
    );
    let logs = tether(base, &["logs", "--follow", &id], b"");
    assert_eq!(text(&logs.stdout), "ready\ngot-usr1\n");
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["exit_code"], 3);
    // Killing an exited process changes nothing; `rm` forgets it.
    let out = tether(base, &["kill", &id], b"");
    assert_eq!(out.status.code(), Some(0));
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (&info["exit_code"], &info["reason"]),
        (&json!(3), &json!("exit"))
    );
    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(0));
    let out = tether(base, &["status", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("not_found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn attach_replays_and_follows_a_running_process() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "-i",
            "--",
            "sh",
            "-c",
            "echo before; read x; echo after $x; exit 4",
        ],
        b"",
    );
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["attach", "-i", &id], b"now\n");
    assert_eq!(text(&out.stdout), "before\nafter now\n");
    assert_eq!(out.status.code(), Some(4));
}

/// A tmux server of its own, killed on drop.
struct Tmux {
    socket: String,
    dir: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "-f",
                self.dir.join("tmux.conf").to_str().unwrap(),
            ])
            .args(args)
            .output()
            .unwrap()
    }

    fn pane(&self) -> String {
        text(&self.cmd(&["capture-pane", "-p", "-t", "main"]).stdout)
    }

    fn pane_size(&self) -> String {
        let out = self.cmd(&[
            "display-message",
            "-p",
            "-t",
            "main",
            "#{pane_height} #{pane_width}",
        ]);
        text(&out.stdout).trim().to_string()
    }

    /// Polls (bounded) until the pane satisfies `done`.
    fn until(&self, what: &str, done: impl Fn(&str) -> bool) {
        poll(what, || {
            let pane = self.pane();
            if done(&pane) {
                Ok(())
            } else {
                Err(format!("never showed; pane:\n{pane}"))
            }
        })
    }

    /// Types `line` until the pane satisfies `done` (bounded): a line
    /// typed while `tether attach` still drops the terminal's replies to
    /// what it replayed (a few milliseconds after the replay shows) is
    /// discarded, not delayed.
    fn type_until(&self, line: &str, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.type_line(line);
            let retry = Instant::now() + Duration::from_secs(2);
            while Instant::now() < retry {
                if done(&self.pane()) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(
                Instant::now() < deadline,
                "{what} never showed; pane:\n{}",
                self.pane()
            );
        }
    }

    fn type_line(&self, line: &str) {
        self.cmd(&["send-keys", "-t", "main", "-l", line]);
        self.cmd(&["send-keys", "-t", "main", "Enter"]);
    }
}

impl Tmux {
    /// A detached tmux session running `tether run -t -- bash --norc -i`
    /// in a 100x30 window, recording the outer terminal's mode before and
    /// after (`stty -g`) and tether's exit status in files of `dir`.
    fn start(name: &str, server: &str, env: &str) -> (Tmux, PathBuf) {
        let tether = tether_binary();
        Tmux::start_script(name, |d| {
            format!(
                "stty -g > {d}/before; {env} TETHER_SERVER={server} {tether} run -t --env 'PS1=prompt> ' -- bash --norc -i; echo $? > {d}/rc; stty -g > {d}/after; exec sleep 600",
                tether = tether.display(),
            )
        })
    }

    /// A detached tmux session (100x30) running the shell script that
    /// `script` makes from the session's directory.
    fn start_script(name: &str, script: impl FnOnce(&str) -> String) -> (Tmux, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tether-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tmux.conf"), "set -g status off\n").unwrap();
        let tmux = Tmux {
            socket: format!("tether-test-{name}-{}", std::process::id()),
            dir: dir.clone(),
        };
        let script = script(&dir.display().to_string());
        let out = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "100",
            "-y",
            "30",
            &script,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (tmux, dir)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_file(path: &Path) -> String {
    poll(
        &path.display().to_string(),
        || match std::fs::read_to_string(path) {
            Ok(content) if content.ends_with('\n') => Ok(content),
            _ => Err("never written".to_string()),
        },
    )
}

/// Polls `probe` every 50 ms until it gives a value, for at most [`WAIT`]:
/// for what has no event to wait on (a tmux pane, a file a shell writes).
/// The panic names `what` and the probe's last word.
fn poll<T>(what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "{what}: {last}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn run_t_drives_an_interactive_shell_in_a_real_terminal() {
    let server = TestServer::start();
    let (tmux, dir) = Tmux::start("shell", &server.base, "");
    tmux.until("the prompt", |p| p.contains("prompt>"));

    tmux.type_line("echo $((6*7))");
    tmux.until("42", |p| p.lines().any(|l| l.trim() == "42"));
    // Raw mode: only the remote terminal echoes what is typed.
    assert_eq!(
        tmux.pane().matches("echo $((6*7))").count(),
        1,
        "{}",
        tmux.pane()
    );

    // The PTY has the size of the outer terminal, and follows its resizes.
    let size = tmux.pane_size();
    tmux.type_line("stty size");
    tmux.until("the initial size", |p| p.lines().any(|l| l.trim() == size));
    tmux.cmd(&["resize-window", "-t", "main", "-x", "120", "-y", "40"]);
    let resized = tmux.pane_size();
    assert_ne!(resized, size);
    // The resize travels as SIGWINCH -> resize frame; the typed command
    // may overtake it, so type again until the new size shows (bounded).
    let deadline = Instant::now() + WAIT;
    loop {
        tmux.type_line("clear; stty size");
        let until = Instant::now() + Duration::from_secs(2);
        let mut seen = false;
        while Instant::now() < until {
            if tmux.pane().lines().any(|l| l.trim() == resized) {
                seen = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if seen {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "size never became {resized}:\n{}",
            tmux.pane()
        );
    }

    // Ctrl-C reaches the remote foreground job, not tether. (Wait until
    // the job runs: a 0x03 in the same burst as the Enter that starts it
    // would make the remote line discipline flush that Enter.)
    tmux.type_line("echo sleeping; sleep 100");
    tmux.until("the job", |p| p.lines().any(|l| l.trim() == "sleeping"));
    tmux.cmd(&["send-keys", "-t", "main", "C-c"]);
    tmux.type_line("echo alive-$((1+1))");
    tmux.until("the shell after Ctrl-C", |p| {
        p.contains("alive-2\n") || p.lines().any(|l| l.trim() == "alive-2")
    });

    tmux.type_line("exit 3");
    assert_eq!(wait_file(&dir.join("rc")), "3\n");
    let before = wait_file(&dir.join("before"));
    let after = wait_file(&dir.join("after"));
    assert_eq!(before, after, "terminal mode restored");
}

#[test]
fn the_token_comes_from_the_flag_or_the_environment() {
    let server = TestServer::start_with(&["--token", "s3cret"]);
    let out = tether_env(&server.base, &["ps"], &[]);
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("401") && stderr.contains("--token"),
        "{stderr}"
    );
    let out = tether_env(&server.base, &["--token", "s3cret", "ps"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The attachment (a WebSocket) carries it too.
    let out = tether_env(
        &server.base,
        &["run", "--", "sh", "-c", "echo authorised; exit 2"],
        &[("TETHER_TOKEN", "s3cret")],
    );
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("authorised\n", Some(2))
    );
}

#[test]
fn signals_to_tether_reach_the_remote_process() {
    use std::io::{BufRead, BufReader};
    let server = TestServer::start();
    let mut child = Command::new(tether_binary())
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 0.05; done",
        ])
        .env("TETHER_SERVER", &server.base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Lines arrive through a channel, so every wait is bounded.
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
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

#[test]
fn a_panic_in_raw_mode_restores_the_terminal() {
    let server = TestServer::start();
    let (_tmux, dir) = Tmux::start("panic", &server.base, "TETHER_TEST_PANIC_IN_RAW_MODE=1");
    assert_eq!(wait_file(&dir.join("rc")), "101\n", "tether panicked");
    let before = wait_file(&dir.join("before"));
    let after = wait_file(&dir.join("after"));
    assert_eq!(before, after, "terminal mode restored after the panic");
}

/// Runs an async harness call from these synchronous tests.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// `tether ARGS` left running, with its stdout lines on a channel (so
/// every wait for one is bounded) and its stderr piped.
fn tether_lines(
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
fn ps(server: &str) -> Vec<serde_json::Value> {
    let out = tether(server, &["ps", "--json"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn argument_errors_exit_125_with_the_usage_and_start_nothing() {
    let server = TestServer::start();
    let cases: [(&[&str], &str); 5] = [
        (
            &["run", "--timeout", "1", "--", "sleep", "3"],
            "Usage: tether run",
        ),
        (&["bogus"], "Usage: tether"),
        (&["run"], "Usage: tether run"),
        (&["attach"], "Usage: tether attach"),
        (
            &["run", "--detach-keys", "ctrl-1", "--", "true"],
            "Usage: tether run",
        ),
    ];
    for (args, usage) in cases {
        let out = tether(&server.base, args, b"");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(stderr.contains(usage), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    assert!(
        ps(&server.base).is_empty(),
        "a bad command line started something"
    );
}

#[test]
fn help_says_what_the_cli_does() {
    let out = tether("http://127.0.0.1:1", &["--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(
        help.starts_with("Run commands on a tetherd server and attach to them"),
        "{help}"
    );
    for needle in ["tether run -t -- bash", "Ctrl-P Ctrl-Q", "126", "127"] {
        assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
    }
    let out = tether("http://127.0.0.1:1", &["run", "--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--detach-keys"));
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
fn ids_may_be_shortened_to_any_unique_prefix() {
    let server = TestServer::start();
    let base = server.base.as_str();
    // Seventeen ids: two of them share a first hex digit.
    let ids: Vec<String> = (0..17)
        .map(|i| {
            let out = tether(
                base,
                &["run", "-d", "--", "sh", "-c", &format!("echo p{i}")],
                b"",
            );
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            text(&out.stdout).trim().to_string()
        })
        .collect();
    let matching = |prefix: &str| ids.iter().filter(|id| id.starts_with(prefix)).count();

    // The shortest prefix of the first id that no other id shares.
    let id = &ids[0];
    let prefix = (1..=id.len())
        .map(|n| &id[..n])
        .find(|p| matching(p) == 1)
        .unwrap();
    let out = tether(base, &["wait", prefix], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("0", Some(0))
    );
    let out = tether(base, &["logs", prefix], b"");
    assert_eq!(text(&out.stdout), "p0\n");
    let out = tether(base, &["status", prefix], b"");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["id"], id.as_str());

    // A prefix of several ids is refused, listing them.
    let shared = ids
        .iter()
        .map(|id| &id[..1])
        .find(|p| matching(p) > 1)
        .unwrap();
    let out = tether(base, &["status", shared], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ambiguous"), "{stderr}");
    for candidate in ids.iter().filter(|id| id.starts_with(shared)) {
        assert!(
            stderr.contains(candidate.as_str()),
            "{candidate} not listed: {stderr}"
        );
    }
    assert!(out.stdout.is_empty());

    // No match at all is the server's 404.
    let out = tether(base, &["status", "nothex"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("not_found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn detach_keys_leave_the_process_running_and_attach_resumes_it() {
    let server = TestServer::start();
    let tether = tether_binary();
    let base = server.base.clone();
    // run -t, detached with Ctrl-P Ctrl-Q; then attach by an 8-character
    // prefix with other keys (Ctrl-X), detached again; then attach again
    // and exit the shell.
    let (tmux, dir) = Tmux::start_script("detach", |d| {
        format!(
            "stty -g > {d}/before; export TETHER_SERVER={base}; \
             {t} run -t --env 'PS1=prompt> ' -- bash --norc -i 2> {d}/detached; echo $? > {d}/rc1; \
             id=$(sed -n 's/.*tether attach \\([0-9a-f]*\\).*/\\1/p' {d}/detached | cut -c1-8); \
             {t} attach --detach-keys ctrl-x $id; echo $? > {d}/rc2; \
             {t} attach $id; echo $? > {d}/rc3; stty -g > {d}/after; exec sleep 600",
            t = tether.display(),
        )
    });
    tmux.until("the prompt", |p| p.contains("prompt>"));
    tmux.type_line("echo one-$((1+1))");
    tmux.until("one-2", |p| p.lines().any(|l| l.trim() == "one-2"));

    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    assert_eq!(wait_file(&dir.join("rc1")), "0\n", "a detach exits 0");
    let message = std::fs::read_to_string(dir.join("detached")).unwrap();
    let id = message
        .split("tether attach ")
        .nth(1)
        .map(|rest| rest.trim_end_matches(|c: char| !c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no re-attach hint in {message:?}"))
        .to_string();
    assert_eq!(id.len(), 32, "{message}");
    let info = block_on(server.status(&id));
    assert!(!info.is_exited(), "the process was ended by the detach");

    // Re-attached (by prefix): the terminal shows the shell's screen, which
    // replaces the detach message (so the attachment is live and the
    // terminal raw; typed earlier, a line would be flushed by the switch
    // to raw mode), and the shell takes input again.
    let reattached = |p: &str, line: &str| {
        !p.contains("tether: detached") && p.lines().any(|l| l.trim() == line)
    };
    tmux.until("the screen", |p| reattached(p, "one-2"));
    tmux.type_until("echo two-$((2+2))", "two-4", |p| {
        p.lines().any(|l| l.trim() == "two-4")
    });
    tmux.cmd(&["send-keys", "-t", "main", "C-x"]);
    assert_eq!(wait_file(&dir.join("rc2")), "0\n", "--detach-keys ctrl-x");
    assert!(!block_on(server.status(&id)).is_exited());

    tmux.until("the second screen", |p| reattached(p, "two-4"));
    tmux.type_until("echo three-$((3+3)); exit 5", "the exit", |_| {
        dir.join("rc3").exists()
    });
    assert_eq!(wait_file(&dir.join("rc3")), "5\n");
    assert!(tmux.pane().lines().any(|l| l.trim() == "three-6"));
    assert_eq!(
        wait_file(&dir.join("before")),
        wait_file(&dir.join("after")),
        "terminal mode restored"
    );
}

/// The modes a terminal program turns on, as tmux sees them in the pane:
/// alternate screen, mouse reporting (any, SGR), application cursor keys,
/// application keypad, and the cursor shown (1) or hidden (0).
fn pane_modes(tmux: &Tmux) -> String {
    let out = tmux.cmd(&[
        "display-message",
        "-p",
        "-t",
        "main",
        "#{alternate_on} #{mouse_any_flag} #{mouse_sgr_flag} #{keypad_cursor_flag} #{keypad_flag} #{cursor_flag}",
    ]);
    text(&out.stdout).trim().to_string()
}

/// Polls (bounded) until the pane's modes are `expected`: tmux reads what
/// was written to the pane a moment after the writer may have exited.
fn until_modes(tmux: &Tmux, expected: &str, what: &str) {
    poll(what, || match pane_modes(tmux) {
        modes if modes == expected => Ok(()),
        modes => Err(format!(
            "modes {modes:?}, not {expected:?}; pane:\n{}",
            tmux.pane()
        )),
    })
}

/// A program that is still on the alternate screen with the mouse and
/// application keys on when the user detaches (vim, less), or one killed
/// before it cleaned up, would leave the user's own shell getting escape
/// sequences for every click and arrow key: tether gives the terminal its
/// usual modes back at the end of the session.
#[test]
fn detaching_or_a_killed_program_gives_the_local_terminal_its_modes_back() {
    let server = TestServer::start();
    let tether = tether_binary();
    let base = server.base.clone();
    const NORMAL: &str = "0 0 0 0 0 1";
    const TUI: &str = "1 1 1 1 1 0";
    let (tmux, dir) = Tmux::start_script("modes", |d| {
        // The TUI's modes, then a line to wait for; the second run kills
        // itself once told to, without cleaning up.
        let modes = r"\033[?1049h\033[?1000h\033[?1006h\033[?1h\033=\033[?2004h\033[?25l";
        std::fs::write(
            format!("{d}/tui.sh"),
            format!("printf '{modes}TUI-UP\\n'; exec sleep 600\n"),
        )
        .unwrap();
        std::fs::write(
            format!("{d}/dies.sh"),
            format!("printf '{modes}DYING\\n'; read line; kill -9 $$\n"),
        )
        .unwrap();
        format!(
            "export TETHER_SERVER={base}; echo SHELL-READY; \
             {t} run -t -- sh {d}/tui.sh 2> {d}/detached; echo $? > {d}/rc1; read go; \
             {t} run -t -- sh {d}/dies.sh 2> {d}/died; echo $? > {d}/rc2; exec sleep 600",
            t = tether.display(),
        )
    });
    tmux.until("the program", |p| p.contains("TUI-UP"));
    until_modes(&tmux, TUI, "the program set its modes");
    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    assert_eq!(wait_file(&dir.join("rc1")), "0\n", "a detach exits 0");
    until_modes(&tmux, NORMAL, "after the detach");
    tmux.cmd(&["send-keys", "-t", "main", "Enter"]);
    tmux.until("the second program", |p| p.contains("DYING"));
    until_modes(&tmux, TUI, "the second program set them");
    tmux.cmd(&["send-keys", "-t", "main", "Enter"]);
    assert_eq!(wait_file(&dir.join("rc2")), "137\n", "killed by SIGKILL");
    until_modes(&tmux, NORMAL, "after the killed program");
    // The shell's screen is back, with what was on it before the runs.
    tmux.until("the shell's screen", |p| p.contains("SHELL-READY"));
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
fn kill_keeps_the_process_for_wait_and_logs_until_rm_forgets_it() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &["run", "-d", "--", "sh", "-c", "echo started; exec sleep 60"],
        b"",
    );
    let id = text(&out.stdout).trim().to_string();
    let deadline = Instant::now() + WAIT;
    while text(&tether(base, &["logs", &id], b"").stdout) != "started\n" {
        assert!(Instant::now() < deadline, "never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A running process is not forgotten without -f.
    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("still_running"),
        "{}",
        text(&out.stderr)
    );

    let out = tether(base, &["kill", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // As after `docker kill`: SIGKILL, and wait reports 137.
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("137", Some(137))
    );
    let out = tether(base, &["logs", &id], b"");
    assert_eq!(text(&out.stdout), "started\n");
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (info["reason"].as_str(), info["signal"].as_str()),
        (Some("killed"), Some("KILL"))
    );

    let out = tether(base, &["rm", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["status", &id], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("not_found"));

    // rm -f kills and forgets a running one.
    let out = tether(base, &["run", "-d", "--", "sleep", "60"], b"");
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["rm", "-f", &id], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(ps(base).iter().all(|p| p["id"] != id.as_str()));
}

#[test]
fn a_name_works_wherever_an_id_does() {
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
            "echo serving; exec sleep 60",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let status = tether(base, &["status", "web"], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (info["id"].as_str(), info["name"].as_str()),
        (Some(id.as_str()), Some("web"))
    );
    let ps_text = text(&tether(base, &["ps"], b"").stdout);
    assert!(
        ps_text
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" web ")),
        "{ps_text}"
    );
    // Unique among known processes.
    let out = tether(base, &["run", "-d", "--name", "web", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("name_taken"),
        "{}",
        text(&out.stderr)
    );
    let out = tether(base, &["kill", "web"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tether(base, &["wait", "web"], b"");
    assert_eq!(out.status.code(), Some(137));
    let out = tether(base, &["logs", "web"], b"");
    assert_eq!(text(&out.stdout), "serving\n");
    let out = tether(base, &["rm", "web"], b"");
    assert_eq!(out.status.code(), Some(0));
    // Forgotten, the name is free again.
    let out = tether(base, &["run", "--name", "web", "--", "echo", "again"], b"");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("again\n", Some(0))
    );
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

#[test]
fn an_unattached_timeout_ends_a_process_nobody_attaches_to() {
    let server = TestServer::start();
    let base = server.base.as_str();
    let out = tether(
        base,
        &[
            "run",
            "-d",
            "--unattached-timeout",
            "300ms",
            "--",
            "sleep",
            "30",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = tether(base, &["wait", &id], b"");
    assert_eq!(out.status.code(), Some(143));
    let status = tether(base, &["status", &id], b"");
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["reason"], "unattached");
}

/// The body of `GET path` (a 200).
fn get_bytes(server: &TestServer, path: &str) -> Vec<u8> {
    block_on(async {
        let response = server.http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.bytes().await.unwrap().to_vec()
    })
}

/// The id in the "re-attach with: tether attach ID" line of a detach.
fn detached_id(path: &Path) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let message = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(rest) = message.split("tether attach ").nth(1) {
            let id: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            if id.len() == 32 {
                return id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no re-attach hint in {message:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A tmux session running a PTY shell with `tether run -t` (extra `run`
/// flags in `flags`), then, after each detach (its message goes to
/// `detached1..3`), printing `between-N` and waiting for the file `goN`
/// before `tether attach`, twice.
fn shell_attached_three_times(name: &str, server: &str, flags: &str) -> (Tmux, PathBuf) {
    let tether = tether_binary();
    Tmux::start_script(name, |d| {
        let attach = |n: u32| {
            format!(
                "echo between-{n}; until [ -e {d}/go{n} ]; do sleep 0.05; done; \
                 {t} attach $id 2> {d}/detached{next}; ",
                t = tether.display(),
                next = n + 1,
            )
        };
        format!(
            "export TETHER_SERVER={server}; \
             {t} run -t {flags} --env 'PS1=prompt> ' --env TERM=xterm-256color -- bash --norc -i 2> {d}/detached1; \
             id=$(sed -n 's/.*tether attach \\([0-9a-f]*\\).*/\\1/p' {d}/detached1); \
             {a1}{a2}echo $? > {d}/rc; exec sleep 600",
            t = tether.display(),
            a1 = attach(1),
            a2 = attach(2),
        )
    })
}

/// Detaches (Ctrl-P Ctrl-Q) attachment `n` and attaches again; returns
/// the id from the detach message once the new attachment has rendered
/// what it replays: the screen (its reset wipes `between-N` from the pane)
/// or the retained bytes (the shell's last prompt follows `between-N`).
fn detach_and_reattach(tmux: &Tmux, dir: &Path, n: u32) -> String {
    tmux.cmd(&["send-keys", "-t", "main", "C-p", "C-q"]);
    let id = detached_id(&dir.join(format!("detached{n}")));
    let between = format!("between-{n}");
    tmux.until(&between, |p| p.contains(&between));
    std::fs::write(dir.join(format!("go{n}")), "").unwrap();
    tmux.until("the replay", |p| {
        let after = p.rsplit(&between).next().unwrap_or(p);
        after
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::trim)
            == Some("prompt>")
            && (!p.contains(&between) || after.lines().count() > 2)
    });
    id
}

/// Types a line that proves the shell has read nothing but what was typed:
/// anything injected before it turns `read` into another command (exit 127)
/// and a reply arriving later is what `read` gets; with nothing injected,
/// `read` times out (exit 142) with nothing read.
fn assert_nothing_was_injected(tmux: &Tmux, tag: &str) {
    let line = format!("read -t 1 x; echo \"{tag}[$x] rc[$?]\"");
    tmux.type_until(&line, tag, |p| {
        p.lines().any(|l| l.starts_with(&format!("{tag}[")))
    });
    let pane = tmux.pane();
    assert!(
        pane.lines().any(|l| l.trim() == format!("{tag}[] rc[142]")),
        "the shell read input nobody typed:\n{pane}"
    );
    assert!(
        pane.lines().any(|l| l.trim() == format!("prompt> {line}")),
        "the command line was not what was typed:\n{pane}"
    );
}

#[test]
fn reattaching_after_vim_types_nothing_into_the_shell() {
    // From the screen (which carries no query): only the bytes after it
    // are replayed.
    vim_then_reattach_twice("replies-screen", &[], "");
}

#[test]
fn reattaching_after_vim_by_replaying_its_bytes_types_nothing_into_the_shell() {
    // Without screens every retained byte is replayed, vim's queries too:
    // the terminal answers them, and tether must drop the answers.
    vim_then_reattach_twice("replies-bytes", &["--no-screen"], "");
}

#[test]
fn reattaching_after_vim_in_drop_mode_types_nothing_into_the_shell() {
    vim_then_reattach_twice("replies-drop", &[], "--drop");
    vim_then_reattach_twice("replies-drop-bytes", &["--no-screen"], "--drop");
}

fn vim_then_reattach_twice(name: &str, server_args: &[&str], run_flags: &str) {
    let server = TestServer::start_with(server_args);
    let (tmux, dir) = shell_attached_three_times(name, &server.base, run_flags);
    tmux.until("the prompt", |p| p.contains("prompt>"));
    // vim asks the terminal for its version, cursor position, colours...:
    // queries that stay in the retained output.
    tmux.type_line("vim -N -u NONE -i NONE");
    tmux.until("vim", |p| p.contains("VIM - Vi IMproved"));
    tmux.type_line(":q");
    tmux.until("the shell after vim", |p| {
        p.lines().filter(|l| l.trim() == "prompt>").count() == 1
    });
    let id = detach_and_reattach(&tmux, &dir, 1);
    let output = get_bytes(&server, &format!("/v1/processes/{id}/output"));
    let queries = [&b"\x1b[>c"[..], b"\x1b[6n", b"\x1b]11;?", b"$p"];
    assert!(
        queries
            .iter()
            .any(|q| output.windows(q.len()).any(|w| w == *q)),
        "vim wrote no terminal query, the test proves nothing: {:?}",
        String::from_utf8_lossy(&output)
    );
    assert_nothing_was_injected(&tmux, "round1");
    assert_eq!(detach_and_reattach(&tmux, &dir, 2), id);
    assert_nothing_was_injected(&tmux, "round2");
    tmux.type_line("exit 7");
    assert_eq!(wait_file(&dir.join("rc")), "7\n");
}

#[test]
fn attach_to_a_pty_whose_start_was_evicted_shows_its_screen() {
    let server = TestServer::start();
    let (tmux, dir) = shell_attached_three_times("evicted", &server.base, "--retain 4096");
    tmux.until("the prompt", |p| p.contains("prompt>"));
    // Colours, a title, and far more than the retention: the start of the
    // output (the first prompt) is evicted.
    tmux.type_line(
        "printf '\\033]0;evicted title\\007'; seq 1 3000; printf '\\033[1;31mred\\033[0m\\n'",
    );
    tmux.until("the output", |p| p.lines().any(|l| l.trim() == "red"));
    let id = detach_and_reattach(&tmux, &dir, 1);
    let info = block_on(server.status(&id));
    assert!(info.stdout_bytes > 3 * 4096, "{}", info.stdout_bytes);

    let screen = || {
        let text = get_bytes(&server, &format!("/v1/processes/{id}/screen"));
        String::from_utf8_lossy(&text).into_owned()
    };
    let expected = screen();
    assert!(expected.contains("2999\n3000\nred\n"), "{expected}");
    // The pane is the screen, row for row, with no notice of lost bytes.
    let rows = |text: &str| -> Vec<String> {
        let mut rows: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
        while rows.last().is_some_and(String::is_empty) {
            rows.pop();
        }
        rows
    };
    tmux.until("the screen in the pane", |p| rows(p) == rows(&expected));
    assert!(!tmux.pane().contains("lost at offset"));
    let title = tmux.cmd(&["display-message", "-p", "-t", "main", "#{pane_title}"]);
    assert_eq!(text(&title.stdout).trim(), "evicted title");
    tmux.type_until("echo \"after[$((2+3))]\"", "the shell takes input", |p| {
        p.lines().any(|l| l.trim() == "after[5]")
    });
    assert!(rows(&screen()).contains(&"after[5]".to_string()));
}

// `tether run` starts and attaches in one WebSocket (`GET /v1/run`).

/// A [`Front`] before `server`: it records each connection's request.
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
