//! The terminal's state as bytes: written to a fresh terminal of the same
//! size (tether's own, xterm, xterm.js), they rebuild the scrollback, both
//! screens, both saved cursors (pending wrap included), the margins, the
//! tab stops, the modes, the pen and the character sets. Nothing here is a
//! query, so a terminal answers none of it.

use std::fmt::Write as _;

use super::cell::{attr, Cell, Color, Pen, Width};
use super::{Charset, Charsets, Cursor, Line, Terminal};

/// Appends the SGR that sets `pen` (from a reset) and its protection.
pub fn write_pen(pen: &Pen, out: &mut String) {
    out.push_str("\x1b[0");
    for (bit, code) in [
        (attr::BOLD, ";1"),
        (attr::FAINT, ";2"),
        (attr::ITALIC, ";3"),
        (attr::BLINK, ";5"),
        (attr::INVERSE, ";7"),
        (attr::INVISIBLE, ";8"),
        (attr::STRIKE, ";9"),
    ] {
        if pen.has(bit) {
            out.push_str(code);
        }
    }
    match pen.underline() {
        0 => {}
        1 => out.push_str(";4"),
        2 => out.push_str(";21"),
        style => {
            let _ = write!(out, ";4:{style}");
        }
    }
    for (color, base) in [(pen.fg, 30u16), (pen.bg, 40u16)] {
        match color {
            Color::Default => {}
            Color::Indexed(c) if c < 8 => {
                let _ = write!(out, ";{}", base + u16::from(c));
            }
            Color::Indexed(c) if c < 16 => {
                let _ = write!(out, ";{}", base + 60 + u16::from(c - 8));
            }
            Color::Indexed(c) => {
                let _ = write!(out, ";{};5;{c}", base + 8);
            }
            Color::Rgb(r, g, b) => {
                let _ = write!(out, ";{};2;{r};{g};{b}", base + 8);
            }
        }
    }
    match pen.underline_color {
        Color::Default => {}
        Color::Indexed(c) => {
            let _ = write!(out, ";58:5:{c}");
        }
        Color::Rgb(r, g, b) => {
            let _ = write!(out, ";58:2::{r}:{g}:{b}");
        }
    }
    out.push('m');
    if pen.has(attr::PROTECTED) {
        out.push_str("\x1b[1\"q");
    }
}

/// Writes the cells of one line from the cursor's place (a fresh row, the
/// default pen in force), trailing default blanks left out unless the line
/// wraps (then every cell is needed to reach the wrap). Leaves the default
/// pen in force.
fn write_cells(line: &Line, out: &mut String) {
    let cells = &line.cells;
    let used = if line.wrapped {
        cells.len()
    } else {
        cells
            .iter()
            .rposition(|c| !c.is_default_blank())
            .map_or(0, |i| i + 1)
    };
    let mut pen = Pen::default();
    for cell in &cells[..used] {
        if cell.width == Width::WideTail {
            continue;
        }
        if cell.pen != pen {
            if pen.has(attr::PROTECTED) && !cell.pen.has(attr::PROTECTED) {
                // SGR leaves DECSCA's protection as it is.
                out.push_str("\x1b[0\"q");
            }
            pen = cell.pen;
            write_pen(&pen, out);
        }
        out.push(cell.ch);
        out.extend(cell.marks.iter().flatten());
    }
    if pen != Pen::default() {
        out.push_str("\x1b[0m");
        if pen.has(attr::PROTECTED) {
            out.push_str("\x1b[0\"q");
        }
    }
}

/// Escape sequences that, written to a fresh terminal of `rows` rows, leave
/// `lines` in its scrollback, an empty screen and the cursor at home.
fn scrollback(lines: &[&Line], rows: usize, out: &mut String) {
    if lines.is_empty() {
        return;
    }
    let mut wrap_pending = false;
    for line in lines {
        // The line before wrapped: only a character printed here makes the
        // wrap happen (and marks that line as wrapped); a blank under the
        // default pen, then back to the first column.
        if wrap_pending {
            out.push(' ');
            if line.cells.len() > 1 {
                out.push('\x08');
            }
        }
        write_cells(line, out);
        wrap_pending = line.wrapped;
        if !wrap_pending {
            out.push_str("\r\n");
        }
    }
    if lines.last().is_some_and(|line| line.wrapped) {
        out.push(' ');
    }
    // rows-1 more line feeds push every written line off the screen.
    for _ in 1..rows {
        out.push('\n');
    }
    out.push_str("\r\x1b[H");
}

