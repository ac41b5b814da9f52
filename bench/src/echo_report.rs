//! Section 12's samples and rows: per kind of echo (raw, cooked), every
//! round trip and per block the CPU time and context switches per key of
//! tetherd, of ttyd (when given) and of the two floors: the bare relay
//! thread (`floors.rs`) and the least tokio + tungstenite server
//! (`tokio_echo.rs`).

use crate::ctx::Ctx;
use crate::report::Figure;
use crate::stats::Dist;
use crate::tetherd::Spent;

/// One server's samples of one kind of echo: every round trip, and per
/// block (a few hundred keys, alternating with the others') the CPU time
/// and context switches per keystroke, so that a burst of load from
/// elsewhere spoils a block, not the figure (medians over blocks).
#[derive(Default)]
pub struct Side {
    rtt: Vec<f64>,
    cpu_us: Vec<f64>,
    switches: Vec<f64>,
}

impl Side {
    /// One round trip, in ms.
    pub fn push(&mut self, rtt_ms: f64) {
        self.rtt.push(rtt_ms);
    }

    /// The end of a block of `keys` keystrokes: what the server spent.
    pub fn block(&mut self, before: Spent, after: Spent, keys: usize) {
        let keys = keys.max(1) as f64;
        self.cpu_us.push((after.cpu_s - before.cpu_s) * 1e6 / keys);
        self.switches
            .push(after.switches.saturating_sub(before.switches) as f64 / keys);
    }
}

/// The samples of one kind of echo: tetherd's, ttyd's (empty without
/// `--ttyd`), and the two floors'.
#[derive(Default)]
pub struct Sides {
    pub ours: Side,
    pub theirs: Side,
    pub relay: Side,
    pub tokio: Side,
}

/// Round trips, CPU per key and switches per key of one side.
struct Dists {
    rtt: Dist,
    cpu: Dist,
    switches: Dist,
}

impl From<Side> for Dists {
    fn from(side: Side) -> Dists {
        Dists {
            rtt: Dist::new(side.rtt),
            cpu: Dist::new(side.cpu_us),
            switches: Dist::new(side.switches),
        }
    }
}

/// "median A×, p99 B× the NAME" of `ours` against `base`.
fn ratios(ours: &Dist, base: &Dist, name: &str) -> String {
    format!(
        "median {:.2}×, p99 {:.2}× the {name}",
        ours.median() / base.median().max(1e-9),
        ours.p99() / base.p99().max(1e-9)
    )
}

/// The rows of one kind of echo: the floors', tetherd's and, when ttyd
/// ran, ttyd's with the targets against it.
pub fn report_echo(ctx: &mut Ctx, kind: &str, sides: Sides, with_ttyd: bool) {
    let blocks = sides.ours.cpu_us.len();
    let ours = Dists::from(sides.ours);
    let relay = Dists::from(sides.relay);
    let tokio = Dists::from(sides.tokio);
    let theirs = with_ttyd.then(|| Dists::from(sides.theirs));
    if let Some(theirs) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer"),
            12,
            &format!("{kind} keystroke echo via ttyd (PTY `cat`)"),
            "ms",
            &theirs.rtt,
            1,
        ));
    }
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.relay"),
            12,
            &format!("{kind} keystroke echo through a bare TCP relay thread (no server, no WebSocket; floor)"),
            "ms",
            &relay.rtt,
            1,
        )
        .note(match &theirs {
            Some(theirs) => format!("ttyd: {}", ratios(&theirs.rtt, &relay.rtt, "relay")),
            None => "ttyd not measured".to_string(),
        }),
    );
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.tokio"),
            12,
            &format!("{kind} keystroke echo through the least tokio + tungstenite server (floor)"),
            "ms",
            &tokio.rtt,
            1,
        )
        .note(format!(
            "a process of its own, one thread, two tasks, ttyd's messages; {}",
            ratios(&tokio.rtt, &relay.rtt, "relay")
        )),
    );
    let over_floors = format!(
        "{}; {}",
        ratios(&ours.rtt, &relay.rtt, "relay"),
        ratios(&ours.rtt, &tokio.rtt, "tokio floor")
    );
    let mut row = Figure::from_dist(
        &format!("ttyd.{kind}.tetherd"),
        12,
        &format!("{kind} keystroke echo via tetherd, same run"),
        "ms",
        &ours.rtt,
        1,
    )
    .floor(relay.rtt.median());
    row = match &theirs {
        Some(theirs) => {
            let median_ratio = ours.rtt.median() / theirs.rtt.median();
            let p99_ratio = ours.rtt.p99() / theirs.rtt.p99();
            row.target(
                "median and p99 ≤ 0.9× ttyd's",
                median_ratio <= 0.9 && p99_ratio <= 0.9,
            )
            .note(format!(
                "tetherd/ttyd: median {median_ratio:.2}×, p99 {p99_ratio:.2}×; {over_floors}"
            ))
        }
        None => row.note(format!("{over_floors}; no ttyd, no target")),
    };
    ctx.report.push(row);
    if let Some(theirs) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer_cpu"),
            12,
            &format!("{kind} echo: server CPU per keystroke, ttyd"),
            "us",
            &theirs.cpu,
            blocks,
        ));
    }
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.relay_cpu"),
            12,
            &format!("{kind} echo: CPU per keystroke, the bare relay thread (floor)"),
            "us",
            &relay.cpu,
            blocks,
        )
        .note(format!(
            "its own thread's schedstat: a poll, a read and a write each way; {:.1} context switches per keystroke",
            relay.switches.median()
        )),
    );
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.tokio_cpu"),
            12,
            &format!(
                "{kind} echo: CPU per keystroke, the least tokio + tungstenite server (floor)"
            ),
            "us",
            &tokio.cpu,
            blocks,
        )
        .note(format!(
            "its process's schedstat, every thread; {:.1} context switches per keystroke",
            tokio.switches.median()
        )),
    );
    let cpu_floors = format!(
        "{:.2}× the relay, {:.2}× the tokio floor",
        ours.cpu.median() / relay.cpu.median().max(1e-9),
        ours.cpu.median() / tokio.cpu.median().max(1e-9)
    );
    let mut row = Figure::from_dist(
        &format!("ttyd.{kind}.cpu"),
        12,
        &format!("{kind} echo: server CPU per keystroke, tetherd"),
        "us",
        &ours.cpu,
        blocks,
    )
    .floor(tokio.cpu.median());
    row = match &theirs {
        Some(theirs) => {
            let cpu_ratio = ours.cpu.median() / theirs.cpu.median().max(1e-9);
            row.target("≤ ttyd's", cpu_ratio <= 1.0).note(format!(
                "medians over {blocks} blocks each; tetherd/ttyd {cpu_ratio:.2}×; {cpu_floors}"
            ))
        }
        None => row.note(format!(
            "medians over {blocks} blocks; {cpu_floors}; no ttyd, no target"
        )),
    };
    ctx.report.push(row);
    if let Some(theirs) = &theirs {
        ctx.report.push(Figure::from_dist(
            &format!("ttyd.{kind}.peer_switches"),
            12,
            &format!("{kind} echo: context switches per keystroke, ttyd"),
            "switches",
            &theirs.switches,
            blocks,
        ));
    }
    ctx.report.push(
        Figure::from_dist(
            &format!("ttyd.{kind}.switches"),
            12,
            &format!("{kind} echo: context switches per keystroke, tetherd"),
            "switches",
            &ours.switches,
            blocks,
        )
        .note("every thread's voluntary + involuntary switches; a voluntary one is a sleep, so a wake-up"),
    );
}
