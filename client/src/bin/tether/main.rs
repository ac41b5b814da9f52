//! `tether`: the command-line client of `tetherd`.
//!
//! Exit status: the remote exit code for `run`, `attach` and `wait` (124
//! when the server's deadline fired, 128+N for a signal death); 0 after a
//! detach; 125 when `tether` itself fails (bad arguments, server
//! unreachable, unknown id); 126 when `run`'s program was found but cannot
//! run (not executable, bad cwd); 127 when it was not found.
//!
//! Files: `args.rs` the command line, `session.rs` run / attach / logs,
//! `relay.rs` the copy loops, `replies.rs` dropping the terminal's
//! replies to replayed output, `detach.rs` the detach keys, `term.rs` the
//! local terminal, `resolve.rs` id prefixes.

mod args;
mod detach;
mod modes;
mod relay;
mod replies;
mod resolve;
mod session;
mod term;
mod units;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;
use tether_client::{Client, Error, ProcessInfo, RetryPolicy};

use args::{Cli, Command};
use resolve::resolve;
use session::Caught;

/// Exit status when tether itself fails, as `docker run` does.
const TETHER_FAILED: i32 = 125;
/// Exit status of `run` when the program exists but cannot be run (not
/// executable, a bad cwd), as a shell (and `docker run`) reports it.
const NOT_EXECUTABLE: i32 = 126;
/// Exit status of `run` when the program is not found, as a shell reports
/// a command not found.
const NOT_FOUND: i32 = 127;

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
            } else {
                Caught::catch()
            };
            session::run(signals, &client, &quick, args).await
        }
        Command::Attach {
            id,
            interactive,
            no_replay,
            detach_keys,
        } => {
            let signals = Caught::catch();
            let info = quick.get(&resolve(&quick, &id).await?).await?;
            session::attach(
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
            let info = quick.get(&resolve(&quick, &id).await?).await?;
            println!("{}", to_json(&info)?);
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
        Command::Logs { id, follow } => {
            let id = resolve(&quick, &id).await?;
            session::logs(&client, &quick, &id, follow).await
        }
        Command::Share { id, write, ttl } => {
            let id = resolve(&quick, &id).await?;
            let rights: &[&str] = if write { &["read", "write"] } else { &["read"] };
            let minted = client.mint_token(&id, rights, ttl).await?;
            // The token rides in the fragment: a browser never sends it to
            // the server with the page, so no access log records it.
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

pub(crate) fn exit_code(info: &ProcessInfo) -> i32 {
    info.exit_code
        .map(|c| c.clamp(0, 255))
        .unwrap_or(TETHER_FAILED)
}

fn print_table(list: &[ProcessInfo]) {
    println!(
        "{:<32} {:<16} {:>8} {:<8} {:>5} {:<10} {:<24} {:>8} {:>10} COMMAND",
        "ID", "NAME", "PID", "STATUS", "EXIT", "REASON", "STARTED", "CPU", "MEM"
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
        // CPU seconds (user + system) and peak memory, where accounted.
        let (cpu, mem) = p.usage.map_or((String::new(), String::new()), |u| {
            (
                format!("{:.2}s", u.cpu_user_s + u.cpu_system_s),
                units::format_size(u.memory_peak_bytes),
            )
        });
        println!(
            "{:<32} {:<16} {:>8} {:<8} {:>5} {:<10} {:<24} {:>8} {:>10} {}",
            p.id,
            p.name.as_deref().unwrap_or(""),
            p.pid,
            status,
            exit,
            reason,
            p.started_at,
            cpu,
            mem,
            command
        );
    }
}
