//! The terminal screen of a PTY process: a server-side terminal emulator fed
//! every retained byte, in order, at the same offsets as retention (by the
//! screen worker, `retained/screen_feed.rs`, behind capture), so that a
//! client can combine "the screen at offset N" with "every byte after N" and
//! see what the program's terminal shows, with no gap and no repeat. Bytes
//! evicted before the emulator got them are skipped ([`Screen::skip_to`]),
//! and the screen is stale until the program erases it.
//!
//! The emulator is tether's own (`term/`, issue 45): what real xterm shows,
//! and a dump that writes both screens, the scrollback, saved cursors,
//! margins, charsets, modes and even an unfinished escape sequence back as
//! bytes. What a client needs that the screen does not (window title,
//! bracketed paste, mouse reporting, focus events, application keypad,
//! cursor style) the same parser hands to `modes.rs`; the plain-text view
//! and each cell's attributes are read in `render.rs`.
//!
//! Memory: a live emulator holds two `cols x rows` grids of 28-byte cells
//! plus up to `scrollback` lines of `cols` cells. A screen whose output has
//! been quiet is put to sleep ([`Screen::sleep`]): the grids are dropped and
//! only its snapshot bytes are kept (a shell prompt: a few hundred bytes);
//! the next byte wakes it by writing the snapshot into a fresh emulator. A
//! screen that has never had output holds no emulator at all.

mod bounds;
mod modes;
mod render;
pub mod term;

use std::borrow::Cow;

pub use bounds::{memory_bound, snapshot_bound, ScreenLimits};
pub use modes::ClientModes;
use term::Vt;

/// The screen at one offset of the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Offset of the first output byte not reflected in `data`.
    pub offset: u64,
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
    /// Bytes that, written to a fresh terminal of `cols x rows`, reproduce
    /// the program's terminal at `offset`. They contain no terminal query.
    pub data: Vec<u8>,
}

/// The emulator, or what it was reduced to while idle.
enum Emulator {
    Live(Box<Vt>),
    /// Bytes that rebuild the emulator in a fresh one (scrollback, screens,
    /// cursor, emulator modes, unfinished sequence); empty: never fed.
    Asleep(Box<[u8]>),
}

/// One PTY process's screen.
pub struct Screen {
    cols: u16,
    rows: u16,
    limits: ScreenLimits,
    /// Bytes fed so far: the offset the screen corresponds to.
    offset: u64,
    emulator: Emulator,
    /// What a client needs beside the screen; kept while the emulator
    /// sleeps.
    modes: ClientModes,
    /// The first bytes of a UTF-8 character whose rest has not come yet.
    utf8: Utf8Carry,
    /// Set when bytes were skipped (evicted before the emulator got them):
    /// the count of full erases then. The screen is stale until the
    /// program erases the whole display or resets the terminal.
    skipped_at_erases: Option<u32>,
}

impl Drop for Screen {
    fn drop(&mut self) {
        // The grids (or the dump) are freed first, so that the trim can
        // give their pages back.
        if self.memory_bound() >= bounds::GIVE_BACK_BYTES {
            self.emulator = Emulator::Asleep(Box::default());
            bounds::give_back_memory();
        }
    }
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("cols", &self.cols)
            .field("rows", &self.rows)
            .field("offset", &self.offset)
            .field("asleep", &matches!(self.emulator, Emulator::Asleep(_)))
            .finish()
    }
}

impl Screen {
    /// A blank screen at offset 0. Sizes are clamped to at least 1.
    pub fn new(cols: u16, rows: u16, limits: ScreenLimits) -> Screen {
        Screen {
            cols: cols.max(1),
            rows: rows.max(1),
            limits,
            offset: 0,
            emulator: Emulator::Asleep(Box::default()),
            modes: ClientModes::default(),
            utf8: Utf8Carry::default(),
            skipped_at_erases: None,
        }
    }

    /// True when bytes were skipped and the program has not erased the
    /// whole display (`CSI 2 J`, `CSI 3 J`) or reset the terminal (`ESC c`)
    /// since: the screen may lack what those bytes drew.
    pub fn is_stale(&self) -> bool {
        self.skipped_at_erases == Some(self.modes.erases)
    }

    /// A screen rebuilt from its snapshot by the binary a handover execs
    /// (issue 43): the snapshot's bytes fed to a blank screen of its size,
    /// which then stands at the snapshot's offset, stale if it was.
    pub fn restored(snapshot: &Snapshot, limits: ScreenLimits, stale: bool) -> Screen {
        let mut screen = Screen::new(snapshot.cols, snapshot.rows, limits);
        screen.feed(&snapshot.data);
        screen.offset = snapshot.offset;
        if stale {
            screen.skipped_at_erases = Some(screen.modes.erases);
        }
        screen
    }

