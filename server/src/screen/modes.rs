//! What a terminal client must know that the emulator does not keep: the
//! window title and the input modes that change what the client sends
//! (bracketed paste, mouse reporting and its encoding, focus events,
//! application keypad) and the cursor style.
//!
//! The emulator's parser (`term/parser.rs`) hands each sequence to both:
//! the screen's state in `term/`, these few values here, which a snapshot
//! writes first ([`ClientModes::restore_sequence`]) and which a sleeping
//! screen keeps.

use super::term::parser::Params;

/// Longest window title kept, in bytes (a title is cut, never grown).
const MAX_TITLE_BYTES: usize = 512;

/// The side state, as the program last set it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientModes {
    /// OSC 0 / OSC 2 window title.
    pub title: Option<String>,
    /// `?2004`.
    pub bracketed_paste: bool,
    /// Mouse tracking: 9, 1000, 1002 or 1003 (the last one set).
    pub mouse_tracking: Option<u16>,
    /// Mouse encoding: 1005, 1006, 1015 or 1016.
    pub mouse_encoding: Option<u16>,
    /// `?1004`.
    pub focus_events: bool,
    /// DECKPAM (`ESC =`) / `?66`.
    pub application_keypad: bool,
    /// DECSCUSR parameter (0 = default).
    pub cursor_style: u16,
    /// Full erases of the display (`CSI 2 J`, `CSI 3 J`) and resets (RIS)
    /// so far, wrapping: a screen that skipped bytes is whole again after
    /// one (see `Screen::is_stale`).
    pub erases: u32,
}

impl ClientModes {
    /// Escape sequences that set these modes on a fresh terminal. None of
    /// them is a query, so a terminal answers none of them.
    pub fn restore_sequence(&self, out: &mut Vec<u8>) {
        if let Some(title) = &self.title {
            out.extend_from_slice(b"\x1b]2;");
            out.extend_from_slice(title.as_bytes());
            out.push(0x07);
        }
        if self.bracketed_paste {
            out.extend_from_slice(b"\x1b[?2004h");
        }
        if let Some(mode) = self.mouse_tracking {
            out.extend_from_slice(format!("\x1b[?{mode}h").as_bytes());
        }
        if let Some(mode) = self.mouse_encoding {
            out.extend_from_slice(format!("\x1b[?{mode}h").as_bytes());
        }
        if self.focus_events {
            out.extend_from_slice(b"\x1b[?1004h");
        }
        if self.application_keypad {
            out.extend_from_slice(b"\x1b=");
        }
        if self.cursor_style != 0 {
            out.extend_from_slice(format!("\x1b[{} q", self.cursor_style).as_bytes());
        }
    }

    fn dec_mode(&mut self, mode: u16, on: bool) {
        match mode {
            2004 => self.bracketed_paste = on,
            9 | 1000 | 1002 | 1003 => {
                // As xterm.js: setting one selects it, resetting any ends tracking.
                self.mouse_tracking = on.then_some(mode);
            }
            1005 | 1006 | 1015 | 1016 => {
                if on {
                    self.mouse_encoding = Some(mode);
                } else if self.mouse_encoding == Some(mode) {
                    self.mouse_encoding = None;
                }
            }
            1004 => self.focus_events = on,
            66 => self.application_keypad = on,
            _ => {}
        }
    }
}

impl ClientModes {
    /// A CSI sequence (`private`: `?` and the like, 0 for none).
    pub fn csi(&mut self, private: u8, params: &Params, intermediates: &[u8], action: char) {
        match (private, intermediates, action) {
            (b'?', [], 'h' | 'l') => {
                for group in params.groups() {
                    self.dec_mode(group[0], action == 'h');
                }
            }
            (0, [b' '], 'q') => self.cursor_style = params.get(0),
            (0, [], 'J') if matches!(params.get(0), 2 | 3) => {
                self.erases = self.erases.wrapping_add(1);
            }
            (0, [b'!'], 'p') => {
                // DECSTR (soft reset), as xterm.js: keypad and bracketed paste off.
                self.application_keypad = false;
                self.bracketed_paste = false;
            }
            _ => {}
        }
    }

