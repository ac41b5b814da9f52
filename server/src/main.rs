//! The `tetherd` binary: flags, the token, the open-file limit, logging,
//! listening, signals.

use std::io::Write;
use std::time::Duration;

use std::io::IsTerminal;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use tether_server::contain::guard::{self, GUARD_ARG};
use tether_server::{limits, secret, Config};
use tokio::signal::unix::{signal, SignalKind};

fn main() -> anyhow::Result<()> {
    // The guard is this binary re-executed (see contain/guard.rs).
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(GUARD_ARG)) {
        guard::main();
    }
    let matches = Config::command().get_matches();
    let mut config = Config::from_arg_matches(&matches)?;
    if let Some(path) = &config.token_file {
        config.token = Some(secret::read_token_file(path)?);
    }
    if config.token.as_deref() == Some("") {
        bail!("the token must not be empty");
    }
    // Before any thread exists: it rewrites our own argv/environ memory and
    // edits the environment.
    let scrubbed = secret::scrub_own_token(config.token.as_deref().unwrap_or(""));
    init_logging(config.log_json);
    if let Err(error) = scrubbed {
        tracing::warn!(%error, "could not scrub the token from /proc/self/cmdline and environ; use --token-file");
    }
    if let Some(user) = &config.user {
        config.spawn_identity = Some(secret::resolve_identity(user, config.group.as_deref())?);
    }
    if !config.listen.ip().is_loopback() && config.token.is_none() && !config.insecure_no_token {
        bail!(
            "refusing to listen on non-loopback address {} without a token: anyone who can reach it could run commands. \
             Pass --token-file (or --token, TETHER_TOKEN), or --insecure-no-token if that is really wanted",
            config.listen
        );
    }
    size_to_open_file_limit(&mut config, &matches);
    if tether_server::contain::reaper::is_init() {
        // PID 1 of a container: orphans are reparented to us, and every
        // child from the guard on must be registered as ours.
        tether_server::contain::reaper::enable();
    }
    // After the token is scrubbed (the guard inherits our environment) and
    // before anything is spawned: from now on, if this process dies, the
    // guard ends everything it started.
    let guard_pid =
        tether_server::contain::start_guard().context("cannot start the guard process")?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(serve(config, guard_pid))?;
    // Whatever is left (a WebSocket cut at the shutdown deadline, a blocking
    // file read) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        // Colour only for a person at a terminal, not in a log file.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
}

/// Raises the soft open-file limit to the hard one and lowers the defaults
/// that cost descriptors to what fits, logging the outcome.
fn size_to_open_file_limit(config: &mut Config, matches: &clap::ArgMatches) {
    let limit = match limits::raise_open_file_limit() {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "cannot read or raise the open-file limit");
            return;
        }
    };
    let explicit = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let fit = limits::fit_to_limit(config, limit.soft, explicit);
    tracing::info!(
        soft = limit.soft,
        hard = limit.hard,
        inherited = limit.inherited,
        max_processes = fit.max_processes,
        max_connections = fit.max_connections,
        max_attachments = fit.max_attachments,
        lowered = fit.lowered,
        "open-file limit: a process costs up to {} descriptors, a connection or attachment {}, {} are reserved",
        limits::FDS_PER_PROCESS,
        limits::FDS_PER_CONNECTION,
        limits::FDS_RESERVED,
    );
    if let Some(need) = fit.overcommitted {
        tracing::warn!(
            need,
            limit = limit.soft,
            "the limits given can need more descriptors than the open-file limit allows; spawns and accepts may fail with EMFILE"
        );
    }
}

async fn serve(config: Config, guard_pid: u32) -> anyhow::Result<()> {
    tokio::spawn(guard::Guard::watch(guard_pid));
    // Before listening: a containment that was asked for and is not
    // there refuses to start.
    tether_server::contain::install(config.containment).context("cannot set up containment")?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // Tests and scripts read this line to learn the port. Whoever started
    // us may stop reading stdout after it: a closed pipe is no error.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "tetherd listening on http://{addr}");
    if let Some(root) = &config.web_root {
        let _ = writeln!(
            stdout,
            "web terminal: http://{addr}/ (from {})",
            root.display()
        );
    }
    let _ = stdout.flush();
    let mut term = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    tether_server::run(listener, config, shutdown).await?;
    Ok(())
}
