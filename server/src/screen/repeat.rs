//! Text into the emulator with every repeat (`REP`, `CSI n b`) cut to what
//! it can change ([`super::bounds::repeat_count`]): 8 bytes may ask avt to
//! print 65,535 cells, and a flood of them would keep the screen thread
//! (and every request for the screen) busy for seconds.
//!
//! A shadow copy of avt's own parser sees the same characters as the
//! emulator's and says when one finishes a repeat, before the emulator is
//! given it: the emulator is given the text up to it, a CAN (which ends
//! the sequence its parser holds and does nothing else), then the shorter
//! repeat. Both parsers are back in their ground state after it, so they
//! stay in step. The same way, the functions where avt differs from real
//! xterm are given as xterm does them (`corrections.rs`, `fill.rs`), and so
//! are the sequences avt drops that xterm acts on (`unparsed.rs`).
//! Everything else passes unchanged, in runs.

use avt::parser::{Function, State};
use avt::Terminal;

use super::bounds::{repeat_count, ScreenLimits};
use super::charsets::{self, SavedCharsets};
use super::corrections::{correct, needs_state, Correction, Region};
use super::fill::PenMirror;
use super::unparsed::{self, Unparsed};

/// The emulator with the shadow parser that stays in step with its own.
pub(super) struct Guarded<'a> {
    pub terminal: &'a mut Terminal,
    pub shadow: &'a mut avt::Parser,
    pub region: &'a mut Region,
    pub charsets: &'a mut SavedCharsets,
    pub pen: &'a mut PenMirror,
    pub unparsed: &'a mut Unparsed,
    /// False only for the fuzz test's reference, which repeats in full.
    pub cut_repeats: bool,
    pub limits: ScreenLimits,
}

impl Guarded<'_> {
    pub fn feed_str(&mut self, text: &str) {
        let mut start = 0;
        for (at, ch) in text.char_indices() {
            // Printed text in the ground state leaves the parser as it is:
            // most of a flood costs the shadow one comparison a character.
            if self.shadow.state == State::Ground
                && (ch >= '\u{a0}' || (' '..='\u{7f}').contains(&ch))
            {
                if self.charsets.drawing_in_use() {
                    if let Some(drawn) = charsets::xterm_graphic(ch) {
                        self.terminal.feed(&text[start..at]);
                        self.terminal.feed(drawn);
                        start = at + ch.len_utf8();
                    }
                }
                continue;
            }
            let before = self.shadow.state;
            let function = self.shadow.feed(ch);
            let end = at + ch.len_utf8();
            if let Some(extra) = self.unparsed.observe(before, self.shadow.state, ch) {
                // A sequence avt drops (`unparsed.rs`): the emulator is
                // given everything before its last character, which a CAN
                // then ends, and what xterm does.
                self.terminal.feed(&text[start..at]);
                let (top, bottom) = self.region.rows(self.terminal.size().1);
                let mut operations = unparsed::operations(extra, self.terminal, top, bottom);
                if !operations.is_empty() && self.pen.must_wrap(&Function::Dch(1)) {
                    operations = self.pen.wrap(operations);
                }
                self.terminal.feed('\u{18}');
                self.terminal.execute(operations);
                start = end;
                continue;
            }
            let Some(function) = function else {
                continue;
            };
            if function == Function::Ris {
                self.unparsed.reset();
            }
            if self.unparsed.wraps_back(&function, self.pen.autowrap_off()) {
                // Reverse wrap (`unparsed.rs`): where the cursor is decides.
                self.terminal.feed(&text[start..at]);
                let n = match function {
                    Function::Cub(n) => n,
                    _ => 1,
                };
                let (top, bottom) = self.region.rows(self.terminal.size().1);
                let operations = self.unparsed.back(n, self.terminal, top, bottom);
                if ch >= ' ' {
                    self.terminal.feed('\u{18}');
                }
                self.terminal.execute(operations);
                start = end;
                continue;
            }
            if let (Function::Rep(count), true) = (&function, self.cut_repeats) {
                let count = *count;
                // What the emulator has been given so far: the repeated
                // character is the one before the cursor then.
                self.terminal.feed(&text[start..at]);
                start = at;
                let cut = self.cut(count);
                if cut != count {
                    self.terminal.feed('\u{18}');
                    self.terminal.execute(Function::Rep(cut));
                    start = end;
                }
                continue;
            }
            if needs_state(&function) || charsets::needs_state(&function) {
                self.terminal.feed(&text[start..at]);
                start = at;
            }
            let active = self.terminal.active_screen_kind();
            let restore = self.charsets.track(&function, active);
            let origin = self.pen.origin();
            let mut correction = correct(&function, self.terminal, self.region, origin);
            if let (Some(operations), Correction::Pass) = (restore, &correction) {
                correction = Correction::After(operations);
            }
            if self.pen.must_wrap(&function) {
                let operations = match correction {
                    Correction::Pass => vec![function.clone()],
                    Correction::After(after) => {
                        std::iter::once(function.clone()).chain(after).collect()
                    }
                    Correction::Instead(instead) => instead,
                };
                correction = Correction::Instead(self.pen.wrap(operations));
            }
            self.pen.track(&function, active);
            match correction {
                Correction::Pass => {}
                Correction::Instead(operations) => {
                    self.terminal.feed(&text[start..at]);
                    // A C0 control (LF, HT) is run in whatever state the
                    // parser is, even inside a sequence, and leaves it
                    // there: left out, it needs no CAN, and a CAN would end
                    // the sequence the shadow still holds. The last
                    // character of a sequence (or a C1 control, which ends
                    // one) does need one.
                    if ch >= ' ' {
                        self.terminal.feed('\u{18}');
                    }
                    self.terminal.execute(operations);
                    start = end;
                }
                Correction::After(operations) => {
                    self.terminal.feed(&text[start..end]);
                    self.terminal.execute(operations);
                    start = end;
                }
            }
        }
        self.terminal.feed(&text[start..]);
    }

    pub fn feed_char(&mut self, ch: char) {
        let mut buffer = [0; 4];
        self.feed_str(ch.encode_utf8(&mut buffer));
    }

    /// The repeat count with the same effect, given where the cursor is.
    fn cut(&self, count: u16) -> u16 {
        let (cols, rows) = self.terminal.size();
        let cursor = self.terminal.cursor();
        let screen = self.terminal.screen();
        // avt repeats the character before the cursor (the head of a wide
        // one whose tail is there).
        let wide = cursor.col > 0
            && screen
                .line(cursor.row)
                .and_then(|line| line.cells().get(cursor.col - 1))
                .is_some_and(|cell| cell.width() != 1);
        let clamp = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        repeat_count(count, clamp(cols), clamp(rows), wide, self.limits)
    }
}
