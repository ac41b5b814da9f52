//! Real xterm judges a corpus: every case is run through real xterm (under
//! Xvfb, `tether_tests::xterm`) twice, each time in a fresh xterm; a case
//! whose two screens differ is dropped (xterm's own answer is not
//! deterministic) and said so, as is a case after which xterm is not the
//! case's size (it obeys DECCOLM by resizing its window, while the PTY,
//! and so the program's idea of the size, stays as it was). Every candidate is scored
//! on the rest: a case passes when its visible text and its cursor are
//! xterm's. The server's emulator is also judged on every cell's
//! attributes (xterm's `XTREPORTSGR` answers against `Screen::styles`, both
//! in one canonical SGR form), and its snapshot of each case is written to
//! a fresh xterm, which must show the server's text, cursor and
//! attributes. The cases, xterm's screens and the Rust candidates' results
//! are written to `target/screen-judge/corpus/<file>.json` for the xterm.js
//! judge in `tests/screen/`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tether_tests::xterm::{Xterm, XtermScreen, Xvfb};

use super::candidates::{alacritty, tether, tether_screen, tether_styles, vt100, Shown, TmuxJudge};
use super::corpus::{hex, out_dir, Case};

/// The Rust candidates, in the order reports list them.
pub const CANDIDATES: [&str; 4] = ["tether", "vt100", "alacritty_terminal", "tmux"];

pub struct Judged {
    /// Cases xterm answered the same way twice.
    pub judged: usize,
    /// Cases whose every cell has xterm's attributes in the server's
    /// screen, and the others with the first cell that differs.
    pub styles_passes: usize,
    pub styles_fails: Vec<String>,
    /// Cases whose snapshot, written to a fresh real xterm, does not show
    /// the server's screen (text, cursor and every cell's attributes).
    pub round_trip_fails: Vec<String>,
    /// Passes per candidate.
    pub passes: BTreeMap<&'static str, usize>,
    /// Failures per candidate.
    pub fails: BTreeMap<&'static str, Vec<String>>,
}

impl Judged {
    pub fn passes(&self, candidate: &str) -> usize {
        self.passes[candidate]
    }
}

/// What real xterm showed for each case, each run twice in fresh xterms
/// (`Err`: the two differed, said how).
fn xterm_screens(cases: &[Case]) -> Vec<Result<XtermScreen, String>> {
    let xvfb = Xvfb::start();
    let run = |case: &Case| Xterm::start(&xvfb, case.cols, case.rows).screen(&case.recording);
    cases
        .iter()
        .map(|case| {
            let (a, b) = (run(case), run(case));
            if a.size != (case.cols, case.rows) {
                return Err(format!(
                    "xterm made itself {}x{} (DECCOLM), the terminal stays {}x{}",
                    a.size.0, a.size.1, case.cols, case.rows
                ));
            }
            if a == b {
                return Ok(a);
            }
            let row = (0..a.lines.len()).find(|&r| a.lines[r] != b.lines[r]);
            Err(match row {
                Some(r) => format!(
                    "xterm showed row {r} as {:?} once and {:?} the other time",
                    a.lines[r], b.lines[r]
                ),
                None => format!(
                    "xterm put the cursor at {:?} once and at {:?} the other time",
                    a.cursor, b.cursor
                ),
            })
        })
        .collect()
}

