//! Section 7: what disk retention costs (issue 15).
//!
//! - Throughput in block mode through pipes and a PTY, every byte checked,
//!   with disk retention (the default: an 8 MiB ring file per stream behind
//!   the 1 MiB memory window) against memory only (`--memory-only
//!   --retain-memory-bytes=8388608`: the same 8 MiB per stream, all in
//!   memory, as retention was before the disk), and with disk and an 8 MiB
//!   window (the same memory as the baseline: the write alone). Three
//!   servers, runs interleaved in rotating order; the ratio of the medians
//!   is the figure, with the spread of the per-run ratios.
//! - `POST /v1/exec` of `true` (one request, the exited process and its
//!   output back) beside the fork+exec floor and the POST + attach + exit
//!   frame path.
//! - Many processes that each printed a log with nobody reading
//!   (`--retention-procs` x `--retention-mib`): the server's peak RSS
//!   against the memory windows plus a fixed overhead, and every log read
//!   back byte-exact over `GET /output`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use tether_protocol::{Overflow, ServerFrame};

use crate::client::{argv, shell, Api};
use crate::ctx::Ctx;
use crate::floors;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::RssSampler;
use crate::throughput::{mbps, transfer, Transfer, VARIANTS};

const SECTION: u8 = 7;
/// The memory window of a disk-retained stream (tetherd's default).
const WINDOW: u64 = 1 << 20;
/// Processes the many-logs run keeps spawning at once.
const SPAWN_CONCURRENCY: usize = 32;
/// Fixed overhead allowed per process past its windows in the many-logs
/// run (task, pipes, read buffer, bookkeeping), and for the whole server.
const OVERHEAD_PER_PROCESS: u64 = 256 << 10;
const OVERHEAD_FIXED: u64 = 32 << 20;

/// Section 7.
pub async fn retention(ctx: &mut Ctx) -> Result<()> {
    throughput(ctx).await?;
    exec(ctx).await?;
    many_logs(ctx).await
}

/// The servers the throughput runs compare: the first is the baseline (the
/// same retention, all in memory); the last is retention as it was before
/// the disk, by default (1 MiB per stream in memory), for comparison.
const SIDES: [(&str, &str, &[&str]); 4] = [
    (
        "memory",
        "memory only (8 MiB in memory)",
        &["--memory-only", "--retain-memory-bytes=8388608"],
    ),
    ("disk", "disk (8 MiB file, 1 MiB window)", &[]),
    (
        "disk_window8",
        "disk (8 MiB file, 8 MiB window)",
        &["--retain-memory-bytes=8388608"],
    ),
    (
        "memory1",
        "memory only (1 MiB: the default before the disk)",
        &["--memory-only"],
    ),
];

/// Index in [`SIDES`] of the pre-disk default.
const BEFORE_DISK: usize = 3;

