//! `run` and `attach`: starting (in the same WebSocket as the
//! attachment, for `run` without `-d`), attaching, and one attached session
//! from start to its end (the exit, or the detach keys).

use std::io::IsTerminal;
use std::time::Duration;

use tether_client::{
    AttachOptions, Attachment, Client, Error, ExitReason, Limits, Overflow, ProcessInfo,
    SpawnRequest, SpawnSpec,
};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

use crate::args::RunArgs;
use crate::detach::DetachKeys;
use crate::exit::{exit_code, CLOSED_OUTPUT, NOT_EXECUTABLE, NOT_FOUND};
use crate::modes::ModeWatch;
use crate::relay::{copy_output, forward_input, watch_keys as watch_keys_only, Copied};
use crate::replies::{InputFilter, OutputFence, Replies};
use crate::stdout::visible;
use crate::term;

/// Longest a detach waits for the local terminal to take the reset of its
/// modes.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(1);

/// Signals caught from the start of `run` or `attach` (so that one that
/// comes early is not fatal to tether), to be forwarded once attached.
pub struct Caught {
    streams: Vec<(tokio::signal::unix::Signal, &'static str)>,
    /// Forwarded to the process; else the first one detaches (`attach
    /// --no-signals`).
    forward: bool,
}

impl Caught {
    pub fn none() -> Caught {
        Caught {
            streams: Vec::new(),
            forward: true,
        }
    }

    /// Signals that detach instead of reaching the process.
    pub fn detaching() -> Caught {
        Caught {
            forward: false,
            ..Caught::catch()
        }
    }

