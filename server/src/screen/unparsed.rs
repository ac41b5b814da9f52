//! Sequences avt 0.19 does not parse, which real xterm acts on without
//! left and right margins: scroll left and right (SL `CSI n SP @`, SR `CSI
//! n SP A`) and insert and delete columns (DECIC `CSI n ' }`, DECDC `CSI n
//! ' ~`). avt's parser drops them; the characters of each CSI sequence the
//! shadow parser goes through are kept here (a few bytes, bounded), and
//! when a sequence ends as one of these the emulator is given what xterm
//! does, made of avt's own operations (insert or delete characters on each
//! row of the scroll region), with the cursor back where it was. The same
//! way, reverse wrap (`?45`, which avt drops as well) is kept here and a
//! backspace or CUB under it given as cursor moves. A snapshot sets the
//! modes kept here ([`Unparsed::modes_sequence`]).

use std::borrow::Cow;

use avt::parser::{Function, State};
use avt::Terminal;

/// What one of these sequences asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Extra {
    /// SL: every row of the region left by n (DCH at the first column).
    ScrollLeft(u16),
    /// SR: right by n (ICH at the first column).
    ScrollRight(u16),
    /// DECIC: n blank columns at the cursor's on every row of the region.
    InsertColumns(u16),
    /// DECDC: n columns deleted at the cursor's.
    DeleteColumns(u16),
}

/// The characters of the CSI sequence in progress (parameters and
/// intermediates); longer ones are none of the above.
#[derive(Debug, Default, Clone)]
pub(super) struct Unparsed {
    chars: [u8; 8],
    len: usize,
    too_long: bool,
    /// Left and right margin mode (DECLRMM, `?69`), which avt drops too:
    /// while it is on, the four are left to avt (which ignores them), as
    /// xterm acts on them within left and right margins avt does not have.
    lr_margin_mode: bool,
    /// Reverse wrap (`?45`), which avt drops: with autowrap on, a
    /// backspace or CUB at the first column goes on at the end of the row
    /// above (from the top margin, of the bottom margin), and one with a
    /// wrap pending only ends it.
    reverse_wrap: bool,
}

fn in_csi(state: State) -> bool {
    matches!(
        state,
        State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore
    )
}

impl Unparsed {
    /// A hard reset (RIS) turns the modes kept here off.
    pub fn reset(&mut self) {
        self.lr_margin_mode = false;
        self.reverse_wrap = false;
    }

