//! What erases, inserts, deletes and scrolls cells, inside the margins as
//! xterm 379 does it (`util.c`, `screen.c`). Every cell these make is blank
//! under the pen's colours only (no attribute), as in xterm.

use super::cell::{attr, Cell, Width};
use super::{Line, Terminal};

impl Terminal {
    fn blank(&self) -> Cell {
        Cell::blank(self.cursor.pen)
    }

    fn full_width(&self) -> bool {
        self.left == 0 && self.right == self.cols - 1
    }

    /// Lines `top..=bottom` move up `n` (the region's columns only when
    /// left and right margins are set); blank lines come in at the bottom.
    /// Lines leaving the top of the primary screen's whole width go to the
    /// scrollback.
    pub(super) fn scroll_up(&mut self, n: usize) {
        let (top, bottom) = (self.top, self.bottom);
        let n = n.min(bottom - top + 1);
        if n == 0 {
            return;
        }
        let blank = self.blank();
        if self.full_width() && n == 1 {
            // One line, the common case: the line leaving is moved, not
            // copied, and the one coming in reuses the scrollback's oldest.
            let line = self.lines.remove(top);
            let mut fresh = if top == 0 && !self.alternate_active {
                self.keep_in_scrollback(line)
                    .filter(|l| l.cells.len() == self.cols)
            } else {
                Some(line)
            }
            .unwrap_or_else(|| Line::blank(self.cols, blank.pen));
            fresh.cells.fill(blank);
            fresh.wrapped = false;
            self.lines.insert(bottom, fresh);
        } else if self.full_width() {
            let removed: Vec<Line> = self
                .lines
                .splice(top..top + n, std::iter::empty())
                .collect();
            let fresh = Line::blank(self.cols, self.cursor.pen);
            let at = bottom + 1 - n;
            self.lines.splice(at..at, std::iter::repeat_n(fresh, n));
            if top == 0 && !self.alternate_active {
                for line in removed {
                    self.keep_in_scrollback(line);
                }
            }
        } else {
            let (left, right) = (self.left, self.right);
            for row in top..=bottom {
                let source = row + n;
                if source <= bottom {
                    let (upper, lower) = self.lines.split_at_mut(source);
                    upper[row].cells[left..=right].copy_from_slice(&lower[0].cells[left..=right]);
                } else {
                    self.lines[row].cells[left..=right].fill(blank);
                }
                repair_wide(&mut self.lines[row].cells, left, right);
            }
        }
    }

    /// Lines `top..=bottom` move down `n`; blank lines come in at the top.
    pub(super) fn scroll_down(&mut self, n: usize) {
        let (top, bottom) = (self.top, self.bottom);
        let n = n.min(bottom - top + 1);
        if n == 0 {
            return;
        }
        let blank = self.blank();
        if self.full_width() {
            self.lines.drain(bottom + 1 - n..=bottom);
            let fresh = Line::blank(self.cols, self.cursor.pen);
            self.lines.splice(top..top, std::iter::repeat_n(fresh, n));
            // The row pushed off took the continuation of the one now last.
            if bottom == self.rows - 1 {
                self.lines[bottom].wrapped = false;
            }
        } else {
            let (left, right) = (self.left, self.right);
            for row in (top..=bottom).rev() {
                if row >= top + n {
                    let (upper, lower) = self.lines.split_at_mut(row);
                    lower[0].cells[left..=right]
                        .copy_from_slice(&upper[row - n].cells[left..=right]);
                } else {
                    self.lines[row].cells[left..=right].fill(blank);
                }
                repair_wide(&mut self.lines[row].cells, left, right);
            }
        }
    }

    /// `line` goes to the end of the scrollback (nowhere without one); the
    /// line that makes room, the oldest, comes back for reuse.
    pub(super) fn keep_in_scrollback(&mut self, line: Line) -> Option<Line> {
        if self.scrollback_limit == 0 {
            return Some(line);
        }
        let oldest = if self.scrollback.len() >= self.scrollback_limit {
            self.scrollback.pop_front()
        } else {
            None
        };
        self.scrollback.push_back(line);
        oldest
    }

