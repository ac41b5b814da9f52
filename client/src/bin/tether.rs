//! `tether`: the command-line client of `tetherd`.
//!
//! Exit status: the remote exit code for `run`, `attach` and `wait` (124
//! when the server's deadline fired, 128+N for a signal death); 125 when
//! `tether` itself fails (server unreachable, bad arguments, unknown id);
//! 127 when `run` cannot start the program.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tether_client::{
    AttachOptions, Attachment, Chunk, Client, Error, OutputReader, Overflow, ProcessInfo,
    RetryPolicy, SpawnRequest, SpawnSpec, StreamName,
};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};

/// Exit status when tether itself fails, as `docker run` does.
const TETHER_FAILED: i32 = 125;
/// Exit status of `run` when the server cannot start the program (missing
/// program, bad cwd), as a shell reports a command not found.
const SPAWN_FAILED: i32 = 127;

/// Start processes on a tetherd server and attach to them.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, propagate_version = true)]
struct Cli {
    /// Base URL of the server.
    #[arg(
        long,
        env = "TETHER_SERVER",
        default_value = "http://127.0.0.1:7420",
        global = true
    )]
    server: String,

    /// Bearer token for the server. Default: for a server on this machine,
    /// the token it generated, from $TETHER_TOKEN_FILE,
    /// $XDG_RUNTIME_DIR/tether/token or ~/.local/state/tether/token.
    #[arg(long, env = "TETHER_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a process and attach to it; exit with its exit code.
    Run(RunArgs),
    /// Attach to a running process (replays its retained output first).
    Attach {
        /// Process id.
        id: String,
        /// Forward local stdin (always on for a PTY process when stdin is a
        /// terminal).
        #[arg(short, long)]
        interactive: bool,
        /// Start at the current end of the output instead of replaying it.
        #[arg(long)]
        no_replay: bool,
    },
    /// Wait for a process to exit; print and exit with its exit code.
    Wait {
        /// Process id.
        id: String,
    },
    /// List processes.
    Ps {
        /// Print the process objects as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one process object as JSON.
    Status {
        /// Process id.
        id: String,
    },
    /// Kill a process (its whole session) and forget it.
    Kill {
        /// Process id.
        id: String,
    },
    /// Send a signal (TERM, INT, KILL, HUP, QUIT, USR1, USR2, CONT, STOP,
    /// WINCH) to a process group.
    Signal {
        /// Process id.
        id: String,
        /// Signal name or number.
        signal: String,
    },
    /// Print a link to the web terminal that shows this one session
    /// (read-only unless --write), carrying a token scoped to it.
    Share {
        /// Process id.
        id: String,
        /// Let the link type into the session (stdin, resize, signal).
        #[arg(long)]
        write: bool,
        /// How long the link works (`30m`, `2h`, ...).
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: Duration,
    },
    /// Print a process's retained output (stdout to stdout, stderr to
    /// stderr).
    Logs {
        /// Process id.
        id: String,
        /// Keep printing until the process exits.
        #[arg(short, long)]
        follow: bool,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Run on a PTY sized to the local terminal, in raw mode.
    #[arg(short = 't', long)]
    tty: bool,
    /// Forward local stdin to the process (implied by -t).
    #[arg(short, long)]
    interactive: bool,
    /// Server-side deadline (`1s`, `5m`, ...); exit status 124 when it fires.
    #[arg(long, value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Environment variable for the process (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Working directory of the process.
    #[arg(long)]
    cwd: Option<String>,
    /// Drop output the client is too slow for (reported as gaps) instead
    /// of pacing the program (the default, `overflow: block`).
    #[arg(long)]
    drop: bool,
    /// Per-stream retention on the server, in bytes.
    #[arg(long, value_name = "BYTES")]
    retain: Option<u64>,
    /// Print the process id and return at once, without attaching.
    #[arg(short, long)]
    detach: bool,
    /// Program and arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG"
    )]
    argv: Vec<String>,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {text:?}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tether: cannot start the runtime: {e}");
            return ExitCode::from(TETHER_FAILED as u8);
        }
    };
    let server = cli.server.clone();
    let code = match runtime.block_on(run_cli(cli)) {
        Ok(code) => code,
        Err(e) => {
            term::restore();
            eprintln!("tether: {}", describe(&e, &server));
            TETHER_FAILED
        }
    };
    term::restore();
    // Exit now: a blocking read of stdin may still be pending in the
    // runtime, and the process is done whatever it would return.
    std::process::exit(code)
}

