//! Section 8: the cost of the server-side terminal emulator (issue 14).
//!
//! - PTY throughput in block mode (window 4 MiB) with the emulator and
//!   without it (`--no-screen`), two servers in the same run, runs
//!   interleaved (alternating which goes first). The output is coloured
//!   text written with `cat` (NUL bytes, as from /dev/zero, are skipped by
//!   the emulator and would measure nothing). Target: with ≥ 90% of without.
//! - Server memory per idle PTY session: N sessions that print a coloured
//!   prompt and wait; RSS growth over N for a server without emulator, one
//!   whose emulators are live (`--screen-idle-ms` longer than the run) and
//!   one whose emulators have gone to sleep (`--screen-idle-ms 50`; each
//!   session is spawned once the one before has slept, so the allocator
//!   reuses what a sleep freed rather than the peak of all emulators awake
//!   at once being counted). Separate servers, so memory freed but kept by
//!   the allocator does not blur the figures. Target (issue 14): an idle
//!   session's emulator (asleep) adds < 64 KiB at 80x24.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::{Overflow, ServerFrame, StreamName};

use crate::client::{argv, shell, Api};
use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::Tetherd;

const SECTION: u8 = 8;
/// Credit window of the throughput runs.
const WINDOW: u64 = 4 << 20;
/// The idle time of the server whose emulators go to sleep.
const SLEEP_AFTER_MS: u64 = 50;

/// A text file of `bytes` bytes like a colourful `ls -l` or build log.
fn text_file(bytes: u64) -> Result<tempfile_path::TempFile> {
    let path = std::env::temp_dir().join(format!("tether-bench-screen-{}.txt", std::process::id()));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut written = 0u64;
    let mut i = 0u64;
    while written < bytes {
        let line = format!(
            "\x1b[0;3{}m{:>8}\x1b[0m drwxr-xr-x  user group {:>9} Dec  1 12:{:02} \x1b[1;34mdirectory-{i}\x1b[0m lorem ipsum dolor sit\n",
            i % 7 + 1,
            i,
            i * 4096,
            i % 60
        );
        file.write_all(line.as_bytes())?;
        written += line.len() as u64;
        i += 1;
    }
    file.flush()?;
    Ok(tempfile_path::TempFile(path))
}

