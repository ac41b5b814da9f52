//! Sequences avt 0.19 does not parse, which real xterm acts on without
//! left and right margins: scroll left and right (SL `CSI n SP @`, SR `CSI
//! n SP A`) and insert and delete columns (DECIC `CSI n ' }`, DECDC `CSI n
//! ' ~`). avt's parser drops them; the characters of each CSI sequence the
//! shadow parser goes through are kept here (a few bytes, bounded), and
//! when a sequence ends as one of these the emulator is given what xterm
//! does, made of avt's own operations (insert or delete characters on each
//! row of the scroll region), with the cursor back where it was.

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
}

fn in_csi(state: State) -> bool {
    matches!(
        state,
        State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore
    )
}

impl Unparsed {
    /// A hard reset (RIS) turns the left and right margin mode off.
    pub fn reset(&mut self) {
        self.lr_margin_mode = false;
    }

    /// avt's dump (`dump`, which ends with the sequence its parser holds)
    /// with the parameters of a CSI sequence cut after its intermediate put
    /// back: avt writes only the intermediate then (its own sequences with
    /// one take no parameters), and `CSI 2 SP` would come back as `CSI SP`.
    pub fn complete<'a>(&self, state: State, dump: Cow<'a, str>) -> Cow<'a, str> {
        if state != State::CsiIntermediate || self.too_long {
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
            if modes.split(|&b| b == b';').any(|mode| mode == b"69") {
                self.lr_margin_mode = ch == 'h';
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
