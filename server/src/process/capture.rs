//! Capture: the start of the data path. Each output fd (a pipe, or the PTY
//! master; both non-blocking on tokio's reactor) is read from the first
//! byte straight into the process's [`RetainedOutput`], whether or not
//! anyone is attached. Nothing here waits for a reader (drop mode) or for
//! more than the slowest one (block mode, through
//! [`RetainedOutput::room`]).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::StreamName;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};

use crate::metrics::Metrics;
use crate::pty::{self, PtyMaster};
use crate::retained::RetainedOutput;

/// Largest single read from an output fd; also bounds each append.
const READ_CHUNK: usize = 64 * 1024;

/// A read shorter than this ends a burst (see `Capture::run`).
const SMALL_READ: usize = 256;

/// Bytes captured in a row before capture lets the thread's other tasks
/// (the attachments' writers, the other stream) run. tokio's cooperative
/// budget alone allows 128 reads, which with the disk log's `pwrite` each is
/// about 10 ms: a stderr line waited that long behind a stdout flood.
const CAPTURE_SLICE: usize = 256 * 1024;

thread_local! {
    /// One read buffer per runtime worker thread: an idle stream holds no
    /// buffer, and no read pays for zeroing one.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_CHUNK]);
}

/// Where capture reads from: a pipe or a PTY master.
pub enum Source {
    /// A stdout or stderr pipe.
    Pipe(AsyncFd<OwnedFd>),
    /// The PTY master (the whole terminal output, as `stdout`).
    Pty(Arc<PtyMaster>),
}

impl Source {
    /// A pipe's read end, made non-blocking and registered.
    pub fn pipe(fd: OwnedFd) -> io::Result<Source> {
        pty::set_nonblocking(&fd)?;
        Ok(Source::Pipe(pty::register(fd)?))
    }

    fn fd(&self) -> &AsyncFd<OwnedFd> {
        match self {
            Source::Pipe(fd) => fd,
            Source::Pty(master) => master.async_fd(),
        }
    }
}

/// One stream's capture, run in its process's supervisor task.
pub struct Capture {
    /// Where the bytes go.
    pub output: Arc<RetainedOutput>,
    /// Which stream this is.
    pub stream: StreamName,
    /// The process's id, for the log.
    pub id: String,
    /// Where they come from.
    pub source: Source,
    /// Set by the supervisor to the moment of the reap.
    pub reaped: watch::Receiver<Option<Instant>>,
    /// How long capture may go on after the reap (`--drain-timeout-ms`).
    pub drain: Duration,
    /// Counts captured bytes.
    pub metrics: Arc<Metrics>,
    /// A PTY's stdout: after this long without output the screen's
    /// emulator is put to sleep (reduced to its snapshot bytes).
    pub screen_idle: Option<Duration>,
    /// Set when the server hands over to a new binary (issue 43): capture
    /// stops between two reads and gives its descriptor up.
    pub frozen: watch::Receiver<bool>,
}

/// How one stream's capture ended.
#[derive(Debug)]
pub enum CaptureEnd {
    /// The stream ended: true at end of file, false at the drain bound
    /// (or a panic).
    Ended(bool),
    /// Stopped for a handover: a second descriptor of what it read, for
    /// the new binary. Every byte read before is in retention.
    Frozen(StreamName, OwnedFd),
}

impl Capture {
    /// Captures until end of file, until the drain bound after the reap,
    /// or until a handover freezes it.
    pub async fn run(self) -> CaptureEnd {
        let mut frozen = self.frozen.clone();
        tokio::select! {
            biased;
            Ok(_) = frozen.wait_for(|f| *f) => {}
            eof = self.capture() => return CaptureEnd::Ended(eof),
        }
        // Dropped between two reads: every byte read is in retention (an
        // append, disk write included, never waits).
        match self.source.fd().get_ref().try_clone() {
            Ok(fd) => CaptureEnd::Frozen(self.stream, fd),
            Err(error) => {
                tracing::error!(id = %self.id, %error, "cannot keep an output descriptor for the handover");
                CaptureEnd::Ended(false)
            }
        }
    }

