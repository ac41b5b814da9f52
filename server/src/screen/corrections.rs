//! Where avt 0.19 does what real xterm does not, the emulator is given
//! what xterm does instead (measured by the screen judge,
//! `tests/tests/screen_corpus/`, whose expected screens are real xterm's):
//!
//! - insert and delete line (`IL`, `DL`) with the cursor outside the scroll
//!   region do nothing; inside it they also move the cursor to the first
//!   column (and so end a pending wrap);
//! - `DECALN` (`ESC # 8`) also resets the scroll region and homes the
//!   cursor;
//! - erase characters, erase in line and erase in display (`ECH`, `EL`,
//!   `ED`) with a wrap pending act from the last column and end the
//!   pending wrap (xterm.js's `EL` and `ED` do not: tether follows xterm);
//! - a line feed (`LF`, `IND`, `VT`, `FF`) with a wrap pending ends it
//!   and leaves the cursor on the last column;
//! - a horizontal tab, forward or backward (`HT`, `CHT`, `CBT`), with a
//!   wrap pending does nothing (the wrap stays pending);
//! - `DECSTBM` with a bottom past the screen sets the margins to the
//!   screen's last row; with a top not above the bottom it is ignored and
//!   the cursor stays where it is (avt ignored the first and homed the
//!   cursor on the second);
//! - reverse index (`RI`, `ESC M`) off the top margin moves up one row, in
//!   origin mode too (avt moves to that row counted from the top margin);
//! - VPR (`CSI n e`) outside origin mode goes down n rows past the bottom
//!   margin, to the last row at most (avt stopped at the margin).
//!
//! Each correction is made of avt's own operations, so the emulator's state
//! (and its dump, the snapshot) stays avt's: nothing here holds state a
//! snapshot would not carry but the scroll region, which mirrors avt's own
//! (avt does not show it), set and reset as avt sets and resets it.

use avt::parser::Function;
use avt::Terminal;

/// avt's scroll region, as avt keeps it (it does not show it): rows from 0,
/// `None` for the whole screen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Region(Option<(usize, usize)>);

impl Region {
    /// The terminal was resized: avt resets the region when the row count
    /// changed.
    pub fn resized(&mut self, rows_changed: bool) {
        if rows_changed {
            self.0 = None;
        }
    }

    pub(super) fn rows(self, rows: usize) -> (usize, usize) {
        self.0.unwrap_or((0, rows.saturating_sub(1)))
    }
}

/// What the emulator is given for one function.
pub(super) enum Correction {
    /// The function as it came.
    Pass,
    /// These operations instead.
    Instead(Vec<Function>),
    /// The function, then these operations.
    After(Vec<Function>),
}

/// True for the functions [`correct`] may need the emulator's state for
/// (the emulator must have been given everything before them).
pub(super) fn needs_state(function: &Function) -> bool {
    matches!(
        function,
        Function::Il(_)
            | Function::Dl(_)
            | Function::Ech(_)
            | Function::El(_)
            | Function::Ed(_)
            | Function::Lf
            | Function::Ht
            | Function::Cht(_)
            | Function::Cbt(_)
            | Function::Ri
            | Function::Vpr(_)
    )
}

/// What the emulator is given for `function`; `origin`: origin mode is on.
pub(super) fn correct(
    function: &Function,
    terminal: &Terminal,
    region: &mut Region,
    origin: bool,
) -> Correction {
    let (cols, rows) = terminal.size();
    let cursor = terminal.cursor();
    let wrap_pending = cursor.col >= cols;
    match *function {
        Function::Il(_) | Function::Dl(_) => {
            let (top, bottom) = region.rows(rows);
            if cursor.row < top || cursor.row > bottom {
                Correction::Instead(Vec::new())
            } else {
                Correction::After(vec![Function::Cha(1)])
            }
        }
        Function::Vpr(n) if !origin => {
            // To the row n below, past the bottom margin (avt stops there).
            let row = (cursor.row + usize::from(n.max(1))).min(rows - 1);
            let row = u16::try_from(row + 1).unwrap_or(u16::MAX);
            Correction::Instead(vec![Function::Vpa(row)])
        }
        Function::Decaln => {
            region.0 = None;
            Correction::After(vec![Function::Decstbm(0, 0)])
        }
        Function::Ech(_) | Function::El(_) | Function::Ed(_) | Function::Lf if wrap_pending => {
            Correction::Instead(vec![last_column(cols), function.clone()])
        }
        Function::Ht | Function::Cht(_) | Function::Cbt(_) if wrap_pending => {
            Correction::Instead(Vec::new())
        }
        Function::Ri if cursor.row != region.rows(rows).0 => {
            Correction::Instead(vec![Function::Cuu(1)])
        }
        Function::Decstbm(top, bottom) => {
            // 1-based, 0 for the default; a bottom past the screen is the
            // last row (as xterm); kept only when top < bottom.
            let top_row = usize::from(top.max(1)) - 1;
            let bottom_row = if bottom == 0 {
                rows
            } else {
                usize::from(bottom).min(rows)
            } - 1;
            if top_row >= bottom_row {
                return Correction::Instead(Vec::new());
            }
            region.0 = ((top_row, bottom_row) != (0, rows - 1)).then_some((top_row, bottom_row));
            if usize::from(bottom) > rows {
                let last = u16::try_from(rows).unwrap_or(u16::MAX);
                return Correction::Instead(vec![Function::Decstbm(top, last)]);
            }
            Correction::Pass
        }
        Function::Ris | Function::Decstr => {
            region.0 = None;
            Correction::Pass
        }
        _ => Correction::Pass,
    }
}

/// Cursor to the last column (`CHA`), which ends a pending wrap.
fn last_column(cols: usize) -> Function {
    Function::Cha(u16::try_from(cols).unwrap_or(u16::MAX))
}
