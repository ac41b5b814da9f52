//! tether's terminal emulator: what real xterm (the judge in
//! `tests/tests/screen_corpus/`) shows for a stream of output, kept in
//! bounded memory, and written back as bytes (`dump.rs`) that rebuild it in
//! a fresh terminal. Written for the server's screen (issue 45) after avt
//! 0.19, corrected from outside, could not reach insert mode, left and
//! right margins, two intensities or the saved cursor's pending wrap.
//!
//! - `parser.rs`: escape sequences to actions (and the unfinished one back);
//! - `cell.rs`: cells and pens;
//! - this file: the state and what the parser drives; `print.rs`:
//!   printing; `control.rs`: C0 and ESC functions and the cursor moves;
//! - `csi.rs`: the CSI functions; `sgr.rs`: the pen; `edit.rs`: what
//!   erases, inserts, deletes and scrolls cells; `dump.rs`: the state as
//!   bytes; `resize.rs`: a new size.

pub mod cell;
mod control;
mod csi;
mod dump;
mod edit;
pub mod parser;
mod print;
mod repeat;
mod resize;
mod sgr;

use std::collections::VecDeque;

use super::modes::ClientModes;
use cell::{Cell, Pen};
use parser::Parser;

/// One row: its cells, and whether the text went on (autowrap) into the
/// row below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub cells: Vec<Cell>,
    pub wrapped: bool,
}

impl Line {
    pub fn blank(cols: usize, pen: Pen) -> Line {
        Line {
            cells: vec![Cell::blank(pen); cols],
            wrapped: false,
        }
    }
}

/// A character set a G-set may hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    #[default]
    Ascii,
    /// DEC Special Graphics (`ESC ( 0`): line drawing.
    DecGraphics,
    /// The United Kingdom set (`ESC ( A`): `#` is `£`.
    British,
}

/// G0 to G3 and which one is invoked into GL.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Charsets {
    pub g: [Charset; 4],
    pub gl: u8,
    /// SS2 / SS3: the set for the next character only.
    pub single_shift: Option<u8>,
}

/// The cursor and what travels with it in DECSC.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub col: usize,
    pub row: usize,
    /// A character was written in the last column: the next one goes to
    /// the next row first (xterm's "do_wrap"; the column stays the last).
    pub pending_wrap: bool,
    pub pen: Pen,
    pub charsets: Charsets,
}

/// What DECSC keeps (xterm: position, pen, character sets, origin mode,
/// the pending wrap).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    pub cursor: Cursor,
    pub origin: bool,
}

/// The modes the screen depends on (the ones a client needs are in
/// `screen/modes.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// IRM (4).
    pub insert: bool,
    /// LNM (20): LF, VT, FF also return.
    pub newline: bool,
    /// DECCKM (?1).
    pub cursor_keys: bool,
    /// DECOM (?6).
    pub origin: bool,
    /// DECAWM (?7).
    pub autowrap: bool,
    /// DECTCEM (?25).
    pub cursor_visible: bool,
    /// Reverse wrap (?45).
    pub reverse_wrap: bool,
    /// DECLRMM (?69): DECSLRM sets left and right margins.
    pub lr_margins: bool,
}

impl Default for Modes {
    fn default() -> Modes {
        Modes {
            insert: false,
            newline: false,
            cursor_keys: false,
            origin: false,
            autowrap: true,
            cursor_visible: true,
            reverse_wrap: false,
            lr_margins: false,
        }
    }
}

/// The terminal's state.
#[derive(Debug, Clone)]
pub struct Terminal {
    pub cols: usize,
    pub rows: usize,
    /// The active screen's rows (the primary one's while `alternate` is
    /// not in use).
    pub lines: Vec<Line>,
    /// The other screen, kept while it is not shown.
    pub other: Vec<Line>,
    pub alternate_active: bool,
    /// Lines scrolled off the top of the primary screen, oldest first.
    pub scrollback: VecDeque<Line>,
    pub scrollback_limit: usize,
    pub cursor: Cursor,
    /// DECSC's cursor, per screen: `[primary, alternate]`.
    pub saved: [Saved; 2],
    pub modes: Modes,
    /// Scroll margins, rows from 0, inclusive.
    pub top: usize,
    pub bottom: usize,
    /// Left and right margins (DECSLRM), columns from 0, inclusive; the
    /// whole width while DECLRMM is off (set only with it on, reset with
    /// it, by DECSTR, RIS and a resize), so that a margin is never asked
    /// whether DECLRMM is on.
    pub left: usize,
    pub right: usize,
    pub tabs: Vec<bool>,
    /// What REP repeats: the character just printed, if the last thing
    /// fed was one.
    pub last_printed: Option<char>,
    /// REP counts are cut to what can still change the screen
    /// (`repeat.rs`); off only to check that cut.
    pub repeat_cut: bool,
}

fn default_tabs(cols: usize) -> Vec<bool> {
    (0..cols).map(|c| c > 0 && c % 8 == 0).collect()
}

