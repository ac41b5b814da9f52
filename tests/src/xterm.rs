//! Real xterm as the judge of what a terminal shows for a byte stream.
//!
//! [`Xvfb`] is a virtual X server of the test's own; [`Xterm`] is a real
//! xterm on it, of a given size, attached with `-S` to a pseudo-terminal the
//! test holds: what the test writes to the PTY's master is what xterm
//! shows, and what xterm answers comes back from the master. After each
//! case the test asks xterm for its screen with its own Media Copy ("print
//! page", `CSI i`, whole page, no attributes, a newline after each row) to a
//! printer command that writes to a FIFO the test reads, and for the cursor with DSR
//! (`CSI 6 n`). An xterm starts in 70 ms: a judge can afford a fresh one
//! per case, as a fresh emulator is what every candidate starts from.
//!
//! xterm runs with its defaults but for the printer resources (and
//! UTF-8): window operations stay disabled, so a stream cannot resize the
//! window, and `DECCOLM` is ignored (`c132` is false) as in a stock xterm.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Instant;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::stat::Mode;
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};

use crate::WAIT;

/// A virtual X server (Xvfb) on a display of its own; killed on drop.
pub struct Xvfb {
    child: Child,
    display: String,
}

impl Xvfb {
    /// Starts Xvfb, large enough for a 250x150 xterm in its default font,
    /// and waits until it says which display it took.
    pub fn start() -> Xvfb {
        let mut child = Command::new("Xvfb")
            .args(["-displayfd", "1", "-nolisten", "tcp"])
            .args(["-screen", "0", "2560x2560x24"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb (Debian package xvfb) must be installed");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let number = line.trim();
        assert!(!number.is_empty(), "Xvfb did not start");
        Xvfb {
            child,
            display: format!(":{number}"),
        }
    }

    pub fn display(&self) -> &str {
        &self.display
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What real xterm showed: the visible rows (trailing blanks trimmed, the
/// second half of a wide character left out) and the cursor, `(column,
/// row)` from 0 (xterm keeps a cursor waiting to wrap on the last column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XtermScreen {
    pub lines: Vec<String>,
    pub cursor: (u16, u16),
    /// `(columns, rows)` at the end: not the size xterm started with when
    /// the case made it change (`DECCOLM`).
    pub size: (u16, u16),
}

/// A real xterm of `cols x rows` on `xvfb`; killed on drop.
pub struct Xterm {
    child: Child,
    master: File,
    replies: Receiver<Vec<u8>>,
    printed: Receiver<Vec<u8>>,
    /// Printed text not yet claimed by a case.
    print_buffer: Vec<u8>,
    cols: u16,
    rows: u16,
    cases: u64,
    dir: PathBuf,
}

/// xterm's placeholder for the cell after a wide character, which its
/// printout carries.
const WIDE_SPACER: char = '\u{FFFF}';

impl Xterm {
    /// A fresh xterm of `cols x rows`. Now and then (1 start in 50 here)
    /// xterm cannot open the display and exits: it is started again, at
    /// most three times.
    pub fn start(xvfb: &Xvfb, cols: u16, rows: u16) -> Xterm {
        let mut complaints = Vec::new();
        for _ in 0..3 {
            match Xterm::launch(xvfb, cols, rows) {
                Ok(xterm) => return xterm,
                Err(complaint) => complaints.push(complaint),
            }
        }
        panic!("xterm did not start: {complaints:?}");
    }

    fn launch(xvfb: &Xvfb, cols: u16, rows: u16) -> Result<Xterm, String> {
        let dir = crate::fresh_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("printer");
        nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut raw = tcgetattr(&pty.slave).unwrap();
        cfmakeraw(&mut raw);
        tcsetattr(&pty.slave, SetArg::TCSANOW, &raw).unwrap();
        // Only xterm gets the slave; nothing started later gets either end.
        fcntl(&pty.master, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).unwrap();
        let resources = [
            format!("*printerCommand: cat > {}", fifo.display()),
            "*printAttributes: 0".to_string(),
            "*printerExtent: true".to_string(),
            "*printerFormFeed: false".to_string(),
            "*printerNewLine: true".to_string(),
        ];
        let mut command = Command::new("xterm");
        command
            .args(["-display", xvfb.display()])
            .args(["-geometry", &format!("{cols}x{rows}")])
            .arg(format!("-Sjudge/{}", pty.slave.as_raw_fd()))
            .arg("-u8")
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env_remove("XENVIRONMENT")
            .stdout(Stdio::null())
            .stderr(File::create(dir.join("stderr")).unwrap());
        for resource in &resources {
            command.args(["-xrm", resource]);
        }
        let child = command
            .spawn()
            .expect("xterm (Debian package xterm) must be installed");
        let slave: OwnedFd = pty.slave;
        drop(slave);
        let master = File::from(pty.master);
        let master_reader = master.try_clone().unwrap();
        let replies = reader(move || Some(master_reader));
        // xterm starts a printer command for each page: opened for reading
        // and writing, the FIFO neither waits for the first one nor ends
        // with one (`Drop` ends its reader).
        let printer = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let printed = reader(move || Some(printer));
        let mut xterm = Xterm {
            child,
            master,
            replies,
            printed,
            print_buffer: Vec::new(),
            cols,
            rows,
            cases: 0,
            dir,
        };
        // In slave mode xterm first writes its window id; then the size it
        // took must be the one asked for.
        match xterm.replies.recv_timeout(WAIT) {
            Ok(first) if first.contains(&b'\n') => {}
            Ok(first) => panic!("xterm began with {first:?}"),
            Err(_) => return Err(xterm.stderr()),
        }
        // (then home, where a fresh terminal has its cursor).
        xterm.write(b"\x1b[999;999H\x1b[6n\x1b[H\x1b[5n");
        let replies = xterm.wait_replies(|r| r.ends_with(b"\x1b[0n"), "its size");
        let size = format!("\x1b[{rows};{cols}R\x1b[0n");
        assert!(
            replies.ends_with(size.as_bytes()),
            "xterm is not {cols}x{rows}: {:?}",
            String::from_utf8_lossy(&replies)
        );
        Ok(xterm)
    }

    pub fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }

    /// What xterm shows after `bytes` (after a hard reset first, but for
    /// the first case of this xterm: a reset does not clear everything, e.g.
    /// the character REP repeats).
    pub fn screen(&mut self, bytes: &[u8]) -> XtermScreen {
        self.cases += 1;
        if self.cases > 1 {
            self.write(b"\x1bc");
        }
        self.write(bytes);
        // CAN ends a sequence the case left unfinished, so that the queries
        // are read as queries. Then: cursor (relative to the margins in
        // origin mode, hence origin mode and both margins), print page, a
        // status report that ends the answers.
        // Last, the size xterm has now (the bottom right corner's place):
        // a case may have made xterm change it (DECCOLM).
        self.write(b"\x18\x1b[6n\x1b[?6$p\x1bP$qr\x1b\\\x1bP$qs\x1b\\\x1b[i");
        self.write(b"\x1b[?6l\x1b[999;999H\x1b[6n\x1b[5n");
        let replies =
            self.wait_replies(|r| find_last(r, b"R\x1b[0n").is_some(), "the cursor report");
        let ((row, col), size) = cursor_report(&replies).unwrap_or_else(|| {
            panic!(
                "no cursor report in {:?}",
                String::from_utf8_lossy(&replies)
            )
        });
        let page = self.wait_page();
        let text = String::from_utf8_lossy(&page).replace(WIDE_SPACER, "");
        let lines: Vec<String> = text
            .split_terminator('\n')
            .map(|line| line.trim_end_matches(' ').to_string())
            .collect();
        XtermScreen {
            lines,
            cursor: (col.min(size.0.saturating_sub(1)), row),
            size,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Err(e) = self.master.write_all(bytes) {
            panic!("xterm went away ({e}): {:?}", self.child.try_wait());
        }
    }

    /// Replies gathered until `done` holds for all of them (bounded).
    fn wait_replies(&mut self, done: impl Fn(&[u8]) -> bool, what: &str) -> Vec<u8> {
        let mut replies = Vec::new();
        let deadline = Instant::now() + WAIT;
        while !done(&replies) {
            match self
                .replies
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(bytes) => replies.extend_from_slice(&bytes),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "xterm never sent {what}; got {:?}",
                    String::from_utf8_lossy(&replies)
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "xterm went away: {:?} {}",
                        self.child.try_wait(),
                        self.stderr()
                    )
                }
            }
        }
        replies
    }

    /// The next page printed: one line per row, each ending with a newline
    /// (no cell holds one), so a page is whole at its `rows`-th newline
    /// (bounded). xterm prints a page after it answered the queries that
    /// follow it, so its end is the only sign that it came.
    fn wait_page(&mut self) -> Vec<u8> {
        let deadline = Instant::now() + WAIT;
        loop {
            let ends: Vec<usize> = (0..self.print_buffer.len())
                .filter(|&i| self.print_buffer[i] == b'\n')
                .take(usize::from(self.rows))
                .collect();
            if ends.len() == usize::from(self.rows) {
                let end = ends[ends.len() - 1] + 1;
                return self.print_buffer.drain(..end).collect();
            }
            match self
                .printed
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(bytes) => self.print_buffer.extend_from_slice(&bytes),
                Err(_) => panic!(
                    "xterm never printed its page; got {:?}",
                    String::from_utf8_lossy(&self.print_buffer)
                ),
            }
        }
    }

