//! The command line: what `tether` accepts, parsed by clap.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::detach::DetachKeys;

/// What `tether --help` opens with.
const LONG_ABOUT: &str = "\
Run commands on a tetherd server and attach to them, as `docker exec` does
for containers: the output is captured on the server from the first byte,
so you can detach, re-attach, and read it again later.

  tether run -- make test        run, relay stdout/stderr, exit with its code
  tether run -t -- bash          an interactive shell on a PTY
                                 (Ctrl-P Ctrl-Q detaches, the shell runs on)
  tether attach ID               re-attach; ID may be any unique prefix
  tether run --name web -d -- ./serve    start in the background, by name
  tether ps / logs / wait / kill / rm
  tether share ID [--write]      a web-terminal link for this one session

Exit status: the remote exit code (124: its deadline fired, 128+N: signal
N); 0 after a detach; 125 when tether itself fails (bad arguments, unknown
id, server unreachable); 126 when the program cannot be run (not
executable, bad --cwd); 127 when it is not found.

Pipes end as in a shell: when tether's stdout or stderr is closed (`tether
run -- yes | head -1`), `run`, `attach` and `logs` stop at once with status
141 and print nothing more; `run` sends its program SIGPIPE (as a local
pipeline would), `attach` and `logs -f` leave it running.";

/// The `tether` command line.
#[derive(Debug, Parser)]
#[command(
    name = "tether",
    version,
    propagate_version = true,
    about = "Run commands on a tetherd server and attach to them, as `docker exec` does for containers",
    long_about = LONG_ABOUT
)]
pub struct Cli {
    /// Base URL of the server.
    #[arg(
        long,
        env = "TETHER_SERVER",
        default_value = "http://127.0.0.1:7420",
        global = true,
        help_heading = "Global options"
    )]
    pub server: String,

    /// Bearer token for the server. Default: for a server on this machine,
    /// the token it generated, from $TETHER_TOKEN_FILE, else its runtime
    /// entry in $XDG_RUNTIME_DIR/tether/servers/ (or
    /// ~/.local/state/tether/servers/).
    #[arg(
        long,
        env = "TETHER_TOKEN",
        hide_env_values = true,
        global = true,
        help_heading = "Global options"
    )]
    pub token: Option<String>,

    /// Also trust the CA certificate(s) in this PEM file for an https://
    /// server (beside the system's roots), as `curl --cacert`; for a
    /// self-signed server, its certificate.
    #[arg(
        long,
        env = "TETHER_CACERT",
        value_name = "FILE",
        global = true,
        help_heading = "Global options"
    )]
    pub cacert: Option<std::path::PathBuf>,

    /// Accept any certificate from an https:// server: encrypted, but not
    /// authenticated. For test servers only; prefer --cacert.
    #[arg(long, global = true, help_heading = "Global options")]
    pub insecure: bool,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per invocation: `run`'s many flags cost nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a process and attach to it; exit with its exit code.
    Run(RunArgs),
    /// Attach to a running process (replays its retained output first).
    Attach {
        /// Process id, unique prefix or name.
        id: String,
        /// Forward local stdin (always on for a PTY process when stdin is a
        /// terminal).
        #[arg(short, long)]
        interactive: bool,
        /// Start at the current end of the output instead of replaying it.
        #[arg(long)]
        no_replay: bool,
        /// Watch only: signals to tether (Ctrl-C, TERM, HUP, QUIT) detach
        /// it instead of reaching the process, which runs on (docker's
        /// --sig-proxy=false).
        #[arg(long)]
        no_signals: bool,
        #[command(flatten)]
        detach_keys: DetachKeysArg,
    },
    /// Wait for a process to exit; print and exit with its exit code.
    Wait {
        /// Process id, unique prefix or name.
        id: String,
    },
    /// List processes.
    Ps {
        /// Every known process, exited ones too (without it, running ones,
        /// as `docker ps`).
        #[arg(short, long)]
        all: bool,
        /// Every column whole: full ids, PID, exit code, reason, TTY, start
        /// time, CPU and peak memory, the whole command.
        #[arg(long)]
        no_trunc: bool,
        /// Print the process objects as JSON (every known process, unless
        /// --filter says otherwise: what scripts read is unchanged).
        #[arg(long)]
        json: bool,
        /// Print only the ids, one a line (for `xargs`, as `docker ps -q`).
        #[arg(short, long, conflicts_with = "json")]
        quiet: bool,
        /// Only the processes that match: `status=running` or
        /// `status=exited`.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_filter)]
        filter: Option<StatusFilter>,
    },
    /// Print one process object as JSON.
    Status {
        /// Process id, unique prefix or name.
        id: String,
    },
    /// Kill a process's whole session (SIGKILL, as `docker kill`); it stays
    /// known (`wait`, `logs`, `status`) until `tether rm` or its TTL.
    Kill {
        /// Process id, unique prefix or name.
        id: String,
        /// Send TERM first and KILL only after this long (`2s`, ...).
        #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
        grace: Option<Duration>,
    },
    /// Forget an exited process (its output and exit); `-f` kills a running
    /// one first.
    Rm {
        /// Process id, unique prefix or name.
        id: String,
        /// Kill it first if it is still running.
        #[arg(short, long)]
        force: bool,
    },
    /// Send a signal (TERM, INT, KILL, HUP, QUIT, USR1, USR2, PIPE, CONT,
    /// STOP, WINCH) to a process group.
    Signal {
        /// Process id, unique prefix or name.
        id: String,
        /// Signal name or number.
        signal: String,
    },
    /// Print a PTY process's terminal screen now: the text a person sees,
    /// one line per row (or, with --ansi, the escape sequences that redraw
    /// it, colours and all).
    Screen {
        /// Process id, unique prefix or name.
        id: String,
        /// Print the escape-sequence form instead of plain text.
        #[arg(long)]
        ansi: bool,
    },
    /// Print a link to the web terminal that shows this one session
    /// (read-only unless --write), carrying a token scoped to it.
    Share {
        /// Process id, unique prefix or name.
        id: String,
        /// Let the link type into the session (stdin, resize, signal).
        #[arg(long)]
        write: bool,
        /// How long the link works (`30m`, `2h`, ...).
        #[arg(long, value_name = "DUR", default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: Duration,
    },
    /// Copy files and directories between this machine and the
    /// filesystem a process sees, as `docker cp`: `tether cp SRC ID:PATH`
    /// or `tether cp ID:PATH DEST`. A relative PATH is taken from the
    /// process's working directory, and the copy runs as the process's
    /// user (a `tar` beside it, which the process's system must have);
    /// modes and times are kept, symbolic links copied as links. Into an
    /// existing directory the source keeps its name, else it takes the
    /// destination's. `-` is a tar archive on stdin or stdout. Needs the
    /// operator's token. Exits 1 when the copy fails.
    Cp {
        /// `ID:PATH`, a local path, or `-` (a tar archive on stdin).
        source: String,
        /// `ID:PATH`, a local path, or `-` (a tar archive on stdout).
        dest: String,
    },
    /// The server itself (the operator's token).
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Write a process's recording to stdout: an asciicast of its retained
    /// output with the times it was written (both streams, resizes, lost
    /// ranges as markers, the exit), following a running process until it
    /// exits. Play it with `asciinema play FILE`.
    Record {
        /// Process id, unique prefix or name.
        id: String,
        /// The asciicast version: 3 (asciinema 3, asciinema-player 3.10+)
        /// or 2 (asciinema 2 and older players).
        #[arg(long = "format-version", value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=3))]
        format_version: u8,
        /// Only what is retained now, even of a running process.
        #[arg(long)]
        no_follow: bool,
    },
    /// Print a process's retained output (stdout to stdout, stderr to
    /// stderr).
    Logs {
        /// Process id, unique prefix or name.
        id: String,
        /// Keep printing until the process exits.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines of each stream (then, with --follow, what
        /// comes next).
        #[arg(short = 'n', long, value_name = "N")]
        tail: Option<usize>,
        /// Only what was written since then: a duration ago (`10m`, `2h`)
        /// or a time (`2026-12-06T07:00:00Z`), as `docker logs --since`
        /// (from the server's time index: to within 10 ms for recent
        /// output, more coarsely for a long run's oldest).
        #[arg(long, value_name = "DURATION|TIME", value_parser = parse_since)]
        since: Option<std::time::SystemTime>,
        /// Only what was written before then (a duration ago or a time),
        /// as `docker logs --until`.
        #[arg(long, value_name = "DURATION|TIME", value_parser = parse_since)]
        until: Option<std::time::SystemTime>,
        /// Each line starts with the time it was written (RFC 3339, UTC,
        /// milliseconds), as `docker logs -t`, from the server's time index.
        #[arg(short = 't', long, conflicts_with = "tail")]
        timestamps: bool,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run on a PTY sized to the local terminal, in raw mode.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Forward local stdin to the process (implied by -t).
    #[arg(short, long)]
    pub interactive: bool,
    /// Server-side deadline (`1s`, `5m`, ...); exit status 124 when it fires.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Environment variable for the process (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Run the process as this user (name or uid), as `docker exec -u`:
    /// only a server running as root can switch user.
    #[arg(short, long)]
    pub user: Option<String>,
    /// With --user: run with this group (name or gid) instead of the
    /// user's primary group.
    #[arg(short, long, requires = "user")]
    pub group: Option<String>,
    /// Working directory of the process.
    #[arg(short = 'w', long, visible_alias = "workdir")]
    pub cwd: Option<String>,
    /// Drop output the client is too slow for (reported as gaps) instead
    /// of pacing the program (an attached run's default, `overflow:
    /// block`). A detached run (-d) drops by default.
    #[arg(long, conflicts_with = "block")]
    pub drop: bool,
    /// Pace the program to its readers (`overflow: block`) even when
    /// detached: with nobody attached it stops once its retention is full,
    /// until someone attaches and reads.
    #[arg(long)]
    pub block: bool,
    /// Per-stream retention on the server, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub retain: Option<u64>,
    /// Print the process id and return at once, without attaching. The
    /// program never waits for a reader: the server keeps the newest
    /// --retain bytes of each stream (its --retain-bytes default, 64 MiB,
    /// on disk) and drops the oldest past that (`logs`, `attach` show the
    /// gap); --block to pace it instead.
    #[arg(short, long)]
    pub detach: bool,
    /// Signals to tether (Ctrl-C, TERM, HUP, QUIT) detach it instead of
    /// reaching the process, which runs on (docker's --sig-proxy=false).
    #[arg(long, conflicts_with = "detach")]
    pub no_signals: bool,
    /// A name for the process, unique on the server, usable wherever its
    /// id is.
    #[arg(long)]
    pub name: Option<String>,
    /// End the process (reason `unattached`) once nobody has been attached
    /// to it for this long (`10m`, ...), counted afresh from each detach.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub unattached_timeout: Option<Duration>,
    /// Record what is typed into it (its stdin) in its recording
    /// (`tether record`), as `i` events. Off by default: keystrokes
    /// include passwords, and whoever may read it may read its recording.
    #[arg(long)]
    pub record_input: bool,
    /// Memory limit of the process and everything it forks (`512M`, `1G`;
    /// no swap). Past it the kernel's OOM killer ends it: exit 137,
    /// "killed: out of memory".
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub memory: Option<u64>,
    /// CPU limit as a share of CPUs, as `docker --cpus` (`0.5`, `2`).
    #[arg(long, value_name = "CPUS")]
    pub cpus: Option<f64>,
    /// Most processes and threads at once; past it `fork` fails.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Soft memory limit: past it the process is slowed, not killed
    /// (cgroup v2 only).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub memory_high: Option<u64>,
    #[command(flatten)]
    pub detach_keys: DetachKeysArg,
    /// Program and arguments. Everything from the program on is its own,
    /// dashes included (`tether run ls -la`); before it, an unknown option
    /// is a usage error (exit 125, the closest option suggested), so a
    /// program whose name starts with `-` must follow `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROG")]
    pub argv: Vec<String>,
}