/// A character's columns: 0 for combining marks and other zero-width
/// characters, 2 for wide ones (East Asian wide, most emoji).
pub fn char_width(ch: char) -> usize {
    if (ch as u32) < 0x7f {
        return 1;
    }
    unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0)
}

impl Terminal {
    pub fn new(cols: usize, rows: usize, scrollback_limit: usize) -> Terminal {
        let (cols, rows) = (cols.max(1), rows.max(1));
        Terminal {
            cols,
            rows,
            lines: vec![Line::blank(cols, Pen::default()); rows],
            other: vec![Line::blank(cols, Pen::default()); rows],
            alternate_active: false,
            scrollback: VecDeque::new(),
            scrollback_limit,
            cursor: Cursor::default(),
            saved: [Saved::default(); 2],
            modes: Modes::default(),
            top: 0,
            bottom: rows - 1,
            left: 0,
            right: cols - 1,
            tabs: default_tabs(cols),
            last_printed: None,
            repeat_cut: true,
        }
    }

    /// The rows of the primary screen (shown or not).
    pub fn primary(&self) -> &[Line] {
        if self.alternate_active {
            &self.other
        } else {
            &self.lines
        }
    }

    /// The left and right margins that apply to the cursor's column: the
    /// whole row when it is outside them.
    fn row_span(&self) -> (usize, usize) {
        if self.cursor.col > self.right {
            (0, self.cols - 1)
        } else {
            (self.left, self.right)
        }
    }

    fn in_region(&self) -> bool {
        self.cursor.row >= self.top
            && self.cursor.row <= self.bottom
            && self.cursor.col >= self.left
            && self.cursor.col <= self.right
    }

    /// Full reset (RIS): everything but the size, the scrollback and its
    /// bound.
    pub fn reset(&mut self) {
        let fresh = Terminal::new(self.cols, self.rows, self.scrollback_limit);
        let scrollback = std::mem::take(&mut self.scrollback);
        *self = fresh;
        self.scrollback = scrollback;
    }

    /// Soft reset (DECSTR): modes, margins, pen, character sets and the
    /// saved cursor; the screen stays.
    fn soft_reset(&mut self) {
        self.modes.insert = false;
        self.modes.origin = false;
        self.modes.autowrap = true;
        self.modes.cursor_visible = true;
        self.modes.cursor_keys = false;
        self.modes.reverse_wrap = false;
        self.modes.lr_margins = false;
        self.top = 0;
        self.bottom = self.rows - 1;
        self.left = 0;
        self.right = self.cols - 1;
        self.cursor.pen = Pen::default();
        self.cursor.charsets = Charsets::default();
        self.cursor.pending_wrap = false;
        self.saved = [Saved::default(); 2];
    }
}

/// What the parser drives: the screen's state and the modes a client needs.
struct Both<'a> {
    terminal: &'a mut Terminal,
    modes: &'a mut ClientModes,
}

impl parser::Perform for Both<'_> {
    fn print(&mut self, ch: char) {
        self.terminal.print(ch);
    }

    fn print_ascii(&mut self, run: &str) {
        self.terminal.print_ascii(run);
    }

    fn execute(&mut self, ch: char) {
        self.terminal.execute(ch);
    }

    fn csi(&mut self, private: u8, params: &parser::Params, intermediates: &[u8], action: char) {
        self.modes.csi(private, params, intermediates, action);
        self.terminal
            .dispatch_csi(private, params, intermediates, action);
    }

    fn esc(&mut self, intermediates: &[u8], action: char) {
        self.modes.esc(intermediates, action);
        self.terminal.esc(intermediates, action);
    }

    fn osc(&mut self, data: &str) {
        self.modes.osc(data);
    }

    fn settled(&mut self) {
        self.terminal.last_printed = None;
    }
}

/// The terminal and its parser: what the screen feeds.
#[derive(Debug, Clone)]
pub struct Vt {
    pub parser: Parser,
    pub terminal: Terminal,
}

impl Vt {
    pub fn new(cols: usize, rows: usize, scrollback: usize) -> Vt {
        Vt {
            parser: Parser::new(),
            terminal: Terminal::new(cols, rows, scrollback),
        }
    }

    /// Text for the screen; the modes a client needs go to `modes`.
    pub fn feed_str(&mut self, text: &str, modes: &mut ClientModes) {
        let mut both = Both {
            terminal: &mut self.terminal,
            modes,
        };
        self.parser.advance(&mut both, text);
    }

    pub fn feed_char(&mut self, ch: char, modes: &mut ClientModes) {
        let mut both = Both {
            terminal: &mut self.terminal,
            modes,
        };
        self.parser.next(&mut both, ch);
    }

    /// Bytes that rebuild this terminal in a fresh one of its size.
    pub fn dump(&self) -> String {
        let mut out = dump::dump(&self.terminal);
        out.push_str(&self.parser.unfinished());
        out
    }
}