    /// What xterm complained of.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Xterm {
    fn drop(&mut self) {
        // The printer's reader waits for bytes: one more, with nobody left
        // to send them to, ends it.
        self.printed = channel().1;
        if let Ok(mut fifo) = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("printer"))
        {
            let _ = fifo.write_all(b"\n");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A thread that forwards what the file `open` gives reads until it ends.
fn reader(open: impl FnOnce() -> Option<File> + Send + 'static) -> Receiver<Vec<u8>> {
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        let Some(mut source) = open() else { return };
        let mut buffer = [0u8; 65536];
        loop {
            match source.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sender.send(buffer[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    receiver
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

/// The cursor's `(row, column)` from 0 on the page, from the answers to
/// `CSI 6 n`, `CSI ? 6 $ p` (origin mode) and DECRQSS of the top and bottom
/// (`r`) and left and right (`s`) margins; and the `(columns, rows)` from
/// the last `CSI 6 n` (the bottom right corner): the last things in
/// `replies` before the closing `CSI 0 n`.
fn cursor_report(replies: &[u8]) -> Option<((u16, u16), (u16, u16))> {
    let end = find_last(replies, b"\x1b[0n")?;
    let start = find_last(&replies[..end], b"\x1b[?6;")?;
    let start = find_last(&replies[..start], b"\x1b[")?;
    let text = std::str::from_utf8(&replies[start..end]).ok()?;
    let pieces: Vec<&str> = text.split('\x1b').filter(|p| !p.is_empty()).collect();
    let numbers = |piece: &str, skip: usize| -> Vec<u16> {
        piece[skip..]
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    let [cpr, mode, vertical, _, horizontal, _, corner] = pieces.as_slice() else {
        return None;
    };
    let cpr = numbers(cpr, 0);
    let corner = numbers(corner, 0);
    let origin = numbers(mode, 0).get(1) == Some(&1);
    // "P1$r<top>;<bottom>r": skip "P1$r"; a refused request is "P0$r".
    let margin = |piece: &str| {
        numbers(piece, 4)
            .first()
            .copied()
            .filter(|_| piece.starts_with("P1"))
    };
    let (top, left) = if origin {
        (
            margin(vertical).unwrap_or(1),
            margin(horizontal).unwrap_or(1),
        )
    } else {
        (1, 1)
    };
    let row = cpr.first()? + top - 2;
    let col = cpr.get(1)? + left - 2;
    Some(((row, col), (*corner.get(1)?, *corner.first()?)))
}
