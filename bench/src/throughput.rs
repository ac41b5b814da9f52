//! Section 3: output throughput to one attached client, block and drop mode,
//! next to the local pipe and PTY floors.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::{Overflow, ServerFrame, StreamName};

use crate::client::{argv, Api};
use crate::ctx::Ctx;
use crate::floors;
use crate::report::Figure;
use crate::stats::Dist;

/// Per-stream retention asked for by the throughput runs.
pub const RETAIN: u64 = 8 << 20;
/// Credit window of the windowed runs.
pub const WINDOW: u64 = 4 << 20;

#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub key: &'static str,
    pub label: &'static str,
    pub overflow: Overflow,
    pub window: Option<u64>,
}

pub const VARIANTS: [Variant; 3] = [
    Variant {
        key: "block_window",
        label: "block mode, window 4 MiB",
        overflow: Overflow::Block,
        window: Some(WINDOW),
    },
    Variant {
        key: "block",
        label: "block mode, no window",
        overflow: Overflow::Block,
        window: None,
    },
    Variant {
        key: "drop",
        label: "drop mode, no window",
        overflow: Overflow::Drop,
        window: None,
    },
];

/// One transfer as the client saw it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Transfer {
    pub secs: f64,
    pub delivered: u64,
    pub dropped: u64,
}

/// `head -c BYTES /dev/zero` through tetherd to one attachment, checking
/// offsets, contents and totals. Timed from the POST to the exit frame.
pub async fn transfer(api: &Api, bytes: u64, tty: bool, v: Variant) -> Result<Transfer> {
    let mut req = argv(&["head", "-c", &bytes.to_string(), "/dev/zero"]);
    req.tty = tty;
    req.overflow = v.overflow;
    req.retain_bytes = Some(RETAIN);
    let query = v.window.map(|w| format!("window={w}")).unwrap_or_default();
    let t0 = Instant::now();
    let info = api.spawn(&req).await?;
    let mut conn = api.attach(&info.id, &query).await?;
    let mut next = [conn.hello.1, conn.hello.2];
    let mut owed = [0u64; 2];
    let mut t = Transfer::default();
    let bound = Duration::from_secs(120);
    let exit = loop {
        let frame = conn.next_within(bound).await?;
        let (stream, offset, data) = match frame {
            ServerFrame::Stdout { offset, data } => (StreamName::Stdout, offset, data),
            ServerFrame::Stderr { offset, data } => (StreamName::Stderr, offset, data),
            ServerFrame::Dropped {
                stream,
                offset,
                length,
            } => {
                if offset != next[stream.index()] {
                    bail!(
                        "dropped frame at {offset}, expected {}",
                        next[stream.index()]
                    );
                }
                next[stream.index()] += length;
                t.dropped += length;
                continue;
            }
            ServerFrame::Exit { process } => break process,
            other => bail!("unexpected frame {other:?}"),
        };
        let i = stream.index();
        if offset != next[i] {
            bail!(
                "{} frame at offset {offset}, expected {}",
                stream.as_str(),
                next[i]
            );
        }
        if stream == StreamName::Stderr || !crate::ctx::all_zero(&data) {
            bail!("unexpected bytes on {} at {offset}", stream.as_str());
        }
        let len = data.len() as u64;
        next[i] += len;
        t.delivered += len;
        if let Some(window) = v.window {
            owed[i] += len;
            if owed[i] >= window / 4 {
                conn.credit(stream, owed[i]).await?;
                owed[i] = 0;
            }
        }
    };
    t.secs = t0.elapsed().as_secs_f64();
    conn.close().await;
    if exit.stdout_bytes != bytes {
        bail!(
            "exit frame reports {} stdout bytes, expected {bytes}",
            exit.stdout_bytes
        );
    }
    if t.delivered + t.dropped != bytes {
        bail!(
            "delivered {} + dropped {} != {bytes}",
            t.delivered,
            t.dropped
        );
    }
    if v.overflow == Overflow::Block && t.dropped > 0 {
        bail!("block mode dropped {} bytes", t.dropped);
    }
    Ok(t)
}

pub fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

/// Section 3.
pub async fn throughput(ctx: &mut Ctx) -> Result<()> {
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    for (tty, bytes) in [(false, ctx.p.pipe_bytes), (true, ctx.p.pty_bytes)] {
        let kind = if tty { "pty" } else { "pipe" };
        let mut floor = Vec::new();
        let mut runs: Vec<Vec<Transfer>> = vec![Vec::new(); VARIANTS.len()];
        // Interleaved, so drift in the machine's load hits all alike.
        for _ in 0..ctx.p.tp_runs {
            let secs = tokio::task::spawn_blocking(move || {
                if tty {
                    floors::pty_throughput(bytes)
                } else {
                    floors::pipe_throughput(bytes)
                }
            })
            .await??;
            floor.push(mbps(bytes, secs));
            for (v, out) in VARIANTS.iter().zip(runs.iter_mut()) {
                let t = transfer(&api, bytes, tty, *v)
                    .await
                    .with_context(|| format!("{kind}, {}", v.label))?;
                out.push(t);
            }
        }
        let size = if bytes >= 1 << 30 {
            format!("{} GiB", bytes >> 30)
        } else {
            format!("{} MiB", bytes >> 20)
        };
        let floor = Dist::new(floor);
        let n = ctx.p.tp_runs;
        let (what, ratio) = if tty { ("PTY", 0.95) } else { ("pipes", 0.8) };
        ctx.report.push(Figure::rate(
            &format!("throughput.{kind}.floor"),
            3,
            &format!(
                "{size} local {} → reader (floor)",
                if tty { "PTY" } else { "pipe" }
            ),
            &floor,
            n,
        ));
        for (v, out) in VARIANTS.iter().zip(&runs) {
            let rates = Dist::new(out.iter().map(|t| mbps(t.delivered, t.secs)).collect());
            let mut f = Figure::rate(
                &format!("throughput.{kind}.{}", v.key),
                3,
                &format!("{size} {what} via tetherd, {}", v.label),
                &rates,
                n,
            )
            .floor(floor.median());
            let share = rates.median() / floor.median();
            if v.overflow == Overflow::Block {
                f = f
                    .target(&format!("≥ {:.0}% of floor", ratio * 100.0), share >= ratio)
                    .note(format!(
                        "{:.0}% of floor; every byte checked, no drops",
                        share * 100.0
                    ));
            } else {
                let lost: u64 = out.iter().map(|t| t.dropped).sum();
                let total = bytes * out.len() as u64;
                f = f.note(format!(
                    "{:.0}% of floor; {:.1}% of bytes dropped (reported as `dropped`)",
                    share * 100.0,
                    lost as f64 * 100.0 / total as f64
                ));
            }
            ctx.report.push(f);
        }
    }
    server.stop();
    Ok(())
}