/// One screen's rows, from home: each row placed with CUP, but the row
/// after a wrapped one, which the wrap itself reaches.
fn screen_rows(lines: &[Line], out: &mut String) {
    let last = lines.len().saturating_sub(1);
    let mut continued = false;
    for (row, line) in lines.iter().enumerate() {
        if continued {
            // The wrap happens at the next print: a blank under the
            // default pen, then back to the first column.
            out.push(' ');
            if line.cells.len() > 1 {
                out.push('\x08');
            }
        } else {
            let _ = write!(out, "\x1b[{}H", row + 1);
        }
        let wraps = line.wrapped && row < last;
        if wraps {
            write_cells(line, out);
        } else {
            let unwrapped = Line {
                cells: line.cells.clone(),
                wrapped: false,
            };
            write_cells(&unwrapped, out);
        }
        continued = wraps;
    }
}

fn charset_final(set: Charset) -> char {
    match set {
        Charset::Ascii => 'B',
        Charset::DecGraphics => '0',
        Charset::British => 'A',
    }
}

fn write_charsets(sets: &Charsets, out: &mut String) {
    for (slot, intermediate) in ['(', ')', '*', '+'].into_iter().enumerate() {
        if sets.g[slot] != Charset::Ascii {
            let _ = write!(out, "\x1b{intermediate}{}", charset_final(sets.g[slot]));
        }
    }
    match sets.gl {
        1 => out.push('\x0e'),
        2 => out.push_str("\x1bn"),
        3 => out.push_str("\x1bo"),
        _ => {}
    }
    match sets.single_shift {
        Some(2) => out.push_str("\x1bN"),
        Some(3) => out.push_str("\x1bO"),
        _ => {}
    }
}

/// Back to the default pen and character sets (a saved cursor's were just
/// set, and the next rows are written with the defaults).
fn default_pen_and_sets(cursor: &Cursor, out: &mut String) {
    out.push_str("\x1b[0m");
    if cursor.pen.has(attr::PROTECTED) {
        out.push_str("\x1b[0\"q");
    }
    let sets = &cursor.charsets;
    if *sets != Charsets::default() {
        out.push_str("\x1b(B\x1b)B\x1b*B\x1b+B\x0f");
    }
}

impl Terminal {
    /// Where origin mode places the cursor from: the top and left margins.
    fn origin_offset(&self) -> (usize, usize) {
        (self.top, self.left)
    }

    /// Places the cursor (counted from `offset`, the origin mode's, when
    /// that is on), makes its wrap pending by writing again the cell it
    /// stands on, and sets its pen and character sets. Insert mode is off.
    fn write_cursor(lines: &[Line], cursor: &Cursor, offset: (usize, usize), out: &mut String) {
        let row = cursor.row.saturating_sub(offset.0);
        let mut protected = false;
        if cursor.pending_wrap {
            let line = &lines[cursor.row];
            let mut at = cursor.col;
            if line.cells[at].width == Width::WideTail && at > 0 {
                at -= 1;
            }
            let cell: Cell = line.cells[at];
            let _ = write!(out, "\x1b[{};{}H", row + 1, at.saturating_sub(offset.1) + 1);
            write_pen(&cell.pen, out);
            protected = cell.pen.has(attr::PROTECTED);
            out.push(cell.ch);
            out.extend(cell.marks.iter().flatten());
        } else {
            let _ = write!(
                out,
                "\x1b[{};{}H",
                row + 1,
                cursor.col.saturating_sub(offset.1) + 1
            );
        }
        write_pen(&cursor.pen, out);
        if protected && !cursor.pen.has(attr::PROTECTED) {
            // SGR leaves DECSCA's protection as it is.
            out.push_str("\x1b[0\"q");
        }
        write_charsets(&cursor.charsets, out);
    }

    /// When the last thing fed was a printed character (which REP would
    /// repeat), prints it again in its cell, leaving the cursor as it is,
    /// so that a fresh terminal repeats the same one. Written last: any
    /// other function makes a terminal forget it. In insert mode the
    /// character is deleted first (DCH) and inserted again, which leaves
    /// the row as it was; insert mode is then set here (true).
    fn write_last_printed(&self, out: &mut String) -> bool {
        let Some(ch) = self.last_printed else {
            return false;
        };
        let is_mark = super::char_width(ch) == 0;
        let cursor = &self.cursor;
        // The cell the character went to, or (a mark) joined.
        let col = if cursor.pending_wrap {
            Some(cursor.col)
        } else if is_mark {
            cursor.col.checked_sub(1)
        } else {
            cursor.col.checked_sub(super::char_width(ch))
        };
        let Some(mut col) = col else {
            return false;
        };
        let cells = &self.lines[cursor.row].cells;
        if cells[col].width == Width::WideTail && col > 0 {
            col -= 1;
        }
        let cell = cells[col];
        let base = if is_mark { cell.ch } else { ch };
        let shown = if cursor.pen.has(attr::INVISIBLE) {
            ' '
        } else {
            base
        };
        if cell.ch != shown || cell.pen != cursor.pen {
            return false;
        }
        let (mut row, mut at) = (cursor.row, col);
        if self.modes.origin {
            row = row.saturating_sub(self.top);
            if self.modes.lr_margins {
                at = at.saturating_sub(self.left);
            }
        }
        let _ = write!(out, "\x1b[{};{}H", row + 1, at + 1);
        if self.modes.insert {
            let width = super::char_width(base);
            let _ = write!(out, "\x1b[{width}P\x1b[4h");
        }
        // The character, its marks again, then a mark its cell had no
        // room for.
        out.push(base);
        let marks = cell.marks.iter().flatten();
        out.extend(marks.clone());
        if is_mark && marks.last() != Some(&ch) {
            out.push(ch);
        }
        self.modes.insert
    }

