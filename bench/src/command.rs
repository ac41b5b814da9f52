//! Section 13: one command, as an agent platform or a script runs it,
//! beside the local floor in the same run: `POST /v1/exec` of `true` (one
//! HTTP request, the result once it has exited) and `tether run -- true`
//! (the CLI as a whole process), rounds interleaved with a local
//! fork+exec+wait of `true`. The CLI pays an exec of its own before it
//! does anything, so `tether --version` (the same binary doing nothing) is
//! timed too, and the CLI's figure is also given less that start-up.
//! tetherd's CPU per exec is read from every thread's `schedstat`.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::{metric, spent};

/// `POST /v1/exec {"argv":["true"]}` until its 200; ms.
async fn exec_true(http: &reqwest::Client, base: &str) -> Result<f64> {
    let t0 = Instant::now();
    let response = http
        .post(format!("{base}/v1/exec"))
        .json(&serde_json::json!({"argv": ["true"]}))
        .send()
        .await
        .context("POST /v1/exec")?;
    let status = response.status();
    let body: serde_json::Value = response.json().await?;
    let elapsed = t0.elapsed().as_secs_f64() * 1e3;
    if status.as_u16() != 200 || body["exit_code"] != 0 {
        bail!("exec failed: {status} {body}");
    }
    Ok(elapsed)
}

/// Section 13.
pub async fn command(ctx: &mut Ctx) -> Result<()> {
    let Some(cli) = ctx.cli.clone() else {
        bail!("no tether CLI beside tetherd (build it: cargo build --release -p tether-cli --bin tether)");
    };
    let server = ctx.start_server(&[])?;
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let cli_path = cli.to_string_lossy().into_owned();
    let run = [
        cli_path.as_str(),
        "--server",
        &server.base,
        "run",
        "--",
        "true",
    ];
    let version = [cli_path.as_str(), "--version"];
    for _ in 0..5 {
        exec_true(&http, &server.base).await?;
        blocking(&run).await?;
    }
    let runs = ctx.p.spawn_runs;
    let (mut floor, mut exec, mut cli_run, mut cli_start) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut exec_cpu = 0.0;
    for _ in 0..runs {
        floor.push(blocking(&["true"]).await?);
        let cpu = spent(server.pid).cpu_s;
        exec.push(exec_true(&http, &server.base).await?);
        exec_cpu += spent(server.pid).cpu_s - cpu;
        cli_run.push(blocking(&run).await?);
        cli_start.push(blocking(&version).await?);
    }
    // A busy server knows many exited processes (each stays known for
    // --exited-ttl-ms, five minutes): past a thousand or so, every spawn
    // also forgets the oldest to keep within the retention budget. The
    // same exec then, beside the floor again: a spawn must not cost more
    // for what the table holds.
    let known = if ctx.report.mode == "quick" {
        300
    } else {
        3000
    };
    for _ in 0..known {
        exec_true(&http, &server.base).await?;
    }
    let (mut floor_full, mut exec_full) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        floor_full.push(blocking(&["true"]).await?);
        exec_full.push(exec_true(&http, &server.base).await?);
    }
    // Every command above exited within --exited-ttl-ms and fits under
    // --max-known-processes: none may have been forgotten to make room
    // for the retention it no longer holds.
    let spawned = metric(&http, &server.base, "tether_spawns_total").await?;
    let exited = metric(&http, &server.base, "tether_processes{status=\"exited\"}").await?;
    server.stop();
    let (floor, exec) = (Dist::new(floor), Dist::new(exec));
    let (floor_full, exec_full) = (Dist::new(floor_full), Dist::new(exec_full));
    let (cli_run, cli_start) = (Dist::new(cli_run), Dist::new(cli_start));
    let ratio = |d: &Dist| d.median() / floor.median();
    ctx.report.push(Figure::from_dist(
        "command.floor",
        13,
        "fork+exec+wait `true`, local (floor)",
        "ms",
        &floor,
        runs,
    ));
    ctx.report.push(
        Figure::from_dist(
            "command.exec",
            13,
            "POST /v1/exec `true` (200 with the result)",
            "ms",
            &exec,
            runs,
        )
        .floor(floor.median())
        .target("≤ 1.5× floor (median)", ratio(&exec) <= 1.5)
        .note(format!("{:.2}× the floor", ratio(&exec))),
    );
    let growth = (exec_full.median() / floor_full.median()) / ratio(&exec);
    ctx.report.push(
        Figure::from_dist(
            "command.exec_known",
            13,
            &format!("POST /v1/exec `true` after {known} more (exited ones known)"),
            "ms",
            &exec_full,
            runs,
        )
        .floor(floor_full.median())
        .target("≤ 1.2× the first exec's (to its floor)", growth <= 1.2)
        .note(format!(
            "{:.2}× its floor; {growth:.2}× the first exec's ratio",
            exec_full.median() / floor_full.median()
        )),
    );
    ctx.report.push(
        Figure::single(
            "command.known",
            13,
            "exited commands still known at the end (of all started)",
            "processes",
            exited,
        )
        .target("all of them", exited >= spawned)
        .note(format!("{exited} of {spawned}")),
    );
    ctx.report.push(Figure::single(
        "command.exec_cpu",
        13,
        "POST /v1/exec `true`: tetherd CPU per command",
        "us",
        exec_cpu * 1e6 / runs.max(1) as f64,
    ));
    ctx.report.push(Figure::from_dist(
        "command.cli_start",
        13,
        "`tether --version`, local (the CLI's own start-up)",
        "ms",
        &cli_start,
        runs,
    ));
    let over_start = cli_run.median() - cli_start.median();
    ctx.report.push(
        Figure::from_dist(
            "command.cli_run",
            13,
            "`tether run -- true` (whole process)",
            "ms",
            &cli_run,
            runs,
        )
        .floor(floor.median())
        .target(
            "≤ 1.5× floor (median), less the CLI's start-up",
            over_start / floor.median() <= 1.5,
        )
        .note(format!(
            "{:.2}× the floor as a whole; {:.2}× less `tether --version`",
            ratio(&cli_run),
            over_start / floor.median()
        )),
    );
    Ok(())
}

async fn blocking(argv: &[&str]) -> Result<f64> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        crate::floors::fork_exec(&argv)
    })
    .await?
}

/// The `tether` CLI beside a tetherd binary, if there is one.
pub fn cli_beside(tetherd: &Path) -> Option<std::path::PathBuf> {
    let cli = tetherd.parent()?.join("tether");
    cli.exists().then_some(cli)
}