    /// The bytes before `offset` will never come (they were evicted): the
    /// screen moves there as it is, and is stale.
    pub fn skip_to(&mut self, offset: u64) {
        if offset > self.offset {
            self.offset = offset;
            self.utf8 = Utf8Carry::default();
            self.skipped_at_erases = Some(self.modes.erases);
        }
    }

    /// The offset the screen corresponds to (bytes fed so far).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Current size.
    pub fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }

    /// True while the emulator is reduced to its snapshot.
    pub fn is_asleep(&self) -> bool {
        matches!(self.emulator, Emulator::Asleep(_))
    }

    /// Feeds the next captured bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let guarded = wake(&mut self.emulator, self.cols, self.rows, self.limits);
        // NUL is ignored by terminals in every state that matters here (xterm
        // and xterm.js drop it); skipping it keeps a stream of zeros cheap.
        let mut rest = bytes;
        while !rest.is_empty() {
            let start = rest.iter().position(|&b| b != 0).unwrap_or(rest.len());
            if start > 0 {
                // A NUL cannot continue a character.
                self.utf8.interrupt(guarded, &mut self.modes);
            }
            rest = &rest[start..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            if end > 0 {
                self.utf8.feed(guarded, &mut self.modes, &rest[..end]);
            }
            rest = &rest[end..];
        }
        self.offset += bytes.len() as u64;
    }

    /// The terminal was resized at the current offset.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        let (cols, rows) = (cols.max(1), rows.max(1));
        if (cols, rows) == (self.cols, self.rows) {
            return;
        }
        let before = self.memory_bound();
        wake(&mut self.emulator, self.cols, self.rows, self.limits)
            .terminal
            .resize(usize::from(cols), usize::from(rows));
        self.cols = cols;
        self.rows = rows;
        if before.saturating_sub(self.memory_bound()) >= bounds::GIVE_BACK_BYTES {
            bounds::give_back_memory();
        }
    }

    /// The most memory this screen may hold at its size (see
    /// [`memory_bound`]).
    pub fn memory_bound(&self) -> u64 {
        memory_bound(self.cols, self.rows, self.limits)
    }

    /// Most bytes a snapshot of this screen takes (see [`snapshot_bound`]).
    pub fn snapshot_bound(&self) -> u64 {
        snapshot_bound(self.cols, self.rows, self.limits)
    }

    /// Drops the emulator's grids, keeping only the bytes that rebuild it.
    pub fn sleep(&mut self) {
        if let Emulator::Live(terminal) = &self.emulator {
            let dump = terminal.dump().into_bytes();
            self.emulator = Emulator::Asleep(dump.into_boxed_slice());
            if self.memory_bound() >= bounds::GIVE_BACK_BYTES {
                bounds::give_back_memory();
            }
        }
    }

    /// The screen now, as bytes for a fresh terminal.
    pub fn snapshot(&self) -> Snapshot {
        let mut data = Vec::new();
        self.modes.restore_sequence(&mut data);
        let dump = match &self.emulator {
            Emulator::Live(terminal) => Cow::Owned(terminal.dump()),
            // Written from a String by `sleep`.
            Emulator::Asleep(dump) => String::from_utf8_lossy(dump),
        };
        data.extend_from_slice(dump.as_bytes());
        data.extend_from_slice(self.utf8.pending());
        Snapshot {
            offset: self.offset,
            cols: self.cols,
            rows: self.rows,
            data,
        }
    }

    /// What a person sees: the visible rows of the active screen, one line
    /// each, trailing blanks trimmed.
    pub fn text(&self) -> String {
        match &self.emulator {
            Emulator::Live(vt) => render::plain_text(&vt.terminal.lines),
            Emulator::Asleep(dump) => {
                let vt = rebuild(self.cols, self.rows, self.limits, dump);
                render::plain_text(&vt.terminal.lines)
            }
        }
    }

    /// The attributes of every visible cell of the active screen, row by
    /// row, as canonical SGR parameters (`render.rs`): what a judge compares
    /// with another terminal's cells.
    pub fn styles(&self) -> Vec<Vec<String>> {
        match &self.emulator {
            Emulator::Live(vt) => render::visible_styles(&vt.terminal.lines),
            Emulator::Asleep(dump) => {
                let vt = rebuild(self.cols, self.rows, self.limits, dump);
                render::visible_styles(&vt.terminal.lines)
            }
        }
    }

    /// Where the cursor is: `(column, row)` from 0, the column one past the
    /// last when a character written in the last column waits to wrap (at
    /// a right margin before it, the margin's column).
    pub fn cursor(&self) -> (u16, u16) {
        let cursor = match &self.emulator {
            Emulator::Live(vt) => vt.terminal.cursor,
            Emulator::Asleep(dump) => {
                rebuild(self.cols, self.rows, self.limits, dump)
                    .terminal
                    .cursor
            }
        };
        let narrow = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        let past_the_last = cursor.pending_wrap && cursor.col + 1 == usize::from(self.cols);
        let col = cursor.col + usize::from(past_the_last);
        (narrow(col), narrow(cursor.row))
    }

    /// The window title the program set last, if any.
    pub fn title(&self) -> Option<&str> {
        self.modes.title.as_deref()
    }
}

