//! Section 5: many concurrent PTY sessions, each with an attached client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{Api, Conn};
use crate::ctx::Ctx;
use crate::latency::{echo_round, raw_cat, wait_for_output};
use crate::limits::{fit_count, PtyRoom, FDS_PER_PTY_SESSION};
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::{cpu_seconds, Tetherd};

/// Per-session retention asked for (the output is a byte or two).
const SESSION_RETAIN: u64 = 64 << 10;
/// What each PTY's screen reserves against `--retain-total` at 80x24 with
/// the default scrollback (`screen::memory_bound`: both grids, the
/// scrollback and one snapshot, about 1.6 MiB), rounded up: a reservation,
/// not what an idle session holds (section 5 measures that).
const SCREEN_RESERVE: u64 = 2 << 20;

/// Runs `f` over `items` with at most `limit` in flight; results in order.
pub async fn bounded<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Result<Vec<R>>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<R>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limit));
    let mut set = JoinSet::new();
    for (i, item) in items.into_iter().enumerate() {
        let permit = permits.clone().acquire_owned().await?;
        let fut = f(item);
        set.spawn(async move {
            let r = fut.await;
            drop(permit);
            (i, r)
        });
    }
    let mut out: Vec<Option<R>> = Vec::new();
    out.resize_with(set.len(), || None);
    while let Some(joined) = set.join_next().await {
        let (i, r) = joined?;
        out[i] = Some(r?);
    }
    out.into_iter()
        .map(|r| r.context("missing result"))
        .collect()
}

/// Settles, then samples RSS (KiB) and threads.
async fn settle_and_sample(server: &Tetherd) -> (u64, u64) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (server.rss_kib(), server.threads())
}

