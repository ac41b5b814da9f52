//! Section 6: server memory while `yes` floods with nobody reading.

use std::time::Duration;

use anyhow::Result;

use crate::client::{argv, Api, Conn};
use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::RssSampler;

/// Per-stream retention of the storm server (`--retain-bytes`).
const RETAIN: u64 = 2 << 20;
/// Fixed overhead allowed above retention: runtime, socket buffers in user
/// space, allocator slack.
const OVERHEAD_MIB: f64 = 16.0;

/// Section 6.
pub async fn storm(ctx: &mut Ctx) -> Result<()> {
    let secs = ctx.p.storm_secs;
    for attached in [false, true] {
        let mut peaks = Vec::new();
        let mut growth = Vec::new();
        let mut produced = 0u64;
        let mut curve = Vec::new();
        for _ in 0..ctx.p.storm_runs {
            let server = ctx.start_server(&[format!("--retain-bytes={RETAIN}")])?;
            let api = Api::new(&server.base)?;
            // Warm up: one short process through the same paths.
            let warm = api
                .spawn(&argv(&["head", "-c", "1000000", "/dev/zero"]))
                .await?;
            let conn = api.attach(&warm.id, "").await?;
            api.wait_exit(&warm.id, Duration::from_secs(30)).await?;
            conn.close().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let base = server.rss_kib();
            let sampler = RssSampler::start(server.pid, Duration::from_millis(20));
            let mut req = argv(&["yes"]);
            req.timeout_ms = Some(secs * 1000);
            let info = api.spawn(&req).await?;
            // An attachment that never reads its socket.
            let idle: Option<Conn> = if attached {
                Some(api.attach(&info.id, "").await?)
            } else {
                None
            };
            let exit = api
                .wait_exit(&info.id, Duration::from_secs(secs + 30))
                .await?;
            let samples = sampler.finish();
            drop(idle);
            server.stop();
            produced += exit.stdout_bytes;
            let peak = samples.iter().map(|s| s.1).max().unwrap_or(base);
            peaks.push((peak as f64 - base as f64) / 1024.0);
            // Growth over the second half of the storm: flat means bounded.
            let half = samples.last().map(|s| s.0 / 2.0).unwrap_or(0.0);
            let mid = samples
                .iter()
                .find(|s| s.0 >= half)
                .map(|s| s.1)
                .unwrap_or(base);
            growth.push((peak as f64 - mid as f64) / 1024.0);
            curve = samples
                .iter()
                .map(|&(t, kib)| (t, kib as f64 / 1024.0))
                .collect();
        }
        let peaks = Dist::new(peaks);
        let growth = Dist::new(growth);
        let retention = 2.0 * RETAIN as f64 / (1 << 20) as f64;
        let label = if attached {
            "one attachment that never reads"
        } else {
            "no attachment"
        };
        let key = if attached {
            "stuck_reader"
        } else {
            "unattached"
        };
        let ok = peaks.max() <= retention + OVERHEAD_MIB && growth.max() < 1.0;
        ctx.report.push(
            Figure::from_dist(
                &format!("storm.{key}"),
                6,
                &format!("`yes` {secs} s, {label}: peak RSS over baseline"),
                "MiB",
                &peaks,
                ctx.p.storm_runs,
            )
            .target(
                &format!("≤ retention {retention:.0} MiB + {OVERHEAD_MIB:.0} MiB, flat"),
                ok,
            )
            .note(format!(
                "{:.0} MB produced per run; growth in 2nd half {:.2} MiB",
                produced as f64 / ctx.p.storm_runs as f64 / 1e6,
                growth.max()
            )),
        );
        ctx.report.curves.insert(format!("`yes`, {label}"), curve);
    }
    Ok(())
}