    /// Captures until end of file, or until the drain bound after the reap.
    /// Returns true when it reached end of file.
    async fn capture(&self) -> bool {
        use futures_util::FutureExt;
        let mut deadline: Option<Instant> = None;
        let mut since_yield = 0;
        // Made once, not at every read: each would register with the watch
        // and, for the screen's idle timer, with the timer wheel, and leave
        // both again when the read came (every keystroke's echo).
        let mut reaped = self.reaped.clone();
        let reaped_changed = reaped.changed().fuse();
        tokio::pin!(reaped_changed);
        let idle = self.screen_idle;
        let screen_timer = sleep(Duration::ZERO);
        tokio::pin!(screen_timer);
        let mut screen_awake = false;
        let mut last_output = Instant::now();
        loop {
            if since_yield >= CAPTURE_SLICE {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            // Block mode: wait for room. After the reap the tail of the pipe
            // fits the exit slack; what still finds no room is a descendant
            // writing on, and the drain bound holds for it as in drop mode,
            // whoever is attached.
            let room = tokio::select! {
                biased;
                room = self.output.room(self.stream) => room,
                _ = wait_deadline(deadline) => return false,
                Ok(()) = &mut reaped_changed, if deadline.is_none() => {
                    deadline = self.on_reaped();
                    continue;
                }
            };
            tokio::select! {
                ready = self.source.fd().readable() => {
                    let Ok(mut guard) = ready else { return true };
                    match guard.try_io(|fd| self.read_once(fd.get_ref(), room)) {
                        Ok(Ok(0)) => return true,
                        Ok(Ok(n)) => {
                            // A read of a few bytes (a keystroke's echo)
                            // emptied the fd: skip the read that would only
                            // say EAGAIN; an event that arrived meanwhile is
                            // kept. Not for bigger reads: during a flood the
                            // next chunk is usually there already, and
                            // waiting for its event halved PTY throughput.
                            if n < SMALL_READ {
                                guard.clear_ready();
                            }
                            since_yield += n;
                            if let Some(idle) = idle {
                                last_output = Instant::now();
                                if !screen_awake {
                                    screen_awake = true;
                                    screen_timer.as_mut().reset(last_output + idle);
                                }
                            }
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(id = %self.id, stream = self.stream.as_str(), error = %e, "capture read failed");
                            return true;
                        }
                        Err(_would_block) => {}
                    }
                }
                _ = wait_deadline(deadline) => return false,
                Ok(()) = &mut reaped_changed, if deadline.is_none() => {
                    deadline = self.on_reaped();
                }
                // The timer runs from the first output after a quiet spell
                // and, when it fires, is set again from the last output if
                // there was any since: one timer per quiet spell, not one
                // per read.
                () = &mut screen_timer, if screen_awake => {
                    let quiet_until = last_output + idle.unwrap_or_default();
                    if Instant::now() >= quiet_until {
                        self.output.sleep_screen();
                        screen_awake = false;
                    } else {
                        screen_timer.as_mut().reset(quiet_until);
                    }
                }
            }
        }
    }

    /// Once the program has been reaped, what is left in its pipe (or the
    /// terminal's buffer) is finite: block mode lets the stream grow to take
    /// it. Returns the drain deadline.
    fn on_reaped(&self) -> Option<Instant> {
        let at = *self.reaped.borrow();
        if at.is_some() {
            self.output.reaped(self.stream);
        }
        at.map(|at| at + self.drain)
    }

    /// Reads once from a ready fd into the retained output. Returns the
    /// bytes read; 0 at end of output (EIO is how a PTY master reports that
    /// the child side closed). The read buffer is the thread's, not this
    /// stream's.
    fn read_once(&self, fd: &OwnedFd, room: usize) -> io::Result<usize> {
        READ_BUFFER.with_borrow_mut(|buf| {
            let want = room.min(buf.len());
            match nix::unistd::read(fd, &mut buf[..want]) {
                Ok(0) | Err(nix::errno::Errno::EIO) => Ok(0),
                Ok(n) => {
                    self.output.append(self.stream, &buf[..n]);
                    Metrics::add(&self.metrics.captured, self.stream, n as u64);
                    Ok(n)
                }
                Err(nix::errno::Errno::EAGAIN) => Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => Err(e.into()),
            }
        })
    }
}

/// Sleeps until the deadline, or forever without one.
pub async fn wait_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retained::log::StreamLog;
    use crate::screen::{Screen, ScreenLimits};
    use tether_protocol::Overflow;

    /// Waits (bounded) for `done`, looking every few milliseconds: the
    /// capture task's timer is what is being tested, so there is nothing
    /// else to wait on.
    async fn within(bound: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if done() {
                return true;
            }
            sleep(Duration::from_millis(5)).await;
        }
        done()
    }

    #[tokio::test]
    async fn a_quiet_terminal_rests_its_screen_after_each_quiet_spell_and_never_while_busy() {
        let screen = Screen::new(
            10,
            3,
            ScreenLimits {
                scrollback_lines: 0,
            },
        );
        let logs = [StreamLog::memory(1 << 20), StreamLog::memory(1 << 20)];
        let output = Arc::new(RetainedOutput::with_logs(
            logs,
            Overflow::Drop,
            None,
            Some(screen),
        ));
        let (read, write) = nix::unistd::pipe().unwrap();
        let (_reaped_tx, reaped) = watch::channel(None);
        let idle = Duration::from_secs(1);
        let capture = Capture {
            output: output.clone(),
            stream: StreamName::Stdout,
            id: "test".into(),
            source: Source::pipe(read).unwrap(),
            reaped,
            drain: Duration::from_secs(1),
            metrics: Arc::default(),
            screen_idle: Some(idle),
            frozen: watch::channel(false).1,
        };
        let task = tokio::spawn(capture.run());
        for spell in 0..2 {
            // Busy: output every 10 ms for longer than the idle bound.
            for _ in 0..150 {
                nix::unistd::write(&write, b"x").unwrap();
                sleep(Duration::from_millis(10)).await;
            }
            assert!(!output.screen_resting(), "spell {spell}: rested while busy");
            assert!(
                within(Duration::from_secs(10), || output.screen_resting()).await,
                "spell {spell}: never rested"
            );
        }
        drop(write);
        assert!(
            matches!(task.await.unwrap(), CaptureEnd::Ended(true)),
            "capture ends at end of file"
        );
    }
}
