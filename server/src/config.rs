//! Command-line flags and the limits they set. Every bound the server
//! enforces lives here with its default; docs/CONFIGURATION.md lists them. The flags
//! are never changed after parsing: what the server runs with is built
//! from them once (`options.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// The default listen address: loopback only, fixed port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

/// Where tetherd listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// TCP, with TLS when a certificate is given.
    Tcp(SocketAddr),
    /// A Unix socket at this path.
    Unix(PathBuf),
}

impl ListenAddr {
    /// True for a loopback address or a Unix socket: nothing another
    /// machine can reach.
    pub fn is_local(&self) -> bool {
        match self {
            ListenAddr::Tcp(addr) => addr.ip().is_loopback(),
            ListenAddr::Unix(_) => true,
        }
    }
}

impl std::str::FromStr for ListenAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<ListenAddr, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, as in unix:/run/tether.sock".into());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        text.parse::<SocketAddr>()
            .map(ListenAddr::Tcp)
            .map_err(|e| {
                format!("{text:?} is neither HOST:PORT (an IP address and port) nor unix:PATH: {e}")
            })
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The counts that cost file descriptors, as asked for by the flags or as
/// fitted to the open-file limit (`limits::fit_to_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Most processes running at once (`--max-processes`).
    pub max_processes: usize,
    /// Most processes known, running and exited (`--max-known-processes`).
    pub max_known_processes: usize,
    /// Most open connections (`--max-connections`).
    pub max_connections: usize,
    /// Most attachments in total (`--max-attachments`).
    pub max_attachments: usize,
}

/// `tetherd`: start processes, capture their output from the first byte, and
/// let WebSocket clients attach to them.
#[derive(Debug, Clone, Parser)]
#[command(name = "tetherd", version, about, args_override_self = true)]
pub struct Config {
    /// Where to listen: `HOST:PORT`, or `unix:PATH` for a Unix socket
    /// (created with mode 0600, or 0660 with --listen-group).
    #[arg(long, env = "TETHER_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: ListenAddr,

    /// With `--listen unix:PATH`: the group (name or gid) that may connect
    /// to the socket too (mode 0660).
    #[arg(long)]
    pub listen_group: Option<String>,

    /// Internal: started by a handover (issue 43), with the old binary's
    /// state in this descriptor. Set by tetherd itself, never by hand.
    #[arg(long, hide = true)]
    pub handover_fd: Option<i32>,

    /// Prints the handover state formats this binary reads, as JSON, and
    /// exits: the preflight a running tetherd asks of its new binary.
    #[arg(long, hide = true)]
    pub handover_check: bool,

    /// Operator token required on every /v1 request (browsers may pass it
    /// as the `access_token` query parameter or a `tether.bearer.TOKEN`
    /// subprotocol). Never passed to children. The token shows in `ps`
    /// when given as a flag: prefer --token-file. tetherd scrubs it from
    /// its own /proc/self/cmdline and environ at start. Without it (and
    /// without --token-file or --no-token) tetherd generates one and writes
    /// it to the generated token file.
    #[arg(long, env = "TETHER_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Read the operator token from this file (surrounding whitespace is
    /// trimmed). Keep it readable only by the user tetherd starts as.
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// Where a generated token is written (mode 0600) and where clients
    /// look for it. Default: $TETHER_TOKEN_FILE, else this server's own
    /// runtime entry (its URL and token) in $XDG_RUNTIME_DIR/tether/servers/,
    /// else ~/.local/state/tether/servers/.
    #[arg(long)]
    pub generated_token_file: Option<PathBuf>,

    /// Serve without any token: every local user of this machine can run
    /// commands as the server's user. Only on loopback or a Unix socket.
    #[arg(long)]
    pub no_token: bool,

    /// When tetherd runs as root: run every spawned process as this user
    /// (name or uid), so children cannot read the server's /proc entries,
    /// memory or token file. Its primary group applies unless --group says
    /// otherwise.
    #[arg(long)]
    pub user: Option<String>,

    /// With --user: the group (name or gid) of spawned processes.
    #[arg(long, requires = "user")]
    pub group: Option<String>,

