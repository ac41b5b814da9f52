//! The CSI functions (xterm's control sequences that change the screen;
//! reports and window operations are ignored: the server answers nothing).

use super::parser::Params;
use super::Terminal;

impl Terminal {
    pub(super) fn dispatch_csi(
        &mut self,
        private: u8,
        params: &Params,
        intermediates: &[u8],
        action: char,
    ) {
        let n = |i: usize| usize::from(params.arg(i, 1));
        match (private, intermediates, action) {
            (0, [], '@') => self.insert_chars(n(0)),
            (0, [b' '], '@') => self.shift_columns_left(n(0)),
            (0, [], 'A') => self.cursor_up(n(0)),
            (0, [b' '], 'A') => self.shift_columns_right(n(0)),
            (0, [], 'B') => self.cursor_down(n(0)),
            (0, [], 'C') => self.cursor_forward(n(0)),
            (0, [], 'D') => self.back(n(0)),
            (0, [], 'E') => {
                self.cursor_down(n(0));
                self.carriage_return();
            }
            (0, [], 'F') => {
                self.cursor_up(n(0));
                self.carriage_return();
            }
            (0, [], 'G' | '`') => self.set_col(n(0) - 1),
            (0, [], 'H' | 'f') => self.set_position(n(0) - 1, n(1) - 1),
            (0, [], 'I') => self.tab_forward(n(0)),
            (0, [], 'J') => self.erase_display(params.arg(0, 0), false),
            (b'?', [], 'J') => self.erase_display(params.arg(0, 0), true),
            (0, [], 'K') => self.erase_line(params.arg(0, 0), false),
            (b'?', [], 'K') => self.erase_line(params.arg(0, 0), true),
            (0, [], 'L') => self.insert_lines(n(0)),
            (0, [], 'M') => self.delete_lines(n(0)),
            (0, [], 'P') => self.delete_chars(n(0)),
            (0, [], 'S') => self.scroll_up(n(0)),
            (0, [], 'T') if params.len() <= 1 => self.scroll_down(n(0)),
            (0, [], 'X') => self.erase_chars(n(0)),
            (0, [], 'Z') => self.tab_back(n(0)),
            (0, [], 'a') => self.cursor_forward_unbounded(n(0)),
            (0, [], 'b') => self.repeat(params.arg(0, 1)),
            (0, [], 'd') => self.set_row(n(0) - 1),
            (0, [], 'e') => self.cursor_down_past_margin(n(0)),
            (0, [], 'g') => match params.arg(0, 0) {
                0 => {
                    if let Some(stop) = self.tabs.get_mut(self.cursor.col) {
                        *stop = false;
                    }
                }
                3 => self.tabs.iter_mut().for_each(|t| *t = false),
                _ => {}
            },
            (0, [], 'h' | 'l') => {
                for group in params.groups() {
                    self.ansi_mode(group[0], action == 'h');
                }
            }
            (b'?', [], 'h' | 'l') => {
                for group in params.groups() {
                    self.dec_mode(group[0], action == 'h');
                }
            }
            (0, [], 'm') => self.sgr(params),
            (0, [], 'r') => self.set_margins(params.arg(0, 1), params.arg(1, 0)),
            (0, [], 's') if self.modes.lr_margins => {
                self.set_lr_margins(params.arg(0, 1), params.arg(1, 0))
            }
            (0, [], 's') => self.save_cursor(),
            (0, [], 'u') => self.restore_cursor(),
            (0, [b'!'], 'p') => self.soft_reset(),
            (0, [b'"'], 'q') => {
                let protect = params.arg(0, 0) == 1;
                self.cursor.pen.set(super::cell::attr::PROTECTED, protect);
            }
            (0, [b'\''], '}') => self.insert_columns(n(0)),
            (0, [b'\''], '~') => self.delete_columns(n(0)),
            _ => {}
        }
    }

    fn ansi_mode(&mut self, mode: u16, on: bool) {
        match mode {
            4 => self.modes.insert = on,
            20 => self.modes.newline = on,
            _ => {}
        }
    }

