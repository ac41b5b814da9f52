//! Real xterm as the judge of what a terminal shows for a byte stream.
//!
//! [`Xvfb`] is a virtual X server of the test's own; [`Xterm`] is a real
//! xterm on it, of a given size, attached with `-S` to a pseudo-terminal the
//! test holds: what the test writes to the PTY's master is what xterm
//! shows, and what xterm answers comes back from the master. After each
//! case the test asks xterm for its screen with its own Media Copy ("print
//! page", `CSI i`, whole page, no attributes, a newline after each row) to a
//! printer command that writes to a FIFO the test reads, and for the cursor with DSR
//! (`CSI 6 n`), and for the attributes of every cell with `XTREPORTSGR`
//! (`CSI Pt;Pl;Pb;Pr # |` on a one-cell rectangle: xterm answers with the
//! SGR of that cell, 256 and direct colours included). An xterm starts in 70 ms: a judge can afford a fresh one
//! per case, as a fresh emulator is what every candidate starts from.
//!
//! xterm runs with its defaults but for the printer resources (and
//! UTF-8, and `boldColors` off, so that bold text keeps the colour it was
//! given in xterm's report instead of its bright version): window operations stay disabled, so a stream cannot resize the
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
    /// Each visible cell's attributes, row by row, in the canonical form of
    /// [`canonical_sgr`].
    pub styles: Vec<Vec<String>>,
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
            "*boldColors: false".to_string(),
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
        // Each cell's attributes, outside origin mode (rectangles are
        // placed by it).
        let mut queries = b"\x1b[?6l".to_vec();
        for row in 1..=self.rows {
            for col in 1..=self.cols {
                queries.extend_from_slice(format!("\x1b[{row};{col};{row};{col}#|").as_bytes());
            }
        }
        self.write(&queries);
        self.write(b"\x1b[999;999H\x1b[6n\x1b[5n");
        let replies =
            self.wait_replies(|r| find_last(r, b"R\x1b[0n").is_some(), "the cursor report");
        let (replies, mut reports) = take_sgr_reports(&replies);
        let cells = usize::from(self.cols) * usize::from(self.rows);
        assert_eq!(
            reports.len(),
            cells,
            "xterm reported {} cells",
            reports.len()
        );
        let mut styles = Vec::new();
        for _ in 0..self.rows {
            let rest = reports.split_off(usize::from(self.cols));
            styles.push(std::mem::replace(&mut reports, rest));
        }
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
            styles,
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

/// The replies without xterm's SGR reports (`CSI ... m`, the only replies
/// ending in `m`), and those reports in canonical form, in order.
fn take_sgr_reports(replies: &[u8]) -> (Vec<u8>, Vec<String>) {
    let mut rest = Vec::with_capacity(replies.len());
    let mut reports = Vec::new();
    let mut at = 0;
    while at < replies.len() {
        if replies[at..].starts_with(b"\x1b[") {
            let params = &replies[at + 2..];
            let len = params
                .iter()
                .position(|b| !(b.is_ascii_digit() || *b == b';' || *b == b':'))
                .unwrap_or(params.len());
            if params.get(len) == Some(&b'm') {
                reports.push(canonical_sgr(&String::from_utf8_lossy(&params[..len])));
                at += 2 + len + 1;
                continue;
            }
        }
        rest.push(replies[at]);
        at += 1;
    }
    (rest, reports)
}

/// SGR parameters (as xterm reports them, or as any program writes them)
/// in the canonical form of the server's `Screen::styles`: the attributes by
/// number in increasing order (1, 2, 3, 4, 5, 7, 8, 9, 21), then the
/// foreground and the background as `38:5:N`/`48:5:N` (N 0-255, however it
/// was written) or `38:2:R:G:B`/`48:2:R:G:B`; empty for the default.
pub fn canonical_sgr(params: &str) -> String {
    let mut flags = std::collections::BTreeSet::new();
    let (mut fg, mut bg): (Option<String>, Option<String>) = (None, None);
    let mut items = params.split(';').peekable();
    while let Some(item) = items.next() {
        let mut subs = item.split(':');
        let code: u16 = subs.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let colour = |base: u16, n: u16| Some(format!("{base}:5:{n}"));
        match code {
            0 => {
                flags.clear();
                fg = None;
                bg = None;
            }
            1..=9 | 21 => {
                flags.insert(code);
            }
            30..=37 => fg = colour(38, code - 30),
            40..=47 => bg = colour(48, code - 40),
            90..=97 => fg = colour(38, code - 90 + 8),
            100..=107 => bg = colour(48, code - 100 + 8),
            39 => fg = None,
            49 => bg = None,
            38 | 48 => {
                // Colon form (`38:5:N`, `38:2::R:G:B`) or semicolon form.
                let mut args: Vec<String> = subs.map(str::to_string).collect();
                if args.is_empty() {
                    let kind = items.next().unwrap_or_default().to_string();
                    let count = if kind == "2" { 3 } else { 1 };
                    args.push(kind);
                    args.extend((0..count).filter_map(|_| items.next().map(str::to_string)));
                } else if args.first().map(String::as_str) == Some("2") && args.len() == 5 {
                    // The colour space id xterm writes empty.
                    args.remove(1);
                }
                let spec = format!("{code}:{}", args.join(":"));
                if code == 38 {
                    fg = Some(spec);
                } else {
                    bg = Some(spec);
                }
            }
            _ => {}
        }
    }
    let mut parts: Vec<String> = flags.iter().map(u16::to_string).collect();
    parts.extend(fg);
    parts.extend(bg);
    parts.join(";")
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
