//! `tether logs`: a process's retained output, stdout to stdout and
//! stderr to stderr, up to now or (`--follow`) to its exit; `--tail` and
//! `--since` choose where it starts.

use tether_client::{AttachOptions, Attachment, Client, Error};
use tokio::io::AsyncWriteExt;

use crate::exit::CLOSED_OUTPUT;
use crate::relay::{copy_output, Copied};
use crate::tail::TailLines;

/// `tether logs`: the retained output, up to now or (`--follow`) to exit;
/// with `tail`, only the last lines of each stream up to now, then (with
/// `--follow`) what comes next.
pub async fn logs(
    client: &Client,
    quick: &Client,
    id: &str,
    follow: bool,
    tail: Option<usize>,
    from: [u64; 2],
) -> Result<i32, Error> {
    let options = AttachOptions {
        readonly: true,
        stdout_offset: from[0],
        stderr_offset: from[1],
        ..AttachOptions::default()
    };
    let attachment = client.attach(id, options.clone()).await?;
    // "Now" is after the attach: a program that writes fast in drop mode
    // may have moved its retention past an end read before it, which
    // would leave nothing to print.
    let info = quick.get(id).await?;
    let Attachment { stdout, stderr, .. } = attachment;
    let (until_out, until_err) = if (follow && tail.is_none()) || info.is_exited() {
        (u64::MAX, u64::MAX)
    } else {
        (info.stdout_bytes, info.stderr_bytes)
    };
    let Some(n) = tail else {
        return print_both(stdout, stderr, until_out, until_err).await;
    };
    let (mut tail_out, mut tail_err) = (TailLines::new(n), TailLines::new(n));
    let (a, b) = tokio::join!(
        copy_output(stdout, &mut tail_out, until_out, None),
        copy_output(stderr, &mut tail_err, until_err, None)
    );
    a?;
    b?;
    // A closed stdout (`| head`) is no failure. tokio's stdio hands
    // each write to a blocking thread: the flush, on the same handle,
    // waits until it is written (the CLI exits right after).
    let mut out = tokio::io::stdout();
    let _ = out.write_all(&tail_out.into_bytes()).await;
    let _ = out.flush().await;
    let mut err = tokio::io::stderr();
    let _ = err.write_all(&tail_err.into_bytes()).await;
    let _ = err.flush().await;
    if follow && !info.is_exited() {
        // The rest, from where the tail ended.
        let options = AttachOptions {
            stdout_offset: until_out,
            stderr_offset: until_err,
            ..options
        };
        let Attachment { stdout, stderr, .. } = client.attach(id, options).await?;
        return print_both(stdout, stderr, u64::MAX, u64::MAX).await;
    }
    Ok(0)
}

/// Prints both streams to the local stdout and stderr up to their ends
/// (or offsets): 0, or [`CLOSED_OUTPUT`] as soon as either local output is
/// closed (`logs -f ID | head -1` stops at once; the process runs on).
async fn print_both(
    stdout: tether_client::OutputReader,
    stderr: tether_client::OutputReader,
    until_out: u64,
    until_err: u64,
) -> Result<i32, Error> {
    let out = copy_output(stdout, tokio::io::stdout(), until_out, None);
    let err = copy_output(stderr, tokio::io::stderr(), until_err, None);
    tokio::pin!(out, err);
    let (mut out_done, mut err_done) = (false, false);
    while !(out_done && err_done) {
        let copied = tokio::select! {
            copied = &mut out, if !out_done => { out_done = true; copied? }
            copied = &mut err, if !err_done => { err_done = true; copied? }
        };
        if copied == Copied::OutputClosed {
            return Ok(CLOSED_OUTPUT);
        }
    }
    Ok(0)
}
