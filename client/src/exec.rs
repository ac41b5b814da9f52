//! [`Client::exec`]: run to completion and collect the output.

use std::time::Duration;

use tether_protocol::api::SpawnRequest;
use tether_protocol::{ExitReason, Overflow, ProcessInfo};

use crate::attach::{AttachOptions, Attachment, Chunk, OutputReader};
use crate::client::Client;
use crate::error::{Error, Result};

/// What [`Client::exec`] returns.
///
/// ```no_run
/// # async fn demo(client: tether_client::Client) -> Result<(), tether_client::Error> {
/// use tether_client::{SpawnRequest, SpawnSpec};
///
/// let out = client.exec(SpawnRequest::command("echo hi; exit 3")).await?;
/// assert_eq!((out.exit_code, out.stdout.as_slice()), (3, &b"hi\n"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code: the program's own, 128+N for a signal death, 124 for
    /// a timeout.
    pub exit_code: i32,
    /// Why it ended (`timeout` when the deadline fired).
    pub reason: ExitReason,
    /// Everything written to stdout (the whole output for a PTY).
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// Bytes lost to `dropped` gaps (always 0 in block mode, which `exec`
    /// uses).
    pub dropped: u64,
    /// The exited process object.
    pub process: ProcessInfo,
}

impl ExecOutput {
    /// True for exit code 0 with reason `exit`.
    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.reason == ExitReason::Exit
    }

    /// True when the server's deadline killed it.
    pub fn timed_out(&self) -> bool {
        self.reason == ExitReason::Timeout
    }
}

impl Client {
    /// Runs a process to completion: spawns it in block mode (every byte
    /// is kept until read, so nothing is lost however fast it writes),
    /// attaches, collects stdout and stderr, and returns them with the exit
    /// code and reason. A `timeout_ms` deadline shows as reason `timeout`
    /// and exit code 124. The output is collected in memory: for large
    /// outputs use [`Client::attach`] and stream it.
    pub async fn exec(&self, mut spec: SpawnRequest) -> Result<ExecOutput> {
        spec.overflow = Overflow::Block;
        // Keep the credit window below the retention: in block mode the
        // server keeps sent-but-uncredited bytes retained, so with a window
        // as large as the retention the program would stop at every round
        // trip instead of writing on while the client reads.
        let mut options = AttachOptions::default();
        if let Some(retain) = spec.retain_bytes {
            options.window = options.window.min((retain / 2).max(1));
        }
        let process = self.spawn(spec).await?;
        let attachment = self.attach(&process.id, options).await?;
        let Attachment {
            stdout,
            stderr,
            stdin,
            exit,
            ..
        } = attachment;
        drop(stdin);
        let (out, err) = tokio::join!(collect(stdout), collect(stderr));
        let (stdout, dropped_out) = out?;
        let (stderr, dropped_err) = err?;
        let info = tokio::time::timeout(Duration::from_secs(60), exit)
            .await
            .map_err(|_| Error::Protocol("output ended but no exit came".into()))??;
        let exit_code = info
            .exit_code
            .ok_or_else(|| Error::Protocol("exited process without an exit code".into()))?;
        let reason = info
            .reason
            .ok_or_else(|| Error::Protocol("exited process without a reason".into()))?;
        Ok(ExecOutput {
            exit_code,
            reason,
            stdout,
            stderr,
            dropped: dropped_out + dropped_err,
            process: info,
        })
    }
}

async fn collect(mut reader: OutputReader) -> Result<(Vec<u8>, u64)> {
    let mut bytes = Vec::new();
    let mut dropped = 0;
    while let Some(chunk) = reader.chunk().await {
        match chunk? {
            Chunk::Data { data, .. } => bytes.extend_from_slice(&data),
            Chunk::Dropped { length, .. } => dropped += length,
            // Not asked for by exec.
            Chunk::Screen { .. } => {}
        }
    }
    Ok((bytes, dropped))
}
