//! Section 14: the handover's pause (issue 43). A tetherd with N sessions
//! whose output keeps flowing (each a bash printing a numbered line every
//! 100 ms, half of them on a PTY) hands over to its own binary, and the
//! harness measures how long nobody is served: from the old binary's
//! answer to `POST /v1/admin/upgrade` to the first answer of the new one
//! (`GET /v1/admin/server` on new connections, which queue meanwhile), and
//! the server's own figure from its log (the quiescing line to the line
//! saying the new binary serves). Then every session must still run, its
//! output numbered without a gap, and the server's memory and descriptors
//! are compared.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::api::ServerRun;
use tether_protocol::ProcessInfo;

use crate::client::{shell, Api};
use crate::ctx::Ctx;
use crate::limits::fit_count;
use crate::report::Figure;
use crate::scale::bounded;
use crate::tetherd::Tetherd;

/// Descriptors a flowing session costs the server, and the handover's
/// second copies of them.
const FDS_PER_SESSION: usize = 8;

/// The sizes measured: none, a hundred, a thousand (fewer in quick mode).
fn sizes(quick: bool) -> [usize; 3] {
    if quick {
        [0, 20, 100]
    } else {
        [0, 100, 1000]
    }
}

/// Section 14.
pub async fn handover(ctx: &mut Ctx) -> Result<()> {
    let quick = ctx.report.mode == "quick";
    for want in sizes(quick) {
        let (n, limited) = fit_count(want.max(1), FDS_PER_SESSION as u64, "handover sessions")?;
        let n = if want == 0 { 0 } else { n };
        let server = ctx.start_server(&[
            format!("--max-processes={}", n + 64),
            format!("--max-known-processes={}", n + 64),
            // Each PTY session reserves its windows and its screen.
            format!("--retain-total={}", (n as u64 + 64) * (4 << 20)),
        ])?;
        let result = measure(&server, n).await;
        let (rss, fds) = (server.rss_kib(), server.fds());
        server.stop();
        let (before, pause_ms, logged_ms) = result?;
        eprintln!("   {n} sessions: {pause_ms:.1} ms (server's log {logged_ms:.1} ms)");
        ctx.report.push(
            Figure::single(
                &format!("handover.pause_{want}"),
                14,
                &format!("handover with {n} flowing sessions: answer → new binary serving"),
                "ms",
                pause_ms,
            )
            .note(format!(
                "the server's log: {logged_ms:.1} ms from closing attachments to serving; RSS {:.1} → {:.1} MiB, fds {} → {fds}{}",
                before.0 as f64 / 1024.0,
                rss as f64 / 1024.0,
                before.1,
                limited.map(|l| format!("; {l}")).unwrap_or_default()
            )),
        );
    }
    Ok(())
}

/// Spawns `n` flowing sessions, hands over, checks them; `((rss, fds)
/// before, pause ms, logged ms)`.
async fn measure(server: &Tetherd, n: usize) -> Result<((u64, usize), f64, f64)> {
    let base = server.base.as_str();
    let api = Api::new(base)?;
    let procs: Vec<ProcessInfo> = bounded((0..n).collect(), 16, {
        let api = api.clone();
        move |i: usize| {
            let api = api.clone();
            async move {
                // `read -t` waits without a fork: output flows at 10 lines
                // a second per session, numbered.
                let mut req =
                    shell("exec bash -c 'i=0; while :; do echo $i; i=$((i+1)); read -t 0.1; done'");
                req.stdin = true;
                // A small log each: a thousand fit the disk budget.
                req.retain_bytes = Some(1 << 20);
                req.tty = i % 2 == 1;
                api.spawn(&req).await
            }
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = (server.rss_kib(), server.fds());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()?;
    let asked = http
        .post(format!("{base}/v1/admin/upgrade"))
        .body("{}")
        .send()
        .await
        .context("ask for the handover")?;
    if asked.status().as_u16() != 202 {
        bail!(
            "the handover was refused: {}",
            asked.text().await.unwrap_or_default()
        );
    }
    let answered = Instant::now();
    let serving = loop {
        let run = http.get(format!("{base}/v1/admin/server")).send().await;
        if let Ok(response) = run {
            if let Ok(run) = response.json::<ServerRun>().await {
                if run.handovers >= 1 {
                    break Instant::now();
                }
            }
        }
        if answered.elapsed() > Duration::from_secs(60) {
            bail!("the new binary did not serve within 60 s");
        }
    };
    let pause_ms = serving.duration_since(answered).as_secs_f64() * 1e3;
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    let logged_ms = logged_pause(&log).unwrap_or(f64::NAN);
    // Every session runs on, its numbers without a gap.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listed = api.list().await?;
    for p in &procs {
        let alive = listed
            .iter()
            .any(|now| now.id == p.id && now.pid == p.pid && !now.is_exited());
        if !alive {
            bail!("session {} did not survive the handover", p.id);
        }
    }
    if let Some(p) = procs.first() {
        let text = http
            .get(format!("{base}/v1/processes/{}/output?stream=stdout", p.id))
            .send()
            .await?
            .text()
            .await?;
        let numbers: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if numbers.windows(2).any(|w| w[1] != w[0] + 1) {
            bail!("session {}'s output has a gap or a repeat", p.id);
        }
    }
    Ok((before, pause_ms, logged_ms))
}

/// The last handover's pause as the server logged it: from its line
/// "handover: closing attachments" to "handover complete", in ms.
fn logged_pause(log: &str) -> Option<f64> {
    // `2026-12-06T09:20:36.660005Z`: the time of day is enough here.
    let at = |line: &str| -> Option<f64> {
        let stamp = line.split_whitespace().next()?;
        let clock = stamp.split_once('T')?.1.trim_end_matches('Z');
        let mut parts = clock.split(':');
        let (h, m, s): (f64, f64, f64) = (
            parts.next()?.parse().ok()?,
            parts.next()?.parse().ok()?,
            parts.next()?.parse().ok()?,
        );
        Some(((h * 60.0 + m) * 60.0 + s) * 1e3)
    };
    let start = log
        .lines()
        .rev()
        .find(|l| l.contains("handover: closing attachments"))?;
    let end = log
        .lines()
        .rev()
        .find(|l| l.contains("handover complete"))?;
    Some(at(end)? - at(start)?)
}
