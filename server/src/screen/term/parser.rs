//! The escape-sequence parser: the state machine of DEC's VT500 family
//! (Paul Williams' diagram, as xterm and most terminals follow it), over
//! characters (UTF-8 is decoded before). It keeps what it has read of an
//! unfinished sequence in a bounded, canonical form, so that a snapshot can
//! end inside a sequence ([`Parser::unfinished`]) and a fresh terminal given
//! it then reads the rest as the first one would.

/// Most parameters kept (xterm keeps 30); more are dropped.
pub const MAX_PARAMS: usize = 32;
/// Most intermediates kept (real sequences have one or two).
const MAX_INTERMEDIATES: usize = 2;
/// Most characters of an OSC string kept for a snapshot (the side parser,
/// `modes.rs`, keeps the same 1 KiB).
const MAX_OSC: usize = 1024;

/// A CSI sequence's parameters: numbers, each either a parameter of its own
/// or (written after `:`) a sub-parameter of the one before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    values: [u16; MAX_PARAMS],
    /// Bit i: value i came after a `:`.
    subs: u32,
    len: usize,
    /// A digit or separator has been read for the value at `len`.
    open: bool,
}

impl Params {
    fn clear(&mut self) {
        *self = Params::default();
    }

    fn digit(&mut self, d: u16) {
        if self.len >= MAX_PARAMS {
            return;
        }
        self.open = true;
        let v = &mut self.values[self.len];
        *v = v.saturating_mul(10).saturating_add(d);
    }

    fn separator(&mut self, sub: bool) {
        if self.len >= MAX_PARAMS {
            return;
        }
        self.len += 1;
        self.open = true;
        if sub && self.len < MAX_PARAMS {
            self.subs |= 1 << self.len;
        }
    }

    fn finish(&mut self) {
        if self.open && self.len < MAX_PARAMS {
            self.len += 1;
            self.open = false;
        }
    }

    /// Number of values (parameters and sub-parameters).
    pub fn len(&self) -> usize {
        self.len
    }

    /// No parameter at all (`CSI m`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Value `i`, 0 when absent.
    pub fn get(&self, i: usize) -> u16 {
        if i < self.len {
            self.values[i]
        } else {
            0
        }
    }

    /// Parameter `i` (sub-parameters not counted) or `default` when it is
    /// absent or 0.
    pub fn arg(&self, i: usize, default: u16) -> u16 {
        match self.groups().nth(i).and_then(|g| g.first().copied()) {
            Some(0) | None => default,
            Some(v) => v,
        }
    }

    /// Each parameter with its sub-parameters.
    pub fn groups(&self) -> impl Iterator<Item = &[u16]> {
        let mut start = 0;
        std::iter::from_fn(move || {
            if start >= self.len {
                return None;
            }
            let mut end = start + 1;
            while end < self.len && self.subs & (1 << end) != 0 {
                end += 1;
            }
            let group = &self.values[start..end];
            start = end;
            Some(group)
        })
    }

    /// The parameters written back (`1;2:3`).
    fn write(&self, out: &mut String) {
        use std::fmt::Write as _;
        for i in 0..self.len {
            if i > 0 {
                out.push(if self.subs & (1 << i) != 0 { ':' } else { ';' });
            }
            let _ = write!(out, "{}", self.values[i]);
        }
        if self.open && self.len < MAX_PARAMS {
            if self.len > 0 {
                out.push(if self.subs & (1 << self.len) != 0 {
                    ':'
                } else {
                    ';'
                });
            }
            if self.values[self.len] != 0 {
                let _ = write!(out, "{}", self.values[self.len]);
            }
        }
    }
}

