//! The local terminal: size, raw mode, and restoring it on every exit path.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::Mutex;

use nix::sys::termios::{self, SetArg, Termios};
use tether_client::Error;

/// The mode to restore, while raw mode is on.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// The terminal size (columns, rows) of stdin, stdout or stderr.
pub fn size() -> Option<(u16, u16)> {
    for fd in [0, 1, 2] {
        // SAFETY: TIOCGWINSZ writes one `winsize` to the pointer we pass,
        // which points to a live, properly aligned value.
        let mut ws: nix::libc::winsize = unsafe { std::mem::zeroed() };
        let r = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCGWINSZ, &mut ws) };
        if r == 0 && ws.ws_col > 0 && ws.ws_row > 0 {
            return Some((ws.ws_col, ws.ws_row));
        }
    }
    None
}

/// Puts the terminal back as it was; a no-op unless raw mode is on.
pub fn restore() {
    let saved = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(mode) = saved {
        let stdin = std::io::stdin();
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &mode);
    }
}

/// Raw mode, restored on drop, on panic and before `exit`.
pub struct RawMode(());

/// How far the terminal leaves its cooked mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Every byte as typed, nothing echoed or interpreted (a PTY session).
    Raw,
    /// Each key as typed (no line editing, no echo, Ctrl-S/Ctrl-Q not
    /// flow control) but Ctrl-C still a signal and output unchanged: for
    /// watching the detach keys while stdin is not forwarded.
    Watch,
}

impl RawMode {
    pub fn enter() -> Result<RawMode, Error> {
        RawMode::enter_as(Keys::Raw)
    }

    pub fn enter_as(keys: Keys) -> Result<RawMode, Error> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(Error::InvalidArgument("stdin is not a terminal".into()));
        }
        let original = termios::tcgetattr(stdin.as_fd())
            .map_err(|e| Error::InvalidArgument(format!("cannot read the terminal mode: {e}")))?;
        let mut raw = original.clone();
        match keys {
            Keys::Raw => termios::cfmakeraw(&mut raw),
            Keys::Watch => {
                use termios::{InputFlags, LocalFlags, SpecialCharacterIndices};
                raw.local_flags
                    .remove(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::IEXTEN);
                raw.input_flags.remove(InputFlags::IXON);
                raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
                raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
            }
        }
        *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(original);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        if let Err(e) = termios::tcsetattr(stdin.as_fd(), SetArg::TCSAFLUSH, &raw) {
            restore();
            return Err(Error::InvalidArgument(format!("cannot set raw mode: {e}")));
        }
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}