/// Section 5.
pub async fn scale(ctx: &mut Ctx) -> Result<()> {
    let (n, limited) = fit_count(ctx.p.sessions, FDS_PER_PTY_SESSION, "sessions")?;
    let _ptys = PtyRoom::ensure(n as u64 + 16)?;
    let server = ctx.start_server(&[
        format!("--max-processes={}", n + 64),
        format!("--max-known-processes={}", n + 64),
        format!("--max-attachments={}", n + 64),
        format!("--max-connections={}", 2 * n + 128),
        format!(
            "--retain-total={}",
            (n as u64 + 64) * (SESSION_RETAIN * 2 + SCREEN_RESERVE)
        ),
        "--idle-timeout-ms=600000".into(),
    ])?;
    let api = Api::new(&server.base)?;
    // Warm up the runtime, allocator and HTTP paths with one full session.
    {
        let info = api.spawn(&session()).await?;
        let mut conn = api.attach(&info.id, "").await?;
        wait_for_output(&mut conn, b"R").await?;
        echo_round(&mut conn, b'w').await?;
        api.delete(&info.id).await?;
        conn.close().await;
    }
    let (base_rss, base_threads) = settle_and_sample(&server).await;

    // N sessions, nobody attached.
    let t0 = Instant::now();
    let ids = bounded((0..n).collect(), 16, {
        let api = api.clone();
        move |_| {
            let api = api.clone();
            async move { Ok(api.spawn(&session()).await?.id) }
        }
    })
    .await?;
    let spawn_secs = t0.elapsed().as_secs_f64();
    // Every session has printed its marker (so `stty` is done, `cat` runs).
    let ready_by = Instant::now() + Duration::from_secs(120);
    let retained = loop {
        let list = api.list().await?;
        let ready = list.iter().filter(|p| p.stdout_bytes >= 1).count();
        if ready >= n {
            break list.iter().map(|p| p.stdout_bytes).sum::<u64>();
        }
        if Instant::now() > ready_by {
            bail!("only {ready} of {n} sessions became ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (idle_rss, idle_threads) = settle_and_sample(&server).await;

    // One attached client per session.
    let t1 = Instant::now();
    let conns: Vec<Conn> = bounded(ids.clone(), 32, {
        let api = api.clone();
        move |id: String| {
            let api = api.clone();
            async move {
                let mut conn = api.attach(&id, "").await?;
                wait_for_output(&mut conn, b"R").await?;
                Ok(conn)
            }
        }
    })
    .await?;
    let attach_secs = t1.elapsed().as_secs_f64();
    let (att_rss, att_threads) = settle_and_sample(&server).await;
    let fds = server.fds();

    // One client types while every other session sits idle.
    let mut conns = conns;
    let mut lone = Vec::new();
    if let Some(first) = conns.first_mut() {
        for i in 0..ctx.p.echo_rounds.min(1000) {
            lone.push(echo_round(first, b'a' + (i % 26) as u8).await?);
        }
    }

    // A share of the clients types `rate` keys a second each, staggered;
    // the rest stay attached and idle.
    let typing = ((n as u64 * ctx.p.scale_typing_pct).div_ceil(100) as usize).clamp(1, n);
    let idle_conns = conns.split_off(typing);
    let keys = ctx.p.scale_keys;
    let rate = ctx.p.scale_rate_hz.max(1);
    let period_us = 1_000_000 / rate;
    let cpu0 = server.cpu_seconds();
    let me0 = cpu_seconds(std::process::id());
    let t2 = Instant::now();
    let mut set = JoinSet::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let stagger = Duration::from_micros(((i as u64) * 7919) % period_us);
        set.spawn(async move {
            tokio::time::sleep(stagger).await;
            let mut tick = tokio::time::interval(Duration::from_micros(period_us));
            let mut out = Vec::with_capacity(keys);
            for k in 0..keys {
                tick.tick().await;
                out.push(echo_round(&mut conn, b'a' + ((i + k) % 26) as u8).await?);
            }
            Ok::<_, anyhow::Error>((out, conn))
        });
    }
    let mut all = Vec::new();
    let mut conns = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (out, conn) = joined??;
        all.extend(out);
        conns.push(conn);
    }
    let busy_secs = t2.elapsed().as_secs_f64();
    let cpu = (server.cpu_seconds() - cpu0) / busy_secs * 100.0;
    let me = (cpu_seconds(std::process::id()) - me0) / busy_secs * 100.0;
    let busy_rss = server.rss_kib();
    let busy_threads = server.threads();
    drop(conns);
    drop(idle_conns);
    server.stop();

    let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64;
    let per_session = per(idle_rss, base_rss) - retained as f64 / 1024.0 / n as f64;
    let per_attach = per(att_rss, idle_rss);
    let label = |s: &str| format!("{n} PTY sessions: {s}");
    ctx.report.push(
        Figure::single(
            "scale.rss_per_session",
            5,
            &label("server RSS per idle session"),
            "KiB",
            per_session,
        )
        .target("≤ 64 KiB beyond retained output", per_session <= 64.0)
        .note(format!(
            "RSS {:.1} → {:.1} MiB; spawned in {spawn_secs:.1} s{}",
            base_rss as f64 / 1024.0,
            idle_rss as f64 / 1024.0,
            limited.map(|l| format!("; {l}")).unwrap_or_default()
        )),
    );
    ctx.report.push(
        Figure::single(
            "scale.rss_per_attachment",
            5,
            &label("server RSS per attachment"),
            "KiB",
            per_attach,
        )
        .note(format!(
            "RSS → {:.1} MiB with {n} attached ({attach_secs:.1} s to attach); {fds} fds",
            att_rss as f64 / 1024.0
        )),
    );
    let grew = att_threads.max(idle_threads).max(busy_threads) as i64 - base_threads as i64;
    ctx.report.push(
        Figure::single("scale.threads", 5, &label("server threads, idle → attached → typing"), "", att_threads as f64)
            .target("no thread per session", grew < (n as i64 / 10).max(8))
            .note(format!(
                "{base_threads} before, {idle_threads} with sessions, {att_threads} attached, {busy_threads} typing"
            )),
    );
    let lone = Dist::new(lone);
    let busy = Dist::new(all);
    ctx.report.push(
        Figure::from_dist(
            "scale.echo_lone",
            5,
            &label("echo, 1 typing, all others idle"),
            "ms",
            &lone,
            1,
        )
        .target("< 1 ms (median)", lone.median() < 1.0),
    );
    ctx.report.push(
        Figure::from_dist(
            "scale.echo_all",
            5,
            &label(&format!(
                "echo, {typing} typing {rate} keys/s each, rest idle"
            )),
            "ms",
            &busy,
            typing,
        )
        .note(format!(
            "server CPU {cpu:.0}%, harness CPU {me:.0}% of one core; RSS {:.1} MiB",
            busy_rss as f64 / 1024.0
        )),
    );
    ctx.report
        .series
        .insert(format!("PTY echo, {n} sessions, 1 typing"), lone);
    ctx.report
        .series
        .insert(format!("PTY echo, {n} sessions, {typing} typing"), busy);
    Ok(())
}

fn session() -> tether_protocol::api::SpawnRequest {
    let mut req = raw_cat();
    req.retain_bytes = Some(SESSION_RETAIN);
    req
}
