//! `tether logs`: a process's retained output, stdout to stdout and
//! stderr to stderr, up to now or (`--follow`) to its exit; `--tail` and
//! `--since` choose where it starts; `--timestamps` stamps each line with
//! the time it was written (`stamped`).

use tether_client::{AttachOptions, Attachment, Chunk, Client, Error, OutputReader};
use tokio::io::AsyncWriteExt;

use crate::exit::CLOSED_OUTPUT;
use crate::relay::{copy_output, Copied};
use crate::tail::TailLines;

/// Where `logs` starts and, with `--until`, stops, per stream.
pub struct Range {
    pub from: [u64; 2],
    pub to: Option<[u64; 2]>,
}

impl Range {
    /// The end of stream `i`: `end`, or sooner with `--until`.
    fn end(&self, i: usize, end: u64) -> u64 {
        self.to.map_or(end, |to| end.min(to[i]))
    }
}

/// `tether logs`: the retained output, up to now or (`--follow`) to exit;
/// with `tail`, only the last lines of each stream up to now, then (with
/// `--follow`) what comes next.
pub async fn logs(
    client: &Client,
    quick: &Client,
    id: &str,
    follow: bool,
    tail: Option<usize>,
    range: Range,
) -> Result<i32, Error> {
    let options = AttachOptions {
        readonly: true,
        stdout_offset: range.from[0],
        stderr_offset: range.from[1],
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
    let (until_out, until_err) = (range.end(0, until_out), range.end(1, until_err));
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

/// `tether logs --timestamps`: each line printed after the time it was
/// written, from the server's time index (`Client::time_marks`: the time
/// of the last mark at or before the line's first byte, at most one
/// mark's spacing early). Output past the last mark read, while following,
/// is stamped with the time it arrives.
pub async fn stamped(
    client: &Client,
    quick: &Client,
    id: &str,
    follow: bool,
    range: Range,
) -> Result<i32, Error> {
    let options = AttachOptions {
        readonly: true,
        stdout_offset: range.from[0],
        stderr_offset: range.from[1],
        ..AttachOptions::default()
    };
    let Attachment { stdout, stderr, .. } = client.attach(id, options).await?;
    let info = quick.get(id).await?;
    let marks = quick.time_marks(id).await?;
    let [out_marks, err_marks] = marks;
    let until = |i: usize, end: u64| {
        range.end(
            i,
            if follow || info.is_exited() {
                u64::MAX
            } else {
                end
            },
        )
    };
    let out = stamp_stream(
        stdout,
        Stamps::new(out_marks, info.stdout_bytes),
        until(0, info.stdout_bytes),
        tokio::io::stdout(),
    );
    let err = stamp_stream(
        stderr,
        Stamps::new(err_marks, info.stderr_bytes),
        until(1, info.stderr_bytes),
        tokio::io::stderr(),
    );
    let (out, err) = tokio::join!(out, err);
    match (out?, err?) {
        (Copied::OutputClosed, _) | (_, Copied::OutputClosed) => Ok(CLOSED_OUTPUT),
        _ => Ok(0),
    }
}

/// One stream to `local`, each line after its time, up to `until`.
async fn stamp_stream(
    mut reader: OutputReader,
    stamps: Stamps,
    until: u64,
    mut local: impl tokio::io::AsyncWrite + Unpin,
) -> Result<Copied, Error> {
    let mut line_start = true;
    while let Some(chunk) = reader.chunk().await {
        let (offset, data) = match chunk? {
            Chunk::Data { offset, data } => (offset, data),
            Chunk::Dropped { offset, length } => {
                let note = format!("[tether: {length} bytes lost at offset {offset}]\n");
                if local.write_all(note.as_bytes()).await.is_err() {
                    return Ok(Copied::OutputClosed);
                }
                line_start = true;
                continue;
            }
            _ => continue,
        };
        if offset >= until {
            break;
        }
        let data = &data[..data.len().min((until - offset) as usize)];
        let mut text = Vec::with_capacity(data.len() + 32);
        for (i, byte) in data.iter().enumerate() {
            if line_start {
                text.extend_from_slice(stamps.at(offset + i as u64).as_bytes());
                text.push(b' ');
            }
            text.push(*byte);
            line_start = *byte == b'\n';
        }
        if local.write_all(&text).await.is_err() || local.flush().await.is_err() {
            return Ok(Copied::OutputClosed);
        }
        if offset + data.len() as u64 >= until {
            break;
        }
    }
    Ok(Copied::Whole)
}

/// A stream's time marks as read, and how far the stream had come then.
struct Stamps {
    marks: Vec<(u64, u64)>,
    known_end: u64,
}

impl Stamps {
    fn new(marks: Vec<(u64, u64)>, known_end: u64) -> Stamps {
        Stamps { marks, known_end }
    }

    /// The time of the byte at `offset`: that of the last mark at or
    /// before it; for a byte written after the marks were read, now.
    fn at(&self, offset: u64) -> String {
        let after = self.marks.partition_point(|&(o, _)| o <= offset);
        let marked = after.checked_sub(1).and_then(|i| self.marks.get(i));
        let time = match marked {
            Some(&(_, ms)) if offset < self.known_end => {
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
            }
            _ => std::time::SystemTime::now(),
        };
        humantime::format_rfc3339_millis(time).to_string()
    }
}
