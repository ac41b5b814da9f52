//! A PTY's terminal emulator, fed off capture's path: capture only appends
//! bytes to retention (and records resizes there, at their stdout offset);
//! one screen worker thread for all PTYs reads the bytes each emulator has
//! not been fed yet back from retention (memory window or disk log, the
//! readers' path) in bounded turns, round-robin, and feeds them, applying
//! each resize when the emulator reaches its offset.
//!
//! The emulator is not a reader: it never holds block-mode capture back. If
//! it falls so far behind that bytes it still needs were evicted (a flood
//! beyond retention), it skips to the oldest retained byte and its screen is
//! marked stale (`Screen::is_stale`) until the program erases the whole
//! display or resets the terminal.
//!
//! The worker is not woken for every write: while it has had work within
//! the last `WARM`, it looks at its queue every `TICK` instead, and capture
//! wakes it early only once an emulator is `URGENT_BYTES` behind. A
//! keystroke's echo then costs capture no thread wake-up (a futex call and,
//! on an idle core, an interrupt: 3-6 us per echo on the 2-vCPU machine of
//! docs/BENCHMARKS.md), and the emulator lags by at most one tick or
//! 64 KiB. Whoever reads the screen catches it up first (`CATCH_UP`), so a
//! snapshot is never behind the output it is sent with.
//!
//! Locks: the screen's own, then retention's, never the other way round, so
//! that a snapshot's offset cannot move while a reader is registered at it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use tether_protocol::StreamName;

use super::{Next, Reader, RetainedOutput, ScreenText, SnapshotSlot};
use crate::screen::{Screen, Snapshot};
use crate::sync::{recover, LockExt};

/// Bytes fed to one emulator per turn of the worker before the next
/// process's turn.
const TURN_BYTES: usize = 64 << 10;

/// Longest turn of the worker on one emulator: a flood of sequences that
/// each change a whole screen holds the screen's lock (and the other
/// emulators' turns) no longer than this.
const TURN_TIME: Duration = Duration::from_millis(10);

/// Bytes fed to the emulator between two looks at the clock: a few
/// dozen sequences, each costing at most a screen and its scrollback.
const FEED_SLICE: usize = 256;

/// Output an emulator may fall behind before capture wakes a ticking
/// worker: one turn's worth.
const URGENT_BYTES: usize = TURN_BYTES;

/// How often a worker that has had work lately looks at its queue.
const TICK: Duration = Duration::from_millis(20);

/// How long after its last work the worker keeps ticking before it sleeps
/// until woken (an idle server has no periodic wake-ups).
const WARM: Duration = Duration::from_secs(1);

/// How long a request for the screen (or an attachment from it) may spend
/// letting a lagging emulator catch up to the end of the output first.
const CATCH_UP: Duration = Duration::from_millis(100);

impl RetainedOutput {
    /// Capture appended `output` bytes of stdout, or the terminal was
    /// resized (0): queue the emulator for the worker (once), and a new byte
    /// cancels a sleep. The worker is hurried only when this append takes the
    /// emulator past [`URGENT_BYTES`] behind.
    pub(super) fn screen_has_news(self: &Arc<Self>, output: usize) {
        let Some(feed) = &self.screen else { return };
        let mut urgent = false;
        if output > 0 {
            feed.sleep_requested.store(false, Ordering::Relaxed);
            let before = feed.unfed.fetch_add(output, Ordering::Relaxed);
            urgent = before < URGENT_BYTES && before + output >= URGENT_BYTES;
        }
        if !feed.queued.swap(true, Ordering::AcqRel) {
            worker().push(Arc::downgrade(self), urgent);
        } else if urgent {
            worker().hurry();
        }
    }

    /// True for a PTY process with a terminal emulator.
    pub fn has_screen(&self) -> bool {
        self.screen.is_some()
    }

    /// Output has been quiet: the worker reduces the emulator to its
    /// snapshot bytes once it has been fed everything.
    pub fn sleep_screen(self: &Arc<Self>) {
        if let Some(feed) = &self.screen {
            feed.sleep_requested.store(true, Ordering::Relaxed);
            self.screen_has_news(0);
        }
    }

