//! A case: bytes nobody judged yet, and the terminal size they are for.

use std::path::{Path, PathBuf};

use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub cols: u16,
    pub rows: u16,
    pub recording: Vec<u8>,
}

/// Where the judged corpora are written for the xterm.js judge
/// (`tests/screen/judge.test.mjs`).
pub fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screen-judge/corpus");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The directory of alacritty_terminal 0.26.0's published recordings
/// (`tests/ref`) in cargo's registry copy of the crate (a dev-dependency,
/// so every machine that builds the tests has it).
fn alacritty_ref_dir() -> PathBuf {
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

/// One of Alacritty's recordings with the grid Alacritty showed at its end
/// (one line per row, trailing blanks trimmed, wide-character spacers left
/// out).
fn read_alacritty_case(dir: &Path) -> (Case, Vec<String>) {
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
    let case = Case {
        name: dir.file_name().unwrap().to_string_lossy().into_owned(),
        cols: size["columns"].as_u64().unwrap() as u16,
        rows: size["screen_lines"].as_u64().unwrap() as u16,
        recording: std::fs::read(dir.join("alacritty.recording")).unwrap(),
    };
    (case, expected)
}

/// Every case of Alacritty's corpus, by name.
pub fn alacritty_ref() -> Vec<(Case, Vec<String>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(alacritty_ref_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("grid.json").is_file())
        .collect();
    dirs.sort();
    let cases: Vec<(Case, Vec<String>)> = dirs.iter().map(|d| read_alacritty_case(d)).collect();
    assert!(cases.len() >= 40, "only {} cases found", cases.len());
    cases
}
