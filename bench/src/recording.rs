//! Section 15: what a recording costs (issue 44). A process writes 64 MiB
//! of text (base64 lines, 4 MiB in quick mode) to its disk log; once it has
//! exited, the harness reads it three ways, each to the end, while the
//! server's RSS is sampled: the log file itself (`cat`-like, from the page
//! cache: the disk's speed here), `GET .../output` (the raw bytes), and
//! `GET .../recording` (the asciicast: every chunk cut at its time marks and
//! written as a JSON string). The recording must hold every byte (its `o`
//! events decoded give the output back), stream at a speed comparable to
//! the raw read, and leave the server's memory where it was (it streams:
//! nothing is built whole).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::client::{shell, Api};
use crate::ctx::Ctx;
use crate::report::Figure;
use crate::tetherd::{RssSampler, Tetherd};

/// Section 15.
pub async fn recording(ctx: &mut Ctx) -> Result<()> {
    let quick = ctx.report.mode == "quick";
    let mib: u64 = if quick { 4 } else { 64 };
    let server = ctx.start_server(&[format!("--retain-bytes={}", (mib + 16) << 20)])?;
    let result = measure(&server, mib).await;
    server.stop();
    let m = result?;
    let rate = |secs: f64| (mib as f64) / secs;
    eprintln!(
        "   {mib} MiB: log file {:.0} MiB/s, output {:.0} MiB/s, recording {:.0} MiB/s ({:.1} MiB of asciicast); RSS +{:.1} MiB at most while recording",
        rate(m.file_s),
        rate(m.output_s),
        rate(m.recording_s),
        m.cast_bytes as f64 / (1 << 20) as f64,
        m.rss_growth_kib as f64 / 1024.0
    );
    let note = format!(
        "{mib} MiB of base64 lines on disk; the log file read directly {:.0} MiB/s, GET output {:.0} MiB/s; the asciicast is {:.1} MiB; the server's RSS grew by {:.1} MiB at most while it streamed ({:.1} MiB before)",
        rate(m.file_s),
        rate(m.output_s),
        m.cast_bytes as f64 / (1 << 20) as f64,
        m.rss_growth_kib as f64 / 1024.0,
        m.rss_before_kib as f64 / 1024.0,
    );
    ctx.report.push(
        Figure::single(
            "recording.stream",
            15,
            &format!("recording of a {mib} MiB log, streamed"),
            "MiB/s",
            rate(m.recording_s),
        )
        .note(note),
    );
    ctx.report.push(Figure::single(
        "recording.rss_growth",
        15,
        "server RSS growth while a recording streams",
        "MiB",
        m.rss_growth_kib as f64 / 1024.0,
    ));
    Ok(())
}

struct Measured {
    file_s: f64,
    output_s: f64,
    recording_s: f64,
    cast_bytes: u64,
    rss_before_kib: u64,
    rss_growth_kib: u64,
}

async fn measure(server: &Tetherd, mib: u64) -> Result<Measured> {
    let api = Api::new(&server.base)?;
    // base64 makes 4 characters of 3 bytes: 3/4 of the size in random bytes.
    let raw = (mib << 20) / 4 * 3;
    let mut request = shell(&format!("head -c {raw} /dev/urandom | base64 -w 76"));
    request.retain_bytes = Some((mib + 16) << 20);
    let process = api.spawn(&request).await?;
    let exited = api.wait_exit(&process.id, Duration::from_secs(300)).await?;
    let written = exited.stdout_bytes;
    if written < mib << 20 {
        bail!("the process wrote {written} bytes, not {mib} MiB");
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let base = &server.base;

    // The log file, found by the process's id in the server's open files.
    let log = log_file(server.pid, &process.id).context("the process's log file")?;
    let t = Instant::now();
    let on_disk = std::fs::read(&log)?.len();
    let file_s = t.elapsed().as_secs_f64();
    if (on_disk as u64) < written {
        bail!("the log file holds {on_disk} bytes of {written}");
    }

    let t = Instant::now();
    let mut response = http
        .get(format!(
            "{base}/v1/processes/{}/output?stream=stdout",
            process.id
        ))
        .send()
        .await?;
    let mut output_bytes = 0u64;
    while let Some(chunk) = response.chunk().await? {
        output_bytes += chunk.len() as u64;
    }
    let output_s = t.elapsed().as_secs_f64();
    if output_bytes != written {
        bail!("GET output gave {output_bytes} bytes of {written}");
    }

    let rss_before_kib = server.rss_kib();
    let sampler = RssSampler::start(server.pid, Duration::from_millis(10));
    let t = Instant::now();
    let mut response = http
        .get(format!("{base}/v1/processes/{}/recording", process.id))
        .send()
        .await?;
    let mut cast_bytes = 0u64;
    let mut decoded = 0u64;
    let mut pending = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        cast_bytes += chunk.len() as u64;
        // Each complete line (the header, then events), scanning only the
        // bytes that just came: an event line is a whole chunk of output.
        let mut from = pending.len();
        pending.extend_from_slice(&chunk);
        while let Some(at) = pending[from..].iter().position(|b| *b == b'\n') {
            let end = from + at;
            let event: serde_json::Value = serde_json::from_slice(&pending[..end])?;
            if event[1] == "o" {
                decoded += event[2].as_str().map_or(0, |s| s.len() as u64);
            }
            pending.drain(..=end);
            from = 0;
        }
    }
    let recording_s = t.elapsed().as_secs_f64();
    let samples = sampler.finish();
    if decoded != written {
        bail!("the recording's output events hold {decoded} bytes of {written}");
    }
    let peak = samples.iter().map(|s| s.1).max().unwrap_or(rss_before_kib);
    Ok(Measured {
        file_s,
        output_s,
        recording_s,
        cast_bytes,
        rss_before_kib,
        rss_growth_kib: peak.saturating_sub(rss_before_kib),
    })
}

/// The stdout log of process `id`, as the server holds it open.
fn log_file(pid: u32, id: &str) -> Option<std::path::PathBuf> {
    let name = format!("{id}.stdout");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .find(|target| target.file_name().is_some_and(|f| f == name.as_str()))
}
