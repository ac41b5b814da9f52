//! The candidate emulators, each fed a whole case and asked what it shows:
//! the visible rows (trailing blanks trimmed, the second half of a wide
//! character left out) and the cursor, `(column, row)` from 0, a cursor
//! waiting to wrap counted on the last column (as xterm reports it).

use std::time::Duration;

use alacritty_terminal::event::VoidListener;
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::Flags;
use alacritty_terminal::term::test::TermSize;
use alacritty_terminal::term::{Config, Term};
use alacritty_terminal::vte::ansi::Processor;
use tether_server::screen::{Screen, ScreenLimits};
use tether_tests::tmux::Tmux;

use super::corpus::Case;

/// What one emulator showed for a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub lines: Vec<String>,
    pub cursor: (u16, u16),
}

impl Shown {
    fn new(case: &Case, lines: impl IntoIterator<Item = String>, cursor: (u16, u16)) -> Shown {
        let mut lines: Vec<String> = lines
            .into_iter()
            .map(|l| l.trim_end_matches(' ').to_string())
            .collect();
        lines.resize(usize::from(case.rows), String::new());
        Shown {
            lines,
            cursor: (cursor.0.min(case.cols - 1), cursor.1),
        }
    }
}

fn narrow(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The server's emulator: `tether_server::screen::Screen`, what
/// `GET .../screen` and the `screen` frame come from.
pub fn tether(case: &Case) -> Shown {
    let screen = tether_screen(case);
    let lines: Vec<String> = screen.text().lines().map(str::to_string).collect();
    Shown::new(case, lines, screen.cursor())
}

/// The server's emulator after the whole case.
pub fn tether_screen(case: &Case) -> Screen {
    let mut screen = Screen::new(
        case.cols,
        case.rows,
        ScreenLimits {
            scrollback_lines: 0,
        },
    );
    screen.feed(&case.recording);
    screen
}

/// Every visible cell's attributes in the server's emulator (canonical SGR).
pub fn tether_styles(case: &Case) -> Vec<Vec<String>> {
    tether_screen(case).styles()
}

pub fn alacritty(case: &Case) -> Shown {
    let size = TermSize::new(usize::from(case.cols), usize::from(case.rows));
    let mut term = Term::new(Config::default(), &size, VoidListener);
    Processor::<alacritty_terminal::vte::ansi::StdSyncHandler>::new()
        .advance(&mut term, &case.recording);
    let lines = (0..i32::from(case.rows)).map(|line| {
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
        text
    });
    let lines: Vec<String> = lines.collect();
    let point = term.grid().cursor.point;
    let row = narrow(usize::try_from(point.line.0).unwrap_or(0));
    Shown::new(case, lines, (narrow(point.column.0), row))
}

pub fn vt100(case: &Case) -> Shown {
    let size = |n: u16| std::num::NonZeroU16::new(n).unwrap();
    let mut parser = vt100::Parser::new(size(case.rows), size(case.cols), 0);
    parser.process(&case.recording);
    let screen = parser.screen();
    let lines: Vec<String> = screen.rows(0, case.cols).collect();
    let (row, col) = screen.cursor_position();
    Shown::new(case, lines, (col, row))
}

/// tmux 3.3a (Debian's), one detached session per case: the pane runs
/// `cat` of the case with the terminal in raw mode (so no byte is
/// translated), then sets the pane's title to a marker, which tmux can only
/// have read after every byte of the case; then `capture-pane`.
pub struct TmuxJudge {
    tmux: Tmux,
    dir: std::path::PathBuf,
    cases: u64,
}

impl TmuxJudge {
    pub fn start(name: &str) -> TmuxJudge {
        let tmux = Tmux::start_command(name, "exec sleep 600");
        let dir = tether_tests::fresh_dir();
        std::fs::create_dir_all(&dir).unwrap();
        TmuxJudge {
            tmux,
            dir,
            cases: 0,
        }
    }

    pub fn shown(&mut self, case: &Case) -> Shown {
        self.cases += 1;
        let session = format!("case{}", self.cases);
        let file = self.dir.join(&session);
        std::fs::write(&file, &case.recording).unwrap();
        let marker = format!("tether-judge-done-{}", self.cases);
        let script = format!(
            "stty raw -echo; cat {}; printf '\\033]2;{marker}\\007'; exec sleep 600",
            file.display()
        );
        let (cols, rows) = (case.cols.to_string(), case.rows.to_string());
        let out = self.tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            &cols,
            "-y",
            &rows,
            &script,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let display = |format: &str| {
            let out = self
                .tmux
                .cmd(&["display-message", "-p", "-t", &session, format]);
            String::from_utf8_lossy(&out.stdout).trim_end().to_string()
        };
        let title = tether_tests::settle_blocking(
            Duration::from_secs(20),
            || display("#{pane_title}"),
            |t| *t == marker,
        );
        assert_eq!(title, marker, "tmux never read all of {}", case.name);
        let cursor = display("#{cursor_x} #{cursor_y}");
        let (x, y) = cursor.split_once(' ').unwrap();
        let pane = self.tmux.cmd(&["capture-pane", "-p", "-t", &session]);
        let text = String::from_utf8_lossy(&pane.stdout).into_owned();
        self.tmux.cmd(&["kill-session", "-t", &session]);
        let _ = std::fs::remove_file(&file);
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        Shown::new(case, lines, (x.parse().unwrap(), y.parse().unwrap()))
    }
}

impl Drop for TmuxJudge {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
