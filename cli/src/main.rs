//! `tether`: the command-line client of `tetherd`.
//!
//! Exit status: the remote exit code for `run`, `attach` and `wait` (124
//! when the server's deadline fired, 128+N for a signal death); 0 after a
//! detach; 125 when `tether` itself fails (bad arguments, server
//! unreachable, unknown id); 126 when `run`'s program was found but cannot
//! run (not executable, bad cwd); 127 when it was not found; 141 when
//! its own stdout or stderr was closed (`| head -1`); 1 when `cp` failed
//! (a missing file, the remote `tar` failing), as `docker cp`.
//!
//! Files: `args.rs` the command line, `run_attach.rs` run / attach, `logs.rs` logs,
//! `relay.rs` the copy loops, `replies.rs` dropping the terminal's
//! replies to replayed output, `detach.rs` the detach keys, `term.rs` the
//! local terminal, `resolve.rs` id prefixes, `tail.rs`
//! the last lines for `logs --tail`, `exit.rs` the exit statuses,
//! `stdout.rs` printing a line, `modes.rs` the terminal's modes given back,
//! `units.rs` sizes, `copy.rs` `cp` (its archives in
//! `archive.rs`).

mod archive;
mod args;
mod copy;
mod detach;
mod exit;
mod listing;
mod logs;
mod modes;
mod relay;
mod replies;
mod resolve;
mod run_attach;
mod stdout;
mod tail;
mod term;
mod units;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;
use tether_client::{Client, Error, RetryPolicy, TransportKind};

use args::{AdminCommand, Cli, Command, StatusFilter};
use exit::{exit_code, TETHER_FAILED};
use resolve::resolve;
use run_attach::Caught;
use stdout::print_line;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 125 (tether's own failure, as documented),
            // not clap's 2; --help and --version are not errors.
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => TETHER_FAILED,
            };
            if code == 0 {
                let _ = e.print();
            } else {
                eprint!("{}", with_usage(&e));
            }
            return ExitCode::from(code as u8);
        }
    };
    // One thread: a session moves a few streams at a person's or a
    // program's pace, and every extra worker is a thread to start and a
    // hand-off per message (stdin and stdout still go through tokio's
    // blocking threads).
    let runtime = match tokio::runtime::Builder::new_current_thread()
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
    let cacert_given = cli.cacert.is_some();
    let code = match runtime.block_on(run_cli(cli)) {
        Ok(code) => code,
        Err(e) => {
            term::restore();
            // Server text is shown, never obeyed by the terminal.
            eprintln!(
                "tether: {}",
                stdout::visible(&describe(&e, &server, cacert_given))
            );
            TETHER_FAILED
        }
    };
    term::restore();
    // Exit now: a blocking read of stdin may still be pending in the
    // runtime, and the process is done whatever it would return.
    std::process::exit(code)
}

/// clap's message for a usage error, with the usage of the (sub)command
/// when clap left it out (it does for a bad value).
fn with_usage(error: &clap::Error) -> String {
    let message = error.render().to_string();
    if message.contains("Usage:") {
        return message;
    }
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    let sub = std::env::args()
        .skip(1)
        .find(|arg| command.find_subcommand(arg).is_some());
    let usage = match sub.and_then(|name| command.find_subcommand_mut(name)) {
        Some(sub) => sub.render_usage(),
        None => command.render_usage(),
    };
    match message.split_once("\n\n") {
        Some((first, rest)) => format!("{first}\n\n{usage}\n\n{rest}"),
        None => format!("{message}\n{usage}\n"),
    }
}

