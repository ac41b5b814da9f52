//! C0 controls and ESC functions, and the cursor moves they share with CSI
//! (line feeds and reverse index, carriage return, backspace with reverse
//! wrap, tabs, DECSC and DECRC): xterm 379's `cursor.c` and `tabs.c`.

use super::cell::{Cell, Pen, Width};
use super::{Charset, Saved, Terminal};

impl Terminal {
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
            self.left
        } else {
            0
        };
        self.cursor.col = col;
        self.cursor.pending_wrap = false;
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
        let left = if before < self.left { 0 } else { self.left };
        let col = self.cursor.col as i64 - n;
        if col < left as i64 {
            if reverse {
                let right = self.right;
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
        let max = if self.cursor.col <= self.right {
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
                prev.max(self.left)
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
            self.cursor.col = self.cursor.col.clamp(self.left, self.right);
        }
        self.cursor.pending_wrap = saved.cursor.pending_wrap && self.is_right_edge(self.cursor.col);
    }

    /// True where a print leaves a wrap pending: the right margin, or the
    /// last column right of it.
    fn is_right_edge(&self, col: usize) -> bool {
        col == self.right || col == self.cols - 1
    }

    /// The margins or the screen shown changed: each saved cursor is kept
    /// where a restore could put it (inside the margins when it was saved
    /// in origin mode, which a restore clamps to anyway) and its wrap
    /// pending only on a right edge. xterm keeps a pending wrap anywhere; a
    /// snapshot could not write that one back (a print makes it, at a right
    /// edge only).
    pub(super) fn margins_changed(&mut self) {
        let (top, bottom, left, right) = (self.top, self.bottom, self.left, self.right);
        let lr = self.modes.lr_margins;
        let edges = [right, self.cols - 1];
        for saved in &mut self.saved {
            if saved.origin {
                saved.cursor.row = saved.cursor.row.clamp(top, bottom);
                saved.cursor.col = saved.cursor.col.clamp(left, right);
            }
            if !edges.contains(&saved.cursor.col) {
                saved.cursor.pending_wrap = false;
            }
        }
        if !edges.contains(&self.cursor.col) {
            self.cursor.pending_wrap = false;
        }
        // While the alternate screen is shown, a snapshot writes the
        // primary's saved cursor, then turns the margins off to write the
        // alternate rows: a wrap pending at a right margin short of the
        // last column does not survive that, so it does not survive here.
        if self.alternate_active && lr {
            let primary = &mut self.saved[0].cursor;
            primary.pending_wrap &= primary.col == self.cols - 1;
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