/// One line for a failure, with advice where there is some.
fn describe(error: &Error, server: &str) -> String {
    if error.is_unreachable() {
        let last = match error {
            Error::BudgetExhausted { last, .. } => last.as_ref(),
            other => other,
        };
        let cause = match last {
            Error::Transport { message, .. } => message.clone(),
            other => other.to_string(),
        };
        return format!(
            "cannot reach the server at {server} ({cause}); is tetherd running? (set --server or TETHER_SERVER)"
        );
    }
    match error {
        Error::Http { status: 401, .. } => {
            format!("{error} (set --token or TETHER_TOKEN)")
        }
        _ => error.to_string(),
    }
}

async fn run_cli(cli: Cli) -> Result<i32, Error> {
    let mut client = Client::new(&cli.server)?;
    if let Some(token) = cli.token.as_deref().filter(|t| !t.is_empty()) {
        client = client.with_token(token);
    }
    // First contact fails fast when there is no server; once a process
    // runs, waits and reconnects get the full budget.
    let quick = client.clone().with_retry(RetryPolicy {
        budget: Duration::from_secs(3),
        ..RetryPolicy::default()
    });
    match cli.command {
        Command::Run(args) => {
            let signals = if args.detach {
                Caught(Vec::new())
            } else {
                catch_signals()
            };
            run(signals, &client, &quick, args).await
        }
        Command::Attach {
            id,
            interactive,
            no_replay,
        } => {
            let signals = catch_signals();
            let info = quick.get(&id).await?;
            let mut options = AttachOptions::default();
            if no_replay {
                options.stdout_offset = info.stdout_bytes;
                options.stderr_offset = info.stderr_bytes;
            }
            let tty = info.tty && std::io::stdin().is_terminal();
            session(signals, &client, &info, options, tty, interactive || tty).await
        }
        Command::Wait { id } => {
            let info = client.wait(&id).await?;
            let code = exit_code(&info);
            println!("{code}");
            Ok(code)
        }
        Command::Ps { json } => {
            let list = quick.list().await?;
            if json {
                println!("{}", to_json(&list)?);
            } else {
                print_table(&list);
            }
            Ok(0)
        }
        Command::Status { id } => {
            let info = quick.get(&id).await?;
            println!("{}", to_json(&info)?);
            Ok(0)
        }
        Command::Kill { id } => {
            quick.kill(&id).await?;
            Ok(0)
        }
        Command::Signal { id, signal } => {
            let name = tether_client::tether_protocol::signal::parse_signal(&signal)
                .map(|(name, _)| name)
                .ok_or_else(|| Error::InvalidArgument(format!("unknown signal {signal:?}")))?;
            quick.signal(&id, name).await?;
            Ok(0)
        }
        Command::Logs { id, follow } => logs(&client, &quick, &id, follow).await,
        Command::Share { id, write, ttl } => {
            let rights: &[&str] = if write { &["read", "write"] } else { &["read"] };
            let minted = client.mint_token(&id, rights, ttl).await?;
            // The token rides in the fragment: browsers never send it to
            // the server with the page or write it to a history server-side.
            println!(
                "{}/#session={}&token={}",
                client.base_url(),
                minted.process,
                minted.token
            );
            Ok(0)
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string_pretty(value).map_err(|e| Error::Protocol(e.to_string()))
}

fn exit_code(info: &ProcessInfo) -> i32 {
    info.exit_code
        .map(|c| c.clamp(0, 255))
        .unwrap_or(TETHER_FAILED)
}

fn print_table(list: &[ProcessInfo]) {
    println!(
        "{:<32} {:>8} {:<8} {:>5} {:<8} {:<24} COMMAND",
        "ID", "PID", "STATUS", "EXIT", "REASON", "STARTED"
    );
    for p in list {
        let status = if p.is_exited() { "exited" } else { "running" };
        let exit = p.exit_code.map(|c| c.to_string()).unwrap_or_default();
        let reason = p
            .reason
            .and_then(|r| serde_json::to_value(r).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let mut command = p.argv.join(" ");
        if command.chars().count() > 60 {
            command = command.chars().take(57).collect::<String>() + "...";
        }
        println!(
            "{:<32} {:>8} {:<8} {:>5} {:<8} {:<24} {}",
            p.id, p.pid, status, exit, reason, p.started_at, command
        );
    }
}

async fn run(
    signals: Caught,
    client: &Client,
    quick: &Client,
    args: RunArgs,
) -> Result<i32, Error> {
    let tty = args.tty;
    if tty && !std::io::stdin().is_terminal() {
        return Err(Error::InvalidArgument(
            "-t needs a terminal on stdin (drop -t, or run it from a terminal)".into(),
        ));
    }
    let mut spec = SpawnRequest::argv(args.argv);
    for (k, v) in args.env {
        spec = spec.env(k, v);
    }
    if let Some(cwd) = args.cwd {
        spec = spec.cwd(cwd);
    }
    if let Some(limit) = args.timeout {
        spec = spec.timeout(limit);
    }
    if let Some(bytes) = args.retain {
        spec = spec.retain_bytes(bytes);
    }
    spec = spec.overflow(if args.drop {
        Overflow::Drop
    } else {
        Overflow::Block
    });
    if tty {
        let (cols, rows) = term::size().unwrap_or((80, 24));
        spec = spec.tty(cols, rows);
        if let Ok(term) = std::env::var("TERM") {
            if !term.is_empty() && !spec.env.contains_key("TERM") {
                spec = spec.env("TERM", term);
            }
        }
    } else if args.interactive {
        spec = spec.with_stdin();
    }
    let info = match quick.spawn(spec).await {
        Ok(info) => info,
        Err(e) if e.code() == Some("spawn_failed") => {
            // As a shell (and `docker run`) does for a command that cannot
            // be run.
            eprintln!("tether: {e}");
            return Ok(SPAWN_FAILED);
        }
        Err(e) => return Err(e),
    };
    if args.detach {
        println!("{}", info.id);
        return Ok(0);
    }
    let mut options = AttachOptions::default();
    if let Some(retain) = args.retain {
        // In block mode a credit window as large as the retention would
        // stop the program at every round trip (see the client's exec).
        options.window = options.window.min((retain / 2).max(1));
    }
    session(
        signals,
        client,
        &info,
        options,
        tty,
        tty || args.interactive,
    )
    .await
}

/// Signals caught from the start of `run` or `attach` (so that one that
/// comes early is not fatal to tether), to be forwarded once attached.
struct Caught(Vec<(tokio::signal::unix::Signal, &'static str)>);

fn catch_signals() -> Caught {
    let mut caught = Vec::new();
    for (kind, name) in [
        (SignalKind::interrupt(), "INT"),
        (SignalKind::terminate(), "TERM"),
        (SignalKind::hangup(), "HUP"),
        (SignalKind::quit(), "QUIT"),
    ] {
        if let Ok(stream) = signal(kind) {
            caught.push((stream, name));
        }
    }
    Caught(caught)
}

/// Attaches and relays until the process exits; returns its exit code.
async fn session(
    signals: Caught,
    client: &Client,
    info: &ProcessInfo,
    options: AttachOptions,
    tty: bool,
    forward_stdin: bool,
) -> Result<i32, Error> {
    let attachment = client.attach(&info.id, options).await?;
    let Attachment {
        stdout,
        stderr,
        stdin,
        control,
        exit,
        ..
    } = attachment;
    let _raw = if tty {
        let raw = term::RawMode::enter()?;
        // Test hook: proves that a panic in raw mode restores the terminal.
        if std::env::var_os("TETHER_TEST_PANIC_IN_RAW_MODE").is_some() {
            panic!("TETHER_TEST_PANIC_IN_RAW_MODE is set");
        }
        Some(raw)
    } else {
        None
    };
    let out = tokio::spawn(relay(stdout, tokio::io::stdout()));
    let err = tokio::spawn(relay(stderr, tokio::io::stderr()));
    if forward_stdin {
        tokio::spawn(async move {
            let mut stdin = stdin;
            let mut local = tokio::io::stdin();
            let mut buf = vec![0u8; 16 << 10];
            loop {
                match local.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if stdin.write(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = stdin.close().await;
        });
    } else {
        drop(stdin);
    }
    if tty {
        let control = control.clone();
        tokio::spawn(async move {
            let Ok(mut winch) = signal(SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some((cols, rows)) = term::size() {
                    let _ = control.resize(cols, rows).await;
                }
            }
        });
    }
    // Signals to tether go to the remote process (in raw mode Ctrl-C is a
    // byte on stdin instead).
    for (mut stream, name) in signals.0 {
        let control = control.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                let _ = control.signal(name).await;
            }
        });
    }
    let (out, err) = (out.await, err.await);
    let info = exit.await?;
    for result in [out, err] {
        if let Ok(Err(e)) = result {
            // Output failed part way (the attachment broke for good).
            return Err(e);
        }
    }
    Ok(exit_code(&info))
}

/// Copies one stream to a local output; gaps are reported on stderr.
async fn relay(mut reader: OutputReader, mut out: impl AsyncWrite + Unpin) -> Result<(), Error> {
    let mut writable = true;
    while let Some(chunk) = reader.chunk().await {
        match chunk? {
            Chunk::Data { data, .. } => {
                if writable && (out.write_all(&data).await.is_err() || out.flush().await.is_err()) {
                    // A closed local output (`| head`): keep draining so
                    // the process is not held back, print nothing more.
                    writable = false;
                }
            }
            Chunk::Dropped { offset, length } => {
                let message = format!(
                    "\r\n[tether: {length} bytes of {} lost at offset {offset}: the server dropped them before they were read]\r\n",
                    reader.stream().as_str()
                );
                let mut stderr = tokio::io::stderr();
                let _ = stderr.write_all(message.as_bytes()).await;
            }
        }
    }
    Ok(())
}

/// `tether logs`: the retained output, up to now or (`--follow`) to exit.
async fn logs(client: &Client, quick: &Client, id: &str, follow: bool) -> Result<i32, Error> {
    let info = quick.get(id).await?;
    let options = AttachOptions {
        readonly: true,
        ..AttachOptions::default()
    };
    let attachment = client.attach(id, options).await?;
    let Attachment { stdout, stderr, .. } = attachment;
    let (until_out, until_err) = if follow || info.is_exited() {
        (u64::MAX, u64::MAX)
    } else {
        (info.stdout_bytes, info.stderr_bytes)
    };
    let (a, b) = tokio::join!(
        relay_until(stdout, tokio::io::stdout(), until_out),
        relay_until(stderr, tokio::io::stderr(), until_err)
    );
    a?;
    b?;
    Ok(0)
}

/// Like [`relay`], but stops at offset `until`.
async fn relay_until(
    mut reader: OutputReader,
    mut out: impl AsyncWrite + Unpin,
    until: u64,
) -> Result<(), Error> {
    while reader.offset() < until {
        let Some(chunk) = reader.chunk().await else {
            break;
        };
        match chunk? {
            Chunk::Data { offset, data } => {
                let keep = usize::try_from(until.saturating_sub(offset))
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let _ = out.write_all(&data[..keep]).await;
                let _ = out.flush().await;
            }
            Chunk::Dropped { offset, length } => {
                let stream = match reader.stream() {
                    StreamName::Stdout => "stdout",
                    StreamName::Stderr => "stderr",
                };
                eprintln!("[tether: {length} bytes of {stream} lost at offset {offset}]");
            }
        }
    }
    Ok(())
}

/// The local terminal: size, raw mode, and restoring it on every exit path.
mod term {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    use std::sync::Mutex;

    use nix::sys::termios::{self, SetArg, Termios};
    use tether_client::Error;

    /// The mode to restore, while raw mode is on.
    static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

    /// The terminal size (columns, rows) of stdin, stdout or stderr.
    pub fn size() -> Option<(u16, u16)> {
        for fd in [0, 1, 2] {
            // SAFETY: TIOCGWINSZ writes one `winsize` to the pointer we pass,
            // which points to a live, properly aligned value.
            let mut ws: nix::libc::winsize = unsafe { std::mem::zeroed() };
            let r = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCGWINSZ, &mut ws) };
            if r == 0 && ws.ws_col > 0 && ws.ws_row > 0 {
                return Some((ws.ws_col, ws.ws_row));
            }
        }
        None
    }

    /// Puts the terminal back as it was; a no-op unless raw mode is on.
    pub fn restore() {
        let saved = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mode) = saved {
            let stdin = std::io::stdin();
            let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &mode);
        }
    }

    /// Raw mode, restored on drop, on panic and before `exit`.
    pub struct RawMode(());

    impl RawMode {
        pub fn enter() -> Result<RawMode, Error> {
            let stdin = std::io::stdin();
            if !stdin.is_terminal() {
                return Err(Error::InvalidArgument("stdin is not a terminal".into()));
            }
            let original = termios::tcgetattr(stdin.as_fd()).map_err(|e| {
                Error::InvalidArgument(format!("cannot read the terminal mode: {e}"))
            })?;
            let mut raw = original.clone();
            termios::cfmakeraw(&mut raw);
            *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(original);
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
            if let Err(e) = termios::tcsetattr(stdin.as_fd(), SetArg::TCSAFLUSH, &raw) {
                restore();
                return Err(Error::InvalidArgument(format!("cannot set raw mode: {e}")));
            }
            Ok(RawMode(()))
        }
    }

    impl Drop for RawMode {
        fn drop(&mut self) {
            restore();
        }
    }
}