    /// Groups (names or gids, comma-separated) no spawned process may run
    /// as, whether from --group, a spawn's `group` or a user's primary
    /// group: each gives what root has (raw disks, password hashes, the
    /// Docker socket, sudo). An empty list allows every group.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "root,adm,disk,docker,kmem,shadow,sudo,wheel"
    )]
    pub denied_groups: Vec<String>,

    /// Allow listening on a non-loopback address without a token (implies
    /// --no-token).
    #[arg(long)]
    pub insecure_no_token: bool,

    /// Certificate chain (PEM) to serve HTTPS and WSS on the listener;
    /// needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Longest lifetime of a scoped token, in milliseconds.
    #[arg(long, default_value_t = 7 * 24 * 3_600_000)]
    pub max_token_ttl_ms: u64,

    /// Extra browser origins allowed (the server's own origin always is;
    /// clients that send no Origin are allowed): any other origin gets 403
    /// `forbidden_origin` on every /v1 request, WebSocket or not. Repeatable.
    #[arg(long = "allow-origin")]
    pub allow_origins: Vec<String>,

    /// Directory of the built web demo, served at `/`.
    #[arg(long)]
    pub web_root: Option<PathBuf>,

    /// Default retention per output stream, in bytes: kept on disk (a ring
    /// file under --data-dir), the newest --retain-memory-bytes of it also
    /// in memory.
    #[arg(long, default_value_t = 64 << 20)]
    pub retain_bytes: u64,

    /// Newest bytes of each stream kept in memory (readers at the front are
    /// served from there), in bytes. With --memory-only, the whole
    /// retention per stream.
    #[arg(long, default_value_t = 1 << 20)]
    pub retain_memory_bytes: u64,

    /// Total disk retention reserved across all processes, in bytes: each
    /// reserves its per-stream retention on disk while it runs, and what
    /// its logs take once it has exited (pipes
    /// two streams, a PTY one); past it 503 retention_exhausted.
    #[arg(long, default_value_t = 64 << 30)]
    pub retain_disk_total: u64,

    /// Directory of the disk logs and process records. Default: a private
    /// directory (mode 0700) created at start and removed at a clean exit.
    /// Given explicitly, it survives restarts: the processes of the
    /// previous run are listed as exited (reason `lost` if they were still
    /// running) with their output readable until the exited TTL.
    #[arg(long, env = "TETHER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Keep retention in memory only (at most --retain-memory-bytes per
    /// stream), with no files at all.
    #[arg(long)]
    pub memory_only: bool,

    /// Largest retention per stream a request may ask for, in bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_retain_bytes: u64,

    /// Total memory retention reserved across all processes, in bytes.
    /// Each process reserves its per-stream memory window (two streams for
    /// pipes, one for a PTY) while it runs, and what its windows hold once
    /// it has exited, until it is forgotten.
    #[arg(long, default_value_t = 2 << 30)]
    pub retain_total: u64,

    /// Most processes running at once.
    #[arg(long, default_value_t = 1024)]
    max_processes: usize,

    /// Most processes known (running and exited) at once; past it the
    /// oldest exited ones are forgotten early.
    #[arg(long, default_value_t = 4096)]
    max_known_processes: usize,

    /// How long an exited process stays queryable (wait, status, replay),
    /// in milliseconds; 0: until it is removed (`tether rm`, DELETE) or
    /// its room is needed (--retain-total, --max-known-processes: oldest
    /// exit first), as `docker` keeps a container's logs until `rm`.
    #[arg(long, default_value_t = 0)]
    pub exited_ttl_ms: u64,

    /// After the process is reaped, how long capture keeps draining output
    /// that descendants hold open, in milliseconds. Past it the exit is
    /// reported with `output_incomplete`.
    #[arg(long, default_value_t = 1000)]
    pub drain_timeout_ms: u64,

    /// Between SIGTERM and SIGKILL when a deadline, the unattached timeout, a
    /// kill, a forced DELETE or shutdown kills a session, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub kill_grace_ms: u64,

    /// Default long-poll time of `wait`, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub default_wait_ms: u64,

    /// Longest long-poll of `wait`, in milliseconds. Keep it below the
    /// read timeout of any proxy in front (nginx: 60 s).
    #[arg(long, default_value_t = 55_000)]
    pub max_wait_ms: u64,

    /// Attachments per process.
    #[arg(long, default_value_t = 64)]
    pub max_attachments_per_process: usize,

    /// Attachments in total.
    #[arg(long, default_value_t = 4096)]
    max_attachments: usize,

    /// How long an input stream (attach with `input=ID`) is kept after its
    /// last attachment went away, in milliseconds: a resume within it
    /// applies each input once; later, it is refused with `input_expired`.
    #[arg(long, default_value_t = 300_000)]
    pub input_ttl_ms: u64,

    /// Input streams kept per process (held or within their TTL).
    #[arg(long, default_value_t = 64)]
    pub max_input_streams: usize,

    /// Memory for the idempotency records of HTTP input (`POST .../stdin`,
    /// `stdin/close`, `signal`, `resize` with an `Idempotency-Key`) across
    /// all processes, in bytes: each record counts its key plus 384 bytes.
    /// When it is full, a new keyed request is refused with 503
    /// `idempotency_exhausted` (one without a key still works).
    #[arg(long, default_value_t = 32 << 20)]
    pub idempotency_total: u64,

    /// Largest client WebSocket message, in bytes (close code 1009 past it).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_frame_bytes: usize,

    /// Largest data payload of one server frame, in bytes.
    #[arg(long, default_value_t = 256 << 10)]
    pub max_data_frame_bytes: usize,

    /// Largest HTTP request body (JSON, or raw stdin), in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// Largest `max_output_bytes` a `POST /v1/exec` may ask for (per
    /// stream), in bytes. An exec reserves three times its cap per stream
    /// against --retain-total while it runs (the bytes kept, their
    /// encoding, the answer's body).
    #[arg(long, default_value_t = 16 << 20)]
    pub max_exec_output_bytes: u64,

    /// Interval of WebSocket pings to each attachment, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub ping_interval_ms: u64,

    /// An attachment that has not answered a ping (with a pong or any message) for this long
    /// is closed, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub idle_timeout_ms: u64,

    /// An attachment whose socket takes no write for this long is closed
    /// (its process keeps running), in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub send_timeout_ms: u64,

    /// After sending Close, how long to wait for the client's Close before
    /// shutting the TCP connection, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub close_timeout_ms: u64,

    /// Open TCP connections at once, WebSocket attachments included. Past
    /// it a new connection displaces the connection that has waited longest
    /// for a request head; when none is waiting, it is answered 503 and
    /// closed. Sized from the fd limit when not given (see docs/CONFIGURATION.md).
    #[arg(long, default_value_t = 5120)]
    max_connections: usize,

    /// How long a connection may take to send a request head, and how long
    /// an idle keep-alive connection waits for the next one, in
    /// milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// How long a request body may take to arrive in full, from its head,
    /// in milliseconds (408 `body_timeout` past it).
    #[arg(long, default_value_t = 30_000)]
    pub body_timeout_ms: u64,

    /// After SIGTERM or SIGINT, how long until every connection is closed
    /// and tetherd exits, in milliseconds; never less than --kill-grace-ms
    /// plus --drain-timeout-ms plus --close-timeout-ms plus 1 s.
    #[arg(long, default_value_t = 10_000)]
    pub shutdown_timeout_ms: u64,

    /// Deadline of processes started by Kubernetes exec
    /// (`/api/v1/namespaces/{ns}/pods/{pod}/exec`), in milliseconds; 0:
    /// none. Kubernetes exec has no deadline of its own: this is the
    /// platform's policy, reported to the client as a timeout, exit code 124.
    #[arg(long, default_value_t = 0)]
    pub kube_exec_timeout_ms: u64,

    /// This host's name in a fleet: every process id becomes `NODE.HEX32`,
    /// so a proxy routes a request about a process by its path alone
    /// (deploy/nginx/). A DNS label: lowercase letters, digits and inner
    /// hyphens, at most 63 characters (a StatefulSet pod's name fits).
    #[arg(long, value_parser = parse_node)]
    pub node: Option<String>,

    /// On SIGTERM, how long running processes may go on before they are
    /// killed, in milliseconds. Meanwhile `/healthz` answers 503 `draining`
    /// and spawns are refused (503 `draining` with `Retry-After`), so a
    /// proxy or Kubernetes moves new work to other hosts; everything else
    /// (wait, attach, signal) is served as usual. 0: kill at once.
    #[arg(long, default_value_t = 0)]
    pub drain_grace_ms: u64,
    /// Worker threads of the async runtime (connections, capture, exits).
    /// 0: half the CPUs this process may use, at least one. Fewer workers
    /// hand less work from thread to thread: on 2 CPUs one worker echoes a
    /// keystroke 13-20 us sooner than two (docs/BENCHMARKS.md), and leaves
    /// the other CPU to the programs and their clients.
    #[arg(long, env = "TETHER_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Keep no terminal emulator for PTY processes (no `screen=1`, no
    /// `/screen`): saves its memory and CPU.
    #[arg(long)]
    pub no_screen: bool,

    /// Largest terminal a PTY may have, in cells (columns x rows), at
    /// spawn and at every resize (HTTP, WebSocket, Kubernetes); beyond it
    /// 400 invalid_request. Each PTY's screen also reserves its memory
    /// for its size against --retain-total.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_term_cells: u64,

    /// Lines of scrollback each PTY's screen keeps (and sends in screen
    /// snapshots), beside its visible rows.
    #[arg(long, default_value_t = 200)]
    pub screen_scrollback: usize,

    /// After this long without output, a PTY's terminal emulator is reduced
    /// to its snapshot bytes (a shell prompt: a few hundred bytes) until the
    /// next output.
    #[arg(long, default_value_t = 1000)]
    pub screen_idle_ms: u64,

    /// Log as JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,

    /// How descendants of a process are contained: `auto` (a cgroup v2 if
    /// writable, else the cgroup v1 freezer, else its session), or one of
    /// `cgroup2`, `cgroup1-freezer` (refuse to start without it), `session`.
    #[arg(long, value_enum, default_value_t = crate::contain::ContainmentMode::Auto)]
    pub containment: crate::contain::ContainmentMode,

    /// Resource limits: `--default-memory-bytes`, `--default-cpus`,
    /// `--default-pids`, `--default-memory-high-bytes` and the `--max-*`
    /// of each (see `contain/limits.rs`).
    #[command(flatten)]
    pub limits: crate::contain::limits::LimitFlags,
}