/// The live emulator, rebuilt from its dump first if it was asleep.
fn wake(emulator: &mut Emulator, cols: u16, rows: u16, limits: ScreenLimits) -> &mut Vt {
    if let Emulator::Asleep(dump) = emulator {
        let vt = rebuild(cols, rows, limits, dump);
        *emulator = Emulator::Live(Box::new(vt));
    }
    match emulator {
        Emulator::Live(vt) => vt,
        // Replaced just above.
        Emulator::Asleep(_) => unreachable!("the emulator was woken"),
    }
}

/// A fresh emulator with `dump` written to it.
fn rebuild(cols: u16, rows: u16, limits: ScreenLimits, dump: &[u8]) -> Vt {
    let mut vt = Vt::new(
        usize::from(cols),
        usize::from(rows),
        limits.scrollback_lines,
    );
    // Dumps are made from `String`s, so this never loses a byte. They hold
    // no client mode (a snapshot writes those apart).
    vt.feed_str(&String::from_utf8_lossy(dump), &mut ClientModes::default());
    vt
}

/// Incremental UTF-8 decoding in front of the emulator: a character split
/// across two reads is held back until it is complete; bytes that cannot be
/// UTF-8 become U+FFFD.
#[derive(Debug, Default)]
struct Utf8Carry {
    bytes: [u8; 4],
    len: usize,
}

impl Utf8Carry {
    fn pending(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// A byte that is skipped came: the held character is invalid.
    fn interrupt(&mut self, terminal: &mut Vt, modes: &mut ClientModes) {
        if self.len > 0 {
            terminal.feed_char('\u{FFFD}', modes);
            self.len = 0;
        }
    }

    fn feed(&mut self, terminal: &mut Vt, modes: &mut ClientModes, mut input: &[u8]) {
        if self.len > 0 {
            // The held bytes and the next few, decoded exactly as one
            // stream would be: a byte that cannot continue the character
            // makes it one U+FFFD, as `from_utf8` says, however the bytes
            // were split.
            let held = self.len;
            let take = input.len().min(4 - held);
            let mut joined = [0u8; 4];
            joined[..held].copy_from_slice(&self.bytes[..held]);
            joined[held..held + take].copy_from_slice(&input[..take]);
            let joined = &joined[..held + take];
            let used = match std::str::from_utf8(joined) {
                Ok(text) => {
                    let width = utf8_width(joined[0]);
                    terminal.feed_str(&text[..width], modes);
                    width
                }
                Err(error) if error.valid_up_to() > 0 => {
                    let width = error.valid_up_to().min(utf8_width(joined[0]));
                    if let Ok(text) = std::str::from_utf8(&joined[..width]) {
                        terminal.feed_str(text, modes);
                    }
                    width
                }
                Err(error) => match error.error_len() {
                    Some(bad) => {
                        terminal.feed_char('\u{FFFD}', modes);
                        bad
                    }
                    None => {
                        // Still incomplete: all of `input` was taken.
                        self.bytes[..joined.len()].copy_from_slice(joined);
                        self.len = joined.len();
                        return;
                    }
                },
            };
            self.len = 0;
            input = &input[used.saturating_sub(held).min(input.len())..];
        }
        loop {
            match std::str::from_utf8(input) {
                Ok(text) => {
                    terminal.feed_str(text, modes);
                    return;
                }
                Err(error) => {
                    let (good, rest) = input.split_at(error.valid_up_to());
                    if let Ok(text) = std::str::from_utf8(good) {
                        terminal.feed_str(text, modes);
                    }
                    match error.error_len() {
                        Some(bad) => {
                            terminal.feed_char('\u{FFFD}', modes);
                            input = &rest[bad..];
                        }
                        None => {
                            // An incomplete character at the end: at most 3 bytes.
                            self.len = rest.len().min(4);
                            self.bytes[..self.len].copy_from_slice(&rest[..self.len]);
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Length of the UTF-8 sequence a lead byte starts.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
