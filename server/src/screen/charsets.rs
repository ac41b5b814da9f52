//! The character sets a saved cursor carries. xterm's DECSC (and the save
//! of `?1048`/`?1049`) saves the G0/G1 designations and which one is in use
//! with the cursor, and DECRC restores them; avt 0.19 saves the cursor's
//! place, pen, origin and wrap modes but not the character sets (vttest's
//! character set screen draws ASCII where xterm draws lines). The sets are
//! mirrored here, saved per screen as avt saves cursors, and given back to
//! the emulator after each restore; a snapshot carries them by putting the
//! saved sets in place around each DECSC of avt's dump
//! ([`SavedCharsets::inject`]). The sets in use also say when to draw three
//! line-drawing characters as xterm does ([`xterm_graphic`]).

use std::borrow::Cow;

use avt::parser::{DecMode, Function};
use avt::{Charset, ScreenKind};

/// G0, G1 and whether G1 is in use (shift out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sets {
    g0: Charset,
    g1: Charset,
    shifted: bool,
}

impl Default for Sets {
    fn default() -> Sets {
        Sets {
            g0: Charset::Ascii,
            g1: Charset::Ascii,
            shifted: false,
        }
    }
}

impl Sets {
    /// The operations that put these sets in place.
    fn operations(self) -> Vec<Function> {
        vec![
            Function::Gzd4(self.g0),
            Function::G1d4(self.g1),
            if self.shifted {
                Function::So
            } else {
                Function::Si
            },
        ]
    }

    /// The same as bytes: ESC ( B|0, ESC ) B|0, SI|SO.
    fn sequence(self) -> String {
        let final_of = |c: Charset| if c == Charset::Drawing { '0' } else { 'B' };
        let shift = if self.shifted { '\u{e}' } else { '\u{f}' };
        format!(
            "\x1b({}\x1b){}{shift}",
            final_of(self.g0),
            final_of(self.g1)
        )
    }
}

/// The sets in use and the ones each screen's saved cursor holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct SavedCharsets {
    current: Sets,
    /// Primary, alternate.
    saved: [Sets; 2],
}

fn slot(screen: ScreenKind) -> usize {
    match screen {
        ScreenKind::Primary => 0,
        ScreenKind::Alternate => 1,
    }
}

/// True for the functions [`SavedCharsets::track`] needs the active screen
/// for (the emulator must have been given everything before them).
pub(super) fn needs_state(function: &Function) -> bool {
    matches!(
        function,
        Function::Decsc
            | Function::Scosc
            | Function::Decrc
            | Function::Scorc
            | Function::Decset(_)
            | Function::Decrst(_)
            | Function::Decstr
    )
}

/// What xterm draws for the three DEC Special Graphics characters where
/// avt's table differs (`_` blank, `` ` `` a black diamond, `~` a centred
/// dot; avt has `_`, `♦` and `⋅`), to be given to the emulator instead
/// while line drawing is in use (avt leaves non-ASCII as it is).
pub(super) fn xterm_graphic(ch: char) -> Option<char> {
    match ch {
        '_' => Some(' '),
        '`' => Some('\u{25c6}'),
        '~' => Some('\u{b7}'),
        _ => None,
    }
}

impl SavedCharsets {
    /// True when the set in use is DEC Special Graphics.
    pub fn drawing_in_use(&self) -> bool {
        let set = if self.current.shifted {
            self.current.g1
        } else {
            self.current.g0
        };
        set == Charset::Drawing
    }

    /// Follows `function` (run on `active`, the screen active before it);
    /// the operations to run after it, when it restores a cursor.
    pub fn track(&mut self, function: &Function, active: ScreenKind) -> Option<Vec<Function>> {
        let mut active = active;
        let mut restore = None;
        match function {
            Function::Gzd4(c) => self.current.g0 = *c,
            Function::G1d4(c) => self.current.g1 = *c,
            Function::So => self.current.shifted = true,
            Function::Si => self.current.shifted = false,
            Function::Decsc | Function::Scosc => self.saved[slot(active)] = self.current,
            Function::Decrc | Function::Scorc => restore = Some(self.saved[slot(active)]),
            Function::Decset(modes) => {
                for mode in modes.as_slice() {
                    match mode {
                        DecMode::AltScreenBuffer => active = ScreenKind::Alternate,
                        DecMode::SaveCursor => self.saved[slot(active)] = self.current,
                        DecMode::SaveCursorAltScreenBuffer => {
                            self.saved[slot(active)] = self.current;
                            active = ScreenKind::Alternate;
                        }
                        _ => {}
                    }
                }
            }
            Function::Decrst(modes) => {
                for mode in modes.as_slice() {
                    match mode {
                        DecMode::AltScreenBuffer => active = ScreenKind::Primary,
                        DecMode::SaveCursor => restore = Some(self.saved[slot(active)]),
                        DecMode::SaveCursorAltScreenBuffer => {
                            active = ScreenKind::Primary;
                            restore = Some(self.saved[slot(active)]);
                        }
                        _ => {}
                    }
                }
            }
            // As avt: a soft reset forgets the active screen's saved cursor.
            Function::Decstr => {
                self.current = Sets::default();
                self.saved[slot(active)] = Sets::default();
            }
            Function::Ris => *self = SavedCharsets::default(),
            _ => {}
        }
        let sets = restore?;
        self.current = sets;
        Some(sets.operations())
    }

    /// avt's `dump` (with the scrollback before it) made to carry the saved
    /// sets: each DECSC in it (`ESC 7`: the primary screen's before the
    /// dump switches to the alternate screen, the alternate's after) gets
    /// its screen's saved sets before it and the default ones after it (the
    /// dump sets the ones in use last). A screen whose saved cursor avt
    /// dumps as nothing (it is at home with the default pen) but whose
    /// saved sets are not the default gets a DECSC of its own at the start,
    /// where a fresh terminal's cursor is at home with the default pen.
    pub fn inject<'a>(&self, dump: &'a str) -> Cow<'a, str> {
        if self.saved == [Sets::default(); 2] {
            return Cow::Borrowed(dump);
        }
        let switch = dump.find("\x1b[?1047h").unwrap_or(dump.len());
        let mut out = String::new();
        let mut dumped = [false; 2];
        let mut rest = dump;
        let mut at = 0;
        while let Some(found) = rest.find("\x1b7") {
            let screen = usize::from(at + found >= switch);
            dumped[screen] = true;
            out.push_str(&rest[..found]);
            out.push_str(&self.saved[screen].sequence());
            out.push_str("\x1b7");
            out.push_str(&Sets::default().sequence());
            at += found + 2;
            rest = &rest[found + 2..];
        }
        out.push_str(rest);
        let mut prefix = String::new();
        if !dumped[0] && self.saved[0] != Sets::default() {
            prefix.push_str(&self.saved[0].sequence());
            prefix.push_str("\x1b7");
            prefix.push_str(&Sets::default().sequence());
        }
        if !dumped[1] && self.saved[1] != Sets::default() {
            prefix.push_str("\x1b[?1047h");
            prefix.push_str(&self.saved[1].sequence());
            prefix.push_str("\x1b7");
            prefix.push_str(&Sets::default().sequence());
            prefix.push_str("\x1b[?1047l");
        }
        Cow::Owned(prefix + &out)
    }
}