    /// Whether the screen has been put to sleep (or asked to be) since its
    /// last output: what capture's idle timer did, for tests.
    #[cfg(test)]
    pub(crate) fn screen_resting(&self) -> bool {
        self.screen.as_ref().is_some_and(|feed| {
            feed.sleep_requested.load(Ordering::Relaxed) || feed.lock().is_asleep()
        })
    }

    /// The terminal screen as bytes for a fresh terminal, with the stdout
    /// offset it corresponds to, after letting the emulator catch up to the
    /// end of the output (for at most 100 ms).
    pub fn screen_snapshot(&self) -> Option<(Snapshot, bool)> {
        let screen = self.caught_up_screen()?;
        Some((screen.snapshot(), screen.is_stale()))
    }

    /// The room the screen's own reservation keeps for one snapshot, if
    /// no other request is using it; None for pipes too.
    pub fn snapshot_slot(&self) -> Option<SnapshotSlot> {
        self.screen.as_ref()?.take_snapshot_slot()
    }

    /// Most bytes a snapshot of the screen takes at its size now; None
    /// for pipes.
    pub fn snapshot_bound(&self) -> Option<u64> {
        let feed = self.screen.as_ref()?;
        Some(feed.lock().snapshot_bound())
    }

    /// The terminal screen as plain text, caught up as for
    /// [`RetainedOutput::screen_snapshot`].
    pub fn screen_text(&self) -> Option<ScreenText> {
        let screen = self.caught_up_screen()?;
        let (cols, rows) = screen.size();
        Some(ScreenText {
            offset: screen.offset(),
            cols,
            rows,
            text: screen.text(),
            stale: screen.is_stale(),
        })
    }

    /// The window title the program set last (OSC 0/2), caught up as for
    /// [`RetainedOutput::screen_snapshot`]; None for pipes and before any.
    pub fn screen_title(&self) -> Option<String> {
        self.caught_up_screen()?.title().map(str::to_string)
    }

    /// A PTY's screen and a reader registered at exactly its offset, in one
    /// step, so that not a byte falls between the two. The emulator may lag
    /// the end (after the bounded catch-up): the reader then starts there.
    /// None for pipes.
    ///
    /// The reader is registered before the snapshot is made, at the
    /// screen's offset or, if bytes from there were evicted meanwhile, at
    /// the oldest retained byte, which the screen then skips to (stale):
    /// one snapshot, no retry, however fast a flood evicts. The screen's
    /// lock keeps its offset where the reader is while the snapshot is made.
    pub fn reader_at_screen(self: &Arc<Self>) -> Option<(Reader, Snapshot)> {
        let mut screen = self.caught_up_screen()?;
        let (reader, start) = self.reader_from_stdout(screen.offset());
        screen.skip_to(start);
        self.apply_resizes(&mut screen);
        Some((reader, screen.snapshot()))
    }