/// `--detach-keys`, shared by `run` and `attach`.
#[derive(Debug, Args)]
pub struct DetachKeysArg {
    /// Key sequence that detaches from the process and leaves it running,
    /// when stdin is a terminal (forwarded, or for `attach` watched for
    /// these keys alone; docker's syntax: letters and `ctrl-X`,
    /// comma-separated; empty to disable).
    #[arg(
        long = "detach-keys",
        value_name = "KEYS",
        default_value = "ctrl-p,ctrl-q",
        value_parser = DetachKeys::parse
    )]
    pub keys: DetachKeys,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {text:?}")),
    }
}

/// `ps --filter status=...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    Running,
    Exited,
}

fn parse_filter(text: &str) -> Result<StatusFilter, String> {
    match text.split_once('=') {
        Some(("status", "running")) => Ok(StatusFilter::Running),
        Some(("status", "exited")) => Ok(StatusFilter::Exited),
        Some(("status", other)) => Err(format!("unknown status {other:?} (running or exited)")),
        _ => Err(format!(
            "unknown filter {text:?} (status=running or status=exited)"
        )),
    }
}

/// `--since`: a duration before now, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<std::time::SystemTime, String> {
    if let Ok(ago) = humantime::parse_duration(text) {
        return std::time::SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("{text} ago is before the epoch"));
    }
    humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!("{text:?} is neither a duration (10m, 2h) nor a time (2026-12-06T07:00:00Z)")
    })
}

/// `tether admin ...`.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Hand the server over to a new binary in place (by default the file
    /// tetherd was started from, as a package upgrade replaced it): every
    /// process runs on, every attachment resumes by itself. Waits until the
    /// new binary serves; exits 1 if it is refused (the server serves on,
    /// unchanged) with the reason.
    Upgrade {
        /// The new binary.
        #[arg(long, value_name = "PATH")]
        binary: Option<String>,
        /// Flags for the new binary, after `--`, added to the server's own
        /// (`-- --max-processes 500`): what a handover cannot change (the
        /// listen address, the data directory...) is refused.
        #[arg(last = true, value_name = "FLAGS")]
        flags: Vec<String>,
    },
}
