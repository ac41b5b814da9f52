//! Counters for `GET /metrics` (Prometheus text format). Plain atomics,
//! updated where the event happens; gauges are counted at scrape time by
//! whoever knows them and handed to [`Metrics::render`].

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use tether_protocol::{ExitReason, StreamName};

/// The gauges of a scrape, counted by the process table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Known processes still running.
    pub running: u64,
    /// Known processes that have exited.
    pub exited: u64,
    /// Open attachments.
    pub attachments: u64,
    /// Bytes charged to `--idempotency-total` by HTTP input's idempotency
    /// records.
    pub idempotency_record_bytes: u64,
}

/// Every counter the server exports.
#[derive(Debug, Default)]
pub struct Metrics {
    pub spawns: AtomicU64,
    pub spawn_failures: AtomicU64,
    pub wait_requests: AtomicU64,
    pub attaches: AtomicU64,
    /// Per stream: bytes read from the process.
    pub captured: [AtomicU64; 2],
    /// Per stream: data bytes sent to attachments.
    pub sent: [AtomicU64; 2],
    /// Per stream: bytes reported to attachments as `dropped`.
    pub dropped: [AtomicU64; 2],
    /// Exits by reason: exit, signal, timeout, killed, unattached, lost, oom.
    pub exits: [AtomicU64; 7],
    /// Open TCP connections, attachments included (kept by the listener).
    pub connections_open: AtomicU64,
    /// Connections answered 503 at the `--max-connections` cap.
    pub connections_refused: AtomicU64,
    /// Connections closed to make room for a newer one (they had waited
    /// longest for a request head).
    pub connections_displaced: AtomicU64,
    /// Refused requests by reason (their error code), in [`REFUSAL_REASONS`] order.
    pub refusals: [AtomicU64; REFUSAL_REASONS.len()],
}

/// The error codes a refusal can have, each a label of
/// `tether_refusals_total`.
pub const REFUSAL_REASONS: [&str; 7] = [
    "unauthorized",
    "token_expired",
    "token_process_gone",
    "out_of_scope",
    "missing_right",
    "forbidden_origin",
    "forbidden_host",
];

fn reason_index(reason: ExitReason) -> usize {
    match reason {
        ExitReason::Exit => 0,
        ExitReason::Signal => 1,
        ExitReason::Timeout => 2,
        ExitReason::Killed => 3,
        ExitReason::Unattached => 4,
        ExitReason::Lost => 5,
        ExitReason::Oom => 6,
    }
}

/// The counters a handover carries, so that rates do not jump (the open
/// connections are a gauge, counted anew).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CarriedMetrics {
    pub counters: Vec<u64>,
}

impl Metrics {
    fn counters(&self) -> Vec<&AtomicU64> {
        let mut all = vec![
            &self.spawns,
            &self.spawn_failures,
            &self.wait_requests,
            &self.attaches,
            &self.connections_refused,
            &self.connections_displaced,
        ];
        all.extend(self.captured.iter());
        all.extend(self.sent.iter());
        all.extend(self.dropped.iter());
        all.extend(self.exits.iter());
        all.extend(self.refusals.iter());
        all
    }

