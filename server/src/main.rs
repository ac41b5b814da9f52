//! The `tetherd` binary: flags, the token, the open-file limit, logging,
//! listening, signals.

use std::io::Write;
use std::time::Duration;

use std::io::IsTerminal;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use tether_server::config::Capacity;
use tether_server::contain::guard::{self, GUARD_ARG};
use tether_server::token::{
    generate_operator_token, named_token_path, runtime_dir, write_token_file, RuntimeEntry,
};
use tether_server::transport::{load_tls, Transport};
use tether_server::{limits, secret, Config, ServerOptions};
use tokio::signal::unix::{signal, SignalKind};

/// A start that fails says why in one line and exits 1, whatever
/// `RUST_BACKTRACE` says: an operator needs the reason, not our stack.
fn main() -> std::process::ExitCode {
    match start_and_serve() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tetherd: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn start_and_serve() -> anyhow::Result<()> {
    // The guard is this binary re-executed (see contain/guard.rs).
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(GUARD_ARG)) {
        guard::main();
    }
    let matches = Config::command().get_matches();
    // The flags as parsed: never changed. What the server runs with is
    // built from them once, below.
    let flags = Config::from_arg_matches(&matches)?;
    if flags.handover_check {
        println!("{}", tether_server::handover::check_report(&flags));
        return Ok(());
    }
    // What a handover executes the next binary with: where this one came
    // from and its flags, read before the token is scrubbed from them.
    let lifetime = tether_server::handover::Lifetime {
        binary: std::env::current_exe().ok(),
        args: flags_for_next_binary(std::env::args_os().skip(1)),
        ..Default::default()
    };
    // Started by a handover: the old binary's state, read before anything
    // else starts (its descriptors are made close-on-exec at once).
    let handed = match flags.handover_fd {
        Some(fd) => {
            Some(tether_server::handover::read(fd).context("cannot read the handover state")?)
        }
        None => None,
    };
    let given_token = match &flags.token_file {
        Some(path) => Some(secret::read_token_file(path)?),
        None => flags.given_token().map(str::to_owned),
    };
    if given_token.as_deref() == Some("") {
        bail!("the token must not be empty (use --no-token to serve without one)");
    }
    // Before any thread exists: it rewrites our own argv/environ memory and
    // edits the environment.
    let scrubbed = secret::scrub_own_token(given_token.as_deref().unwrap_or(""));
    init_logging(flags.log_json);
    if let Err(error) = scrubbed {
        tracing::warn!(%error, "could not scrub the token from /proc/self/cmdline and environ; use --token-file");
    }
    let spawn_identity = match &flags.user {
        Some(user) => Some(secret::resolve_identity(
            user,
            flags.group.as_deref(),
            &flags.denied_groups,
        )?),
        None => None,
    };
    let (token, generated) = match &handed {
        // The token, key and generated file in force before the handover;
        // a `--token-file` is read again (as SIGHUP does), so a handover
        // that names another one rotates the token.
        Some((state, _, _)) => (
            given_token.or_else(|| state.operator_token.clone()),
            state
                .lifetime
                .generated_token
                .clone()
                .map(|(token, path)| Generated { token, path }),
        ),
        None => settle_token(&flags, given_token)?,
    };
    let capacity = size_to_open_file_limit(&flags, &matches);
    let mut config = ServerOptions::new(flags, capacity, token, spawn_identity);
    if let Some((state, _, _)) = &handed {
        config.signing_key = tether_server::token::SigningKey::from_bytes(state.signing_key);
        tether_server::process::input_once::set_fingerprint_key(state.fingerprint_key);
    }
    if tether_server::contain::reaper::is_init() {
        // PID 1 of a container: orphans are reparented to us, and every
        // child from the guard on must be registered as ours.
        tether_server::contain::reaper::enable();
    }
    // After the token is scrubbed (the guard inherits our environment) and
    // before anything is spawned: from now on, if this process dies, the
    // guard ends everything it started.
    let (guard_pid, handed) = match handed {
        Some((mut state, document, mut fds)) => {
            let pipe = match state.guard_pipe.take() {
                Some(fd) => Some(fds.take(fd)?),
                None => None,
            };
            tether_server::contain::carry::adopt(&state.containment, pipe)
                .context("cannot adopt the containment of the handover")?;
            let pid = state.containment.guard_pid.unwrap_or(0);
            (
                pid,
                Some(Handed {
                    state,
                    document,
                    fds,
                }),
            )
        }
        None => (
            tether_server::contain::start_guard().context("cannot start the guard process")?,
            None,
        ),
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads(config.worker_threads))
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(serve(config, guard_pid, generated, handed, lifetime))?;
    // Whatever is left (a WebSocket cut at the shutdown deadline, a blocking
    // file read) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

/// `--worker-threads`, or half the CPUs we may use (affinity and cgroup
/// quota), at least one.
fn worker_threads(asked: usize) -> usize {
    if asked > 0 {
        return asked;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.div_ceil(2)
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
/// that cost descriptors to what fits, logging the outcome: the capacities
/// the server runs with.
fn size_to_open_file_limit(flags: &Config, matches: &clap::ArgMatches) -> Capacity {
    let limit = match limits::raise_open_file_limit() {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "cannot read or raise the open-file limit");
            return flags.asked_capacity();
        }
    };
    let explicit = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let fit = limits::fit_to_limit(flags.asked_capacity(), limit.soft, explicit);
    tracing::info!(
        soft = limit.soft,
        hard = limit.hard,
        inherited = limit.inherited,
        max_processes = fit.capacity.max_processes,
        max_known_processes = fit.capacity.max_known_processes,
        max_connections = fit.capacity.max_connections,
        max_attachments = fit.capacity.max_attachments,
        lowered = fit.lowered,
        "open-file limit: a running process costs up to {} descriptors, an exited one still known {}, a connection or attachment {}, {} are reserved",
        limits::FDS_PER_PROCESS,
        limits::FDS_PER_EXITED_PROCESS,
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
    fit.capacity
}

/// The operator token in force and where a generated one went:
/// `--no-token` (with a warning), the token given, or a new one written to
/// the token file.
fn settle_token(
    config: &Config,
    given: Option<String>,
) -> anyhow::Result<(Option<String>, Option<Generated>)> {
    let tokenless = config.no_token || config.insecure_no_token;
    if tokenless && given.is_some() {
        bail!("--no-token and --token (or --token-file) contradict each other: pick one");
    }
    if tokenless && !config.listen.is_local() && !config.insecure_no_token {
        bail!(
            "refusing to listen on non-loopback address {} without a token: anyone who can reach it could run commands. \
             Drop --no-token (a token is generated), pass --token-file (or --token, TETHER_TOKEN), \
             or --insecure-no-token if that is really wanted",
            config.listen
        );
    }
    if tokenless {
        tracing::warn!(
            "--no-token: every user of this machine who can reach {} can run commands as this server's user",
            config.listen
        );
        return Ok((None, None));
    }
    if given.is_some() {
        return Ok((given, None));
    }
    let token = generate_operator_token();
    // A file the user named holds the token; otherwise this server's own
    // runtime entry does, written once the address is known.
    let path = config
        .generated_token_file
        .clone()
        .or_else(named_token_path);
    if let Some(path) = &path {
        if let Err(error) = write_token_file(path, &token) {
            bail!(
                "cannot write the generated token to {}: {error} (pass --generated-token-file, --token-file or --no-token)",
                path.display()
            );
        }
    }
    Ok((Some(token.clone()), Some(Generated { token, path })))
}

/// SIGHUP reads `--token-file` and `--tls-cert`/`--tls-key` again, as
/// they rotate (a token every few weeks, a certificate every few months),
/// without restarting anything: new requests and handshakes see the new
/// ones, attachments and connections already made carry on. A file that
/// cannot be read, or a key that does not match its certificate, leaves
/// what is in force and says why.
fn reload_on_hangup(
    token_file: Option<std::path::PathBuf>,
    token: tether_server::secret::OperatorToken,
    tls: Option<tether_server::transport::TlsReload>,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(async move {
        while hangups.recv().await.is_some() {
            if let Some(path) = &token_file {
                match secret::read_token_file(path) {
                    Ok(new) => {
                        token.replace(new);
                        tracing::info!(file = %path.display(), "SIGHUP: the token file was read again");
                    }
                    Err(error) => {
                        tracing::error!(%error, "SIGHUP: the token in force stays")
                    }
                }
            }
            if let Some(tls) = &tls {
                match tls.reload() {
                    Ok(()) => tracing::info!("SIGHUP: the TLS certificate and key were read again"),
                    Err(error) => {
                        tracing::error!(%error, "SIGHUP: the certificate in force stays")
                    }
                }
            }
            if token_file.is_none() && tls.is_none() {
                tracing::info!("SIGHUP: no --token-file and no --tls-cert to read again");
            }
        }
    })
}

/// The flags a handover passes to the next binary: these, without the
/// token (it travels in the state, never on a command line) and without
/// this start's own `--handover-fd`.
fn flags_for_next_binary(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut kept = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--token" || text == "--handover-fd" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--token=") || text.starts_with("--handover-fd=") {
            continue;
        }
        kept.push(arg);
    }
    kept
}

