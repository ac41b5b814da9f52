//! The process object: what `GET /v1/processes/{id}`, `wait`, `hello` and
//! `exit` all report, so every view of a process agrees.

use serde::{Deserialize, Serialize};

use crate::resources::{Limits, Usage};

/// Whether a process is still running. `exited` means reaped *and* output
/// capture complete, so "wait, then read the output" never misses the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStatus {
    /// Not yet reaped, or reaped with capture still draining.
    Running,
    /// Reaped and capture complete; the exit fields are set.
    Exited,
}

/// Why a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// It exited by itself; `exit_code` is its code.
    Exit,
    /// A signal that the server did not send for a deadline killed it;
    /// `exit_code` is 128 + the signal number.
    Signal,
    /// The server fired its `timeout_ms` deadline and killed its session;
    /// `exit_code` is 124, as `timeout(1)` reports.
    Timeout,
    /// A kill request (`POST /v1/processes/{id}/kill`, a forced `DELETE`)
    /// or server shutdown killed its session.
    Killed,
    /// Its `unattached_timeout_ms` passed with no attachment, and the server
    /// killed its session.
    Unattached,
    /// The server restarted (a crash or an upgrade) while it ran: it was not
    /// supervised after that, its exit is unknown (`exit_code` null) and
    /// only its retained output was read back from `--data-dir`.
    Lost,
    /// The kernel's OOM killer ended a member of its cgroup (it reached its
    /// `limits.memory_bytes`) and it then failed; `exit_code` stays the
    /// program's (137 for a leader that KILL ended, as `signal` says).
    Oom,
}

/// What happens when a stream's retention is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Evict the oldest bytes (reported to attachments as `dropped`); the
    /// process never waits for its readers.
    #[default]
    Drop,
    /// Stop reading the stream until the slowest attachment has been sent
    /// the retained bytes: the program waits on its write as on a full pipe.
    Block,
}

/// How the server contains a process: what DELETE, a deadline and the
/// server's own death reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Containment {
    /// A cgroup v2 of its own: every descendant, however it detached.
    #[serde(rename = "cgroup2")]
    Cgroup2,
    /// A cgroup of its own in the v1 freezer hierarchy: every descendant.
    #[serde(rename = "cgroup1-freezer")]
    Cgroup1Freezer,
    /// Its session only: a descendant that calls `setsid` escapes.
    #[serde(rename = "session")]
    Session,
}

/// The process object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Server-assigned id, used in every URL.
    pub id: String,
    /// The name given at spawn, if any (absent from the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// OS process id of the session leader.
    pub pid: u32,
    /// The argv that was executed (`["/bin/sh","-c",cmd]` for `command`).
    pub argv: Vec<String>,
    /// Whether the process runs on a PTY (one output stream, `stdout`).
    pub tty: bool,
    /// The overflow mode of its output streams.
    pub overflow: Overflow,
    /// `running` or `exited`.
    pub status: ProcessStatus,
    /// RFC 3339 UTC with milliseconds.
    pub started_at: String,
    /// The exit code: the program's own for `exit`, 128+N for a signal
    /// death, 124 for `timeout`. Null while running.
    pub exit_code: Option<i32>,
    /// Name (without `SIG`) of the signal that ended it, else null.
    pub signal: Option<String>,
    /// Why it ended; null while running.
    pub reason: Option<ExitReason>,
    /// RFC 3339 UTC with milliseconds: the moment it counted as exited
    /// (reaped and capture complete), the same moment `wait` returns.
    pub finished_at: Option<String>,
    /// Monotonic milliseconds from spawn to reap.
    pub duration_ms: Option<u64>,
    /// Total bytes written to stdout so far (retained or not).
    pub stdout_bytes: u64,
    /// Total bytes written to stderr so far (retained or not).
    pub stderr_bytes: u64,
    /// True when a descendant kept an output open past the drain bound and
    /// capture stopped before end of file.
    pub output_incomplete: bool,
    /// RFC 3339 UTC with milliseconds: when the oldest byte still retained
    /// (either stream) was written, from the server's time index (at most
    /// one mark's spacing early: 10 ms at first, coarser for long
    /// outputs). Absent with nothing retained or no time known (a process
    /// lost in a crash, or from a server that predates the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_retained_at: Option<String>,
    /// RFC 3339 UTC with milliseconds: when the newest retained byte was
    /// written, as `first_retained_at` is told. Absent when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_retained_at: Option<String>,
    /// True when its input is recorded (the spawn's `record_input`): what
    /// is typed into it shows in its recording. Absent when false, so an
    /// attaching viewer can tell.
    #[serde(default, skip_serializing_if = "is_false")]
    pub records_input: bool,
    /// Why some of its output is not retained on disk (`disk full`, or the
    /// OS error), when that happened; absent otherwise. Output that left
    /// memory unwritten is reported to readers as `dropped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_error: Option<String>,
    /// Set only on processes started by Kubernetes exec
    /// (`GET /api/v1/namespaces/{ns}/pods/{pod}/exec`): the names the client
    /// used. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesNames>,
    /// The host that runs the process (`tetherd --node`), absent on a
    /// server started without one. Also the part of `id` before its dot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// How it is contained; absent from servers that predate the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Containment>,
    /// The resource limits applied to it; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// What it used, live while it runs and final at its exit; absent
    /// where the server cannot account (session containment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// True once it hit `limits.pids` (a `fork` failed with EAGAIN);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pids_limit_hit: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The namespace, pod and container a Kubernetes client named when it
/// started a process with exec. tetherd has no pods: these are labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesNames {
    /// The namespace of the exec URL.
    pub namespace: String,
    /// The pod of the exec URL.
    pub pod: String,
    /// The `container` query parameter, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl ProcessInfo {
    /// True once the process has been reaped and its capture completed.
    pub fn is_exited(&self) -> bool {
        self.status == ProcessStatus::Exited
    }
}
