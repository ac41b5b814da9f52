//! Section 4: stderr latency while stdout floods.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use tether_protocol::{Overflow, ServerFrame, StreamName};

use crate::client::{argv, Api};
use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;

/// Floods stdout from a thread while the main thread writes
/// `CLOCK_REALTIME` in ns to stderr every 10 ms, for `argv[1]` seconds.
const SCRIPT: &str = r#"
import os, sys, threading, time
dur = float(sys.argv[1])
def flood():
    buf = b'x' * 65536
    try:
        while True:
            os.write(1, buf)
    except OSError:
        pass
threading.Thread(target=flood, daemon=True).start()
end = time.monotonic() + dur
nxt = time.monotonic()
while time.monotonic() < end:
    os.write(2, b'%d\n' % time.time_ns())
    nxt += 0.01
    d = nxt - time.monotonic()
    if d > 0:
        time.sleep(d)
os._exit(0)
"#;

#[derive(Clone, Copy)]
struct Variant {
    key: &'static str,
    label: &'static str,
    overflow: Overflow,
    window: Option<u64>,
    /// Withhold stdout credit while the script runs.
    withhold: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        key: "drop",
        label: "drop mode, no window, client reads all",
        overflow: Overflow::Drop,
        window: None,
        withhold: false,
    },
    Variant {
        key: "block_window",
        label: "block mode, window 4 MiB, client reads all",
        overflow: Overflow::Block,
        window: Some(4 << 20),
        withhold: false,
    },
    Variant {
        key: "withheld",
        label: "block mode, window 256 KiB, stdout credit withheld",
        overflow: Overflow::Block,
        window: Some(256 << 10),
        withhold: true,
    },
];

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// One run: (stderr delays in ms, stderr lines, stdout bytes delivered).
async fn run(api: &Api, secs: f64, v: Variant) -> Result<(Vec<f64>, usize, u64)> {
    let mut req = argv(&["python3", "-c", SCRIPT, &secs.to_string()]);
    req.overflow = v.overflow;
    req.retain_bytes = Some(8 << 20);
    let query = v.window.map(|w| format!("window={w}")).unwrap_or_default();
    let info = api.spawn(&req).await?;
    let mut conn = api.attach(&info.id, &query).await?;
    let started = Instant::now();
    // Python's start-up comes before the first line; allow for it.
    let release_at = started + Duration::from_secs_f64(secs + 2.0);
    let mut withholding = v.withhold;
    let mut owed = [0u64; 2];
    let mut line = Vec::new();
    let mut delays = Vec::new();
    let mut lines = 0usize;
    let mut stdout_bytes = 0u64;
    let deadline = started + Duration::from_secs_f64(secs + 60.0);
    loop {
        if Instant::now() > deadline {
            bail!("fairness run did not finish");
        }
        if withholding && (Instant::now() > release_at || lines as f64 >= secs * 100.0 - 1.0) {
            // The script is done (or should be): let stdout drain.
            withholding = false;
            conn.credit(StreamName::Stdout, 1 << 50).await?;
        }
        let frame = match tokio::time::timeout(Duration::from_millis(50), conn.next()).await {
            Err(_) => continue,
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => bail!("attachment closed before exit"),
            Ok(Err(e)) => return Err(e),
        };
        let arrived = now_ns();
        let (stream, len) = match frame {
            ServerFrame::Stderr { data, .. } => {
                let len = data.len() as u64;
                line.extend_from_slice(&data);
                while let Some(pos) = line.iter().position(|&b| b == b'\n') {
                    let text: Vec<u8> = line.drain(..=pos).collect();
                    let ts: i128 = std::str::from_utf8(&text[..pos])?.trim().parse()?;
                    delays.push((arrived - ts) as f64 / 1e6);
                    lines += 1;
                }
                (StreamName::Stderr, len)
            }
            ServerFrame::Stdout { data, .. } => {
                stdout_bytes += data.len() as u64;
                (StreamName::Stdout, data.len() as u64)
            }
            ServerFrame::Dropped { .. } => continue,
            ServerFrame::Exit { .. } => break,
            other => bail!("unexpected frame {other:?}"),
        };
        if let Some(window) = v.window {
            let i = stream.index();
            if stream == StreamName::Stdout && v.withhold {
                continue;
            }
            owed[i] += len;
            if owed[i] >= window / 4 || stream == StreamName::Stderr {
                conn.credit(stream, owed[i]).await?;
                owed[i] = 0;
            }
        }
    }
    conn.close().await;
    Ok((delays, lines, stdout_bytes))
}

/// Section 4.
pub async fn fairness(ctx: &mut Ctx) -> Result<()> {
    let server = ctx.start_server(&[])?;
    let api = Api::new(&server.base)?;
    let secs = ctx.p.fair_secs;
    for v in VARIANTS {
        let mut delays = Vec::new();
        let mut lines = 0;
        let mut bytes = 0;
        for _ in 0..ctx.p.fair_runs {
            let (d, l, b) = run(&api, secs, v).await?;
            delays.extend(d);
            lines += l;
            bytes += b;
        }
        let expected = (secs * 100.0) as usize * ctx.p.fair_runs;
        let dist = Dist::new(delays);
        let rate = bytes as f64 / (secs * ctx.p.fair_runs as f64) / 1e6;
        ctx.report.push(
            Figure::from_dist(
                &format!("fairness.{}", v.key),
                4,
                &format!("stderr line delay under stdout flood: {}", v.label),
                "ms",
                &dist,
                ctx.p.fair_runs,
            )
            .target("< 20 ms (p99)", dist.p99() < 20.0)
            .note(format!(
                "{lines} of ~{expected} lines; stdout delivered {rate:.0} MB/s{}",
                if v.withhold { " (after release)" } else { "" }
            )),
        );
        ctx.report
            .series
            .insert(format!("stderr delay, {}", v.label), dist);
    }
    server.stop();
    Ok(())
}