    /// Shifts cells `col..=right` of the cursor's row right by `n`, blanks
    /// in their place (ICH, and a print in insert mode).
    pub(super) fn insert_cells_at(&mut self, col: usize, right: usize, n: usize) {
        let blank = self.blank();
        let line = &mut self.lines[self.cursor.row];
        let n = n.min(right + 1 - col);
        line.cells[col..=right].rotate_right(n);
        line.cells[col..col + n].fill(blank);
        repair_wide(&mut line.cells, col, right);
        line.wrapped = false;
    }

    /// ICH.
    pub(super) fn insert_chars(&mut self, n: usize) {
        self.cursor.pending_wrap = false;
        if self.cursor.col < self.left || self.cursor.col > self.right {
            return;
        }
        let right = self.right;
        self.insert_cells_at(self.cursor.col, right, n);
    }

    /// DCH: cells right of the cursor move left over `n`, blanks come in
    /// at the right margin.
    pub(super) fn delete_chars(&mut self, n: usize) {
        if self.cursor.col < self.left || self.cursor.col > self.right {
            return;
        }
        self.cursor.pending_wrap = false;
        let right = self.right;
        let col = self.cursor.col;
        self.delete_cells_in(self.cursor.row, col, right, n);
    }

    fn delete_cells_in(&mut self, row: usize, col: usize, right: usize, n: usize) {
        let blank = self.blank();
        let line = &mut self.lines[row];
        let n = n.min(right + 1 - col);
        line.cells[col..=right].rotate_left(n);
        line.cells[right + 1 - n..=right].fill(blank);
        repair_wide(&mut line.cells, col, right);
        line.wrapped = false;
    }

    /// IL: inside the region, lines from the cursor's move down `n`; the
    /// cursor goes to the left margin. Outside it, nothing.
    pub(super) fn insert_lines(&mut self, n: usize) {
        if !self.in_region() {
            return;
        }
        let top = self.top;
        self.top = self.cursor.row;
        self.scroll_down(n);
        self.top = top;
        self.cursor.col = self.left;
        self.cursor.pending_wrap = false;
    }

    /// DL.
    pub(super) fn delete_lines(&mut self, n: usize) {
        if !self.in_region() {
            return;
        }
        let top = self.top;
        self.top = self.cursor.row;
        // Lines deleted inside the screen never go to the scrollback.
        let limit = std::mem::take(&mut self.scrollback_limit);
        self.scroll_up(n);
        self.scrollback_limit = limit;
        self.top = top;
        self.cursor.col = self.left;
        self.cursor.pending_wrap = false;
    }

    /// SL / SR / DECIC / DECDC: columns of every row in the region move.
    fn shift_columns(&mut self, col: usize, n: usize, left_shift: bool) {
        // xterm: only with the cursor inside the margins, all four.
        if !self.in_region() {
            return;
        }
        let right = self.right;
        if col < self.left || col > right {
            return;
        }
        let blank = self.blank();
        for row in self.top..=self.bottom {
            let line = &mut self.lines[row];
            let n = n.min(right + 1 - col);
            if left_shift {
                line.cells[col..=right].rotate_left(n);
                line.cells[right + 1 - n..=right].fill(blank);
            } else {
                line.cells[col..=right].rotate_right(n);
                line.cells[col..col + n].fill(blank);
            }
            repair_wide(&mut line.cells, col, right);
        }
    }

    pub(super) fn shift_columns_left(&mut self, n: usize) {
        let left = self.left;
        self.shift_columns(left, n, true);
    }

    pub(super) fn shift_columns_right(&mut self, n: usize) {
        let left = self.left;
        self.shift_columns(left, n, false);
    }

