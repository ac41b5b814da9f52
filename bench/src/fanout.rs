//! Section 10: one PTY session watched by many attachments while it prints
//! `head -c N /dev/zero`: in block mode every viewer must get every byte, in
//! drop mode every viewer's delivered plus `dropped` bytes must add up to the
//! total, offset by offset.
//!
//! The viewers run on a runtime of their own with two worker threads (the
//! harness's main runtime is single-threaded), so the client side can use
//! both cores as the server does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::{ClientFrame, Overflow, ServerFrame};
use tokio::sync::{mpsc, Semaphore};

use crate::client::{shell, Api, Conn};
use crate::ctx::Ctx;
use crate::latency::wait_for_output;
use crate::limits::{raise_nofile_to, FDS_SPARE};
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::RssSampler;

/// Per-stream retention of the watched session.
const RETAIN: u64 = 8 << 20;
const BOUND: Duration = Duration::from_secs(300);

/// What one viewer saw.
#[derive(Debug, Clone, Copy)]
struct Seen {
    delivered: u64,
    dropped: u64,
    done: Instant,
}

/// Reads one viewer's attachment from offset 1 (the ready marker, byte 0,
/// was read) to the exit frame, checking that offsets are contiguous (data
/// and `dropped` alike), that every byte is zero, and that the totals add
/// up. Delivered counts the marker.
async fn watch(mut conn: Conn, total: u64, block: bool) -> Result<Seen> {
    let mut next = 1u64;
    let (mut delivered, mut dropped) = (1u64, 0u64);
    let exit = loop {
        match conn.next_within(BOUND).await? {
            ServerFrame::Stdout { offset, data } => {
                if offset != next {
                    bail!("stdout frame at {offset}, expected {next}");
                }
                if !crate::ctx::all_zero(&data) {
                    bail!("unexpected bytes in the frame at {offset}");
                }
                next += data.len() as u64;
                delivered += data.len() as u64;
            }
            ServerFrame::Dropped { offset, length, .. } => {
                if offset != next {
                    bail!("dropped at {offset}, expected {next}");
                }
                next += length;
                dropped += length;
            }
            ServerFrame::Exit { process } => break process,
            _ => {}
        }
    };
    let done = Instant::now();
    conn.close().await;
    if exit.stdout_bytes != total || delivered + dropped != total {
        bail!(
            "delivered {delivered} + dropped {dropped} != {total} (exit says {})",
            exit.stdout_bytes
        );
    }
    if block && dropped > 0 {
        bail!("block mode dropped {dropped} bytes");
    }
    Ok(Seen {
        delivered,
        dropped,
        done,
    })
}

/// One run: the session, `viewers` attachments, the go, every viewer's view.
async fn run(
    api: &Api,
    viewers: usize,
    bytes: u64,
    overflow: Overflow,
) -> Result<(Vec<Seen>, Instant)> {
    // Raw mode so the zeros pass untouched; `head -c 1` holds the output
    // back until every viewer is attached.
    let mut req = shell(&format!(
        "stty raw -echo; printf R; head -c 1 >/dev/null; exec head -c {bytes} /dev/zero"
    ));
    req.tty = true;
    req.overflow = overflow;
    req.retain_bytes = Some(RETAIN);
    let info = api.spawn(&req).await?;
    let total = bytes + 1;
    let block = overflow == Overflow::Block;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (ready_tx, mut ready_rx) = mpsc::channel::<()>(viewers);
    let connects = Arc::new(Semaphore::new(32));
    let mut handles = Vec::with_capacity(viewers);
    for _ in 0..viewers {
        let (api, id, ready, connects) = (
            api.clone(),
            info.id.clone(),
            ready_tx.clone(),
            connects.clone(),
        );
        handles.push(rt.spawn(async move {
            let conn = {
                let _permit = connects.acquire().await?;
                let mut conn = api.attach(&id, "").await?;
                if conn.hello.1 != 0 {
                    bail!("viewer attached at offset {}, not 0", conn.hello.1);
                }
                wait_for_output(&mut conn, b"R").await?;
                conn
            };
            let _ = ready.send(()).await;
            watch(conn, total, block).await
        }));
    }
    drop(ready_tx);
    let by = Instant::now() + BOUND;
    for got in 0..viewers {
        let left = by.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ready_rx.recv()).await {
            Ok(Some(())) => {}
            _ => {
                rt.shutdown_background();
                bail!("only {got} of {viewers} viewers attached");
            }
        }
    }
    // The go: one more attachment types the byte `head -c 1` waits for.
    let mut control = api.attach(&info.id, "").await?;
    let t0 = Instant::now();
    control
        .send(&ClientFrame::Stdin { data: vec![b'g'] })
        .await?;
    control.close().await;
    let mut seen = Vec::with_capacity(viewers);
    let mut failure = None;
    for handle in handles {
        match handle.await {
            Ok(Ok(s)) => seen.push(s),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(e.into())),
        }
    }
    rt.shutdown_background();
    api.delete(&info.id).await?;
    if let Some(e) = failure {
        return Err(e).context(format!("{} of {viewers} viewers fine", seen.len()));
    }
    Ok((seen, t0))
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