/// One line for a failure, with advice where there is some (and none that
/// was already followed: no "pass --cacert" to a user who did).
fn describe(error: &Error, server: &str, cacert_given: bool) -> String {
    if error.is_unreachable() {
        let last = match error {
            Error::BudgetExhausted { last, .. } => last.as_ref(),
            other => other,
        };
        return match last {
            Error::Transport { message, kind, .. } => {
                let advice = match kind {
                    TransportKind::Refused => {
                        "; is tetherd running? (set --server or TETHER_SERVER)"
                    }
                    TransportKind::Dns => "; check the host in --server or TETHER_SERVER",
                    // A plain-HTTP server answering a TLS hello: rustls
                    // sees a record that is no TLS at all.
                    TransportKind::Tls if message.contains("InvalidContentType") => {
                        "; the server answered without TLS: use http:// (or start tetherd with --tls-cert and --tls-key)"
                    }
                    TransportKind::Tls if server.starts_with("https://") && !cacert_given => {
                        "; to trust a private CA or a self-signed certificate, pass it with --cacert FILE (or TETHER_CACERT)"
                    }
                    _ => "",
                };
                format!("cannot reach the server at {server}: {kind} ({message}){advice}")
            }
            other => format!("cannot reach the server at {server}: {other}"),
        };
    }
    match error {
        Error::Http { status: 401, .. } => {
            format!("{error} (set --token or TETHER_TOKEN)")
        }
        // The server's message names its API (`?force=1`); a CLI user
        // wants the command.
        Error::Http { status, code, .. } if code == "still_running" => format!(
            "server answered {status} {code}: the process is still running; `tether rm -f ID` kills and forgets it, `tether kill ID` only kills it"
        ),
        _ => error.to_string(),
    }
}