    /// The modes avt does not keep, as a sequence that sets them in a
    /// fresh terminal (for a snapshot).
    pub fn modes_sequence(&self) -> &'static str {
        match (self.reverse_wrap, self.lr_margin_mode) {
            (false, false) => "",
            (true, false) => "\x1b[?45h",
            (false, true) => "\x1b[?69h",
            (true, true) => "\x1b[?45;69h",
        }
    }

    /// True when a backspace or CUB needs the cursor (reverse wrap on,
    /// with autowrap: `autowrap_off` from `fill.rs`'s mirror).
    pub fn wraps_back(&self, function: &Function, autowrap_off: bool) -> bool {
        self.reverse_wrap && !autowrap_off && matches!(function, Function::Bs | Function::Cub(_))
    }

    /// What the emulator runs instead of a backspace (`n` 1) or CUB `n`
    /// with reverse wrap on, the scroll region being `top..=bottom`: the
    /// cursor goes back `n` cells, a pending wrap counting as one, from the
    /// first column to the last of the row above (from the top margin or
    /// the top row, to the bottom margin or the bottom row).
    pub fn back(&self, n: u16, terminal: &Terminal, top: usize, bottom: usize) -> Vec<Function> {
        let (cols, rows) = terminal.size();
        let cursor = terminal.cursor();
        let (mut row, mut col, mut pending) = (cursor.row, cursor.col, cursor.col >= cols);
        // More steps than cells on the screen go round: bounded by one turn.
        let steps = usize::from(n.max(1)).min(cols * rows + 1);
        for _ in 0..steps {
            if pending {
                pending = false;
                col = cols - 1;
            } else if col > 0 {
                col -= 1;
            } else {
                row = if row == top {
                    bottom
                } else if row == 0 {
                    rows - 1
                } else {
                    row - 1
                };
                col = cols - 1;
            }
        }
        let narrow = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        let mut ops = Vec::new();
        if row < cursor.row {
            ops.push(Function::Cuu(narrow(cursor.row - row)));
        } else if row > cursor.row {
            ops.push(Function::Cud(narrow(row - cursor.row)));
        }
        ops.push(Function::Cha(narrow(col + 1)));
        ops
    }

    /// avt's dump (`dump`, which ends with the sequence its parser holds)
    /// with a CSI sequence in progress written as it came: avt writes only
    /// the intermediate of one cut after it (its own sequences with one take
    /// no parameters: `CSI 2 SP` came back as `CSI SP`), and a parameter
    /// after a private marker as 0 (`CSI ? 45` as `CSI ? 0`).
    pub fn complete<'a>(&self, state: State, dump: Cow<'a, str>) -> Cow<'a, str> {
        let csi = matches!(
            state,
            State::CsiEntry | State::CsiParam | State::CsiIntermediate
        );
        if !csi || self.too_long {
            return dump;
        }
        let (Some(at), Ok(chars)) = (
            dump.rfind("\x1b["),
            std::str::from_utf8(&self.chars[..self.len]),
        ) else {
            return dump;
        };
        Cow::Owned(format!("{}\x1b[{chars}", &dump[..at]))
    }

    /// Follows one character the shadow parser took from `before` to
    /// `after`: the sequence it ended, when it is one of these.
    pub fn observe(&mut self, before: State, after: State, ch: char) -> Option<Extra> {
        if after == State::CsiEntry && !in_csi(before) {
            self.len = 0;
            self.too_long = false;
            return None;
        }
        if in_csi(after) {
            // A C0 control inside a sequence is run, not part of it.
            if ch < ' ' {
                return None;
            }
            match u8::try_from(ch) {
                Ok(byte) if self.len < self.chars.len() => {
                    self.chars[self.len] = byte;
                    self.len += 1;
                }
                _ => self.too_long = true,
            }
            return None;
        }
        if !in_csi(before) || after != State::Ground || self.too_long || before == State::CsiIgnore
        {
            return None;
        }
        let body = &self.chars[..self.len];
        if let (Some((b'?', modes)), 'h' | 'l') = (body.split_first(), ch) {
            for mode in modes.split(|&b| b == b';') {
                match mode {
                    b"69" => self.lr_margin_mode = ch == 'h',
                    b"45" => self.reverse_wrap = ch == 'h',
                    _ => {}
                }
            }
            return None;
        }
        if self.lr_margin_mode {
            return None;
        }
        let (params, intermediate) = match body.split_last() {
            Some((&last, params)) if last == b' ' || last == b'\'' => (params, last),
            _ => return None,
        };
        if !params.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // One parameter, 0 or none meaning 1.
        let n = std::str::from_utf8(params)
            .ok()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(1)
            .max(1);
        match (intermediate, ch) {
            (b' ', '@') => Some(Extra::ScrollLeft(n)),
            (b' ', 'A') => Some(Extra::ScrollRight(n)),
            (b'\'', '}') => Some(Extra::InsertColumns(n)),
            (b'\'', '~') => Some(Extra::DeleteColumns(n)),
            _ => None,
        }
    }
}

/// What the emulator runs for `extra`, the scroll region being rows
/// `top..=bottom`: nothing when the cursor is outside it (as xterm). The
/// cursor goes from row to row with relative moves, which origin mode does
/// not change, and comes back to its row and column.
pub(super) fn operations(
    extra: Extra,
    terminal: &Terminal,
    top: usize,
    bottom: usize,
) -> Vec<Function> {
    let cursor = terminal.cursor();
    let (cols, _) = terminal.size();
    if cursor.row < top || cursor.row > bottom {
        return Vec::new();
    }
    let narrow = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let col = cursor.col.min(cols.saturating_sub(1));
    let (at, operation) = match extra {
        Extra::ScrollLeft(n) => (0, Function::Dch(n)),
        Extra::ScrollRight(n) => (0, Function::Ich(n)),
        Extra::InsertColumns(n) => (col, Function::Ich(n)),
        Extra::DeleteColumns(n) => (col, Function::Dch(n)),
    };
    let mut ops = Vec::new();
    if cursor.row > top {
        ops.push(Function::Cuu(narrow(cursor.row - top)));
    }
    for row in top..=bottom {
        ops.push(Function::Cha(narrow(at + 1)));
        ops.push(operation.clone());
        if row < bottom {
            ops.push(Function::Cud(1));
        }
    }
    if bottom > cursor.row {
        ops.push(Function::Cuu(narrow(bottom - cursor.row)));
    }
    ops.push(Function::Cha(narrow(col + 1)));
    ops
}
