//! `tether-bench`: measures tetherd against the targets of issue 6, next to
//! local floors taken in the same run, and prints a table, writes JSON and
//! draws SVG charts.
//!
//! ```text
//! cargo run --release -p tether-bench -- all [--quick] [--json out.json] [--svg-dir docs/bench]
//! ```
//!
//! Every server it starts listens on 127.0.0.1 only and is stopped when its
//! section ends (or when the harness dies, by PR_SET_PDEATHSIG).

mod client;
mod command;
mod ctx;
mod echo_report;
mod fairness;
mod fanout;
mod floors;
mod handover;
mod latency;
mod limits;
mod peers;
mod recording;
mod report;
mod retention;
mod scale;
mod screen;
mod stats;
mod storm;
mod svg;
mod tetherd;
mod throughput;
mod tokio_echo;
mod ttyd;
mod ttyd_protocol;
mod waits;

use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use clap::{Parser, ValueEnum};

use ctx::{Ctx, Params};
use report::{Machine, Report};

/// Benchmarks tetherd: latency, throughput, fairness, scale and memory.
#[derive(Debug, Parser)]
#[command(name = "tether-bench", version, about)]
struct Cli {
    /// What to run.
    #[arg(value_enum)]
    what: What,
    /// Small sizes and few runs (well under two minutes); proves the
    /// harness works, as CI does.
    #[arg(long)]
    quick: bool,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write SVG charts into this directory.
    #[arg(long)]
    svg_dir: Option<PathBuf>,
    /// Write the Markdown table here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// The tetherd binary (default: target/release/tetherd, built if run
    /// through cargo).
    #[arg(long)]
    tetherd: Option<PathBuf>,
    /// Extra flag for every tetherd started (repeatable), for experiments
    /// such as `--tetherd-arg=--max-data-frame-bytes=262144`.
    #[arg(long = "tetherd-arg", allow_hyphen_values = true)]
    tetherd_args: Vec<String>,
    /// A ttyd binary (built from its public source, tsl0922/ttyd): section
    /// 12 measures a keystroke through it beside tetherd; without it the
    /// section says so and measures nothing.
    #[arg(long)]
    ttyd: Option<PathBuf>,
    /// Do not build tetherd and the CLI (`cargo build --release`) first.
    #[arg(long)]
    no_build: bool,
    /// Concurrent PTY sessions of the scale run (default 10000, 50 quick).
    #[arg(long)]
    sessions: Option<usize>,
    /// Share of the scale run's sessions that type in its typing phase, in
    /// percent (default 10).
    #[arg(long)]
    scale_typing_pct: Option<u64>,
    /// Attachments watching the one PTY session of the fan-out run
    /// (default 1000, 20 quick).
    #[arg(long)]
    viewers: Option<usize>,
    /// Bytes that session prints, in MiB (default 100, 4 quick).
    #[arg(long)]
    fanout_mib: Option<u64>,
    /// Concurrent `wait` long-polls of the waits run (default 10000, 200
    /// quick).
    #[arg(long)]
    waits: Option<usize>,
    /// Keystrokes per second per session in the scale run's typing phase
    /// (default 2; 10 in quick mode, where there are only 50 sessions).
    #[arg(long)]
    scale_rate: Option<u64>,
    /// Bytes through pipes in the throughput run, in MiB (default 1024, 64
    /// quick).
    #[arg(long)]
    pipe_mib: Option<u64>,
    /// Bytes through a PTY in the throughput run, in MiB (default 256, 16
    /// quick).
    #[arg(long)]
    pty_mib: Option<u64>,
    /// Processes of the retention section's many-logs run (default 1000,
    /// 20 quick).
    #[arg(long)]
    retention_procs: Option<usize>,
    /// MiB each of them prints (default 4: 1000 x 16 MiB, the issue's
    /// figure, needs 16 GiB of free disk; 1 quick).
    #[arg(long)]
    retention_mib: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum What {
    All,
    Spawn,
    Echo,
    Throughput,
    Fairness,
    Scale,
    Storm,
    Retention,
    Screen,
    Peers,
    Fanout,
    Waits,
    Ttyd,
    Command,
    Handover,
    Recording,
}

fn main() -> Result<()> {
    // Section 12's tokio floor runs in a process of its own, as a server
    // does (`tokio_echo.rs`): this binary, started with this variable.
    if let Some(kind) = std::env::var_os(tokio_echo::CHILD_ENV) {
        return tokio_echo::serve_child(&kind.to_string_lossy());
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<()> {
    let cli = Cli::parse();
    let bin = tetherd::locate(
        cli.tetherd.as_deref(),
        !cli.no_build && std::env::var_os("CARGO").is_some(),
    )?;
    let machine = Machine::probe();
    eprintln!(
        "tether-bench: {} mode, tetherd {}, {} x {}, {} MiB, {} rustc running",
        if cli.quick { "quick" } else { "full" },
        bin.display(),
        machine.nproc,
        machine.cpu_model,
        machine.mem_total_mib,
        machine.rustc_running_at_start
    );
    let started = Instant::now();
    let mut ctx = Ctx {
        cli: command::cli_beside(&bin),
        bin: bin.clone(),
        extra: cli.tetherd_args.clone(),
        ttyd: cli.ttyd.clone(),
        p: {
            let mut p = Params::new(cli.quick, cli.sessions);
            if let Some(hz) = cli.scale_rate {
                p.scale_rate_hz = hz;
            }
            if let Some(mib) = cli.pipe_mib {
                p.pipe_bytes = mib << 20;
            }
            if let Some(mib) = cli.pty_mib {
                p.pty_bytes = mib << 20;
            }
            if let Some(n) = cli.retention_procs {
                p.retention_procs = n;
            }
            if let Some(mib) = cli.retention_mib {
                p.retention_mib = mib;
            }
            if let Some(pct) = cli.scale_typing_pct {
                p.scale_typing_pct = pct.clamp(1, 100);
            }
            if let Some(n) = cli.viewers {
                p.viewers = n.max(1);
            }
            if let Some(mib) = cli.fanout_mib {
                p.fanout_bytes = mib.max(1) << 20;
            }
            if let Some(n) = cli.waits {
                p.waits = n.max(1);
            }
            p
        },
        report: Report {
            mode: if cli.quick { "quick" } else { "full" }.into(),
            machine,
            tetherd: bin.display().to_string(),
            started_at_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            ..Default::default()
        },
    };
    let all = cli.what == What::All;
    let sections = [
        (What::Spawn, "1. spawn-to-exit and exit-to-wait"),
        (What::Echo, "2. keystroke echo"),
        (What::Throughput, "3. throughput"),
        (What::Fairness, "4. fairness"),
        (What::Scale, "5. scale"),
        (What::Storm, "6. output storm"),
        (What::Retention, "7. what disk retention costs"),
        (What::Screen, "8. terminal screen cost"),
        (What::Peers, "9. peers: websocketd on the same work"),
        (What::Fanout, "10. one PTY session, many viewers"),
        (What::Waits, "11. concurrent wait long-polls"),
        (What::Ttyd, "12. a keystroke: tetherd beside ttyd"),
        (
            What::Command,
            "13. one command: exec and the CLI beside the floor",
        ),
        (What::Handover, "14. the handover's pause"),
        (What::Recording, "15. what a recording costs"),
    ];
    let mut failed = Vec::new();
    for (what, title) in sections {
        if !all && cli.what != what {
            continue;
        }
        eprintln!("== {title}");
        let t = Instant::now();
        let result = match what {
            What::Spawn => latency::spawn(&mut ctx).await,
            What::Echo => latency::echo(&mut ctx).await,
            What::Throughput => throughput::throughput(&mut ctx).await,
            What::Fairness => fairness::fairness(&mut ctx).await,
            What::Scale => scale::scale(&mut ctx).await,
            What::Storm => storm::storm(&mut ctx).await,
            What::Retention => retention::retention(&mut ctx).await,
            What::Screen => screen::screen(&mut ctx).await,
            What::Peers => peers::peers(&mut ctx).await,
            What::Fanout => fanout::fanout(&mut ctx).await,
            What::Waits => waits::waits(&mut ctx).await,
            What::Ttyd => ttyd::ttyd(&mut ctx).await,
            What::Command => command::command(&mut ctx).await,
            What::Handover => handover::handover(&mut ctx).await,
            What::Recording => recording::recording(&mut ctx).await,
            What::All => Ok(()),
        };
        match result {
            Ok(()) => eprintln!("   done in {:.1} s", t.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("   FAILED: {e:#}");
                failed.push(format!("{title}: {e:#}"));
            }
        }
    }
    ctx.report.elapsed_s = started.elapsed().as_secs_f64();
    println!();
    print!("{}", ctx.report.table());
    println!(
        "\n{} mode, {:.0} s; p99 is the bad tail (p1 for throughputs); n = samples (runs).",
        ctx.report.mode, ctx.report.elapsed_s
    );
    if let Some(path) = &cli.json {
        ctx.report.write_json(path)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &cli.markdown {
        std::fs::write(path, ctx.report.markdown())?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &cli.svg_dir {
        for path in svg::write_all(&ctx.report, dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("{} section(s) failed:\n{}", failed.len(), failed.join("\n"));
    }
    Ok(())
}
