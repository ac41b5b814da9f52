//! The shared harness of the black-box tests: [`TestServer`] starts the real
//! `tetherd` binary on an ephemeral loopback port and stops it on drop;
//! [`Attachment`] is a small WebSocket client that speaks `tether.v1`.
//! Every wait is bounded by [`WAIT`]; nothing sleeps to synchronise.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::ProcessInfo;

pub use tether_protocol;

mod attachment;
pub mod cli;
pub mod cut;
pub mod front;
pub mod hostile;
pub mod nginx;
pub mod pki;
mod poll;
mod procfs;
pub mod rust_client;
pub mod scoped;
pub mod tmux;
pub mod xterm;

pub use attachment::{refused_attach, Attachment, Received};
pub use poll::{settle, settle_async, settle_blocking, settle_within};
pub use procfs::*;

/// The bound on every wait in the tests.
pub const WAIT: Duration = Duration::from_secs(20);

/// Path of a workspace binary (`tetherd` or `tether`), built once per test
/// run if needed: `cargo test` builds the test crate, not other packages'
/// binaries, so the harness builds them (a no-op when up to date).
///
/// It builds every binary of the workspace, as `cargo build --workspace
/// --bins` does (and `./scripts/test.sh` before the tests): one package
/// alone would unify its dependencies' features differently and build a
/// second copy of them all, a minute of every CI run.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    if !matches!(name, "tetherd" | "tether" | "hostile-call") {
        panic!("unknown binary {name}");
    }
    BUILT.get_or_init(|| {
        let mut cargo = Command::new(env!("CARGO"));
        // Without the variables cargo set for this test crate: build
        // scripts that track them (ring's tracks CARGO_PKG_NAME and
        // CARGO_MANIFEST_DIR) would otherwise see a change, rebuild here,
        // and again in the next `cargo test`.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(set_by_cargo_for_a_crate) {
                cargo.env_remove(key);
            }
        }
        let status = cargo
            .args(["build", "--quiet", "--workspace", "--bins"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --workspace --bins failed");
    });
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/debug/<name>
    exe.parent().unwrap().parent().unwrap().join(name)
}

/// True for the variables cargo sets for the crate it runs (a test or a
/// build script), as opposed to those a user sets to configure cargo.
pub fn set_by_cargo_for_a_crate(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || key.starts_with("CARGO_BIN_")
        || matches!(
            key,
            "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// The tetherd under test: `TETHER_TEST_TETHERD` if set (to show that a
/// test fails against another build), else this workspace's.
pub fn tetherd_binary() -> PathBuf {
    match std::env::var_os("TETHER_TEST_TETHERD") {
        Some(path) => PathBuf::from(path),
        None => binary("tetherd"),
    }
}

/// A loopback port that nothing listens on (bound, then let go): for a
/// server to listen on, or for a client to find no server at.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local_addr").port()
}

/// The `tether` CLI under test: `TETHER_TEST_TETHER` if set (to show that
/// a test fails against another build), else this workspace's.
pub fn tether_binary() -> PathBuf {
    match std::env::var_os("TETHER_TEST_TETHER") {
        Some(path) => PathBuf::from(path),
        None => binary("tether"),
    }
}

/// Raises this test process's own open-file limit to at least `want`
/// (as root, the hard limit too), for tests that open many sockets.
pub fn raise_own_fd_limit(want: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft >= want {
        return;
    }
    let hard = hard.max(want);
    setrlimit(Resource::RLIMIT_NOFILE, want, hard)
        .expect("raise the test's own open-file limit (needs root past the hard limit)");
}

/// How the harness starts tetherd, beyond its flags.
#[derive(Default)]
struct Launch<'a> {
    /// `--listen` (default `127.0.0.1:0`).
    listen: Option<&'a str>,
    /// A program tetherd runs under, such as `unshare --pid --fork`.
    wrapper: &'a [&'a str],
    /// RLIMIT_NOFILE (soft, hard) to start it with.
    fd_limit: Option<(u64, u64)>,
    /// Exactly the flags given: no `--no-token` added when they give no
    /// token (see [`TestServer::start_exact`]).
    exact: bool,
    /// Where tetherd's stderr goes (default: inherited).
    stderr: Option<&'a std::path::Path>,
    /// No `--data-dir` added: tetherd makes its private default directory
    /// (under `TMPDIR`), as an operator who gives none gets.
    private: bool,
    /// Another tetherd than this workspace's (an older build).
    binary: Option<&'a std::path::Path>,
}

/// A running `tetherd` on an ephemeral port; killed on drop. Unless the
/// flags name one (or `--memory-only`, or it is started with
/// [`TestServer::start_private`]), it gets a `--data-dir` of its own,
/// removed on drop: a killed server cannot remove its private one.
pub struct TestServer {
    child: Child,
    data_dir: Option<PathBuf>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub http: reqwest::Client,
    stdout: std::sync::Mutex<std::sync::mpsc::Receiver<String>>,
}