    /// DECIC: columns from the cursor's move right.
    pub(super) fn insert_columns(&mut self, n: usize) {
        if !self.in_region() {
            return;
        }
        let col = self.cursor.col;
        self.shift_columns(col, n, false);
    }

    /// DECDC.
    pub(super) fn delete_columns(&mut self, n: usize) {
        if !self.in_region() {
            return;
        }
        let col = self.cursor.col;
        self.shift_columns(col, n, true);
    }

    /// Blanks `from..to` of `row`, protected cells kept when `selective`.
    fn erase_cells(&mut self, row: usize, from: usize, to: usize, selective: bool) {
        let blank = self.blank();
        let cols = self.cols;
        let line = &mut self.lines[row];
        let (from, to) = (from.min(cols), to.min(cols));
        if from >= to {
            return;
        }
        for cell in &mut line.cells[from..to] {
            if !(selective && cell.pen.has(attr::PROTECTED)) {
                *cell = blank;
            }
        }
        // Half a wide character left at either end is blanked too.
        if from > 0
            && line.cells[from - 1].width == Width::Wide
            && line.cells[from].width != Width::WideTail
        {
            let pen = line.cells[from - 1].pen;
            line.cells[from - 1] = Cell::blank(pen);
        }
        if to < cols && line.cells[to].width == Width::WideTail {
            let pen = line.cells[to].pen;
            line.cells[to] = Cell::blank(pen);
        }
    }

    /// ECH: `n` cells from the cursor, to the end of the row at most.
    pub(super) fn erase_chars(&mut self, n: usize) {
        self.cursor.pending_wrap = false;
        let (row, col) = (self.cursor.row, self.cursor.col);
        self.erase_cells(row, col, col + n, false);
    }

    /// EL (DECSEL when `selective`).
    pub(super) fn erase_line(&mut self, mode: u16, selective: bool) {
        self.cursor.pending_wrap = false;
        let (row, col) = (self.cursor.row, self.cursor.col);
        match mode {
            0 => {
                self.erase_cells(row, col, self.cols, selective);
                self.lines[row].wrapped = false;
            }
            1 => self.erase_cells(row, 0, col + 1, selective),
            2 => {
                self.erase_cells(row, 0, self.cols, selective);
                self.lines[row].wrapped = false;
            }
            _ => {}
        }
    }

    /// ED (DECSED when `selective`); 3 forgets the scrollback.
    pub(super) fn erase_display(&mut self, mode: u16, selective: bool) {
        self.cursor.pending_wrap = false;
        let (row, col) = (self.cursor.row, self.cursor.col);
        match mode {
            0 => {
                self.erase_cells(row, col, self.cols, selective);
                self.lines[row].wrapped = false;
                for r in row + 1..self.rows {
                    self.erase_cells(r, 0, self.cols, selective);
                    self.lines[r].wrapped = false;
                }
            }
            1 => {
                for r in 0..row {
                    self.erase_cells(r, 0, self.cols, selective);
                    self.lines[r].wrapped = false;
                }
                self.erase_cells(row, 0, col + 1, selective);
            }
            2 => {
                for r in 0..self.rows {
                    self.erase_cells(r, 0, self.cols, selective);
                    self.lines[r].wrapped = false;
                }
            }
            3 if !selective => self.scrollback.clear(),
            _ => {}
        }
    }
}

/// After cells moved inside `left..=right`, a wide character cut in two
/// (a head without its tail, a tail without its head) at either edge
/// becomes blanks, as xterm blanks the rest of a character it splits.
fn repair_wide(cells: &mut [Cell], left: usize, right: usize) {
    let last = cells.len() - 1;
    for col in left.saturating_sub(1)..=(right + 1).min(last) {
        let broken = match cells[col].width {
            Width::Wide => col == last || cells[col + 1].width != Width::WideTail,
            Width::WideTail => col == 0 || cells[col - 1].width != Width::Wide,
            Width::Narrow => false,
        };
        if broken {
            cells[col] = Cell::blank(cells[col].pen);
        }
    }
}
