//! The `tetherd` binary: flags, logging, listening, signals.

use anyhow::{bail, Context};
use clap::Parser;
use tether_server::contain::guard::{self, GUARD_ARG};
use tether_server::Config;
use tokio::signal::unix::{signal, SignalKind};

fn main() -> anyhow::Result<()> {
    // The guard is this binary re-executed (see contain/guard.rs).
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(GUARD_ARG)) {
        guard::main();
    }
    let config = Config::parse();
    if tether_server::contain::reaper::is_init() {
        // PID 1 of a container: orphans are reparented to us, and every
        // child from the guard on must be registered as ours.
        tether_server::contain::reaper::enable();
    }
    // Before anything is spawned: from now on, if this process dies,
    // the guard ends everything it started.
    let guard_pid =
        tether_server::contain::start_guard().context("cannot start the guard process")?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config, guard_pid))
}

async fn serve(config: Config, guard_pid: u32) -> anyhow::Result<()> {
    tokio::spawn(guard::Guard::watch(guard_pid));
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if config.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    if !config.listen.ip().is_loopback() && config.token.is_none() && !config.insecure_no_token {
        bail!(
            "refusing to listen on non-loopback address {} without a token: anyone who can reach it could run commands. \
             Pass --token (or TETHER_TOKEN), or --insecure-no-token if that is really wanted",
            config.listen
        );
    }
    // Before listening: a containment that was asked for and is not
    // there refuses to start.
    tether_server::contain::install(config.containment).context("cannot set up containment")?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // Tests and scripts read this line to learn the port.
    println!("tetherd listening on http://{addr}");
    if let Some(root) = &config.web_root {
        println!("web terminal: http://{addr}/ (from {})", root.display());
    }
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
