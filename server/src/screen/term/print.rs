//! Printing: a character to the cursor's cell, as xterm 379's `dotext`
//! and `WriteText` do it: the pending wrap, insert mode, wide characters
//! (never split, dropped where they cannot fit), combining marks joining
//! the cell written last, invisible text kept as blanks, runs of plain
//! ASCII a row at a time, REP, and the character sets.

use super::cell::{self, Cell, Width};
use super::{char_width, Charset, Terminal};

impl Terminal {
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
        let (left, mut right) = self.row_span();
        if width == 2 && self.cursor.col + 1 > right {
            if right == left || !self.modes.autowrap {
                // xterm drops a wide character that cannot fit.
                return;
            }
            self.wrap();
            right = self.row_span().1;
        }
        // xterm's InsertChar does nothing outside the left and right
        // margins: there a print in insert mode writes over.
        if self.modes.insert && (self.left..=self.right).contains(&self.cursor.col) {
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
        self.cursor.col = self.left;
    }

    /// A character written over either half of a wide one leaves a blank
    /// where the other half was.
    fn clear_wide_around(&mut self, row: usize, col: usize, width: usize) {
        let cols = self.cols;
        let line = &mut self.lines[row];
        if line.cells[col].width == Width::WideTail && col > 0 {
            let pen = line.cells[col - 1].pen;
            line.cells[col - 1] = Cell::blank(pen);
        }
        let end = col + width - 1;
        if end < cols && line.cells[end].width == Width::Wide && end + 1 < cols {
            let pen = line.cells[end + 1].pen;
            line.cells[end + 1] = Cell::blank(pen);
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
        let count = if self.repeat_cut {
            super::repeat::repeat_count(count.max(1), cols, rows, width == 2, self.scrollback_limit)
        } else {
            count.max(1)
        };
        for _ in 0..count {
            self.put_char(ch, width);
        }
    }
}

/// DEC Special Graphics as xterm draws it.
pub(super) fn dec_graphics(ch: char) -> char {
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