/// A file removed on drop.
mod tempfile_path {
    pub struct TempFile(pub std::path::PathBuf);
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// `cat FILE` on a PTY through tetherd to one windowed attachment, block
/// mode; returns MB/s of what the PTY wrote (POST to exit frame), having
/// checked that every byte arrived in order.
async fn transfer(api: &Api, file: &str) -> Result<f64> {
    let mut req = argv(&["cat", file]);
    req.tty = true;
    req.overflow = Overflow::Block;
    req.retain_bytes = Some(8 << 20);
    let t0 = Instant::now();
    let info = api.spawn(&req).await?;
    let mut conn = api.attach(&info.id, &format!("window={WINDOW}")).await?;
    let mut next = conn.hello.1;
    let mut owed = 0u64;
    let exit = loop {
        match conn.next_within(Duration::from_secs(120)).await? {
            ServerFrame::Stdout { offset, data } => {
                if offset != next {
                    bail!("stdout at {offset}, expected {next}");
                }
                next += data.len() as u64;
                owed += data.len() as u64;
                if owed >= WINDOW / 4 {
                    conn.credit(StreamName::Stdout, owed).await?;
                    owed = 0;
                }
            }
            ServerFrame::Exit { process } => break process,
            other => bail!("unexpected frame {other:?}"),
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    conn.close().await;
    if exit.stdout_bytes != next {
        bail!("exit says {} bytes, {next} arrived", exit.stdout_bytes);
    }
    api.delete(&info.id).await?;
    Ok(next as f64 / secs / 1e6)
}

/// RSS growth per session (KiB) for `n` idle PTY sessions on `server`.
/// With `pause`, each session is given that long after its prompt before
/// the next is spawned (so that its emulator has gone to sleep, and the
/// memory it freed is reused by the next one instead of counting as peak).
async fn idle_kib(server: &Tetherd, n: usize, pause: Option<Duration>) -> Result<f64> {
    let api = Api::new(&server.base)?;
    let prompt = r"printf '\033]0;user@host: ~\007\033[1;32muser@host\033[0m:\033[1;34m~\033[0m$ '; exec sleep 3600";
    let before = server.rss_kib();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let mut req = shell(prompt);
        req.tty = true;
        req.cols = Some(80);
        req.rows = Some(24);
        ids.push(api.spawn(&req).await?.id);
        if let Some(pause) = pause {
            prompted(&api, &ids[ids.len() - 1..], deadline).await?;
            tokio::time::sleep(pause).await;
        }
    }
    prompted(&api, &ids, deadline).await?;
    let after = server.rss_kib();
    Ok(after.saturating_sub(before) as f64 / n as f64)
}

/// Waits until every session has printed its prompt.
async fn prompted(api: &Api, ids: &[String], deadline: Instant) -> Result<()> {
    for id in ids {
        while api.wait(id, 0).await?.stdout_bytes == 0 {
            if Instant::now() > deadline {
                bail!("session {id} printed no prompt");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(())
}

/// Section 8.
pub async fn screen(ctx: &mut Ctx) -> Result<()> {
    let quick = ctx.p.tp_runs < 5;
    let (bytes, runs, sessions) = if quick {
        (4u64 << 20, 3, 20)
    } else {
        (64 << 20, 7, 200)
    };
    let file = text_file(bytes)?;
    let path = file.0.display().to_string();
    let with = ctx.start_server(&[])?;
    let without = ctx.start_server(&["--no-screen".into()])?;
    let (api_with, api_without) = (Api::new(&with.base)?, Api::new(&without.base)?);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // Interleaved, alternating which goes first.
        if run % 2 == 0 {
            on.push(
                transfer(&api_with, &path)
                    .await
                    .context("with the emulator")?,
            );
            off.push(transfer(&api_without, &path).await.context("--no-screen")?);
        } else {
            off.push(transfer(&api_without, &path).await.context("--no-screen")?);
            on.push(
                transfer(&api_with, &path)
                    .await
                    .context("with the emulator")?,
            );
        }
    }
    with.stop();
    without.stop();
    drop(file);
    let (on, off) = (Dist::new(on), Dist::new(off));
    let size = format!("{} MiB", bytes >> 20);
    let share = on.median() / off.median();
    ctx.report.push(Figure::rate(
        "screen.pty.no_screen",
        SECTION,
        &format!("{size} coloured text via PTY, block, --no-screen"),
        &off,
        runs,
    ));
    ctx.report.push(
        Figure::rate(
            "screen.pty.screen",
            SECTION,
            &format!("{size} coloured text via PTY, block, with emulator"),
            &on,
            runs,
        )
        .floor(off.median())
        .target("≥ 90% of --no-screen", share >= 0.9)
        .note(format!(
            "{:.0}% of --no-screen in the same run",
            share * 100.0
        )),
    );

    // Memory per idle session: one server per configuration.
    let idle = Some(Duration::from_millis(SLEEP_AFTER_MS * 2));
    let configs: [(&str, &str, Vec<String>, Option<Duration>); 3] = [
        (
            "screen.idle.no_screen",
            "--no-screen",
            vec!["--no-screen".into()],
            None,
        ),
        (
            "screen.idle.live",
            "emulator live (before --screen-idle-ms)",
            vec!["--screen-idle-ms".into(), "3600000".into()],
            None,
        ),
        (
            "screen.idle.asleep",
            "emulator asleep (after --screen-idle-ms)",
            vec!["--screen-idle-ms".into(), SLEEP_AFTER_MS.to_string()],
            idle,
        ),
    ];
    let mut per_session = Vec::new();
    for (_, _, args, pause) in &configs {
        let server = ctx.start_server(args)?;
        let kib = idle_kib(&server, sessions, *pause).await?;
        server.stop();
        per_session.push(kib);
    }
    let base = per_session[0];
    for ((id, label, _, _), kib) in configs.iter().zip(&per_session) {
        let mut f = Figure::single(
            id,
            SECTION,
            &format!("RSS per idle PTY session (80x24, {sessions} sessions), {label}"),
            "KiB",
            *kib,
        );
        if *id != "screen.idle.no_screen" {
            let extra = kib - base;
            f = f.note(format!("{extra:.1} KiB beyond --no-screen"));
            if *id == "screen.idle.asleep" {
                f = f.target("< 64 KiB beyond --no-screen", extra < 64.0);
            }
        }
        ctx.report.push(f);
    }
    Ok(())
}