/// What a handover passed to this binary.
struct Handed {
    state: tether_server::handover::State,
    document: tether_server::handover::DocumentReader,
    fds: tether_server::handover::TakenFds,
}

/// A token tetherd generated, and the file it wrote it to.
struct Generated {
    token: String,
    path: Option<std::path::PathBuf>,
}

/// Serves until shutdown; a generated token file is removed at the end,
/// and also when the start fails (a missing containment, a bad key, an
/// address in use), so no file outlives the server that wrote it.
async fn serve(
    config: ServerOptions,
    guard_pid: u32,
    generated: Option<Generated>,
    handed: Option<Handed>,
    lifetime: tether_server::handover::Lifetime,
) -> anyhow::Result<()> {
    let result =
        serve_until_shutdown(config, guard_pid, generated.as_ref(), handed, lifetime).await;
    if let Some(Generated {
        token,
        path: Some(path),
    }) = &generated
    {
        // Remove the file if it still holds our token (another tetherd may
        // have written its own since).
        if std::fs::read_to_string(path).is_ok_and(|t| t.trim() == token) {
            let _ = std::fs::remove_file(path);
        }
    }
    result
}

async fn serve_until_shutdown(
    config: ServerOptions,
    guard_pid: u32,
    generated: Option<&Generated>,
    mut handed: Option<Handed>,
    mut lifetime: tether_server::handover::Lifetime,
) -> anyhow::Result<()> {
    tokio::spawn(guard::Guard::watch(guard_pid));
    // Before listening: a containment that was asked for and is not
    // there refuses to start.
    tether_server::contain::install(config.containment).context("cannot set up containment")?;
    let (tls, tls_reload) = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            let (acceptor, reload) = load_tls(cert, key)?;
            (Some(acceptor), Some(reload))
        }
        _ => (None, None),
    };
    tokio::spawn(reload_on_hangup(
        config.token_file.clone(),
        config.token.clone(),
        tls_reload,
    )?);
    if tls.is_none() && !config.listen.is_local() && config.token.is_some() {
        tracing::warn!(
            "listening on {} without TLS: the token, every command and all terminal output cross the network in clear text; \
             pass --tls-cert and --tls-key, or put a TLS proxy in front",
            config.listen
        );
    }
    let transport = match &mut handed {
        Some(Handed { state, fds, .. }) => {
            Transport::adopt(fds.take(state.listener)?, state.unix_socket.clone(), tls)?
        }
        None => Transport::bind(&config.listen, tls, config.listen_group.as_deref()).await?,
    };
    let url = transport.url()?;
    let web_root = config.web_root.clone();
    // Removed when this returns (the server is done), by this server only.
    let carried_entry = match &mut handed {
        Some(Handed { state, fds, .. }) => match state.lifetime.runtime_entry.take() {
            Some((path, fd)) => Some(RuntimeEntry::adopt(path, fds.take(fd)?)?),
            None => None,
        },
        None => None,
    };
    let entry = match generated {
        _ if handed.is_some() => carried_entry,
        Some(Generated { token, path: None }) => match runtime_dir() {
            Some(dir) => Some(RuntimeEntry::write(&dir, &url, token).with_context(|| {
                format!(
                    "cannot write this server's runtime entry (its URL and token) in {} (pass --generated-token-file, --token-file or --no-token)",
                    dir.display()
                )
            })?),
            None => {
                tracing::warn!(
                    "no runtime directory ($XDG_RUNTIME_DIR or $HOME): the token is only in the URL printed below"
                );
                None
            }
        },
        _ => None,
    };
    // Every check that can refuse the start (containment, limits, the data
    // directory) before the line that says we serve.
    let from_version = handed.as_ref().map(|h| h.state.from_version.clone());
    let ready = match handed {
        Some(Handed {
            state,
            document,
            mut fds,
        }) => tether_server::Ready::adopt(transport, config, state, &document, &mut fds)
            .context("cannot adopt the state of the handover")?,
        None => tether_server::Ready::prepare(transport, config)?,
    };
    if let Some(entry) = &entry {
        lifetime.runtime_entry = Some(entry.carry()?);
    }
    lifetime.generated_token = generated.map(|g| (g.token.clone(), g.path.clone()));
    if let Some(from) = from_version {
        // Whoever started the first binary may still read this stdout.
        let _ = writeln!(
            std::io::stdout(),
            "tetherd handed over from {from}: listening on {url}"
        );
        tracing::info!(from, "handover complete: serving");
        return serve_ready(ready, lifetime, entry).await;
    }
    // Tests and scripts read this line to learn the address. Whoever
    // started us may stop reading stdout after it: a closed pipe is no
    // error.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "tetherd listening on {url}");
    if let Some(generated) = generated {
        if let Some(path) = generated
            .path
            .as_deref()
            .or(entry.as_ref().map(RuntimeEntry::path))
        {
            let _ = writeln!(
                stdout,
                "token: generated, in {} (readable only by this user); clients on this machine read it from there",
                path.display()
            );
        }
        if url.starts_with("http") {
            // The fragment never leaves the browser: not sent to the
            // server, not in any log.
            let _ = writeln!(stdout, "open: {url}/#token={}", generated.token);
        }
    }
    if let Some(root) = &web_root {
        // With the generated token in the fragment, as the `open:` line:
        // the last link printed is the one people click.
        let fragment = match generated {
            Some(generated) if url.starts_with("http") => format!("#token={}", generated.token),
            _ => String::new(),
        };
        let _ = writeln!(
            stdout,
            "web terminal: {url}/{fragment} (from {})",
            root.display()
        );
    }
    let _ = stdout.flush();
    serve_ready(ready, lifetime, entry).await
}

/// Serves until SIGTERM or Ctrl-C; SIGUSR2 asks for a handover to the
/// binary tetherd was started from (as nginx's USR2).
async fn serve_ready(
    ready: tether_server::Ready,
    lifetime: tether_server::handover::Lifetime,
    entry: Option<RuntimeEntry>,
) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let requests = ready.handover_requests();
    tokio::spawn(async move {
        while usr2.recv().await.is_some() {
            tracing::info!("SIGUSR2: handing over to the binary tetherd was started from");
            let request = tether_server::table::HandoverRequest {
                binary: None,
                flags: Vec::new(),
                reply: None,
            };
            if requests.try_send(request).is_err() {
                tracing::warn!("SIGUSR2: a handover is already asked for");
            }
        }
    });
    ready.serve(shutdown, lifetime).await?;
    drop(entry);
    Ok(())
}