fn xterm_version() -> String {
    let out = std::process::Command::new("xterm")
        .arg("-version")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Judges `cases` by real xterm, scores the candidates, writes
/// `<file>.json` and prints the counts.
pub fn judge(corpus: &str, file: &str, cases: &[Case]) -> Judged {
    let screens = xterm_screens(cases);
    let mut tmux = TmuxJudge::start(&format!("judge-{file}"));
    let mut passes: BTreeMap<&'static str, usize> = CANDIDATES.iter().map(|c| (*c, 0)).collect();
    let mut fails: BTreeMap<&'static str, Vec<String>> =
        CANDIDATES.iter().map(|c| (*c, Vec::new())).collect();
    let mut judged = Vec::new();
    let mut dropped = Vec::new();
    let mut styles_fails = Vec::new();
    let mut round_trip_fails = Vec::new();
    let xvfb = Xvfb::start();
    for (case, screen) in cases.iter().zip(&screens) {
        let expected = match screen {
            Ok(screen) => {
                if let Some(diff) = first_difference(&screen.styles, &tether_styles(case)) {
                    styles_fails.push(format!("{}: {diff}", case.name));
                }
                if let Some(diff) = round_trip(&xvfb, case) {
                    round_trip_fails.push(format!("{}: {diff}", case.name));
                }
                Shown {
                    lines: screen.lines.clone(),
                    cursor: screen.cursor,
                }
            }
            Err(reason) => {
                dropped.push(json!({"name": case.name, "reason": reason}));
                continue;
            }
        };
        let shown = [tether(case), vt100(case), alacritty(case), tmux.shown(case)];
        let mut results = serde_json::Map::new();
        let mut wrong = serde_json::Map::new();
        for (candidate, shown) in CANDIDATES.iter().zip(shown) {
            let same = shown == expected;
            if same {
                *passes.get_mut(candidate).unwrap() += 1;
            } else {
                fails.get_mut(candidate).unwrap().push(case.name.clone());
                let cursor = [shown.cursor.0, shown.cursor.1];
                wrong.insert(
                    candidate.to_string(),
                    json!({"lines": shown.lines, "cursor": cursor}),
                );
            }
            results.insert(candidate.to_string(), Value::Bool(same));
        }
        judged.push(json!({
            "name": case.name, "cols": case.cols, "rows": case.rows,
            "recording": hex(&case.recording),
            "expected": expected.lines, "cursor": [expected.cursor.0, expected.cursor.1],
            "results": results, "wrong": wrong,
        }));
    }
    let count = judged.len();
    let report = json!({
        "corpus": corpus, "judge": xterm_version(),
        "cases": judged, "dropped": dropped,
    });
    std::fs::write(
        out_dir().join(format!("{file}.json")),
        serde_json::to_vec(&report).unwrap(),
    )
    .unwrap();
    println!(
        "{corpus}: {count} cases judged by real xterm, {} dropped",
        dropped.len()
    );
    for d in &dropped {
        println!("  dropped {}: {}", d["name"], d["reason"]);
    }
    for candidate in CANDIDATES {
        println!(
            "  {candidate}: {} (fails {:?})",
            passes[candidate], fails[candidate]
        );
    }
    let styles_passes = count - styles_fails.len();
    println!("  tether's attributes: {styles_passes} equal to xterm's");
    for fail in &styles_fails {
        println!("    differs: {fail}");
    }
    println!(
        "  tether's snapshot in a fresh xterm: {} show the server's screen",
        count - round_trip_fails.len()
    );
    for fail in &round_trip_fails {
        println!("    differs: {fail}");
    }
    Judged {
        judged: count,
        styles_passes,
        styles_fails,
        round_trip_fails,
        passes,
        fails,
    }
}

/// The first cell whose attributes differ, said where and how.
fn first_difference(xterm: &[Vec<String>], ours: &[Vec<String>]) -> Option<String> {
    for (row, (a, b)) in xterm.iter().zip(ours).enumerate() {
        for (col, (a, b)) in a.iter().zip(b).enumerate() {
            if a != b {
                return Some(format!("row {row} column {col}: xterm {a:?}, tether {b:?}"));
            }
        }
    }
    (xterm.len() != ours.len()).then(|| format!("{} rows, tether {}", xterm.len(), ours.len()))
}

/// The server's snapshot of the case written to a fresh real xterm: what
/// differs from the server's own screen, if anything.
fn round_trip(xvfb: &Xvfb, case: &Case) -> Option<String> {
    let screen = tether_screen(case);
    let snapshot = screen.snapshot();
    let shown = Xterm::start(xvfb, case.cols, case.rows).screen(&snapshot.data);
    let ours = tether(case);
    if shown.lines != ours.lines {
        let row = (0..ours.lines.len()).find(|&r| shown.lines.get(r) != Some(&ours.lines[r]));
        return Some(format!("text of row {row:?}"));
    }
    if shown.cursor != ours.cursor {
        return Some(format!(
            "cursor {:?}, server {:?}",
            shown.cursor, ours.cursor
        ));
    }
    first_difference(&shown.styles, &screen.styles())
}