impl Config {
    /// The token given by `--token` or `TETHER_TOKEN` (not `--token-file`):
    /// start-up decides the token in force (`ServerOptions::token`).
    pub fn given_token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The capacities the flags ask for; start-up may lower the defaults
    /// among them to fit the open-file limit (`ServerOptions::capacity`).
    pub fn asked_capacity(&self) -> Capacity {
        Capacity {
            max_processes: self.max_processes,
            max_known_processes: self.max_known_processes,
            max_connections: self.max_connections,
            max_attachments: self.max_attachments,
        }
    }

    /// The configuration with every default, for tests and embedding.
    pub fn defaults() -> Config {
        Config::parse_from(["tetherd"])
    }

    pub(crate) fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
    pub(crate) fn kill_grace(&self) -> Duration {
        Duration::from_millis(self.kill_grace_ms)
    }
    pub(crate) fn exited_ttl(&self) -> Option<Duration> {
        (self.exited_ttl_ms > 0).then(|| Duration::from_millis(self.exited_ttl_ms))
    }
    pub(crate) fn ping_interval(&self) -> Duration {
        Duration::from_millis(self.ping_interval_ms.max(1))
    }
    pub(crate) fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
    pub(crate) fn send_timeout(&self) -> Duration {
        Duration::from_millis(self.send_timeout_ms)
    }
    pub(crate) fn screen_idle(&self) -> Duration {
        Duration::from_millis(self.screen_idle_ms.max(1))
    }
    pub(crate) fn close_timeout(&self) -> Duration {
        Duration::from_millis(self.close_timeout_ms)
    }
    pub(crate) fn drain_grace(&self) -> Duration {
        Duration::from_millis(self.drain_grace_ms)
    }
    pub(crate) fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms.max(1))
    }
    pub(crate) fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms.max(1))
    }
    /// From the signal to exit: the flag, but at least long enough for
    /// every process to be killed and every attachment to get its exit
    /// frame and close handshake.
    pub(crate) fn shutdown_timeout(&self) -> Duration {
        let needed = self.kill_grace()
            + self.drain_timeout()
            + self.close_timeout()
            + Duration::from_secs(1);
        Duration::from_millis(self.shutdown_timeout_ms).max(needed)
    }
}

/// A node name is a DNS label, so it can be a host name, an nginx upstream
/// name and a path segment, and a `.` can end it inside a process id.
fn parse_node(name: &str) -> Result<String, String> {
    let inner_ok = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends_ok = !name.starts_with('-') && !name.ends_with('-');
    if name.is_empty() || name.len() > 63 || !inner_ok || !ends_ok {
        return Err(format!(
            "{name:?} is not a DNS label (lowercase letters, digits and inner hyphens, 1 to 63 characters)"
        ));
    }
    Ok(name.to_string())
}
