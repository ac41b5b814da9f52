//! Stdin: a bounded queue per process from clients to one writer task,
//! which writes to the stdin pipe or the PTY master in the order received.
//!
//! The queue is skipped when it is empty: a write then goes straight to the
//! fd (non-blocking, under the queue's lock, so nothing can pass it), and
//! only what the fd does not take at once is queued for the task. A
//! keystroke reaches the program without waking another task.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::unix::pipe::Sender as PipeWriter;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::pty::PtyMaster;
use crate::sync::LockExt;

/// Stdin messages queued per process before writers wait.
const STDIN_QUEUE: usize = 16;
/// Bytes of stdin that HTTP requests may have queued for one process at
/// once (at least `--max-body-bytes`): past it a POST is answered 429
/// `stdin_busy` before its body is read, instead of parking with it.
pub const HTTP_STDIN_BUDGET: usize = 4 << 20;

/// What the stdin writer task is asked to do.
#[derive(Debug)]
enum StdinCommand {
    /// Write these bytes; the permit (an HTTP or attachment stdin budget)
    /// is given back once they are written.
    Data(Vec<u8>, Option<OwnedSemaphorePermit>),
    /// Close stdin (pipes) or send the EOF character (PTY).
    Eof,
}

/// The process has no open stdin (none was asked for, it was closed, or
/// the program stopped reading it for good).
#[derive(Debug)]
pub struct StdinClosed;

/// The fd stdin goes to, shared by the writer task and direct writes.
#[derive(Debug, Clone)]
enum StdinFd {
    Pipe(Arc<PipeWriter>),
    Pty(Arc<PtyMaster>),
}