    fn dec_mode(&mut self, mode: u16, on: bool) {
        match mode {
            1 => self.modes.cursor_keys = on,
            6 => {
                self.modes.origin = on;
                self.set_position(0, 0);
            }
            7 => self.modes.autowrap = on,
            25 => self.modes.cursor_visible = on,
            45 => self.modes.reverse_wrap = on,
            69 => {
                self.modes.lr_margins = on;
                if !on {
                    self.left = 0;
                    self.right = self.cols - 1;
                    self.margins_changed();
                }
            }
            47 => self.switch_screen(on, false),
            1047 => {
                if !on && self.alternate_active {
                    self.clear_screen();
                }
                self.switch_screen(on, false);
            }
            1048 => {
                if on {
                    self.save_cursor();
                } else {
                    self.restore_cursor();
                }
            }
            1049 => {
                // xterm: save, switch, clear; switch back, restore (the
                // save and the restore use the slot of the screen shown).
                if on {
                    self.save_cursor();
                    self.switch_screen(true, true);
                } else {
                    self.switch_screen(false, false);
                    self.restore_cursor();
                }
            }
            _ => {}
        }
    }

    /// To the alternate screen (`on`) or back; `clear`: erase the
    /// alternate screen on the way in.
    fn switch_screen(&mut self, on: bool, clear: bool) {
        if on != self.alternate_active {
            std::mem::swap(&mut self.lines, &mut self.other);
            self.alternate_active = on;
            self.margins_changed();
        }
        if on && clear {
            self.clear_screen();
        }
    }

    fn clear_screen(&mut self) {
        self.cursor.pending_wrap = false;
        let pen = self.cursor.pen;
        for line in &mut self.lines {
            *line = super::Line::blank(self.cols, pen);
        }
    }

    pub(super) fn set_col(&mut self, col: usize) {
        let (offset, max) = if self.modes.origin {
            (self.left, self.right)
        } else {
            (0, self.cols - 1)
        };
        self.cursor.col = (col + offset).min(max);
        self.cursor.pending_wrap = false;
    }

    pub(super) fn set_row(&mut self, row: usize) {
        let (offset, max) = if self.modes.origin {
            (self.top, self.bottom)
        } else {
            (0, self.rows - 1)
        };
        self.cursor.row = (row + offset).min(max);
        self.cursor.pending_wrap = false;
    }

    pub(super) fn set_position(&mut self, row: usize, col: usize) {
        self.set_col(col);
        self.set_row(row);
    }

    fn cursor_up(&mut self, n: usize) {
        let min = if self.cursor.row < self.top {
            0
        } else {
            self.top
        };
        self.cursor.row = self.cursor.row.saturating_sub(n).max(min);
        self.cursor.pending_wrap = false;
    }

    fn cursor_down(&mut self, n: usize) {
        let max = if self.cursor.row > self.bottom {
            self.rows - 1
        } else {
            self.bottom
        };
        self.cursor.row = (self.cursor.row + n).min(max);
        self.cursor.pending_wrap = false;
    }

    /// VPR: down `n` rows, past the bottom margin unless in origin mode.
    fn cursor_down_past_margin(&mut self, n: usize) {
        if self.modes.origin {
            self.cursor_down(n);
        } else {
            self.cursor.row = (self.cursor.row + n).min(self.rows - 1);
            self.cursor.pending_wrap = false;
        }
    }

    fn cursor_forward(&mut self, n: usize) {
        let max = if self.cursor.col <= self.right {
            self.right
        } else {
            self.cols - 1
        };
        self.cursor.col = (self.cursor.col + n).min(max);
        self.cursor.pending_wrap = false;
    }

    /// HPR: right `n` columns, to the last column at most.
    fn cursor_forward_unbounded(&mut self, n: usize) {
        self.cursor.col = (self.cursor.col + n).min(self.cols - 1);
        self.cursor.pending_wrap = false;
    }

    /// DECSTBM: kept only when top < bottom; the cursor goes home.
    fn set_margins(&mut self, top: u16, bottom: u16) {
        if let Some((top, bottom)) = margin_pair(top, bottom, self.rows) {
            (self.top, self.bottom) = (top, bottom);
            self.margins_changed();
            self.set_position(0, 0);
        }
    }

    /// DECSLRM (with DECLRMM on): kept only when left < right; the cursor
    /// goes home.
    fn set_lr_margins(&mut self, left: u16, right: u16) {
        if let Some((left, right)) = margin_pair(left, right, self.cols) {
            (self.left, self.right) = (left, right);
            self.margins_changed();
            self.set_position(0, 0);
        }
    }
}

/// A pair of margins as DECSTBM and DECSLRM give them (1-based, 0 for the
/// default; past the screen is its last line or column), from 0, when the
/// first is before the second.
fn margin_pair(first: u16, last: u16, size: usize) -> Option<(usize, usize)> {
    let first = usize::from(first.max(1)) - 1;
    let last = if last == 0 {
        size - 1
    } else {
        (usize::from(last) - 1).min(size - 1)
    };
    (first < last).then_some((first, last))
}