    /// An ESC sequence.
    pub fn esc(&mut self, intermediates: &[u8], action: char) {
        if !intermediates.is_empty() {
            return;
        }
        match action {
            '=' => self.application_keypad = true,
            '>' => self.application_keypad = false,
            // RIS: a full reset forgets everything but the title.
            'c' => {
                let title = self.title.take();
                *self = ClientModes {
                    title,
                    erases: self.erases.wrapping_add(1),
                    ..ClientModes::default()
                };
            }
            _ => {}
        }
    }

    /// An OSC string (the parser keeps at most 1 KiB of it).
    pub fn osc(&mut self, data: &str) {
        let Some((kind, text)) = data.split_once(';') else {
            return;
        };
        if kind != "0" && kind != "2" {
            return;
        }
        // The title is everything after the first `;`, as xterm reads it;
        // control characters would end or change the sequence on replay.
        let mut title: String = text.chars().filter(|c| !c.is_control()).collect();
        if title.len() > MAX_TITLE_BYTES {
            let mut cut = MAX_TITLE_BYTES;
            while !title.is_char_boundary(cut) {
                cut -= 1;
            }
            title.truncate(cut);
        }
        self.title = Some(title);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::screen::term::parser::{Parser, Perform};

    /// The parser driving these modes alone.
    struct Only<'a>(&'a mut ClientModes);

    impl Perform for Only<'_> {
        fn print(&mut self, _: char) {}
        fn execute(&mut self, _: char) {}
        fn csi(&mut self, private: u8, params: &Params, intermediates: &[u8], action: char) {
            self.0.csi(private, params, intermediates, action);
        }
        fn esc(&mut self, intermediates: &[u8], action: char) {
            self.0.esc(intermediates, action);
        }
        fn osc(&mut self, data: &str) {
            self.0.osc(data);
        }
        fn settled(&mut self) {}
    }

    fn track(bytes: &[u8]) -> ClientModes {
        let mut modes = ClientModes::default();
        Parser::new().advance(&mut Only(&mut modes), &String::from_utf8_lossy(bytes));
        modes
    }

    #[test]
    fn records_title_paste_mouse_keypad_and_cursor_style() {
        let modes = track(b"\x1b]0;user@host: ~\x07\x1b[?2004h\x1b[?1002;1006h\x1b=\x1b[5 q");
        assert_eq!(modes.title.as_deref(), Some("user@host: ~"));
        assert!(modes.bracketed_paste);
        assert_eq!(modes.mouse_tracking, Some(1002));
        assert_eq!(modes.mouse_encoding, Some(1006));
        assert!(modes.application_keypad);
        assert_eq!(modes.cursor_style, 5);
        let mut out = Vec::new();
        modes.restore_sequence(&mut out);
        assert_eq!(track(&out), modes);
    }

    #[test]
    fn resets_follow_the_program() {
        let modes = track(b"\x1b[?2004h\x1b[?1000h\x1b=\x1b[?2004l\x1b[?1000l\x1b>");
        assert_eq!(modes, ClientModes::default());
        let modes = track(b"\x1b]2;t\x1b\\\x1b[?1003h\x1bc");
        assert_eq!(modes.title.as_deref(), Some("t"));
        assert_eq!(modes.mouse_tracking, None);
    }

    #[test]
    fn a_title_cannot_smuggle_control_characters_or_grow() {
        let mut input = b"\x1b]2;a\x1b[6nb".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.push(0x07);
        let modes = track(&input);
        let title = modes.title.unwrap_or_default();
        assert!(title.len() <= MAX_TITLE_BYTES);
        assert!(!title.contains('\x1b'));
    }
}