impl StdinFd {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            StdinFd::Pipe(pipe) => pipe.as_fd(),
            StdinFd::Pty(master) => master.async_fd().get_ref().as_fd(),
        }
    }

    /// Non-blocking: bytes written until the fd is full (maybe 0), or the
    /// error that stopped it.
    fn write_now(&self, data: &[u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < data.len() {
            match nix::unistd::write(self.fd(), &data[done..]) {
                Ok(n) => done += n,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }

    /// Writes all of `data`, waiting for the fd.
    async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        match self {
            StdinFd::Pty(master) => master.write_all(data).await,
            StdinFd::Pipe(pipe) => {
                let mut data = data;
                while !data.is_empty() {
                    pipe.writable().await?;
                    match pipe.try_write(data) {
                        Ok(n) => data = &data[n..],
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug)]
struct Open {
    sender: mpsc::Sender<StdinCommand>,
    fd: StdinFd,
}

/// The clients' end of a process's stdin.
#[derive(Debug)]
pub struct StdinQueue {
    /// `None` once closed for good (or never opened).
    open: Mutex<Option<Open>>,
    /// Commands handed to the writer task and not yet carried out; a
    /// direct write is allowed only at zero (counted under `open`'s lock).
    queued: Arc<AtomicUsize>,
    /// A PTY has no half-close: after EOF it still takes input.
    reopens_after_eof: bool,
    /// Bytes HTTP requests may have queued ([`HTTP_STDIN_BUDGET`]).
    http_budget: Arc<Semaphore>,
}

/// The HTTP stdin budget of a process is spent.
#[derive(Debug)]
pub struct StdinBusy(pub usize);

/// What [`StdinQueue::try_write`] did.
#[derive(Debug)]
pub enum TryWrite {
    /// Written, or the part the fd did not take queued ahead of anything
    /// later.
    Done,
    /// The queue is not empty: nothing was written; here is all of it back.
    Busy(Vec<u8>, Option<OwnedSemaphorePermit>),
}

impl StdinQueue {
    /// No stdin at all (`/dev/null`).
    pub fn none() -> StdinQueue {
        StdinQueue {
            open: Mutex::new(None),
            queued: Arc::default(),
            reopens_after_eof: false,
            http_budget: http_budget(),
        }
    }

    /// A queue to a writer task of the pipe.
    pub fn pipe(stdin: PipeWriter) -> StdinQueue {
        StdinQueue::start(StdinFd::Pipe(Arc::new(stdin)), false)
    }

    /// A queue to a writer task of the PTY master.
    pub fn pty(master: Arc<PtyMaster>) -> StdinQueue {
        StdinQueue::start(StdinFd::Pty(master), true)
    }

    fn start(fd: StdinFd, reopens_after_eof: bool) -> StdinQueue {
        let (sender, rx) = mpsc::channel(STDIN_QUEUE);
        let queued = Arc::<AtomicUsize>::default();
        tokio::spawn(write_queued(fd.clone(), rx, queued.clone()));
        StdinQueue {
            open: Mutex::new(Some(Open { sender, fd })),
            queued,
            reopens_after_eof,
            http_budget: http_budget(),
        }
    }

    /// Nothing is queued for the writer task.
    pub fn is_idle(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    /// A second descriptor of the open stdin, for a handover to carry
    /// (issue 43); `None` once closed (or never opened).
    pub fn carry_fd(&self) -> Option<io::Result<std::os::fd::OwnedFd>> {
        let open = self.lock();
        open.as_ref().map(|open| open.fd.fd().try_clone_to_owned())
    }

    fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        self.open.lock_or_recover()
    }

    /// Writes at once if nothing is queued: what the fd takes without
    /// waiting is written under the lock, the rest queued (with `permit`)
    /// before the lock is released, so nothing written later can pass it.
    /// `Busy` gives everything back when the queue is not empty.
    pub fn try_write(
        &self,
        mut data: Vec<u8>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<TryWrite, StdinClosed> {
        let open = self.lock();
        let open = open.as_ref().ok_or(StdinClosed)?;
        if self.queued.load(Ordering::Acquire) > 0 {
            return Ok(TryWrite::Busy(data, permit));
        }
        let written = match open.fd.write_now(&data) {
            Ok(n) if n == data.len() => return Ok(TryWrite::Done),
            Ok(n) => n,
            // Broken (the program closed its stdin): the writer task
            // finds the same error and ends, as for a queued write.
            Err(_) => 0,
        };
        data.drain(..written);
        // Nothing is queued, so the channel has room.
        self.queued.fetch_add(1, Ordering::AcqRel);
        if open
            .sender
            .try_send(StdinCommand::Data(data, permit))
            .is_err()
        {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(StdinClosed);
        }
        Ok(TryWrite::Done)
    }

    /// Writes `data`, at once if nothing is queued, else queued behind
    /// what is; waits while the queue is full. `permit`, if any, is held
    /// until they are written.
    pub async fn write(
        &self,
        data: Vec<u8>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), StdinClosed> {
        let (data, permit) = match self.try_write(data, permit)? {
            TryWrite::Done => return Ok(()),
            TryWrite::Busy(data, permit) => (data, permit),
        };
        self.send(StdinCommand::Data(data, permit), false).await
    }

    /// Queues a command behind what is queued. `close` closes the queue
    /// for good first (later writes get `StdinClosed`).
    async fn send(&self, command: StdinCommand, close: bool) -> Result<(), StdinClosed> {
        let sender = {
            let mut open = self.lock();
            let sender = open.as_ref().ok_or(StdinClosed)?.sender.clone();
            if close {
                *open = None;
            }
            // Counted before the lock is released: no direct write passes it.
            self.queued.fetch_add(1, Ordering::AcqRel);
            sender
        };
        sender.send(command).await.map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            StdinClosed
        })
    }

    /// Takes `bytes` of the HTTP stdin budget, at once or not at all.
    pub fn reserve_http(&self, bytes: usize) -> Result<OwnedSemaphorePermit, StdinBusy> {
        let bytes = bytes.clamp(1, HTTP_STDIN_BUDGET) as u32;
        match self.http_budget.clone().try_acquire_many_owned(bytes) {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => {
                Err(StdinBusy(HTTP_STDIN_BUDGET))
            }
        }
    }

    /// Closes stdin (pipes; later writes get a clear error instead of a
    /// silent drop) or sends the terminal's EOF character (PTY).
    pub async fn close(&self) -> Result<(), StdinClosed> {
        self.send(StdinCommand::Eof, !self.reopens_after_eof).await
    }
}

fn http_budget() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(HTTP_STDIN_BUDGET))
}

/// The writer task: carries out queued commands in order. A pipe ends at
/// EOF (dropping the last handle of the pipe is the end of file the
/// program sees); a PTY has no half-close, its EOF is the EOF character.
async fn write_queued(fd: StdinFd, mut rx: mpsc::Receiver<StdinCommand>, queued: Arc<AtomicUsize>) {
    while let Some(command) = rx.recv().await {
        let result = match command {
            StdinCommand::Data(data, _permit) => fd.write_all(&data).await,
            StdinCommand::Eof => match &fd {
                StdinFd::Pipe(_) => break,
                StdinFd::Pty(master) => master.write_all(&[master.eof_char()]).await,
            },
        };
        if result.is_err() {
            // The program closed its stdin; later writes go nowhere, as
            // with a real pipe.
            break;
        }
        queued.fetch_sub(1, Ordering::AcqRel);
    }
    // Nothing queued will be written any more: the queue is idle (a later
    // write finds stdin closed, as it does with nothing queued).
    queued.store(0, Ordering::Release);
}
