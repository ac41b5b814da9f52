//! Starting tetherd as a supervisor sees it: "listening on" is printed
//! only by a server that passed every check and serves, and every start
//! that fails is one line on stderr and exit status 1, never a backtrace,
//! whatever `RUST_BACKTRACE` says.

use std::process::{Command, Output};

use tether_tests::cli::poll;
use tether_tests::{binary, TestServer};

/// tetherd with `args` and `RUST_BACKTRACE=1` (as on many developers'
/// machines), bounded by `timeout` in case it were to start and serve.
fn start(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("20")
        .arg(binary("tetherd"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LOG", "error")
        .env_remove("TETHER_TOKEN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Asserts a refused start: status 1, nothing on stdout, and stderr's
/// reason in one `tetherd: ...` line with no stack frames. Returns it.
fn refused(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        !stdout.contains("listening on"),
        "announced a server that did not serve: {stdout}"
    );
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("Caused by"),
        "{stderr}"
    );
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tetherd: "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line only: {stderr}");
    lines[0].to_string()
}

#[test]
fn a_data_dir_it_cannot_lock_refuses_the_start_before_listening_is_announced() {
    let dir = std::env::temp_dir().join(format!("tether-startup-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = dir.join("tetherd.lock");
    let _ = std::fs::remove_file(&lock);
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let output = start(&[
        "--listen",
        "127.0.0.1:0",
        "--no-token",
        "--data-dir",
        dir.to_str().unwrap(),
    ]);
    let line = refused(&output);
    assert!(line.contains("tetherd.lock"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_address_in_use_is_one_line_without_a_backtrace() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let line = refused(&start(&["--listen", &address, "--no-token"]));
    assert!(line.contains(&address) || line.contains("in use"), "{line}");
}

#[test]
fn a_refused_token_choice_is_one_line_without_a_backtrace() {
    let line = refused(&start(&["--listen", "0.0.0.0:0", "--no-token"]));
    assert!(line.contains("refusing to listen"), "{line}");
}

/// The last link tetherd prints, the web terminal's, carries the token it
/// generated (as the `open:` line does), so the page a person opens from
/// it is let in.
#[test]
fn the_web_terminal_link_carries_the_generated_token() {
    let xdg = std::env::temp_dir().join(format!("tether-startup-web-{}", std::process::id()));
    let web = xdg.join("web");
    std::fs::create_dir_all(&web).unwrap();
    std::fs::write(web.join("index.html"), "<!doctype html>").unwrap();
    let server = tether_tests::TestServer::start_exact(
        &["--web-root", web.to_str().unwrap()],
        &[("XDG_RUNTIME_DIR", xdg.to_str().unwrap())],
        None,
    );
    // After "listening on": the token's place, `open:`, the web terminal.
    let lines: Vec<String> = (0..3).map(|_| server.next_stdout_line()).collect();
    let open = lines.iter().find(|l| l.starts_with("open: ")).unwrap();
    let token = open.split("#token=").nth(1).unwrap();
    let link = lines
        .iter()
        .find(|l| l.starts_with("web terminal: "))
        .unwrap();
    assert!(link.contains(&format!("/#token={token} ")), "{lines:?}");
    drop(server);
    std::fs::remove_dir_all(&xdg).unwrap();
}

/// The guard shows in `ps` as the server it guards, with the argument
/// that says what it is, not as `/proc/self/exe`.
#[test]
fn the_guard_shows_as_tetherd_in_ps() {
    let server = TestServer::start();
    let guard = poll("the guard among the server's children", || {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid != Some(server.pid()) {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let argv: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if argv.iter().any(|a| a == "__tether-guard") {
                return Ok(argv);
            }
        }
        Err("no child runs __tether-guard".to_string())
    });
    assert_eq!(guard, ["tetherd", "__tether-guard"]);
}
