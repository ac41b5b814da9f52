//! A new size, as xterm takes it: rows keep their cells (cut or padded,
//! no reflow), rows taken away go from the bottom while they are blank and
//! below the cursor, else from the top into the scrollback; rows added
//! come blank at the bottom. Margins are reset, the cursor stays inside.

use super::cell::Pen;
use super::{default_tabs, Line, Terminal};

fn fit(line: &mut Line, cols: usize) {
    line.cells
        .resize(cols, super::cell::Cell::blank(Pen::default()));
    line.cells.shrink_to_fit();
    if let Some(last) = line.cells.last_mut() {
        if last.width == super::cell::Width::Wide {
            *last = super::cell::Cell::blank(last.pen);
        }
    }
}

impl Terminal {
    pub fn resize(&mut self, cols: usize, rows: usize) {
        let (cols, rows) = (cols.max(1), rows.max(1));
        if (cols, rows) == (self.cols, self.rows) {
            return;
        }
        for line in self
            .lines
            .iter_mut()
            .chain(self.other.iter_mut())
            .chain(self.scrollback.iter_mut())
        {
            fit(line, cols);
        }
        let alternate = self.alternate_active;
        let (mut primary, mut alt) = if alternate {
            (
                std::mem::take(&mut self.other),
                std::mem::take(&mut self.lines),
            )
        } else {
            (
                std::mem::take(&mut self.lines),
                std::mem::take(&mut self.other),
            )
        };
        let mut cursor_row = self.cursor.row;
        // The primary screen: its cursor row is the shown one's only when
        // it is shown.
        while primary.len() > rows {
            let below_cursor = alternate || primary.len() - 1 > cursor_row;
            let last_blank = primary
                .last()
                .is_some_and(|l| l.cells.iter().all(|c| c.is_default_blank()));
            if below_cursor && last_blank {
                primary.pop();
            } else {
                let line = primary.remove(0);
                self.keep_in_scrollback(line);
                if !alternate {
                    cursor_row = cursor_row.saturating_sub(1);
                }
            }
        }
        primary.resize(rows, Line::blank(cols, Pen::default()));
        while alt.len() > rows {
            if alternate && alt.len() - 1 <= cursor_row {
                alt.remove(0);
                cursor_row = cursor_row.saturating_sub(1);
            } else {
                alt.pop();
            }
        }
        alt.resize(rows, Line::blank(cols, Pen::default()));
        // A last row cannot go on into a row below.
        for lines in [&mut primary, &mut alt] {
            if let Some(last) = lines.last_mut() {
                last.wrapped = false;
            }
        }
        if alternate {
            self.lines = alt;
            self.other = primary;
        } else {
            self.lines = primary;
            self.other = alt;
        }
        self.cols = cols;
        self.rows = rows;
        self.cursor.row = cursor_row.min(rows - 1);
        self.cursor.col = self.cursor.col.min(cols - 1);
        self.cursor.pending_wrap = false;
        for saved in &mut self.saved {
            saved.cursor.row = saved.cursor.row.min(rows - 1);
            saved.cursor.col = saved.cursor.col.min(cols - 1);
        }
        self.top = 0;
        self.bottom = rows - 1;
        self.left = 0;
        self.right = cols - 1;
        let old = std::mem::take(&mut self.tabs);
        self.tabs = default_tabs(cols);
        for (col, stop) in old.into_iter().enumerate().take(cols) {
            self.tabs[col] = stop;
        }
    }
}
