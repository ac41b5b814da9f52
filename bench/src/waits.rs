//! Section 11: thousands of `GET /v1/processes/{id}/wait` long-polls pending
//! at once, one per running process (each on a connection of its own, as
//! HTTP/1.1 clients do): the server's memory while they wait, and how long
//! it takes to answer all of them once their processes are killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::ProcessInfo;
use tokio::task::JoinSet;

use crate::client::{argv, Api};
use crate::ctx::Ctx;
use crate::limits::{fit_count, FDS_PER_WAITED_PROCESS};
use crate::report::Figure;
use crate::scale::bounded;
use crate::stats::Dist;
use crate::tetherd::Tetherd;

/// Retention each process asks for (it prints nothing).
const RETAIN: u64 = 64 << 10;
/// The long-poll each wait asks for: far beyond the run.
const WAIT_MS: u64 = 300_000;
/// Waits started before checking that the server has received them.
const BATCH: usize = 250;

/// `tether_wait_requests_total` from /metrics.
async fn waits_received(http: &reqwest::Client, base: &str) -> Result<u64> {
    Ok(crate::tetherd::metric(http, base, "tether_wait_requests_total").await? as u64)
}

/// Polls /metrics until the server has received `want` wait requests.
async fn until_received(http: &reqwest::Client, base: &str, want: u64) -> Result<()> {
    let by = Instant::now() + Duration::from_secs(120);
    loop {
        let got = waits_received(http, base).await?;
        if got >= want {
            return Ok(());
        }
        if Instant::now() > by {
            bail!("the server received {got} of {want} wait requests within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Section 11.
pub async fn waits(ctx: &mut Ctx) -> Result<()> {
    let (n, limited) = fit_count(ctx.p.waits, FDS_PER_WAITED_PROCESS, "waits")?;
    let server = ctx.start_server(&[
        format!("--max-processes={}", n + 64),
        format!("--max-known-processes={}", n + 64),
        format!("--max-connections={}", n + 256),
        // A budget of reservations, not memory used: generous.
        format!("--retain-total={}", (n as u64 + 64) * RETAIN * 4),
        format!("--max-wait-ms={WAIT_MS}"),
    ])?;
    let result = measure(ctx, &server, n, limited).await;
    server.stop();
    result
}

async fn measure(ctx: &mut Ctx, server: &Tetherd, n: usize, limited: Option<String>) -> Result<()> {
    let api = Api::new(&server.base)?;
    // A client of its own: one connection per pending wait, no idle cap.
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_millis(WAIT_MS + 60_000))
        .build()?;
    let t0 = Instant::now();
    let procs: Vec<ProcessInfo> = bounded((0..n).collect(), 16, {
        let api = api.clone();
        move |_| {
            let api = api.clone();
            async move {
                let mut req = argv(&["sleep", "3600"]);
                req.retain_bytes = Some(RETAIN);
                api.spawn(&req).await
            }
        }
    })
    .await?;
    let spawn_secs = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (base_rss, base_fds) = (server.rss_kib(), server.fds());
    let base_waits = waits_received(&http, &server.base).await?;

    // Start the waits in batches, each received before the next starts,
    // so no connect is lost to a full listen backlog.
    let t1 = Instant::now();
    let mut set = JoinSet::new();
    let base = Arc::new(server.base.clone());
    for (i, p) in procs.iter().enumerate() {
        let (client, base, id, pid) = (http.clone(), base.clone(), p.id.clone(), p.pid);
        set.spawn(async move {
            let response = client
                .get(format!(
                    "{base}/v1/processes/{id}/wait?timeout_ms={WAIT_MS}"
                ))
                .send()
                .await?;
            let at = Instant::now();
            if !response.status().is_success() {
                bail!("wait for {id}: {}", response.status());
            }
            let info: ProcessInfo = response.json().await?;
            if !info.is_exited() {
                bail!("wait for {id} answered before its exit");
            }
            Ok::<_, anyhow::Error>((pid, at))
        });
        if (i + 1) % BATCH == 0 || i + 1 == n {
            until_received(&http, &server.base, base_waits + i as u64 + 1).await?;
        }
    }
    let start_secs = t1.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (wait_rss, wait_fds, threads) = (server.rss_kib(), server.fds(), server.threads());
    if !set.is_empty() && set.len() != n {
        bail!(
            "{} of {n} waits ended before their processes",
            n - set.len()
        );
    }

    // Kill every process (SIGKILL, straight to its pid), noting when.
    let mut killed_at = std::collections::HashMap::with_capacity(n);
    let k0 = Instant::now();
    for p in &procs {
        let pid = i32::try_from(p.pid).context("pid")?;
        // SAFETY: a plain signal to a process tetherd started for us and
        // has not reaped (its wait is pending).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        killed_at.insert(p.pid, Instant::now());
    }
    let kill_secs = k0.elapsed().as_secs_f64();
    let mut after = Vec::with_capacity(n);
    let mut last = k0;
    while let Some(joined) = set.join_next().await {
        let (pid, at) = joined??;
        last = last.max(at);
        let killed = killed_at.get(&pid).copied().unwrap_or(k0);
        after.push(at.saturating_duration_since(killed).as_secs_f64() * 1e3);
    }
    let all_ms = last.duration_since(k0).as_secs_f64() * 1e3;
    let after = Dist::new(after);

    let per_wait = (wait_rss as f64 - base_rss as f64) / n as f64;
    let label = |s: &str| format!("{n} concurrent `wait`s: {s}");
    ctx.report.push(
        Figure::single(
            "waits.rss_per_wait",
            11,
            &label("server RSS per pending wait"),
            "KiB",
            per_wait,
        )
        .note(format!(
            "RSS {:.1} → {:.1} MiB, {threads} threads, fds {base_fds} → {wait_fds}; \
             {n} `sleep`s spawned in {spawn_secs:.1} s, waits sent in {start_secs:.1} s{}",
            base_rss as f64 / 1024.0,
            wait_rss as f64 / 1024.0,
            limited.map(|l| format!("; {l}")).unwrap_or_default()
        )),
    );
    ctx.report.push(
        Figure::single(
            "waits.all_answered",
            11,
            &label("first kill → last answer"),
            "ms",
            all_ms,
        )
        .note(format!(
            "SIGKILL to all {n} took {:.0} ms of it",
            kill_secs * 1e3
        )),
    );
    ctx.report.push(
        Figure::from_dist(
            "waits.after_kill",
            11,
            &label("its process killed → its answer"),
            "ms",
            &after,
            n,
        )
        .note("every answer says exited"),
    );
    Ok(())
}