/// What the parser found.
pub trait Perform {
    fn print(&mut self, ch: char);
    /// A run of printable ASCII characters (each one a `print`).
    fn print_ascii(&mut self, run: &str) {
        for ch in run.chars() {
            self.print(ch);
        }
    }
    /// A C0 control (or a C1 one given as its ESC form: see `esc`).
    fn execute(&mut self, ch: char);
    /// `CSI private? params intermediates final`.
    fn csi(&mut self, private: u8, params: &Params, intermediates: &[u8], action: char);
    /// `ESC intermediates final`.
    fn esc(&mut self, intermediates: &[u8], action: char);
    /// An OSC string, ended by BEL or ST (ESC, or C1 ST); at most 1 KiB
    /// of it.
    fn osc(&mut self, data: &str);
    /// Anything but a print left the parser in the ground state (xterm
    /// forgets the character REP repeats then).
    fn settled(&mut self);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Ground,
    Escape,
    EscapeIntermediate,
    CsiEntry,
    CsiParam,
    CsiIntermediate,
    CsiIgnore,
    Dcs,
    Osc,
    SosPmApc,
}

/// The parser's state.
#[derive(Debug, Clone, Default)]
pub struct Parser {
    state: State,
    private: u8,
    intermediates: [u8; MAX_INTERMEDIATES],
    intermediate_len: usize,
    params: Params,
    osc: String,
}

impl Parser {
    pub fn new() -> Parser {
        Parser::default()
    }