/// Section 10.
pub async fn fanout(ctx: &mut Ctx) -> Result<()> {
    let viewers = ctx.p.viewers;
    let bytes = ctx.p.fanout_bytes;
    raise_nofile_to(viewers as u64 * 2 + FDS_SPARE)?;
    let server = ctx.start_server(&[
        format!("--max-attachments-per-process={}", viewers + 8),
        format!("--max-attachments={}", viewers + 64),
        format!("--max-connections={}", 2 * viewers + 128),
        "--idle-timeout-ms=600000".into(),
    ])?;
    let api = Api::new(&server.base)?;
    // Warm-up: the same path with a few viewers and a little output.
    run(&api, viewers.min(4), 1 << 20, Overflow::Block).await?;
    let label = |s: &str| format!("1 PTY session, {viewers} viewers, {}: {s}", mib(bytes));
    for overflow in [Overflow::Block, Overflow::Drop] {
        let mode = if overflow == Overflow::Block {
            "block"
        } else {
            "drop"
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let base_rss = server.rss_kib();
        let sampler = RssSampler::start(server.pid, Duration::from_millis(50));
        let cpu0 = server.cpu_seconds();
        let (seen, t0) = run(&api, viewers, bytes, overflow)
            .await
            .with_context(|| format!("{mode} mode"))?;
        let samples = sampler.finish();
        let first = seen.iter().map(|s| s.done).min().unwrap_or(t0);
        let last = seen.iter().map(|s| s.done).max().unwrap_or(t0);
        let secs = last.duration_since(t0).as_secs_f64();
        let cpu = (server.cpu_seconds() - cpu0) / secs.max(1e-9) * 100.0;
        let delivered: u64 = seen.iter().map(|s| s.delivered).sum();
        let dropped: u64 = seen.iter().map(|s| s.dropped).sum();
        let peak = samples.iter().map(|s| s.1).max().unwrap_or(base_rss);
        let done = Dist::new(
            seen.iter()
                .map(|s| s.done.duration_since(t0).as_secs_f64() * 1e3)
                .collect(),
        );
        let lag_ms = last.duration_since(first).as_secs_f64() * 1e3;
        let total = (bytes + 1) * viewers as u64;
        let mut f = Figure::single(
            &format!("fanout.{mode}.aggregate"),
            10,
            &label(&format!("{mode} mode, aggregate to all viewers")),
            "MB/s",
            delivered as f64 / secs.max(1e-9) / 1e6,
        );
        f.higher_is_better = true;
        let exact = format!(
            "every viewer: offsets contiguous, delivered + dropped = {} B",
            bytes + 1
        );
        f = if overflow == Overflow::Block {
            f.target(
                "every byte to every viewer",
                dropped == 0 && delivered == total,
            )
            .note(format!(
                "{exact}, no drops; {secs:.1} s; server CPU {cpu:.0}%, peak RSS +{:.1} MiB",
                (peak as f64 - base_rss as f64) / 1024.0
            ))
        } else {
            f.target("exact `dropped` notices", delivered + dropped == total)
                .note(format!(
                    "{exact}; {:.1}% dropped overall; {secs:.1} s; server CPU {cpu:.0}%, peak RSS +{:.1} MiB",
                    dropped as f64 * 100.0 / total as f64,
                    (peak as f64 - base_rss as f64) / 1024.0
                ))
        };
        ctx.report.push(f);
        ctx.report.push(
            Figure::from_dist(
                &format!("fanout.{mode}.done"),
                10,
                &label(&format!("{mode} mode, go → a viewer's exit frame")),
                "ms",
                &done,
                viewers,
            )
            .note(format!(
                "slowest viewer {lag_ms:.0} ms behind the fastest (max − min)"
            )),
        );
    }
    server.stop();
    Ok(())
}