    /// The screen's lock, after feeding it up to the end of the output as
    /// it is now (or for `CATCH_UP`), and past evicted bytes in any case.
    /// Past the deadline the screen is answered as far as it got (its
    /// offset says where): a flood of expensive sequences makes the answer
    /// older, never later.
    fn caught_up_screen(&self) -> Option<MutexGuard<'_, Screen>> {
        let feed = self.screen.as_ref()?;
        let deadline = Instant::now() + CATCH_UP;
        let mut screen = feed.lock();
        let end = self.totals()[StreamName::Stdout.index()];
        while screen.offset() < end && Instant::now() < deadline {
            if self.feed_turn(&mut screen, deadline) {
                break;
            }
        }
        let start = self.retained_start(StreamName::Stdout);
        screen.skip_to(start);
        self.apply_resizes(&mut screen);
        Some(screen)
    }

    /// Feeds the emulator up to [`TURN_BYTES`] of what it has not had, and
    /// until `deadline` at most (checked every [`FEED_SLICE`] bytes),
    /// applying resizes on the way. Returns true when it has everything.
    fn feed_turn(&self, screen: &mut Screen, deadline: Instant) -> bool {
        let mut budget = TURN_BYTES;
        loop {
            let due = self.apply_resizes(screen);
            if budget == 0 || Instant::now() >= deadline {
                return false;
            }
            let from = screen.offset();
            let max = match due {
                Some(at) => budget.min(usize::try_from(at - from).unwrap_or(usize::MAX)),
                None => budget,
            };
            match self.next(StreamName::Stdout, from, max, |_, parts| parts.concat()) {
                Next::Data { frame, .. } => {
                    for slice in frame.chunks(FEED_SLICE) {
                        screen.feed(slice);
                        budget = budget.saturating_sub(slice.len());
                        if Instant::now() >= deadline {
                            return false;
                        }
                    }
                }
                Next::Dropped { offset, length } => screen.skip_to(offset + length),
                Next::Pending | Next::End => return true,
            }
        }
    }

    /// Applies the resizes recorded at or before the emulator's offset, in
    /// order; returns the offset of the next one, if any.
    fn apply_resizes(&self, screen: &mut Screen) -> Option<u64> {
        let (due, next) = self.resizes_due(screen.offset());
        for resize in due {
            screen.resize(resize.cols, resize.rows);
        }
        next
    }

    /// One turn of the worker: true when this emulator is to stay queued.
    fn worker_turn(&self) -> bool {
        let Some(feed) = &self.screen else {
            return false;
        };
        let mut screen = feed.lock();
        feed.unfed.store(0, Ordering::Relaxed);
        if !self.feed_turn(&mut screen, Instant::now() + TURN_TIME) {
            return true;
        }
        if feed.sleep_requested.swap(false, Ordering::Relaxed) {
            screen.sleep();
        }
        feed.queued.store(false, Ordering::Release);
        // Output, a resize or a sleep that came between the last look and
        // the flag saw the flag still set and did not queue it.
        let news =
            self.screen_news_after(screen.offset()) || feed.sleep_requested.load(Ordering::Relaxed);
        news && !feed.queued.swap(true, Ordering::AcqRel)
    }
}

/// The screen worker: emulators with bytes (or a resize, or a sleep) to
/// process, fed one turn each in order.
struct Worker {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// The worker's queue, and how it waits when the queue is empty.
#[derive(Default)]
struct Queue {
    emulators: VecDeque<Weak<RetainedOutput>>,
    /// Waiting without a deadline: a push must wake it.
    asleep: bool,
    /// Waiting for its next tick: only an urgent push wakes it.
    ticking: bool,
}

fn worker() -> &'static Worker {
    static WORKER: OnceLock<&'static Worker> = OnceLock::new();
    WORKER.get_or_init(|| {
        let worker: &'static Worker = Box::leak(Box::new(Worker {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("tether-screen".into())
            .spawn(move || worker.run());
        if let Err(e) = spawned {
            // Screens then lag until a request catches them up.
            tracing::error!(error = %e, "starting the screen worker failed");
        }
        worker
    })
}

impl Worker {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock_or_recover()
    }

    fn push(&self, output: Weak<RetainedOutput>, urgent: bool) {
        let mut queue = self.lock();
        queue.emulators.push_back(output);
        let wake = queue.asleep || (urgent && queue.ticking);
        drop(queue);
        if wake {
            self.ready.notify_one();
        }
    }

    /// A queued emulator fell [`URGENT_BYTES`] behind: do not wait for the
    /// tick.
    fn hurry(&self) {
        if self.lock().ticking {
            self.ready.notify_one();
        }
    }

    fn run(&self) {
        lower_priority();
        let mut warm_until = Instant::now();
        loop {
            let next = {
                let mut queue = self.lock();
                loop {
                    if let Some(next) = queue.emulators.pop_front() {
                        break next;
                    }
                    if Instant::now() < warm_until {
                        queue.ticking = true;
                        queue = recover(self.ready.wait_timeout(queue, TICK)).0;
                        queue.ticking = false;
                    } else {
                        queue.asleep = true;
                        queue = recover(self.ready.wait(queue));
                        queue.asleep = false;
                    }
                }
            };
            warm_until = Instant::now() + WARM;
            // A forgotten process is gone from the queue with its last Arc.
            if let Some(output) = next.upgrade() {
                if output.worker_turn() {
                    self.lock().emulators.push_back(next);
                }
            }
        }
    }
}

