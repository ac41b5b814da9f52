//! The `tetherd` binary: flags, logging, listening, signals.

use std::io::IsTerminal;

use anyhow::{bail, Context};
use clap::Parser;
use tether_server::Config;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if config.log_json {
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
    if !config.listen.ip().is_loopback() && config.token.is_none() && !config.insecure_no_token {
        bail!(
            "refusing to listen on non-loopback address {} without a token: anyone who can reach it could run commands. \
             Pass --token (or TETHER_TOKEN), or --insecure-no-token if that is really wanted",
            config.listen
        );
    }
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