    fn write_margins(&self, out: &mut String) {
        if (self.top, self.bottom) != (0, self.rows - 1) {
            let _ = write!(out, "\x1b[{};{}r", self.top + 1, self.bottom + 1);
        }
        if self.modes.lr_margins {
            out.push_str("\x1b[?69h");
            if (self.left, self.right) != (0, self.cols - 1) {
                let _ = write!(out, "\x1b[{};{}s", self.left + 1, self.right + 1);
            }
        }
    }

    /// No margins (the whole screen), as the rows are written.
    fn write_no_margins(&self, out: &mut String) {
        if (self.top, self.bottom) != (0, self.rows - 1) {
            out.push_str("\x1b[r");
        }
        if self.modes.lr_margins {
            out.push_str("\x1b[?69l");
        }
    }

    /// One screen's saved cursor (DECSC), written while that screen is
    /// shown and the margins are set (a wrap pends at a right margin, and
    /// origin mode counts from them; `margins_changed` keeps a saved
    /// cursor where both hold). Origin mode is off after.
    fn write_saved(&self, which: usize, lines: &[Line], out: &mut String) {
        let saved = &self.saved[which];
        if *saved == super::Saved::default() {
            return;
        }
        let offset = if saved.origin {
            out.push_str("\x1b[?6h");
            self.origin_offset()
        } else {
            (0, 0)
        };
        Terminal::write_cursor(lines, &saved.cursor, offset, out);
        out.push_str("\x1b7");
        default_pen_and_sets(&saved.cursor, out);
        if saved.origin {
            out.push_str("\x1b[?6l");
        }
    }
}

pub fn dump(term: &Terminal) -> String {
    let mut out = String::new();
    let history: Vec<&Line> = term.scrollback.iter().collect();
    scrollback(&history, term.rows, &mut out);
    let primary = term.primary();
    screen_rows(primary, &mut out);
    let alternate: &[Line] = if term.alternate_active {
        &term.lines
    } else {
        &term.other
    };
    let alternate_used = term.alternate_active
        || term.saved[1] != super::Saved::default()
        || alternate
            .iter()
            .any(|l| l.wrapped || l.cells.iter().any(|c| !c.is_default_blank()));
    // Each screen is entered once (xterm.js clears the alternate screen
    // whenever it enters or leaves it): the primary rows; then, with the
    // alternate screen shown at the end, the primary's saved cursor under
    // the margins, the margins off again (`switch_screen` drops what that
    // drops), the alternate rows and its saved cursor; otherwise the
    // alternate rows and saved cursor first, then back to the primary.
    if term.alternate_active {
        term.write_margins(&mut out);
        term.write_saved(0, primary, &mut out);
        term.write_no_margins(&mut out);
        out.push_str("\x1b[?47h");
        screen_rows(alternate, &mut out);
        term.write_margins(&mut out);
        term.write_saved(1, alternate, &mut out);
    } else {
        if alternate_used {
            out.push_str("\x1b[?47h");
            screen_rows(alternate, &mut out);
        }
        term.write_margins(&mut out);
        if alternate_used {
            term.write_saved(1, alternate, &mut out);
            out.push_str("\x1b[?47l");
        }
        term.write_saved(0, primary, &mut out);
    }
    let active = &term.lines;
    // Tab stops, where they are not every eighth column.
    if term.tabs != super::default_tabs(term.cols) {
        out.push_str("\x1b[3g");
        for (col, _) in term.tabs.iter().enumerate().filter(|(_, &t)| t) {
            let _ = write!(out, "\x1b[1;{}H\x1bH", col + 1);
        }
    }
    let modes = &term.modes;
    if modes.origin {
        out.push_str("\x1b[?6h");
    }
    if modes.newline {
        out.push_str("\x1b[20h");
    }
    if modes.cursor_keys {
        out.push_str("\x1b[?1h");
    }
    if !modes.autowrap {
        out.push_str("\x1b[?7l");
    }
    if !modes.cursor_visible {
        out.push_str("\x1b[?25l");
    }
    if modes.reverse_wrap {
        out.push_str("\x1b[?45h");
    }
    let offset = if modes.origin {
        term.origin_offset()
    } else {
        (0, 0)
    };
    Terminal::write_cursor(active, &term.cursor, offset, &mut out);
    // Last: any function after a print makes a terminal forget it.
    if !term.write_last_printed(&mut out) && modes.insert {
        out.push_str("\x1b[4h");
    }
    out
}