/// Capture and attachments come first: the worker runs at nice 10.
fn lower_priority() {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id
    // only changes this thread's nice value, and its failure is harmless.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::screen::ScreenLimits;
    use tether_protocol::{Overflow, TermSize};

    fn pty_output(capacity: usize) -> Arc<RetainedOutput> {
        let screen = Screen::new(
            10,
            3,
            ScreenLimits {
                scrollback_lines: 0,
            },
        );
        let logs = [
            super::super::StreamLog::memory(capacity),
            super::super::StreamLog::memory(capacity),
        ];
        Arc::new(RetainedOutput::with_logs(
            logs,
            Overflow::Drop,
            None,
            Some(screen),
        ))
    }

    #[test]
    fn the_screen_sees_each_resize_between_the_bytes_before_and_after_it() {
        let output = pty_output(1 << 20);
        output.append(StreamName::Stdout, b"ab");
        let size = TermSize::new(4, 2).unwrap();
        output.resize_with(size, || Ok::<(), ()>(())).unwrap();
        output.append(StreamName::Stdout, b"\r\n1234567");
        let text = output.screen_text().unwrap();
        assert_eq!((text.cols, text.rows, text.offset), (4, 2, 11));
        // Written at 4 columns: wrapped (at 10 it would fit one row).
        assert_eq!(text.text, "1234\n567\n");
        assert!(!text.stale);
    }

    #[test]
    fn a_quiet_screen_sleeps_once_fed_and_new_output_wakes_it() {
        let output = pty_output(1 << 20);
        output.append(StreamName::Stdout, b"$ ");
        output.sleep_screen();
        // Whichever turn takes the request (the worker's or this one), the
        // screen has been fed everything and is asleep after it.
        output.worker_turn();
        let feed = output.screen.as_ref().unwrap();
        assert!(feed.lock().is_asleep());
        assert_eq!(feed.lock().offset(), 2);
        output.append(StreamName::Stdout, b"ls");
        assert!(!feed.sleep_requested.load(Ordering::Relaxed));
        assert_eq!(output.screen_text().unwrap().text, "$ ls\n\n\n");
        assert!(!feed.lock().is_asleep());
    }

    /// The emulator's offset once the worker alone has fed it `end` bytes
    /// (no screen request catches it up), within a bounded time.
    fn fed_by_the_worker(output: &RetainedOutput, end: u64) -> bool {
        let feed = output.screen.as_ref().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if feed.lock().offset() == end {
                return true;
            }
            // Nothing to wait on: the worker's progress is only visible here.
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    #[test]
    fn the_worker_feeds_small_and_large_output_without_being_asked() {
        // A keystroke's echo (not urgent: the worker takes it at its next
        // tick or, asleep, when woken), then a flood past URGENT_BYTES.
        let output = pty_output(1 << 20);
        output.append(StreamName::Stdout, b"x");
        assert!(fed_by_the_worker(&output, 1), "a small write was never fed");
        output.append(StreamName::Stdout, b"y");
        assert!(
            fed_by_the_worker(&output, 2),
            "a write while warm was never fed"
        );
        let flood = vec![b'z'; 3 * URGENT_BYTES];
        for chunk in flood.chunks(4096) {
            output.append(StreamName::Stdout, chunk);
        }
        let end = 2 + flood.len() as u64;
        assert!(fed_by_the_worker(&output, end), "a flood was never fed");
        let feed = output.screen.as_ref().unwrap();
        assert!(feed.unfed.load(Ordering::Relaxed) < URGENT_BYTES);
    }

    #[test]
    fn an_emulator_behind_evicted_bytes_skips_them_and_is_stale() {
        let output = pty_output(8);
        // Held by this test: the worker cannot feed it meanwhile.
        let feed = output.screen.as_ref().unwrap();
        let screen = feed.lock();
        output.append(StreamName::Stdout, b"lost lost lost ");
        output.append(StreamName::Stdout, b"kept");
        drop(screen);
        let text = output.screen_text().unwrap();
        assert_eq!(text.offset, 19);
        assert!(text.stale);
        let (reader, snapshot) = output.reader_at_screen().unwrap();
        assert_eq!(snapshot.offset, 19);
        let mut cursor = super::super::Cursor::at(19);
        output.append(StreamName::Stdout, b"!");
        match reader.next(StreamName::Stdout, &mut cursor, 10, |_, p| p.concat()) {
            Next::Data { offset, frame, .. } => assert_eq!((offset, &frame[..]), (19, &b"!"[..])),
            other => panic!("expected the byte after the snapshot, got {other:?}"),
        }
    }
}
