//! The server's emulator judged by a corpus nobody here wrote: the
//! reference recordings that `alacritty_terminal` publishes with its crate
//! (`tests/ref/*/`: the bytes a real program wrote, the terminal size, and
//! the grid Alacritty showed at the end), read from cargo's copy of the
//! package (a dev-dependency, so every machine that builds the tests has
//! it). Each case's visible text (one line per row, trailing blanks
//! trimmed, the spacer after a wide character left out) is compared; the
//! counts per candidate are in docs/BENCHMARKS.md. The cases and the
//! server's results are written to `target/screen-judge/corpus/` for the
//! xterm.js judge in `tests/screen/`, which scores xterm.js on the same
//! cases and holds the server to at least its count.

use std::path::{Path, PathBuf};

use alacritty_terminal::event::VoidListener;
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::Flags;
use alacritty_terminal::term::test::TermSize;
use alacritty_terminal::term::{Config, Term};
use alacritty_terminal::vte::ansi::Processor;
use serde_json::Value;
use tether_server::screen::{Screen, ScreenLimits};

/// Cases the server's emulator (avt 0.19 behind `server/src/screen/`)
/// shows as Alacritty did. Raise it when the emulator gets better: the
/// judge fails on fewer.
const TETHER_PASSES_AT_LEAST: usize = 37;

/// The corpus directory in cargo's registry copy of the crate.
fn corpus() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let src = home.join("registry/src");
    for registry in std::fs::read_dir(&src).unwrap() {
        let dir = registry
            .unwrap()
            .path()
            .join("alacritty_terminal-0.26.0/tests/ref");
        if dir.is_dir() {
            return dir;
        }
    }
    panic!("alacritty_terminal 0.26.0 is not in {}", src.display());
}

struct Case {
    name: String,
    cols: u16,
    rows: u16,
    recording: Vec<u8>,
    expected: Vec<String>,
}

fn read_case(dir: &Path) -> Case {
    let json = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    };
    let size = json("size.json");
    let grid = json("grid.json");
    let rows = grid["lines"].as_u64().unwrap() as usize;
    let raw = &grid["raw"];
    let inner = raw["inner"].as_array().unwrap();
    let zero = raw["zero"].as_u64().unwrap() as usize;
    // Alacritty's ring keeps the bottom row first.
    let expected = (0..rows)
        .map(|line| {
            let row = &inner[(zero + rows - 1 - line) % inner.len()]["inner"];
            let mut text = String::new();
            for cell in row.as_array().unwrap() {
                if cell["flags"].as_str().unwrap().contains("WIDE_CHAR_SPACER") {
                    continue;
                }
                text.push_str(cell["c"].as_str().unwrap());
                if let Some(zerowidth) = cell["extra"]["zerowidth"].as_array() {
                    for c in zerowidth {
                        text.push_str(c.as_str().unwrap());
                    }
                }
            }
            text.trim_end().to_string()
        })
        .collect();
    Case {
        name: dir.file_name().unwrap().to_string_lossy().into_owned(),
        cols: size["columns"].as_u64().unwrap() as u16,
        rows: size["screen_lines"].as_u64().unwrap() as u16,
        recording: std::fs::read(dir.join("alacritty.recording")).unwrap(),
        expected,
    }
}

fn cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("grid.json").is_file())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| read_case(d)).collect()
}

fn tether(case: &Case) -> Vec<String> {
    let mut screen = Screen::new(
        case.cols,
        case.rows,
        ScreenLimits {
            scrollback_lines: 0,
        },
    );
    screen.feed(&case.recording);
    screen.text().lines().map(str::to_string).collect()
}

fn alacritty(case: &Case) -> Vec<String> {
    let size = TermSize::new(usize::from(case.cols), usize::from(case.rows));
    let mut term = Term::new(Config::default(), &size, VoidListener);
    Processor::<alacritty_terminal::vte::ansi::StdSyncHandler>::new()
        .advance(&mut term, &case.recording);
    (0..i32::from(case.rows))
        .map(|line| {
            let row = &term.grid()[Line(line)];
            let mut text = String::new();
            for col in 0..usize::from(case.cols) {
                let cell = &row[Column(col)];
                if cell
                    .flags
                    .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
                {
                    continue;
                }
                text.push(cell.c);
                if let Some(zerowidth) = cell.zerowidth() {
                    text.extend(zerowidth);
                }
            }
            text.trim_end().to_string()
        })
        .collect()
}

fn vt100(case: &Case) -> Vec<String> {
    let size = |n: u16| std::num::NonZeroU16::new(n).unwrap();
    let mut parser = vt100::Parser::new(size(case.rows), size(case.cols), 0);
    parser.process(&case.recording);
    parser
        .screen()
        .rows(0, case.cols)
        .map(|row| row.trim_end().to_string())
        .collect()
}

#[test]
fn the_screen_matches_what_alacritty_showed_for_its_published_recordings() {
    let cases = cases();
    assert!(cases.len() >= 40, "only {} cases found", cases.len());
    let mut tether_passes = Vec::new();
    let mut alacritty_passes = 0;
    let mut vt100_passes = 0;
    for case in &cases {
        if vt100(case) == case.expected {
            vt100_passes += 1;
        }
        if tether(case) == case.expected {
            tether_passes.push(case.name.as_str());
        }
        if alacritty(case) == case.expected {
            alacritty_passes += 1;
        }
    }
    let failed: Vec<&str> = cases
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| !tether_passes.contains(n))
        .collect();
    println!(
        "alacritty_terminal ref corpus, {} cases: tether (avt) {}, alacritty_terminal {}, vt100 {}; tether fails {failed:?}",
        cases.len(),
        tether_passes.len(),
        alacritty_passes,
        vt100_passes
    );
    let judged: Vec<Value> = cases
        .iter()
        .map(|case| {
            let hex: String = case.recording.iter().map(|b| format!("{b:02x}")).collect();
            serde_json::json!({
                "name": case.name, "cols": case.cols, "rows": case.rows,
                "recording": hex, "expected": case.expected,
                "tether": tether_passes.contains(&case.name.as_str()),
            })
        })
        .collect();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screen-judge/corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let corpus =
        serde_json::json!({"corpus": "alacritty_terminal 0.26.0 tests/ref", "cases": judged});
    std::fs::write(
        dir.join("alacritty_ref.json"),
        serde_json::to_vec(&corpus).unwrap(),
    )
    .unwrap();
    // The judge reads the corpus right: Alacritty agrees with its own
    // recordings.
    assert!(
        alacritty_passes + 2 >= cases.len(),
        "alacritty {alacritty_passes}"
    );
    assert!(
        tether_passes.len() >= TETHER_PASSES_AT_LEAST,
        "tether passes {} (fails {failed:?})",
        tether_passes.len()
    );
}
