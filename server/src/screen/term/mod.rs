//! tether's terminal emulator: what real xterm (the judge in
//! `tests/tests/screen_corpus/`) shows for a stream of output, kept in
//! bounded memory, and written back as bytes ([`dump`]) that rebuild it in
//! a fresh terminal. Written for the server's screen (issue 45) after avt
//! 0.19, corrected from outside, could not reach insert mode, left and
//! right margins, two intensities or the saved cursor's pending wrap.
//!
//! - `parser.rs`: escape sequences to actions (and the unfinished one back);
//! - `cell.rs`: cells and pens;
//! - this file: the state, printing and the C0 and ESC functions;
//! - `csi.rs`: the CSI functions; `sgr.rs`: the pen; `edit.rs`: what
//!   erases, inserts, deletes and scrolls cells; `dump.rs`: the state as
//!   bytes; `resize.rs`: a new size.

pub mod cell;
mod csi;
mod dump;
mod edit;
pub mod parser;
mod resize;
mod sgr;

use std::collections::VecDeque;

use super::modes::ClientModes;
use cell::{Cell, Pen, Width};
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
    /// whole width while DECLRMM is off.
    pub left: usize,
    pub right: usize,
    pub tabs: Vec<bool>,
    /// What REP repeats: the character just printed, if the last thing
    /// fed was one.
    pub last_printed: Option<char>,
    /// REP counts are cut to what can still change the screen
    /// (`bounds::repeat_count`); off only to check that cut.
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

    // Printing ------------------------------------------------------------

    fn translate(&mut self, ch: char) -> char {
        let set = match self.cursor.charsets.single_shift.take() {
            Some(g) => self.cursor.charsets.g[usize::from(g & 3)],
            None => self.cursor.charsets.g[usize::from(self.cursor.charsets.gl & 3)],
        };
        match set {
            Charset::Ascii => ch,
            Charset::British if ch == '#' => '£',
            Charset::British => ch,
            Charset::DecGraphics => dec_graphics(ch),
        }
    }

    pub fn print(&mut self, ch: char) {
        let ch = self.translate(ch);
        let width = char_width(ch);
        self.last_printed = Some(ch);
        if width == 0 {
            self.combine(ch);
            return;
        }
        self.put_char(ch, width);
    }

    fn put_char(&mut self, ch: char, width: usize) {
        if self.cursor.pending_wrap {
            if self.modes.autowrap {
                self.wrap();
            } else {
                self.cursor.pending_wrap = false;
            }
        }
        let (mut left, mut right) = self.row_span();
        if width == 2 && self.cursor.col + 1 > right {
            if right == left || !self.modes.autowrap {
                // xterm drops a wide character that cannot fit.
                return;
            }
            self.wrap();
            (left, right) = self.row_span();
        }
        let _ = left;
        if self.modes.insert {
            self.insert_cells_at(self.cursor.col, right, width);
        }
        let (col, row) = (self.cursor.col, self.cursor.row);
        let pen = self.cursor.pen;
        self.clear_wide_around(row, col, width);
        let line = &mut self.lines[row];
        if pen.has(cell::attr::INVISIBLE) {
            // xterm keeps blanks for invisible text.
            line.cells[col] = Cell::new(' ', Width::Narrow, pen);
            if width == 2 {
                line.cells[col + 1] = Cell::new(' ', Width::Narrow, pen);
            }
        } else {
            let kind = if width == 2 {
                Width::Wide
            } else {
                Width::Narrow
            };
            line.cells[col] = Cell::new(ch, kind, pen);
            if width == 2 {
                line.cells[col + 1] = Cell::new(' ', Width::WideTail, pen);
            }
        }
        if col + width > right {
            // The last column was written: xterm keeps the cursor there,
            // with the wrap pending (with autowrap off too, where the next
            // character writes over it).
            self.cursor.col = right;
            self.cursor.pending_wrap = true;
        } else {
            self.cursor.col = col + width;
        }
    }

    /// A run of printable ASCII: what `print` does for each, a row's
    /// worth at a time where no character set, insert mode or single shift
    /// changes it.
    pub fn print_ascii(&mut self, run: &str) {
        let sets = &self.cursor.charsets;
        let plain = sets.single_shift.is_none()
            && sets.g[usize::from(sets.gl & 3)] == Charset::Ascii
            && !self.modes.insert;
        let bytes = run.as_bytes();
        let (Some(&last), true) = (bytes.last(), plain) else {
            for ch in run.chars() {
                self.print(ch);
            }
            return;
        };
        let mut at = 0;
        while at < bytes.len() {
            if self.cursor.pending_wrap {
                if self.modes.autowrap {
                    self.wrap();
                } else {
                    self.cursor.pending_wrap = false;
                }
            }
            let (_, right) = self.row_span();
            let (row, col) = (self.cursor.row, self.cursor.col);
            let n = (right + 1 - col).min(bytes.len() - at);
            self.clear_wide_around(row, col, 1);
            self.clear_wide_around(row, col + n - 1, 1);
            let pen = self.cursor.pen;
            let invisible = pen.has(cell::attr::INVISIBLE);
            let cells = &mut self.lines[row].cells[col..col + n];
            for (cell, &byte) in cells.iter_mut().zip(&bytes[at..at + n]) {
                let ch = if invisible { ' ' } else { char::from(byte) };
                *cell = Cell::new(ch, Width::Narrow, pen);
            }
            at += n;
            if col + n > right {
                self.cursor.col = right;
                self.cursor.pending_wrap = true;
            } else {
                self.cursor.col = col + n;
            }
        }
        self.last_printed = Some(char::from(last));
    }

    /// A zero-width character joins the one written last: the cell left
    /// of the cursor, or the cursor's own with a wrap pending. Two marks a
    /// cell, as xterm; more are dropped.
    fn combine(&mut self, mark: char) {
        let (row, col) = (self.cursor.row, self.cursor.col);
        let at = if self.cursor.pending_wrap {
            Some(col)
        } else {
            col.checked_sub(1)
        };
        let Some(mut at) = at else {
            return;
        };
        let cells = &mut self.lines[row].cells;
        if cells[at].width == Width::WideTail && at > 0 {
            at -= 1;
        }
        let cell = &mut cells[at];
        if cell.pen.has(cell::attr::INVISIBLE) {
            return;
        }
        if let Some(slot) = cell.marks.iter_mut().find(|m| m.is_none()) {
            *slot = Some(mark);
        }
    }

    /// The line ends here: mark it wrapped and go to the start of the
    /// next one, scrolling at the bottom margin.
    fn wrap(&mut self) {
        let row = self.cursor.row;
        self.cursor.pending_wrap = false;
        let full_width = self.left == 0 && self.right == self.cols - 1;
        if row + 1 < self.rows || (row == self.bottom && full_width) {
            // The text goes on in the next row (the row itself moves up
            // when the region scrolls). On the last row otherwise (below
            // the region, or a region narrowed by left and right margins,
            // whose scroll leaves the row where it is) it goes on in the
            // same row: the last row never wraps.
            self.lines[row].wrapped = true;
        }
        self.index();
        let (left, _) = if self.modes.lr_margins {
            (self.left, self.right)
        } else {
            (0, 0)
        };
        self.cursor.col = left;
    }

    /// A character written over either half of a wide one leaves a blank
    /// where the other half was.
    fn clear_wide_around(&mut self, row: usize, col: usize, width: usize) {
        let cols = self.cols;
        let line = &mut self.lines[row];
        if line.cells[col].width == Width::WideTail && col > 0 {
            let pen = line.cells[col - 1].pen;
            line.cells[col - 1] = Cell::blank(pen).with_pen(pen);
        }
        let end = col + width - 1;
        if end < cols && line.cells[end].width == Width::Wide && end + 1 < cols {
            let pen = line.cells[end + 1].pen;
            line.cells[end + 1] = Cell::blank(pen).with_pen(pen);
        }
    }

    pub fn repeat(&mut self, count: u16) {
        let Some(ch) = self.last_printed else {
            return;
        };
        let width = char_width(ch);
        if width == 0 {
            return; // xterm repeats no combining character
        }
        // The width a line of repeats fills: the left and right margins'.
        let cols = u16::try_from(self.right - self.left + 1).unwrap_or(u16::MAX);
        let rows = u16::try_from(self.rows).unwrap_or(u16::MAX);
        let limits = super::bounds::ScreenLimits {
            scrollback_lines: self.scrollback_limit,
        };
        let count = if self.repeat_cut {
            super::bounds::repeat_count(count.max(1), cols, rows, width == 2, limits)
        } else {
            count.max(1)
        };
        for _ in 0..count {
            self.put_char(ch, width);
        }
    }

    // C0 and ESC ----------------------------------------------------------

    pub fn execute(&mut self, ch: char) {
        // xterm forgets REP's character once back in the ground state; a
        // control inside an unfinished sequence makes it forget too (a
        // snapshot could not bring that character back: it stands away
        // from the cursor then).
        self.last_printed = None;
        match ch {
            '\x08' => self.back(1),
            '\x09' => self.tab_forward(1),
            '\x0a' | '\x0b' | '\x0c' => {
                self.index();
                if self.modes.newline {
                    self.carriage_return();
                }
            }
            '\x0d' => self.carriage_return(),
            // A single shift waiting for its character is given up too (a
            // snapshot resets the sets it wrote with SI).
            '\x0e' => {
                self.cursor.charsets.gl = 1;
                self.cursor.charsets.single_shift = None;
            }
            '\x0f' => {
                self.cursor.charsets.gl = 0;
                self.cursor.charsets.single_shift = None;
            }
            _ => {}
        }
    }

    pub fn esc(&mut self, intermediates: &[u8], action: char) {
        match (intermediates, action) {
            ([], 'D') => self.index(),
            ([], 'E') => {
                self.index();
                self.carriage_return();
            }
            ([], 'H') => {
                if let Some(stop) = self.tabs.get_mut(self.cursor.col) {
                    *stop = true;
                }
            }
            ([], 'M') => self.reverse_index(),
            ([], 'N') => self.cursor.charsets.single_shift = Some(2),
            ([], 'O') => self.cursor.charsets.single_shift = Some(3),
            ([], '7') => self.save_cursor(),
            ([], '8') => self.restore_cursor(),
            ([], 'c') => self.reset(),
            ([], 'n') => self.cursor.charsets.gl = 2,
            ([], 'o') => self.cursor.charsets.gl = 3,
            ([b'#'], '8') => self.alignment_test(),
            ([g @ (b'(' | b')' | b'*' | b'+')], set) => {
                let slot = usize::from(*g - b'(');
                self.cursor.charsets.g[slot] = match set {
                    '0' => Charset::DecGraphics,
                    'A' => Charset::British,
                    _ => Charset::Ascii,
                };
            }
            _ => {}
        }
    }

    pub fn carriage_return(&mut self) {
        let col = if self.modes.origin || self.cursor.col >= self.left {
            self.left_margin()
        } else {
            0
        };
        self.cursor.col = col;
        self.cursor.pending_wrap = false;
    }

    fn left_margin(&self) -> usize {
        if self.modes.lr_margins {
            self.left
        } else {
            0
        }
    }

    /// IND / LF: down a row, scrolling the region at its bottom margin.
    pub fn index(&mut self) {
        self.cursor.pending_wrap = false;
        if self.cursor.row == self.bottom && self.in_region_cols() {
            self.scroll_up(1);
        } else if self.cursor.row + 1 < self.rows && self.cursor.row != self.bottom {
            self.cursor.row += 1;
        }
    }

    fn in_region_cols(&self) -> bool {
        self.cursor.col >= self.left && self.cursor.col <= self.right
    }

    /// RI: up a row, scrolling the region down at its top margin.
    fn reverse_index(&mut self) {
        self.cursor.pending_wrap = false;
        if self.cursor.row == self.top && self.in_region_cols() {
            self.scroll_down(1);
        } else if self.cursor.row > 0 && self.cursor.row != self.top {
            self.cursor.row -= 1;
        }
    }

    /// BS and CUB (xterm 379's `CursorBack`, reverse wrap included).
    pub fn back(&mut self, n: usize) {
        let reverse = self.modes.reverse_wrap && self.modes.autowrap;
        let mut n = n as i64;
        if reverse && self.cursor.pending_wrap {
            n -= 1;
        }
        let before = self.cursor.col;
        let left = if before < self.left_margin() {
            0
        } else {
            self.left_margin()
        };
        let col = self.cursor.col as i64 - n;
        if col < left as i64 {
            if reverse {
                let right = if self.modes.lr_margins {
                    self.right
                } else {
                    self.cols - 1
                };
                let in_row = (right - left + 1) as i64;
                let mut offset = in_row * self.cursor.row as i64 + col - left as i64;
                if before == left && self.in_region() && self.cursor.row == self.top {
                    offset = (self.bottom as i64 + 1) * in_row - 1;
                } else if offset < 0 {
                    let length = in_row * self.rows as i64;
                    offset += ((-offset) / length + 1) * length;
                }
                self.cursor.row = ((offset / in_row) as usize).min(self.rows - 1);
                self.cursor.col = (offset % in_row) as usize + left;
            } else {
                self.cursor.col = left;
            }
        } else {
            self.cursor.col = col as usize;
        }
        self.cursor.pending_wrap = false;
    }

    pub fn tab_forward(&mut self, n: usize) {
        if self.cursor.pending_wrap {
            return;
        }
        let max = if self.modes.lr_margins && self.cursor.col <= self.right {
            self.right
        } else {
            self.cols - 1
        };
        for _ in 0..n {
            let next = (self.cursor.col + 1..self.cols)
                .find(|&c| self.tabs[c])
                .unwrap_or(self.cols - 1)
                .min(max);
            if next <= self.cursor.col {
                break;
            }
            self.cursor.col = next;
        }
    }

    pub fn tab_back(&mut self, n: usize) {
        if self.cursor.pending_wrap {
            return;
        }
        for _ in 0..n {
            let prev = (0..self.cursor.col)
                .rev()
                .find(|&c| self.tabs[c])
                .unwrap_or(0);
            let prev = if self.modes.origin {
                prev.max(self.left_margin())
            } else {
                prev
            };
            if prev >= self.cursor.col {
                break;
            }
            self.cursor.col = prev;
        }
    }

    pub fn save_cursor(&mut self) {
        let which = usize::from(self.alternate_active);
        self.saved[which] = Saved {
            cursor: self.cursor,
            origin: self.modes.origin,
        };
    }

    pub fn restore_cursor(&mut self) {
        let which = usize::from(self.alternate_active);
        let saved = self.saved[which];
        self.modes.origin = saved.origin;
        self.cursor.pen = saved.cursor.pen;
        self.cursor.charsets = saved.cursor.charsets;
        self.cursor.col = saved.cursor.col.min(self.cols - 1);
        self.cursor.row = saved.cursor.row.min(self.rows - 1);
        if self.modes.origin {
            self.cursor.row = self.cursor.row.clamp(self.top, self.bottom);
            if self.modes.lr_margins {
                self.cursor.col = self.cursor.col.clamp(self.left, self.right);
            }
        }
        self.cursor.pending_wrap = saved.cursor.pending_wrap && self.is_right_edge(self.cursor.col);
    }

    /// True where a print leaves a wrap pending: the right margin, or the
    /// last column right of it.
    fn is_right_edge(&self, col: usize) -> bool {
        col == self.right || col == self.cols - 1
    }

    /// The margins changed: each saved cursor is kept where a restore
    /// could put it (inside the margins when it was saved in origin mode,
    /// which a restore clamps to anyway) and its wrap pending only on a
    /// right edge. xterm keeps a pending wrap anywhere; a snapshot could
    /// not write that one back (a print makes it, at a right edge only).
    pub(super) fn margins_changed(&mut self) {
        let (top, bottom, left, right) = (self.top, self.bottom, self.left, self.right);
        let lr = self.modes.lr_margins;
        let edges = [right, self.cols - 1];
        for saved in &mut self.saved {
            if saved.origin {
                saved.cursor.row = saved.cursor.row.clamp(top, bottom);
                if lr {
                    saved.cursor.col = saved.cursor.col.clamp(left, right);
                }
            }
            if !edges.contains(&saved.cursor.col) {
                saved.cursor.pending_wrap = false;
            }
        }
        if !edges.contains(&self.cursor.col) {
            self.cursor.pending_wrap = false;
        }
    }

    /// DECALN: the screen full of `E`, margins reset, cursor home.
    fn alignment_test(&mut self) {
        for line in &mut self.lines {
            for cell in &mut line.cells {
                *cell = Cell::new('E', Width::Narrow, Pen::default());
            }
            line.wrapped = false;
        }
        self.top = 0;
        self.bottom = self.rows - 1;
        self.left = 0;
        self.right = self.cols - 1;
        self.cursor.pen = self.cursor.pen.blank();
        self.cursor.col = 0;
        self.cursor.row = 0;
        self.cursor.pending_wrap = false;
    }
}

impl Cell {
    fn with_pen(mut self, pen: Pen) -> Cell {
        self.pen = pen.blank();
        self
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

/// DEC Special Graphics as xterm draws it.
fn dec_graphics(ch: char) -> char {
    match ch {
        '`' => '◆',
        'a' => '▒',
        'b' => '␉',
        'c' => '␌',
        'd' => '␍',
        'e' => '␊',
        'f' => '°',
        'g' => '±',
        'h' => '␤',
        'i' => '␋',
        'j' => '┘',
        'k' => '┐',
        'l' => '┌',
        'm' => '└',
        'n' => '┼',
        'o' => '⎺',
        'p' => '⎻',
        'q' => '─',
        'r' => '⎼',
        's' => '⎽',
        't' => '├',
        'u' => '┤',
        'v' => '┴',
        'w' => '┬',
        'x' => '│',
        'y' => '≤',
        'z' => '≥',
        '{' => 'π',
        '|' => '≠',
        '}' => '£',
        '~' => '·',
        '_' => ' ',
        other => other,
    }
}
