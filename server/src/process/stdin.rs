//! Stdin: a bounded queue per process from clients to one writer task,
//! which writes to the stdin pipe or the PTY master in the order received.

use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe::Sender as PipeWriter;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::pty::PtyMaster;

/// Stdin messages queued per process before writers wait.
const STDIN_QUEUE: usize = 16;
/// Bytes of stdin that HTTP requests may have queued for one process at
/// once (at least `--max-body-bytes`): past it a POST is answered 429
/// `stdin_busy` before its body is read, instead of parking with it.
pub const HTTP_STDIN_BUDGET: usize = 4 << 20;

/// What the stdin writer task is asked to do.
#[derive(Debug)]
enum StdinCommand {
    /// Write these bytes; the permit (HTTP stdin budget) is given back once
    /// they are written.
    Data(Vec<u8>, Option<OwnedSemaphorePermit>),
    /// Close stdin (pipes) or send the EOF character (PTY).
    Eof,
}

/// The process has no open stdin (none was asked for, it was closed, or
/// the program stopped reading it for good).
#[derive(Debug)]
pub struct StdinClosed;

/// The clients' end of a process's stdin.
#[derive(Debug)]
pub struct StdinQueue {
    sender: Mutex<Option<mpsc::Sender<StdinCommand>>>,
    /// A PTY has no half-close: after EOF it still takes input.
    reopens_after_eof: bool,
    /// Bytes HTTP requests may have queued ([`HTTP_STDIN_BUDGET`]).
    http_budget: Arc<Semaphore>,
}

/// The HTTP stdin budget of a process is spent.
#[derive(Debug)]
pub struct StdinBusy(pub usize);

impl StdinQueue {
    /// No stdin at all (`/dev/null`).
    pub fn none() -> StdinQueue {
        StdinQueue {
            sender: Mutex::new(None),
            reopens_after_eof: false,
            http_budget: http_budget(),
        }
    }

    /// A queue to a writer task of the pipe.
    pub fn pipe(stdin: PipeWriter) -> StdinQueue {
        let (tx, rx) = mpsc::channel(STDIN_QUEUE);
        tokio::spawn(write_pipe(stdin, rx));
        StdinQueue {
            sender: Mutex::new(Some(tx)),
            reopens_after_eof: false,
            http_budget: http_budget(),
        }
    }

    /// A queue to a writer task of the PTY master.
    pub fn pty(master: Arc<PtyMaster>) -> StdinQueue {
        let (tx, rx) = mpsc::channel(STDIN_QUEUE);
        tokio::spawn(write_pty(master, rx));
        StdinQueue {
            sender: Mutex::new(Some(tx)),
            reopens_after_eof: true,
            http_budget: http_budget(),
        }
    }

    fn sender(&self) -> Result<mpsc::Sender<StdinCommand>, StdinClosed> {
        self.sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(StdinClosed)
    }

    /// Queues bytes; waits while the queue is full. `permit`, if any, is
    /// held until they are written.
    pub async fn write(
        &self,
        data: Vec<u8>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), StdinClosed> {
        self.sender()?
            .send(StdinCommand::Data(data, permit))
            .await
            .map_err(|_| StdinClosed)
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
        let sender = self.sender()?;
        if !self.reopens_after_eof {
            *self.sender.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        sender
            .send(StdinCommand::Eof)
            .await
            .map_err(|_| StdinClosed)
    }
}

fn http_budget() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(HTTP_STDIN_BUDGET))
}

async fn write_pipe(mut stdin: PipeWriter, mut rx: mpsc::Receiver<StdinCommand>) {
    while let Some(command) = rx.recv().await {
        match command {
            StdinCommand::Data(data, _permit) => {
                if stdin.write_all(&data).await.is_err() {
                    // The program closed its stdin; later writes go nowhere,
                    // as with a real pipe.
                    break;
                }
            }
            StdinCommand::Eof => break,
        }
    }
    // Dropping the pipe is the end-of-file the program sees.
}

async fn write_pty(master: Arc<PtyMaster>, mut rx: mpsc::Receiver<StdinCommand>) {
    while let Some(command) = rx.recv().await {
        let result = match command {
            StdinCommand::Data(data, _permit) => master.write_all(&data).await,
            // A PTY has no half-close: EOF is the terminal's EOF character.
            StdinCommand::Eof => master.write_all(&[master.eof_char()]).await,
        };
        if result.is_err() {
            break;
        }
    }
}