    pub fn advance(&mut self, perform: &mut impl Perform, text: &str) {
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if self.state == State::Ground {
                // Printable ASCII, the bulk of most output, in runs.
                let run = bytes[at..]
                    .iter()
                    .position(|b| !(0x20..0x7f).contains(b))
                    .unwrap_or(bytes.len() - at);
                if run > 0 {
                    perform.print_ascii(&text[at..at + run]);
                    at += run;
                    continue;
                }
            }
            let Some(ch) = text[at..].chars().next() else {
                break;
            };
            self.next(perform, ch);
            at += ch.len_utf8();
        }
    }

    fn enter(&mut self, state: State) {
        self.state = state;
        self.private = 0;
        self.intermediate_len = 0;
        self.params.clear();
        self.osc.clear();
    }

    fn collect(&mut self, ch: char) {
        if self.intermediate_len < MAX_INTERMEDIATES {
            self.intermediates[self.intermediate_len] = ch as u8;
            self.intermediate_len += 1;
        }
    }

    #[inline]
    pub fn next(&mut self, perform: &mut impl Perform, ch: char) {
        let c = ch as u32;
        if self.state == State::Ground && c >= 0x20 && c != 0x7f && !(0x80..0xa0).contains(&c) {
            perform.print(ch);
            return;
        }
        if c == 0 {
            // NUL is dropped before anything sees it (the screen skips
            // runs of them unread).
            return;
        }
        self.control(perform, ch);
        if self.state == State::Ground {
            perform.settled();
        }
    }

    fn control(&mut self, perform: &mut impl Perform, ch: char) {
        let c = ch as u32;
        // Anywhere.
        match c {
            0x18 | 0x1a => {
                self.enter(State::Ground);
                perform.execute(ch);
                return;
            }
            0x1b => {
                if self.state == State::Osc {
                    perform.osc(&self.osc);
                }
                self.enter(State::Escape);
                return;
            }
            0x80..=0x9f => {
                if self.state == State::Osc && c == 0x9c {
                    perform.osc(&self.osc);
                }
                self.c1(perform, c as u8);
                return;
            }
            _ => {}
        }
        match self.state {
            State::Ground => {
                if c < 0x20 {
                    perform.execute(ch);
                }
            }
            State::Escape => match c {
                0x00..=0x1f => perform.execute(ch),
                0x20..=0x2f => {
                    self.collect(ch);
                    self.state = State::EscapeIntermediate;
                }
                0x50 => self.enter(State::Dcs),
                0x5b => self.enter(State::CsiEntry),
                0x5d => self.enter(State::Osc),
                0x58 | 0x5e | 0x5f => self.enter(State::SosPmApc),
                0x30..=0x7e => {
                    self.state = State::Ground;
                    perform.esc(&[], ch);
                }
                _ => {}
            },
            State::EscapeIntermediate => match c {
                0x00..=0x1f => perform.execute(ch),
                0x20..=0x2f => self.collect(ch),
                0x30..=0x7e => {
                    self.state = State::Ground;
                    let (ints, n) = (self.intermediates, self.intermediate_len);
                    perform.esc(&ints[..n], ch);
                }
                _ => {}
            },
            State::CsiEntry | State::CsiParam => match c {
                0x00..=0x1f => perform.execute(ch),
                0x30..=0x39 => {
                    self.params.digit((c - 0x30) as u16);
                    self.state = State::CsiParam;
                }
                0x3a | 0x3b => {
                    self.params.separator(c == 0x3a);
                    self.state = State::CsiParam;
                }
                0x3c..=0x3f => {
                    if self.state == State::CsiEntry {
                        self.private = c as u8;
                        self.state = State::CsiParam;
                    } else {
                        self.state = State::CsiIgnore;
                    }
                }
                0x20..=0x2f => {
                    self.collect(ch);
                    self.state = State::CsiIntermediate;
                }
                0x40..=0x7e => self.dispatch_csi(perform, ch),
                _ => {}
            },
            State::CsiIntermediate => match c {
                0x00..=0x1f => perform.execute(ch),
                0x20..=0x2f => self.collect(ch),
                0x30..=0x3f => self.state = State::CsiIgnore,
                0x40..=0x7e => self.dispatch_csi(perform, ch),
                _ => {}
            },
            State::CsiIgnore => match c {
                0x00..=0x1f => perform.execute(ch),
                0x40..=0x7e => self.state = State::Ground,
                _ => {}
            },
            State::Osc => match c {
                0x07 => {
                    perform.osc(&self.osc);
                    self.enter(State::Ground);
                }
                0x00..=0x1f => {}
                _ => {
                    if self.osc.len() + ch.len_utf8() <= MAX_OSC {
                        self.osc.push(ch);
                    }
                }
            },
            State::Dcs | State::SosPmApc => {}
        }
    }

    fn dispatch_csi(&mut self, perform: &mut impl Perform, ch: char) {
        self.params.finish();
        self.state = State::Ground;
        let (ints, n) = (self.intermediates, self.intermediate_len);
        let params = std::mem::take(&mut self.params);
        perform.csi(self.private, &params, &ints[..n], ch);
    }

    /// A C1 control (U+0080 to U+009F): the string and sequence
    /// introducers start their state, ST ends a string, the others act as
    /// their 7-bit `ESC` forms.
    fn c1(&mut self, perform: &mut impl Perform, c: u8) {
        match c {
            0x90 => self.enter(State::Dcs),
            0x9b => self.enter(State::CsiEntry),
            0x9d => self.enter(State::Osc),
            0x98 | 0x9e | 0x9f => self.enter(State::SosPmApc),
            0x9c => self.enter(State::Ground),
            _ => {
                self.enter(State::Ground);
                perform.esc(&[], char::from(c - 0x40));
            }
        }
    }

    /// The unfinished sequence, in 7-bit form, that puts a fresh parser in
    /// this one's state; empty in the ground state.
    pub fn unfinished(&self) -> String {
        let mut out = String::new();
        let ints: String = self.intermediates[..self.intermediate_len]
            .iter()
            .map(|&b| char::from(b))
            .collect();
        match self.state {
            State::Ground => {}
            State::Escape => out.push('\x1b'),
            State::EscapeIntermediate => {
                out.push('\x1b');
                out.push_str(&ints);
            }
            State::CsiEntry | State::CsiParam | State::CsiIntermediate => {
                out.push_str("\x1b[");
                if self.private != 0 {
                    out.push(char::from(self.private));
                }
                self.params.write(&mut out);
                out.push_str(&ints);
            }
            // A private marker after a parameter is ignored to the end.
            State::CsiIgnore => out.push_str("\x1b[0?"),
            State::Dcs => out.push_str("\x1bP"),
            State::Osc => {
                out.push_str("\x1b]");
                out.push_str(&self.osc);
            }
            State::SosPmApc => out.push_str("\x1b_"),
        }
        out
    }
}
