//! Renderings of an [`avt::Terminal`] that `avt` does not make itself: the
//! retained scrollback as escape sequences (its `dump` covers the visible
//! buffers only) and the plain text a person sees.

use std::fmt::Write as _;

use avt::{Color, Line, Pen};

/// Appends SGR parameters for `pen` (after a reset), `;`-separated.
fn sgr(pen: &Pen, out: &mut String) {
    out.push_str("\x1b[0");
    if pen.is_bold() {
        out.push_str(";1");
    }
    if pen.is_faint() {
        out.push_str(";2");
    }
    if pen.is_italic() {
        out.push_str(";3");
    }
    if pen.is_underline() {
        out.push_str(";4");
    }
    if pen.is_blink() {
        out.push_str(";5");
    }
    if pen.is_inverse() {
        out.push_str(";7");
    }
    if pen.is_strikethrough() {
        out.push_str(";9");
    }
    for (color, base) in [(pen.foreground(), 30u16), (pen.background(), 40u16)] {
        match color {
            None => {}
            Some(Color::Indexed(c)) if c < 8 => {
                let _ = write!(out, ";{}", base + u16::from(c));
            }
            Some(Color::Indexed(c)) if c < 16 => {
                let _ = write!(out, ";{}", base + 60 + u16::from(c - 8));
            }
            Some(Color::Indexed(c)) => {
                let _ = write!(out, ";{};5;{c}", base + 8);
            }
            Some(Color::RGB(rgb)) => {
                let _ = write!(out, ";{};2;{};{};{}", base + 8, rgb.r, rgb.g, rgb.b);
            }
        }
    }
    out.push('m');
}

/// Writes one line's cells with their attributes, trailing default blanks
/// left out (a fresh terminal has them already) unless the line wraps, where
/// every cell is needed to reach the wrap.
fn line_cells(line: &Line, out: &mut String) {
    let cells = line.cells();
    let default = Pen::default();
    let used = if line.is_wrapped() {
        cells.len()
    } else {
        cells
            .iter()
            .rposition(|c| c.char() != ' ' || *c.pen() != default)
            .map_or(0, |i| i + 1)
    };
    let mut pen = default;
    for cell in &cells[..used] {
        if cell.width() == 0 {
            continue; // the tail of a wide character
        }
        if *cell.pen() != pen {
            pen = *cell.pen();
            sgr(&pen, out);
        }
        out.push(cell.char());
    }
    if pen != default {
        out.push_str("\x1b[0m");
    }
}

/// Escape sequences that, written to a fresh terminal of `rows` rows, leave
/// `lines` in its scrollback, an empty screen and the cursor at home.
pub fn scrollback(lines: &[&Line], rows: usize, out: &mut String) {
    if lines.is_empty() {
        return;
    }
    let mut wrap_pending = false;
    for line in lines {
        // The line before wrapped: only a character printed here makes the
        // wrap happen (and marks that line as wrapped). A blank under the
        // default pen does it, so that the line the wrap may scroll in is
        // filled with that pen, not with the pen of this line's first cell;
        // then back to the first column (on a screen one column wide the
        // line is its first cell, whose own pen is right).
        if wrap_pending {
            out.push(' ');
            if line.cells().len() > 1 {
                out.push('\x08');
            }
        }
        line_cells(line, out);
        wrap_pending = line.is_wrapped();
        if !wrap_pending {
            out.push_str("\r\n");
        }
    }
    // Each of these scrolls one written line off the top (see the module
    // tests): whether the lines filled the screen or not, rows-1 more line
    // feeds push all of them into the scrollback. A last line that wrapped
    // (its continuation was scrolled or erased away since) left a wrap
    // pending: a blank, like the erased cell it lands on, makes the wrap
    // happen, which is what marks the line as wrapped, and the cursor is
    // on the next row as after the others.
    if lines.last().is_some_and(|line| line.is_wrapped()) {
        out.push(' ');
    }
    for _ in 1..rows {
        out.push('\n');
    }
    out.push_str("\r\x1b[H");
}

/// The visible rows as plain text, one line per row with trailing blanks
/// trimmed, like `tmux capture-pane -p`.
pub fn plain_text<'a>(rows: impl Iterator<Item = &'a Line>) -> String {
    let mut text = String::new();
    for line in rows {
        let row: String = line
            .cells()
            .iter()
            .filter(|c| c.width() != 0)
            .map(|c| c.char())
            .collect();
        text.push_str(row.trim_end());
        text.push('\n');
    }
    text
}