    /// The counters as carried.
    pub fn carried(&self) -> CarriedMetrics {
        CarriedMetrics {
            counters: self
                .counters()
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// Sets the counters a handover carried (in the same order; a binary
    /// with more counters starts the new ones at zero).
    pub fn adopt(&self, carried: &CarriedMetrics) {
        for (counter, value) in self.counters().iter().zip(&carried.counters) {
            counter.store(*value, Ordering::Relaxed);
        }
    }

    /// Counts one refused request by its error code.
    pub fn refused(&self, code: &str) {
        if let Some(i) = REFUSAL_REASONS.iter().position(|r| *r == code) {
            self.refusals[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one exit.
    pub fn exited(&self, reason: ExitReason) {
        self.exits[reason_index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds to a per-stream counter.
    pub fn add(counter: &[AtomicU64; 2], stream: StreamName, n: u64) {
        counter[stream.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    /// `node` (`--node`) labels every series, so one scrape config serves
    /// a whole fleet.
    pub fn render(&self, gauges: Gauges, node: Option<&str>) -> String {
        let mut out = String::new();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut metric = |name: &str, kind: &str, help: &str, rows: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in rows {
                let labels = match (node, labels.strip_prefix('{')) {
                    (None, _) => labels.clone(),
                    (Some(node), None) => format!("{{node=\"{node}\"}}"),
                    (Some(node), Some(rest)) => format!("{{node=\"{node}\",{rest}"),
                };
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        metric(
            "tether_processes",
            "gauge",
            "Known processes by status.",
            &[
                ("{status=\"running\"}".into(), gauges.running),
                ("{status=\"exited\"}".into(), gauges.exited),
            ],
        );
        metric(
            "tether_attachments",
            "gauge",
            "Open attachments.",
            &[(String::new(), gauges.attachments)],
        );
        metric(
            "tether_idempotency_record_bytes",
            "gauge",
            "Bytes the idempotency records of HTTP input hold (--idempotency-total).",
            &[(String::new(), gauges.idempotency_record_bytes)],
        );
        metric(
            "tether_worker_threads",
            "gauge",
            "Worker threads of the async runtime (--worker-threads).",
            &[(String::new(), worker_threads())],
        );
        metric(
            "tether_connections",
            "gauge",
            "Open TCP connections, attachments included.",
            &[(String::new(), get(&self.connections_open))],
        );
        metric(
            "tether_connections_refused_total",
            "counter",
            "Connections answered 503 at the --max-connections cap.",
            &[(String::new(), get(&self.connections_refused))],
        );
        metric(
            "tether_connections_displaced_total",
            "counter",
            "Connections closed to make room, having waited longest for a request.",
            &[(String::new(), get(&self.connections_displaced))],
        );
        metric(
            "tether_spawns_total",
            "counter",
            "Processes started.",
            &[(String::new(), get(&self.spawns))],
        );
        metric(
            "tether_spawn_failures_total",
            "counter",
            "Spawn requests that failed.",
            &[(String::new(), get(&self.spawn_failures))],
        );
        metric(
            "tether_attaches_total",
            "counter",
            "Attachments opened.",
            &[(String::new(), get(&self.attaches))],
        );
        metric(
            "tether_wait_requests_total",
            "counter",
            "Wait (long-poll) requests.",
            &[(String::new(), get(&self.wait_requests))],
        );
        let per_stream = |c: &[AtomicU64; 2]| -> Vec<(String, u64)> {
            StreamName::ALL
                .iter()
                .map(|s| (format!("{{stream=\"{}\"}}", s.as_str()), get(&c[s.index()])))
                .collect()
        };
        metric(
            "tether_bytes_captured_total",
            "counter",
            "Bytes read from processes.",
            &per_stream(&self.captured),
        );
        metric(
            "tether_bytes_sent_total",
            "counter",
            "Data bytes sent to attachments.",
            &per_stream(&self.sent),
        );
        metric(
            "tether_bytes_dropped_total",
            "counter",
            "Bytes reported to attachments as dropped (evicted before they were sent).",
            &per_stream(&self.dropped),
        );
        let reasons = [
            "exit",
            "signal",
            "timeout",
            "killed",
            "unattached",
            "lost",
            "oom",
        ];
        metric(
            "tether_exits_total",
            "counter",
            "Process exits by reason.",
            &reasons
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{{reason=\"{r}\"}}"), get(&self.exits[i])))
                .collect::<Vec<_>>(),
        );
        metric(
            "tether_refusals_total",
            "counter",
            "Requests refused by the access check, by reason.",
            &REFUSAL_REASONS
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{{reason=\"{r}\"}}"), get(&self.refusals[i])))
                .collect::<Vec<_>>(),
        );
        out
    }
}

/// The runtime's worker threads; 0 outside one (unit tests).
fn worker_threads() -> u64 {
    tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_workers() as u64)
}