async fn run_cli(cli: Cli) -> Result<i32, Error> {
    let mut client = Client::new(&cli.server)?;
    if let Some(path) = &cli.cacert {
        client = client.with_ca_file(path)?;
    }
    if cli.insecure {
        client = client.with_insecure_tls()?;
    }
    if let Some(token) = cli.token.as_deref().filter(|t| !t.is_empty()) {
        client = client.with_token(token);
    }
    // First contact fails fast when there is no server (`run`'s first
    // WebSocket too: its budget is `quick`'s); once a process runs, waits
    // and reconnects get the full budget.
    let quick = client.clone().with_retry(RetryPolicy {
        budget: Duration::from_secs(3),
        ..RetryPolicy::default()
    });
    match cli.command {
        Command::Run(args) => {
            let signals = if args.detach {
                Caught::none()
            } else if args.no_signals {
                Caught::detaching()
            } else {
                Caught::catch()
            };
            run_attach::run(signals, &client, &quick, args).await
        }
        Command::Attach {
            id,
            interactive,
            no_replay,
            no_signals,
            detach_keys,
        } => {
            let signals = if no_signals {
                Caught::detaching()
            } else {
                Caught::catch()
            };
            let info = quick.get(&resolve(&quick, &id).await?).await?;
            run_attach::attach(
                signals,
                &client,
                &info,
                interactive,
                no_replay,
                detach_keys.keys,
            )
            .await
        }
        Command::Wait { id } => {
            let info = client.wait(&resolve(&quick, &id).await?).await?;
            let code = exit_code(&info);
            print_line(&code.to_string());
            Ok(code)
        }
        Command::Ps {
            all,
            no_trunc,
            json,
            quiet,
            filter,
        } => {
            let mut list = quick.list().await?;
            // As `docker ps`: running ones unless asked; JSON, for scripts,
            // lists every known process as it always has.
            let filter = match (filter, all || json) {
                (Some(filter), _) => Some(filter),
                (None, true) => None,
                (None, false) => Some(StatusFilter::Running),
            };
            if let Some(filter) = filter {
                list.retain(|p| p.is_exited() == (filter == StatusFilter::Exited));
            }
            if quiet {
                let ids: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
                if !ids.is_empty() {
                    let ids: Vec<_> = ids.iter().map(|id| stdout::visible(id)).collect();
                    print_line(&ids.join("\n"));
                }
            } else if json {
                print_line(&to_json(&list)?);
            } else if no_trunc {
                print_line(&listing::whole(&list));
            } else {
                print_line(&listing::compact(&list, std::time::SystemTime::now()));
            }
            Ok(0)
        }
        Command::Admin {
            command: AdminCommand::Upgrade { binary, flags },
        } => {
            let request = tether_protocol::api::UpgradeRequest { binary, flags };
            let (started, run) = match client.upgrade_and_wait(&request).await {
                Ok(done) => done,
                // Refused: the server serves on, unchanged; say why.
                Err(error @ Error::Http { status: 409, .. }) => {
                    eprintln!("tether: {}", stdout::visible(&error.to_string()));
                    return Ok(1);
                }
                Err(error) => return Err(error),
            };
            print_line(&format!(
                "tetherd (pid {}) handed over from {} to {} ({}): every process carried on",
                run.pid,
                started.from_version,
                run.version,
                started.binary.escape_debug()
            ));
            Ok(0)
        }
        Command::Status { id } => {
            let info = quick.get(&resolve(&quick, &id).await?).await?;
            print_line(&to_json(&info)?);
            Ok(0)
        }
        Command::Kill { id, grace } => {
            let id = resolve(&quick, &id).await?;
            quick
                .kill_with_grace(&id, grace.unwrap_or(Duration::ZERO))
                .await?;
            Ok(0)
        }
        Command::Rm { id, force } => {
            quick.remove(&resolve(&quick, &id).await?, force).await?;
            Ok(0)
        }
        Command::Signal { id, signal } => {
            let name = tether_client::tether_protocol::signal::parse_signal(&signal)
                .map(|(name, _)| name)
                .ok_or_else(|| Error::InvalidArgument(format!("unknown signal {signal:?}")))?;
            quick.signal(&resolve(&quick, &id).await?, name).await?;
            Ok(0)
        }
        Command::Screen { id, ansi } => {
            use std::io::Write as _;
            let id = resolve(&quick, &id).await?;
            let screen = quick.screen(&id, ansi).await?;
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`tether screen ID | head`) is not a failure.
            let _ = stdout.write_all(&screen).and_then(|()| stdout.flush());
            Ok(0)
        }
        Command::Cp { source, dest } => {
            copy::copy(
                &client,
                &quick,
                copy::Side::parse(&source),
                copy::Side::parse(&dest),
            )
            .await
        }
        Command::Record {
            id,
            format_version,
            no_follow,
        } => {
            let id = resolve(&quick, &id).await?;
            let options = tether_client::RecordingOptions {
                version: format_version,
                follow: !no_follow,
            };
            let mut stdout = tokio::io::stdout();
            match client.recording_to(&id, options, &mut stdout).await {
                Ok(_) => Ok(0),
                // A closed stdout (`| head`) ends it quietly, as a shell's
                // pipeline would.
                Err(Error::Closed(message)) if message.contains("Broken pipe") => {
                    Ok(exit::CLOSED_OUTPUT)
                }
                Err(error) => Err(error),
            }
        }
        Command::Logs {
            id,
            follow,
            tail,
            since,
            until,
            timestamps,
        } => {
            let id = resolve(&quick, &id).await?;
            let from = match since {
                Some(since) => quick.offsets_since(&id, since).await?,
                None => [0, 0],
            };
            // Where the output written from `until` on starts: the end.
            let to = match until {
                Some(until) => Some(quick.offsets_since(&id, until).await?),
                None => None,
            };
            let range = logs::Range { from, to };
            if timestamps {
                return logs::stamped(&client, &quick, &id, follow, range).await;
            }
            logs::logs(&client, &quick, &id, follow, tail, range).await
        }
        Command::Share { id, write, ttl } => {
            let id = resolve(&quick, &id).await?;
            let rights: &[&str] = if write { &["read", "write"] } else { &["read"] };
            let minted = client.mint_token(&id, rights, ttl).await?;
            // The token rides in the fragment: a browser never sends it to
            // the server with the page, so no access log records it.
            print_line(&stdout::visible(&format!(
                "{}/#session={}&token={}",
                client.base_url(),
                minted.process,
                minted.token
            )));
            Ok(0)
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string_pretty(value).map_err(|e| Error::Protocol(e.to_string()))
}