/// Disk against memory-only throughput, block mode, no credit window.
async fn throughput(ctx: &mut Ctx) -> Result<()> {
    let mut servers = Vec::new();
    let mut apis = Vec::new();
    for (_, _, flags) in SIDES {
        let server = ctx.start_server(&flags.iter().map(|f| f.to_string()).collect::<Vec<_>>())?;
        apis.push(Api::new(&server.base)?);
        servers.push(server);
    }
    let block = VARIANTS
        .iter()
        .copied()
        .find(|v| v.overflow == Overflow::Block && v.window.is_none())
        .context("no block-mode variant")?;
    for (tty, bytes) in [(false, ctx.p.pipe_bytes), (true, ctx.p.pty_bytes)] {
        let kind = if tty { "pty" } else { "pipe" };
        let mut runs: Vec<Vec<Transfer>> = vec![Vec::new(); SIDES.len()];
        for run in 0..ctx.p.tp_runs.max(2) {
            // Interleaved, the order rotating, so neither load drift nor
            // going first favours a side.
            for k in 0..SIDES.len() {
                let side = (run + k) % SIDES.len();
                let t = transfer(&apis[side], bytes, tty, block)
                    .await
                    .with_context(|| format!("{kind}, {}", SIDES[side].1))?;
                runs[side].push(t);
            }
        }
        let rates: Vec<Vec<f64>> = runs
            .iter()
            .map(|r| r.iter().map(|t| mbps(t.delivered, t.secs)).collect())
            .collect();
        let what = if tty { "PTY" } else { "pipes" };
        let size = format!("{} MiB", bytes >> 20);
        let baseline = Dist::new(rates[0].clone());
        let n = baseline.len();
        for (side, (key, label, _)) in SIDES.iter().enumerate() {
            let dist = Dist::new(rates[side].clone());
            let mut f = Figure::rate(
                &format!("retention.{kind}.{key}"),
                SECTION,
                &format!("{size} {what}, block mode, {label}"),
                &dist,
                n,
            );
            if side > 0 && side != BEFORE_DISK {
                let before = dist.median() / Dist::new(rates[BEFORE_DISK].clone()).median();
                let ratio = dist.median() / baseline.median();
                let pairs = Dist::new(
                    rates[side]
                        .iter()
                        .zip(&rates[0])
                        .map(|(d, m)| d / m * 100.0)
                        .collect(),
                );
                f = f
                    .floor(baseline.median())
                    .target("≥ 90% of memory only", ratio >= 0.9)
                    .note(format!(
                        "{:.0}% of memory only (per run {:.0}–{:.0}%), {:.0}% of the 1 MiB \
                         default before the disk; every byte checked",
                        ratio * 100.0,
                        pairs.min(),
                        pairs.max(),
                        before * 100.0
                    ));
            }
            ctx.report.push(f);
        }
    }
    for server in servers {
        server.stop();
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One `POST /v1/exec` of `true`: checks the answer, returns its time.
async fn exec_true(api: &Api, http: &reqwest::Client) -> Result<f64> {
    let t0 = Instant::now();
    let response = http
        .post(format!("{}/v1/exec", api.base))
        .json(&argv(&["true"]))
        .send()
        .await
        .context("POST /v1/exec")?;
    let status = response.status();
    let body: serde_json::Value = response.json().await?;
    let elapsed = ms(t0.elapsed());
    if !status.is_success() || body["status"] != "exited" || body["exit_code"] != 0 {
        bail!("exec of true answered {status} {body}");
    }
    Ok(elapsed)
}

/// POST `true`, attach, read to the exit frame.
async fn spawn_attach_exit(api: &Api) -> Result<f64> {
    let t0 = Instant::now();
    let info = api.spawn(&argv(&["true"])).await?;
    let mut conn = api.attach(&info.id, "").await?;
    for _ in 0..100_000 {
        if let ServerFrame::Exit { .. } = conn.next_within(Duration::from_secs(10)).await? {
            let elapsed = ms(t0.elapsed());
            conn.close().await;
            return Ok(elapsed);
        }
    }
    bail!("no exit frame in 100000 frames")
}

/// `POST /v1/exec` of `true` beside its floors, interleaved.
async fn exec(ctx: &mut Ctx) -> Result<()> {
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .build()?;
    for _ in 0..5 {
        exec_true(&api, &http).await?;
    }
    let runs = ctx.p.spawn_runs;
    let (mut exec, mut attach, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        exec.push(exec_true(&api, &http).await?);
        attach.push(spawn_attach_exit(&api).await?);
        floor.extend(tokio::task::spawn_blocking(|| floors::fork_exec_true(1)).await??);
    }
    server.stop();
    let [exec, attach, floor] = [exec, attach, floor].map(Dist::new);
    let over = exec.median() - floor.median();
    ctx.report.push(Figure::from_dist(
        "retention.exec.floor",
        SECTION,
        "fork+exec+wait `true`, local (floor)",
        "ms",
        &floor,
        runs,
    ));
    ctx.report.push(
        Figure::from_dist(
            "retention.exec.attach",
            SECTION,
            "`true`: POST + attach + exit frame",
            "ms",
            &attach,
            runs,
        )
        .floor(floor.median()),
    );
    ctx.report.push(
        Figure::from_dist(
            "retention.exec",
            SECTION,
            "`true`: POST /v1/exec (exited process + output back)",
            "ms",
            &exec,
            runs,
        )
        .floor(floor.median())
        .target("a few ms (median ≤ floor + 5 ms)", over <= 5.0)
        .note(format!("median {over:.2} ms over the floor")),
    );
    Ok(())
}

/// The log process `index` prints: numbered lines cut at `bytes`.
fn expected_log(index: usize, bytes: u64) -> Vec<u8> {
    use std::io::Write;
    let mut out = Vec::with_capacity(bytes as usize + 32);
    let mut line = 1u64;
    while (out.len() as u64) < bytes {
        let _ = writeln!(out, "P{index}-{line}");
        line += 1;
    }
    out.truncate(bytes as usize);
    out
}

/// Spawns process `index` printing its log with nobody attached; waits
/// for its exit.
async fn print_log(api: &Api, index: usize, bytes: u64) -> Result<String> {
    // Each line is at least 5 bytes, so `bytes / 5 + 1` lines are enough.
    let mut req = shell(&format!(
        "seq -f 'P{index}-%.0f' 1 {} | head -c {bytes}",
        bytes / 5 + 1
    ));
    req.overflow = Overflow::Drop;
    req.retain_bytes = Some(bytes);
    let info = api.spawn(&req).await?;
    let exited = api.wait_exit(&info.id, Duration::from_secs(600)).await?;
    if exited.stdout_bytes != bytes || exited.exit_code != Some(0) {
        bail!(
            "process {index} exited {:?} after {} bytes, expected {bytes}",
            exited.exit_code,
            exited.stdout_bytes
        );
    }
    Ok(info.id)
}

/// Reads process `index`'s whole stdout back over `GET /output` and
/// compares it with what it printed.
async fn check_log(api: &Api, id: &str, index: usize, bytes: u64) -> Result<()> {
    let body = reqwest::get(format!(
        "{}/v1/processes/{id}/output?stream=stdout&offset=0",
        api.base
    ))
    .await?
    .error_for_status()?
    .bytes()
    .await?;
    if body[..] != expected_log(index, bytes)[..] {
        bail!(
            "process {index}: {} bytes read back differ from the {bytes} it printed",
            body.len()
        );
    }
    Ok(())
}

/// Many processes that each printed a log: RSS at the windows, logs exact.
async fn many_logs(ctx: &mut Ctx) -> Result<()> {
    let (procs, bytes) = (ctx.p.retention_procs, ctx.p.retention_mib << 20);
    let server = ctx.start_server(&[
        // The memory budget is not what this run measures: the windows of
        // a thousand drop-mode processes (2 streams each) reach 2 GiB.
        format!("--retain-total={}", 4u64 << 30),
        format!(
            "--retain-disk-total={}",
            2 * procs as u64 * bytes + (1 << 30)
        ),
        "--max-processes=1024".into(),
        // At the 1000 x 16 MiB, printing alone outlasts the default
        // exited TTL (5 min) on this VM's disk; the logs must all be there
        // to be read back.
        "--exited-ttl-ms=86400000".into(),
    ])?;
    let api = Api::new(&server.base)?;
    // The idle server, after one process has come and gone.
    let first = print_log(&api, 0, 4096).await?;
    check_log(&api, &first, 0, 4096).await?;
    api.delete(&first).await?;
    let idle_kib = server.rss_kib();
    let sampler = RssSampler::start(server.pid, Duration::from_millis(50));
    let t0 = Instant::now();
    let ids: Vec<String> = stream::iter(0..procs)
        .map(|i| print_log(&api, i, bytes))
        .buffered(SPAWN_CONCURRENCY)
        .try_collect()
        .await?;
    let printed = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    stream::iter(ids.iter().enumerate())
        .map(|(i, id)| check_log(&api, id, i, bytes))
        .buffered(4)
        .try_collect::<Vec<()>>()
        .await?;
    let read_back = t1.elapsed().as_secs_f64();
    let peak_kib = sampler
        .finish()
        .iter()
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(0);
    for id in &ids {
        api.delete(id).await?;
    }
    server.stop();
    let windows = procs as u64 * WINDOW.min(bytes);
    let bound = idle_kib * 1024 + windows + procs as u64 * OVERHEAD_PER_PROCESS + OVERHEAD_FIXED;
    let peak = peak_kib * 1024;
    let per_process = peak.saturating_sub(idle_kib * 1024 + windows) / procs.max(1) as u64;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    ctx.report.push(
        Figure::single(
            "retention.many.rss",
            SECTION,
            &format!(
                "{procs} processes x {} MiB printed, nobody reading: peak RSS",
                bytes >> 20
            ),
            "MiB",
            mib(peak),
        )
        .target("≤ idle + windows + 256 KiB/process + 32 MiB", peak <= bound)
        .note(format!(
            "idle {:.0} MiB, windows {:.0} MiB, {:.0} KiB/process beyond them; \
             {:.0} MiB on disk",
            mib(idle_kib * 1024),
            mib(windows),
            per_process as f64 / 1024.0,
            mib(procs as u64 * bytes)
        )),
    );
    ctx.report.push(
        Figure::single(
            "retention.many.read_back",
            SECTION,
            &format!("the {procs} logs read back over GET /output"),
            "MB/s",
            procs as f64 * bytes as f64 / read_back / 1e6,
        )
        .note(format!(
            "every byte compared; printing took {printed:.1} s, reading {read_back:.1} s"
        )),
    );
    Ok(())
}
