//! Giving the local terminal back as the user had it when a session on a
//! PTY ends: a program still running when the user detaches (vim, less, a
//! TUI) or one killed before it restored the terminal has left it on the
//! alternate screen, with mouse reporting, bracketed paste or application
//! keys on, and the user's own shell would get escape sequences for every
//! click and arrow key.
//!
//! [`ModeWatch`] passes the output through and notes whether it left the
//! terminal on the alternate screen (the one mode whose reset is not
//! harmless when it is off: leaving it restores a saved cursor).
//! [`reset_sequence`] turns everything else off unconditionally, as tmux
//! does on detach: each of those is a no-op on a terminal where it is off.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// Parameters of one CSI sequence kept, at most; the rest are ignored.
const MAX_PARAMS: usize = 16;

/// Where the scanner is within an escape sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    /// After `ESC [`: `private` once `?` came first; `plain` while only
    /// digits and `;` came (anything else makes it a sequence we skip).
    Csi {
        private: bool,
        plain: bool,
    },
}

/// Follows a byte stream for the DEC private modes 47, 1047 and 1049 (the
/// alternate screen) and for RIS (`ESC c`), across writes.
#[derive(Debug)]
pub struct AltScreen {
    state: State,
    params: [u16; MAX_PARAMS],
    count: usize,
    current: Option<u16>,
    on: bool,
}

impl Default for AltScreen {
    fn default() -> Self {
        AltScreen {
            state: State::Ground,
            params: [0; MAX_PARAMS],
            count: 0,
            current: None,
            on: false,
        }
    }
}

impl AltScreen {
    /// True when the bytes so far left the alternate screen on.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Takes the next bytes of the output.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    fn byte(&mut self, byte: u8) {
        // ESC starts over from anywhere (it cancels a sequence in progress,
        // as terminals do); CAN and SUB abort one.
        match byte {
            0x1b => {
                self.state = State::Escape;
                return;
            }
            0x18 | 0x1a => {
                self.state = State::Ground;
                return;
            }
            _ => {}
        }
        match self.state {
            State::Ground => {}
            State::Escape => {
                self.state = State::Ground;
                match byte {
                    b'[' => {
                        self.state = State::Csi {
                            private: false,
                            plain: true,
                        };
                        self.count = 0;
                        self.current = None;
                    }
                    // RIS: a full reset leaves the alternate screen.
                    b'c' => self.on = false,
                    _ => {}
                }
            }
            State::Csi { private, plain } => match byte {
                b'?' if !private && self.count == 0 && self.current.is_none() => {
                    self.state = State::Csi {
                        private: true,
                        plain,
                    };
                }
                b'0'..=b'9' => {
                    let digit = u16::from(byte - b'0');
                    let value = self.current.unwrap_or(0);
                    self.current = Some(value.saturating_mul(10).saturating_add(digit));
                }
                b';' => self.push(),
                0x40..=0x7e => {
                    self.push();
                    if private && plain && (byte == b'h' || byte == b'l') {
                        let alternate = self.params[..self.count]
                            .iter()
                            .any(|&mode| matches!(mode, 47 | 1047 | 1049));
                        if alternate {
                            self.on = byte == b'h';
                        }
                    }
                    self.state = State::Ground;
                }
                // Intermediates, other parameter bytes: not a mode set.
                0x20..=0x3f => {
                    self.state = State::Csi {
                        private,
                        plain: false,
                    };
                }
                // Control characters inside a CSI are executed, not part
                // of it; anything else ends it.
                0x00..=0x1f => {}
                _ => self.state = State::Ground,
            },
        }
    }

    fn push(&mut self) {
        if let Some(value) = self.current.take() {
            if self.count < MAX_PARAMS {
                self.params[self.count] = value;
                self.count += 1;
            }
        }
    }
}

/// What puts a terminal back in its usual modes after a program: leave the
/// alternate screen if it is on, then normal cursor keys and keypad, no
/// bracketed paste, no mouse reporting in any encoding, no focus events,
/// the cursor shown in its default style, default colours.
pub fn reset_sequence(alternate_screen: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if alternate_screen {
        out.extend_from_slice(b"\x1b[?1049l");
    }
    out.extend_from_slice(
        b"\x1b[?1l\x1b>\x1b[?2004l\
          \x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\
          \x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l\
          \x1b[?1004l\x1b[?25h\x1b[0 q\x1b[0m",
    );
    out
}

/// A writer that notes, in passing, whether what went through it left the
/// terminal on the alternate screen.
pub struct ModeWatch<W> {
    inner: W,
    alternate: AltScreen,
}

impl<W> ModeWatch<W> {
    pub fn new(inner: W) -> ModeWatch<W> {
        ModeWatch {
            inner,
            alternate: AltScreen::default(),
        }
    }

    /// The reset for what the output left on (see [`reset_sequence`]).
    pub fn reset_sequence(&self) -> Vec<u8> {
        reset_sequence(self.alternate.is_on())
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ModeWatch<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.alternate.feed(&buf[..n.min(buf.len())]);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(chunks: &[&[u8]]) -> bool {
        let mut alt = AltScreen::default();
        for chunk in chunks {
            alt.feed(chunk);
        }
        alt.is_on()
    }

    #[test]
    fn each_alternate_screen_mode_is_followed_on_and_off() {
        for mode in ["47", "1047", "1049"] {
            let on = format!("\x1b[?{mode}h");
            let off = format!("\x1b[?{mode}l");
            assert!(after(&[on.as_bytes()]), "{mode}");
            assert!(!after(&[on.as_bytes(), off.as_bytes()]), "{mode}");
        }
        assert!(!after(&[b"plain text, \x1b[1049h without the ?"]));
        assert!(!after(&[b"\x1b[?1049h", b"\x1bc"]), "RIS leaves it");
    }

    #[test]
    fn a_sequence_split_between_writes_or_among_other_modes_counts() {
        assert!(after(&[b"ab\x1b", b"[?10", b"49", b"h cd"]));
        assert!(after(&[b"\x1b[?1;1049;25h"]));
        assert!(!after(&[b"\x1b[?1049h\x1b[?25;1049l"]));
    }

    #[test]
    fn what_is_not_a_mode_set_leaves_it_alone() {
        // Cancelled by ESC, by CAN, with an intermediate, a huge parameter.
        assert!(!after(&[b"\x1b[?10\x1b[?2004h"]));
        assert!(!after(&[b"\x1b[?1049\x18h"]));
        assert!(!after(&[b"\x1b[?1049$h"]));
        assert!(!after(&[b"\x1b[?99999999999h"]));
        assert!(after(&[b"\x1b[?1049h\x1b[?1049$l"]));
    }

    #[test]
    fn the_reset_leaves_the_alternate_screen_only_when_it_is_on() {
        assert!(reset_sequence(true).starts_with(b"\x1b[?1049l"));
        assert!(!reset_sequence(false)
            .windows(8)
            .any(|w| w == b"\x1b[?1049l"));
        let reset = String::from_utf8(reset_sequence(false)).unwrap();
        for off in ["?1000l", "?1006l", "?2004l", "?1l", "?25h"] {
            assert!(reset.contains(off), "{off}");
        }
    }
}