impl TestServer {
    /// Starts tetherd with default flags.
    pub fn start() -> TestServer {
        TestServer::start_with(&[])
    }

    /// Starts tetherd with extra flags.
    pub fn start_with(args: &[&str]) -> TestServer {
        TestServer::start_with_env(args, &[])
    }

    /// Starts tetherd with extra flags and environment variables. Unless
    /// the flags or environment give a token, the server runs with
    /// `--no-token` (tests that are not about tokens); see
    /// [`TestServer::start_exact`] for a server left to its secure default.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> TestServer {
        TestServer::launch(&Launch::default(), args, env)
    }

    /// Starts tetherd listening on `listen` (an address with port 0 for an
    /// ephemeral one), with extra flags and environment variables.
    pub fn start_at(listen: &str, args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let how = Launch {
            listen: Some(listen),
            ..Launch::default()
        };
        TestServer::launch(&how, args, env)
    }

    /// Starts tetherd as the last argument of `wrapper` (such as
    /// `unshare --pid --fork`); `pid()` is then the wrapper's.
    pub fn start_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let how = Launch {
            wrapper,
            ..Launch::default()
        };
        TestServer::launch(&how, args, env)
    }

    /// Starts tetherd without a `--data-dir`, so that it retains to its
    /// private default directory (under `TMPDIR`, which `env` may set).
    pub fn start_private(args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let how = Launch {
            private: true,
            ..Launch::default()
        };
        TestServer::launch(&how, args, env)
    }

    /// [`TestServer::start_private`] as the last argument of `wrapper`
    /// (such as `unshare --pid --fork`).
    pub fn start_private_wrapped(
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> TestServer {
        let how = Launch {
            wrapper,
            private: true,
            ..Launch::default()
        };
        TestServer::launch(&how, args, env)
    }

    /// Starts tetherd under an open-file limit of `soft` (and `hard`), as
    /// systemd's default of 1024 would.
    pub fn start_with_fd_limit(args: &[&str], soft: u64, hard: u64) -> TestServer {
        let how = Launch {
            fd_limit: Some((soft, hard)),
            ..Launch::default()
        };
        TestServer::launch(&how, args, &[])
    }

    /// Starts tetherd with exactly these flags (plus an ephemeral loopback
    /// `--listen` unless they name one), `RUST_LOG=warn` unless `env` sets
    /// it, and its stderr into the file `stderr` if given.
    pub fn start_exact(
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Option<&std::path::Path>,
    ) -> TestServer {
        let how = Launch {
            exact: true,
            stderr,
            ..Launch::default()
        };
        TestServer::launch(&how, args, env)
    }

    /// Starts another tetherd than this workspace's (an older build),
    /// with extra flags.
    pub fn start_binary(binary: &std::path::Path, args: &[&str]) -> TestServer {
        let how = Launch {
            binary: Some(binary),
            ..Launch::default()
        };
        TestServer::launch(&how, args, &[])
    }

    fn launch(how: &Launch<'_>, args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let tetherd = how
            .binary
            .map_or_else(tetherd_binary, std::path::Path::to_path_buf);
        let has_token = args
            .iter()
            .any(|a| *a == "--token" || a.starts_with("--token=") || *a == "--token-file")
            || env.iter().any(|(k, _)| *k == "TETHER_TOKEN");
        let mut args = args.to_vec();
        let mut env = env.to_vec();
        if !how.exact && !has_token {
            args.push("--no-token");
            // Its start-up warning is expected here; other warnings still show.
            if !env.iter().any(|(k, _)| *k == "RUST_LOG") {
                env.push(("RUST_LOG", "warn,tetherd=error"));
            }
        }
        let mut command = match how.wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(&tetherd);
                command
            }
            None => Command::new(&tetherd),
        };
        if !args.contains(&"--listen") {
            command.args(["--listen", how.listen.unwrap_or("127.0.0.1:0")]);
        }
        let data_dir = (!how.private
            && !args
                .iter()
                .any(|a| *a == "--data-dir" || *a == "--memory-only"))
        .then(fresh_dir);
        if let Some(dir) = &data_dir {
            command.arg("--data-dir").arg(dir);
        }
        command
            .args(args)
            .env_remove("TETHER_TOKEN")
            .env_remove("TETHER_TOKEN_FILE")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(match how.stderr {
                Some(path) => {
                    Stdio::from(std::fs::File::create(path).expect("create the stderr file"))
                }
                None => Stdio::inherit(),
            });
        if let Some((soft, hard)) = how.fd_limit {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches no memory
            // of the parent.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        soft,
                        hard,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        let mut child = command.spawn().expect("start tetherd");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("tetherd listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from tetherd: {line:?}"))
            .to_string();
        // The rest of stdout (the token's file and URL, when generated),
        // read as it comes so the server never blocks on a full pipe.
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
        TestServer {
            child,
            data_dir,
            base: addr,
            // Never reuse a connection the server may be closing: its
            // keep-alive idle bound is --header-timeout-ms (10 s), and a
            // test that blocks on a child process can leave one idle that
            // long (hyper then reports IncompleteMessage).
            http: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
            stdout: std::sync::Mutex::new(lines),
        }
    }

    /// The next line tetherd printed after its address (bounded by [`WAIT`]).
    pub fn next_stdout_line(&self) -> String {
        self.stdout
            .lock()
            .unwrap()
            .recv_timeout(WAIT)
            .expect("tetherd printed no further line in time")
    }

    /// [`TestServer::next_stdout_line`] for async tests: the runtime runs
    /// meanwhile (a connection the server closed is seen closed).
    pub async fn next_stdout_line_async(&self) -> String {
        settle(
            || self.stdout.lock().unwrap().try_recv().ok(),
            Option::is_some,
        )
        .await
        .expect("tetherd printed no further line in time")
    }

    /// OS pid of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Full URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POST /v1/processes; panics unless 201.
    pub async fn spawn(&self, body: Value) -> ProcessInfo {
        let (status, value) = self.post("/v1/processes", body).await;
        assert_eq!(status, 201, "spawn failed: {value}");
        serde_json::from_value(value).unwrap()
    }

    /// Spawns `sh -c COMMAND` with extra fields merged into the request.
    pub async fn sh(&self, command: &str, extra: Value) -> ProcessInfo {
        let mut body = json!({ "command": command });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        self.spawn(body).await
    }

    /// POST a JSON body; returns status and JSON response (or null).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        Self::parts(response).await
    }

    /// GET a path; returns status and JSON response (or null).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        Self::parts(response).await
    }

    async fn parts(response: reqwest::Response) -> (u16, Value) {
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// GET /v1/processes/{id}/screen?format=FORMAT: the screen now, as
    /// text (`text`: one line per row) or as its snapshot (`ansi`: the
    /// bytes that redraw it, cursor and attributes included).
    pub async fn screen(&self, id: &str, format: &str) -> String {
        let path = format!("/v1/processes/{id}/screen?format={format}");
        let response = self.http.get(self.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.text().await.unwrap()
    }

    /// GET /v1/processes/{id}.
    pub async fn status(&self, id: &str) -> ProcessInfo {
        let (status, value) = self.get(&format!("/v1/processes/{id}")).await;
        assert_eq!(status, 200, "{value}");
        serde_json::from_value(value).unwrap()
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Long-polls until the process has exited (bounded by [`WAIT`]).
    pub async fn wait_exit(&self, id: &str) -> ProcessInfo {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, value) = self
                .get(&format!("/v1/processes/{id}/wait?timeout_ms=5000"))
                .await;
            assert_eq!(status, 200, "{value}");
            let info: ProcessInfo = serde_json::from_value(value).unwrap();
            if info.is_exited() {
                return info;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "process {id} did not exit in time"
            );
        }
    }

    /// Attaches with a query string such as `stdout=5&window=1024`.
    pub async fn attach(&self, id: &str, query: &str) -> Attachment {
        Attachment::connect(&self.ws_url(id, query)).await
    }

    /// `ws://.../attach?query`.
    pub fn ws_url(&self, id: &str, query: &str) -> String {
        format!(
            "{}/v1/processes/{id}/attach?{query}",
            self.base.replacen("http", "ws", 1)
        )
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A new, not yet existing, path under the system's temporary directory.
pub fn fresh_dir() -> PathBuf {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("tether-test-{}-{n}", std::process::id()))
}

impl TestServer {
    /// POST raw bytes to a process's stdin; returns status and JSON body.
    pub async fn post_raw_stdin(&self, id: &str, data: &[u8]) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(&format!("/v1/processes/{id}/stdin")))
            .body(data.to_vec())
            .send()
            .await
            .unwrap();
        Self::parts(response).await
    }

    /// Sends `line` to the process's stdin over HTTP; panics unless 204.
    pub async fn say(&self, id: &str, line: &str) {
        let (status, body) = self.post_raw_stdin(id, line.as_bytes()).await;
        assert_eq!(status, 204, "{body}");
    }
}

impl TestServer {
    /// Sends SIGTERM and waits (bounded) for the server to exit; returns
    /// its exit code.
    pub async fn terminate(&mut self) -> Option<i32> {
        self.send_sigterm();
        self.exited().await
    }

    /// Sends SIGTERM and returns at once.
    pub fn send_sigterm(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Waits (bounded by [`WAIT`]) for the server to exit; its exit code.
    pub async fn exited(&mut self) -> Option<i32> {
        let status = settle(|| self.child.try_wait().unwrap(), Option::is_some).await;
        status.expect("tetherd did not exit after SIGTERM").code()
    }
}