    pub fn catch() -> Caught {
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
        Caught {
            streams: caught,
            forward: true,
        }
    }
}

/// How an attached session ended.
pub enum Ending {
    /// The process exited (the object has its reason and code).
    Exited(Box<ProcessInfo>),
    /// The detach keys were typed: the process runs on.
    Detached,
    /// The local stdout or stderr was closed (`| head -1`).
    OutputClosed,
}

/// What one attached session does locally.
pub struct Local {
    /// Raw mode, window size changes forwarded.
    pub tty: bool,
    /// Local stdin goes to the process.
    pub forward_stdin: bool,
    /// Watched for on stdin when it is a terminal.
    pub detach_keys: DetachKeys,
    /// Output written before the attachment goes to a local terminal
    /// whose replies to it must not reach the process (`tether attach`).
    pub drop_replies: bool,
    /// Stdin is a terminal that is not forwarded: it is watched for the
    /// detach keys alone (`tether attach` of a process without `-i`).
    pub watch_keys: bool,
}

/// `tether run`: starts the process and attaches to it in one WebSocket
/// (`GET /v1/run`); with `-d`, only starts it (`POST /v1/processes`) and
/// prints its id. The first contact fails within `quick`'s retry budget;
/// once the process runs, a dropped connection is resumed within the
/// attachment's full reconnect budget, by the new process's id.
pub async fn run(
    signals: Caught,
    client: &Client,
    quick: &Client,
    args: RunArgs,
) -> Result<i32, Error> {
    let tty = args.tty;
    // A detached run needs no terminal here: its PTY takes this one's size
    // if there is one (else 80x24) and is resized by whoever attaches.
    if tty && !args.detach && !std::io::stdin().is_terminal() {
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
    if let Some(name) = args.name {
        spec = spec.name(name);
    }
    if let Some(user) = args.user {
        spec = spec.user(user);
    }
    if let Some(group) = args.group {
        spec = spec.group(group);
    }
    if let Some(limit) = args.unattached_timeout {
        spec = spec.unattached_timeout(limit);
    }
    if args.record_input {
        spec = spec.record_input();
    }
    let limits = Limits {
        memory_bytes: args.memory,
        cpus: args.cpus,
        pids: args.pids,
        memory_high_bytes: args.memory_high,
    };
    if !limits.is_empty() {
        spec = spec.limits(limits);
    }
    // A detached program has no reader to pace it: in block mode it would
    // stop once its retention filled (`yes` at 64 MiB), so a detached
    // run drops the oldest output unless asked to block.
    let drop = args.drop || (args.detach && !args.block);
    spec = spec.overflow(if drop {
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
    if args.detach {
        return match quick.spawn(spec).await {
            Ok(info) => {
                crate::stdout::print_line(&visible(&info.id));
                Ok(0)
            }
            Err(e) => cannot_start(e),
        };
    }
    let mut options = AttachOptions {
        first_connect: Some(quick.retry_policy()),
        ..AttachOptions::default()
    };
    if let Some(retain) = args.retain {
        // In block mode a credit window as large as the retention would
        // stop the program at every round trip (see the client's exec).
        options.window = options.window.min((retain / 2).max(1));
    }
    let attachment = match client.run(spec, options).await {
        Ok(attachment) => attachment,
        Err(e) => return cannot_start(e),
    };
    let info = attachment.process().clone();
    let local = Local {
        tty,
        forward_stdin: tty || args.interactive,
        detach_keys: args.detach_keys.keys,
        // Nobody answered what the program wrote before `run` attached:
        // its first queries are live.
        drop_replies: false,
        watch_keys: false,
    };
    let ending = session(signals, attachment, false, local).await?;
    if matches!(ending, Ending::OutputClosed) {
        // As a local pipeline ends its writer: the program gets SIGPIPE
        // (it was writing to a reader that is gone).
        let _ = client.signal(&info.id, "PIPE").await;
    }
    Ok(conclude(ending, &info, client).await)
}

/// The exit status of a spawn the server refused: as a shell (and `docker
/// run`) reports a command that cannot be run, 127 not found, 126 found but
/// not runnable; any other refusal is tether's own failure.
fn cannot_start(error: Error) -> Result<i32, Error> {
    let status = match error.code() {
        Some("spawn_failed") => NOT_FOUND,
        Some("cannot_execute") => NOT_EXECUTABLE,
        _ => return Err(error),
    };
    eprintln!("tether: {}", visible(&error.to_string()));
    Ok(status)
}

/// `tether attach`.
pub async fn attach(
    signals: Caught,
    client: &Client,
    info: &ProcessInfo,
    interactive: bool,
    no_replay: bool,
    detach_keys: DetachKeys,
) -> Result<i32, Error> {
    let mut options = AttachOptions::default();
    if no_replay {
        options.stdout_offset = info.stdout_bytes;
        options.stderr_offset = info.stderr_bytes;
    }
    let tty = info.tty && std::io::stdin().is_terminal();
    let to_terminal = info.tty && std::io::stdout().is_terminal();
    // A PTY shown on a terminal starts from its screen (and a resume whose
    // offset was evicted takes the screen instead of a gap); piped, its
    // output stays the bytes as written.
    options.screen = to_terminal && !no_replay;
    let local = Local {
        tty,
        forward_stdin: interactive || tty,
        watch_keys: !(interactive || tty) && std::io::stdin().is_terminal(),
        detach_keys,
        drop_replies: tty && to_terminal && !no_replay,
    };
    let attachment = match client.attach(&info.id, options.clone()).await {
        // A server run with --no-screen has no screens: replay the bytes.
        Err(e) if options.screen && e.code() == Some("invalid_request") => {
            options.screen = false;
            client.attach(&info.id, options.clone()).await?
        }
        other => other?,
    };
    let ending = session(signals, attachment, options.screen, local).await?;
    Ok(conclude(ending, info, client).await)
}

/// The exit status for how a session ended, and a word on stderr for
/// every end that is not the program's own exit.
async fn conclude(ending: Ending, info: &ProcessInfo, client: &Client) -> i32 {
    match ending {
        Ending::Detached => {
            eprintln!(
                "tether: detached; the process keeps running (re-attach with: tether attach {})",
                visible(info.name.as_deref().unwrap_or(&info.id))
            );
            0
        }
        // Quietly, with the shell's status for a writer whose reader went
        // (128 + SIGPIPE), as `yes | head -1` ends.
        Ending::OutputClosed => CLOSED_OUTPUT,
        Ending::Exited(info) => {
            if let Some(why) = why_it_ended(&info, client).await {
                eprintln!("tether: {}", visible(&why));
            }
            exit_code(&info)
        }
    }
}

/// `reason: explanation` for an end other than `exit`.
async fn why_it_ended(info: &ProcessInfo, client: &Client) -> Option<String> {
    let code = exit_code(info);
    let signal = info.signal.as_deref().unwrap_or("?");
    Some(match info.reason? {
        ExitReason::Exit => return None,
        ExitReason::Signal => {
            format!("signal: the process was killed by SIG{signal} (exit {code})")
        }
        ExitReason::Timeout => {
            format!("timeout: the deadline passed and the server killed the session (exit {code})")
        }
        ExitReason::Killed if server_stopping(client).await => {
            format!("killed: the server shut down (exit {code})")
        }
        ExitReason::Killed => format!("killed: a kill request ended the session (exit {code})"),
        ExitReason::Unattached => format!(
            "unattached: the session had no attachment for its unattached_timeout_ms (exit {code})"
        ),
        ExitReason::Lost => {
            "lost: the server restarted while the process ran; its exit is unknown".to_string()
        }
        ExitReason::Oom => match info.limits.and_then(|l| l.memory_bytes) {
            Some(limit) => format!(
                "killed: out of memory (limit {})",
                crate::units::format_size(limit)
            ),
            None => "killed: out of memory".to_string(),
        },
    })
}

/// Whether the server is shutting down or gone: `/healthz` answers
/// anything but 200 (503 while shutting down) or nothing.
async fn server_stopping(client: &Client) -> bool {
    // The client's own HTTP settings: its TLS trust (--cacert) included.
    match client.health(Duration::from_secs(1)).await {
        Ok(status) => status != 200,
        Err(_) => true,
    }
}

/// Relays an attachment until the process exits or the detach keys are
/// typed (`screen`: it starts from the terminal screen). Raw mode (with
/// `tty`) lasts exactly as long as this call.
async fn session(
    signals: Caught,
    attachment: Attachment,
    screen: bool,
    local: Local,
) -> Result<Ending, Error> {
    // Replayed: a screen, and stdout below the end the hello reported.
    let replies = local.drop_replies.then(Replies::replaying);
    let fence = replies.as_ref().map(|replies| {
        let until = attachment.process().stdout_bytes;
        OutputFence::new(replies.clone(), until, screen)
    });
    // A PTY's output on a terminal changes that terminal's modes: they are
    // given back when the session ends (`modes.rs`).
    let give_back = attachment.process().tty && std::io::stdout().is_terminal();
    let Attachment {
        stdout,
        stderr,
        stdin,
        control,
        exit,
        ..
    } = attachment;
    let watch_keys = local.watch_keys && local.detach_keys != DetachKeys::none();
    let _watching = if watch_keys {
        Some(term::RawMode::enter_as(term::Keys::Watch)?)
    } else {
        None
    };
    let _raw = if local.tty {
        let raw = term::RawMode::enter()?;
        // Test hook: proves that a panic in raw mode restores the terminal.
        if std::env::var_os("TETHER_TEST_PANIC_IN_RAW_MODE").is_some() {
            panic!("TETHER_TEST_PANIC_IN_RAW_MODE is set");
        }
        Some(raw)
    } else {
        None
    };
    let (stop_out, stopped) = oneshot::channel::<()>();
    let (gave_back, given_back) = oneshot::channel::<()>();
    // Either local output closed (`| head -1`): the session ends at once.
    let (closed_tx, mut output_closed) = tokio::sync::mpsc::channel::<()>(2);
    let closed_err = closed_tx.clone();
    // A detach stops the output between writes (so that a reset follows
    // whole writes of the program's output, and nothing follows the detach
    // message).
    let out = tokio::spawn(async move {
        if !give_back {
            let result = tokio::select! {
                result = copy_output(stdout, tokio::io::stdout(), u64::MAX, fence) => result,
                Ok(()) = stopped => Ok(Copied::Whole),
            };
            tell_if_closed(&result, &closed_tx).await;
            return result;
        }
        let mut local = ModeWatch::new(tokio::io::stdout());
        let result = tokio::select! {
            result = copy_output(stdout, &mut local, u64::MAX, fence) => result,
            Ok(()) = stopped => Ok(Copied::Whole),
        };
        tell_if_closed(&result, &closed_tx).await;
        let reset = local.reset_sequence();
        let _ = local.write_all(&reset).await;
        let _ = local.flush().await;
        let _ = gave_back.send(());
        result
    });
    let err = tokio::spawn(async move {
        let result = copy_output(stderr, tokio::io::stderr(), u64::MAX, None).await;
        tell_if_closed(&result, &closed_err).await;
        result
    });
    let err_relay = err.abort_handle();
    let (detached_tx, detached_rx) = oneshot::channel();
    if local.forward_stdin {
        // Only a person at a terminal types detach keys; piped input is
        // passed through untouched.
        let keys = if std::io::stdin().is_terminal() {
            local.detach_keys
        } else {
            DetachKeys::none()
        };
        tokio::spawn(forward_input(
            tokio::io::stdin(),
            stdin,
            keys.watcher(),
            replies.map(InputFilter::new),
            detached_tx,
        ));
    } else if watch_keys {
        drop(stdin);
        tokio::spawn(watch_keys_only(
            tokio::io::stdin(),
            local.detach_keys.watcher(),
            detached_tx,
        ));
    } else {
        drop(stdin);
        drop(detached_tx);
    }
    if local.tty {
        let control = control.clone();
        // The PTY follows the terminal attached last (as tmux and the web
        // terminal do); the program redraws at the new size.
        if let Some((cols, rows)) = term::size() {
            let _ = control.resize(cols, rows).await;
        }
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
    // With --no-signals the first of them detaches instead.
    let (signal_detach_tx, mut signal_detach) = tokio::sync::mpsc::channel::<()>(1);
    for (mut stream, name) in signals.streams {
        let control = control.clone();
        let detach = signal_detach_tx.clone();
        let forward = signals.forward;
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if !forward {
                    let _ = detach.send(()).await;
                    return;
                }
                let _ = control.signal(name).await;
            }
        });
    }
    drop(signal_detach_tx);
    let finished = async {
        let (out, err) = (out.await, err.await);
        let info = exit.await?;
        for result in [out, err] {
            if let Ok(Err(e)) = result {
                // Output failed part way (the attachment broke for good).
                return Err(e);
            }
        }
        Ok(info)
    };
    let detached = async {
        // A dropped sender (stdin ended, or is not forwarded, or no signal
        // detaches) is no detach.
        tokio::select! {
            Ok(()) = detached_rx => {}
            Some(()) = signal_detach.recv() => {}
            else => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        result = finished => result.map(|info| Ending::Exited(Box::new(info))),
        Some(()) = output_closed.recv() => {
            err_relay.abort();
            let _ = stop_out.send(());
            Ok(Ending::OutputClosed)
        }
        () = detached => {
            err_relay.abort();
            let _ = stop_out.send(());
            // Bounded: a terminal that takes nothing (Ctrl-S) must not
            // hold the detach.
            let _ = tokio::time::timeout(GIVE_BACK_WAIT, given_back).await;
            Ok(Ending::Detached)
        }
    }
}

/// Tells the session that a local output was closed, if this copy ended so.
async fn tell_if_closed(copied: &Result<Copied, Error>, closed: &tokio::sync::mpsc::Sender<()>) {
    if let Ok(Copied::OutputClosed) = copied {
        let _ = closed.send(()).await;
    }
}
