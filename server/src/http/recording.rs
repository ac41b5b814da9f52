//! `GET /v1/processes/{id}/recording`: what retention holds of a process
//! as an asciicast (issue 44), which `asciinema play` and asciinema-player
//! play: v3 by default (asciinema 3, player 3.10+), `?version=2` for older
//! tools. Output events carry the time the time index gives each chunk
//! (`retained/times.rs`: at most one mark's spacing early); stdout and
//! stderr are both output (`o`), merged in the order they were written, as
//! a terminal shows them; a PTY's resizes are `r` events; bytes evicted or
//! lost before they were read are a marker (`m`) that names the range; the
//! exit is an `x` event (v3). The header's title is the terminal's (the
//! last OSC 0/2 the server's screen saw when the recording began), else
//! the process's name. With `follow=1` it streams a running process
//! until its exit, as the output endpoint does. Needs the `read` right and
//! takes an attachment slot while it streams.
//!
//! `GET /v1/processes/{id}/offsets?since=TIME`: where each stream's output
//! written from a time on starts, from the same index (`tether logs
//! --since` attaches from there); `GET /v1/processes/{id}/times`: the
//! index itself, what `tether logs --timestamps` stamps lines with.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tether_protocol::{ProcessInfo, StreamName};

use super::asciicast::{event_line, header_line, Header, Term, Utf8Carry};
use super::follow::{Chunk, Follower};
use super::params::{query_bool, query_time};
use crate::attach;
use crate::error::ApiError;
use crate::grant::{Grant, Need};
use crate::process::Process;
use crate::retained::input_log::InputEvent;
use crate::retained::times::SizeChange;
use crate::table::ProcessTable;

/// The handler.
pub async fn recording(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let process = grant.process(&table, Need::Read, &id)?;
    let version = match query.get("version").map(String::as_str) {
        None | Some("3") => 3,
        Some("2") => 2,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "version must be 3 (the default) or 2, got {other:?}"
            )))
        }
    };
    let follow = query_bool(&query, "follow")?.unwrap_or(false);
    let admission = attach::admit(&table, &process, false)?;
    let max = table.config().max_data_frame_bytes;
    let streams: &[StreamName] = if process.tty {
        &[StreamName::Stdout]
    } else {
        &StreamName::ALL
    };
    let mut admission = Some(admission);
    let lanes = streams
        .iter()
        .map(|&stream| {
            // From the first byte: what was evicted is read as `dropped`.
            let starts = [0u64; 2];
            Lane {
                stream,
                follower: Follower::new(
                    process.clone(),
                    vec![stream],
                    starts,
                    max,
                    admission.take(),
                ),
                ahead: None,
                done: false,
                carry: Utf8Carry::default(),
            }
        })
        .collect();
    // The terminal's title, once its emulator has caught up with the
    // output (at most 100 ms of parsing): off the async workers.
    let title = if process.output().has_screen() {
        let output = process.output().clone();
        tokio::task::spawn_blocking(move || output.screen_title())
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let mut recorder = Recorder::new(process, lanes, version, follow);
    recorder.title = title;
    let lines = futures_util::stream::unfold(recorder, |mut recorder| async move {
        let line = recorder.next_line().await?;
        Some((Ok::<Bytes, Infallible>(line), recorder))
    });
    Ok((
        [(CONTENT_TYPE, "application/x-asciicast")],
        Body::from_stream(lines),
    )
        .into_response())
}

/// The offsets handler: `{"stdout": N, "stderr": M}`.
pub async fn offsets(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let process = grant.process(&table, Need::Read, &id)?;
    let since = query_time(&query, "since")?
        .ok_or_else(|| ApiError::InvalidRequest("since is required".into()))?;
    let [stdout, stderr] = process.output().offsets_since(since);
    Ok(axum::Json(json!({"stdout": stdout, "stderr": stderr})).into_response())
}

/// The times handler: `{"stdout": [[offset, ms], ...], "stderr": [...]}`,
/// at most [`crate::retained::times::MAX_MARKS`] a stream.
pub async fn times(
    State(table): State<Arc<ProcessTable>>,
    Extension(grant): Extension<Grant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let process = grant.process(&table, Need::Read, &id)?;
    let [stdout, stderr] = process.output().times(|t| t.marks());
    Ok(axum::Json(json!({"stdout": stdout, "stderr": stderr})).into_response())
}

/// One stream being read, with the chunk read ahead of the other's.
struct Lane {
    stream: StreamName,
    follower: Follower,
    ahead: Option<Chunk>,
    done: bool,
    /// The start of a UTF-8 sequence that the next chunk completes.
    carry: Utf8Carry,
}

struct Recorder {
    process: Arc<Process>,
    lanes: Vec<Lane>,
    version: u8,
    follow: bool,
    /// The process's start: the recording's time zero (ms since the epoch).
    start_ms: u64,
    /// The time of the last event written: events never go back in time.
    last_ms: u64,
    /// Resizes and input not written yet, oldest first: each goes
    /// before the stdout bytes written after it.
    placed: VecDeque<Placed>,
    /// How many sizes and inputs of the index were taken into `placed`.
    seen: (u64, u64),
    /// Input bytes whose loss (the input log's bound) was said.
    said_lost: u64,
    header_sent: bool,
    /// The terminal's title for the header, if it has one.
    title: Option<String>,
    exit: Option<ProcessInfo>,
    ended: bool,
}

impl Recorder {
    fn new(process: Arc<Process>, lanes: Vec<Lane>, version: u8, follow: bool) -> Recorder {
        let start_ms = process
            .started_at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut recorder = Recorder {
            process,
            lanes,
            version,
            follow,
            start_ms,
            last_ms: start_ms,
            placed: VecDeque::new(),
            seen: (0, 0),
            said_lost: 0,
            header_sent: false,
            title: None,
            exit: None,
            ended: false,
        };
        recorder.take_placed();
        recorder
    }

    /// With nothing placed waiting, takes the resizes and input that came
    /// since the last look, merged by stdout offset (a running process's
    /// come later, after all that was taken before).
    fn take_placed(&mut self) {
        if !self.placed.is_empty() {
            return;
        }
        let (seen_sizes, seen_inputs) = self.seen;
        let (sizes, inputs, lost) = self.process.output().times(|t| {
            let (sizes, next_size) = t.sizes_since(seen_sizes);
            let (inputs, next_input, lost) =
                t.input_log().map_or((Vec::new(), seen_inputs, 0), |log| {
                    let (inputs, next) = log.since(seen_inputs);
                    (inputs, next, log.dropped())
                });
            self.seen = (next_size, next_input);
            (sizes, inputs, lost)
        });
        let mut sizes = sizes.into_iter().map(Placed::Resize).peekable();
        let mut inputs = inputs.into_iter().peekable();
        if lost > self.said_lost {
            let (offset, at_ms) = inputs
                .peek()
                .map_or((0, self.last_ms), |i| (i.offset, i.at_ms));
            self.placed.push_back(Placed::InputLost {
                offset,
                at_ms,
                bytes: lost - self.said_lost,
            });
            self.said_lost = lost;
        }
        loop {
            let input_first = match (sizes.peek(), inputs.peek()) {
                (Some(Placed::Resize(size)), Some(input)) => input.offset < size.offset,
                (None, Some(_)) => true,
                _ => false,
            };
            let next = if input_first {
                inputs.next().map(Placed::Input)
            } else {
                sizes.next()
            };
            match next {
                Some(placed) => self.placed.push_back(placed),
                None => break,
            }
        }
    }

    /// The next line of the recording, `None` after the last.
    async fn next_line(&mut self) -> Option<Bytes> {
        if !self.header_sent {
            self.header_sent = true;
            let header = self.header();
            // The size at spawn is the header's, not an event.
            if matches!(self.placed.front(), Some(Placed::Resize(s)) if s.offset == 0) {
                self.placed.pop_front();
            }
            return Some(header);
        }
        if self.ended {
            return None;
        }
        loop {
            self.read_ahead().await;
            // The earliest chunk read ahead, by the time it was written.
            let earliest = self
                .lanes
                .iter()
                .enumerate()
                .filter_map(|(i, lane)| Some((i, self.time_of(lane.stream, lane.ahead.as_ref()?)?)))
                .min_by_key(|&(_, ms)| ms);
            let Some((lane, at_ms)) = earliest else {
                if self.lanes.iter().all(|lane| lane.done) || !self.follow {
                    self.ended = true;
                    return self.last_events();
                }
                continue;
            };
            // A resize or input made before these bytes were written
            // comes first.
            let offset = match &self.lanes[lane].ahead {
                Some(Chunk::Data { offset, .. } | Chunk::Dropped { offset, .. }) => *offset,
                _ => 0,
            };
            self.take_placed();
            if self.lanes[lane].stream == StreamName::Stdout
                && self.placed.front().is_some_and(|p| p.offset() <= offset)
            {
                let placed = self.placed.pop_front()?;
                return Some(self.placed_event(placed));
            }
            let chunk = self.lanes[lane].ahead.take()?;
            let chunk = self.cut_at_next_mark(lane, chunk);
            match chunk {
                Chunk::Data { bytes, .. } => {
                    let time = self.time(at_ms);
                    let carry = &mut self.lanes[lane].carry;
                    return Some(carry.text(&bytes, |text| event_line(time, "o", text)));
                }
                Chunk::Dropped {
                    stream,
                    offset,
                    length,
                } => {
                    let label = format!(
                        "tether: {length} bytes of {} lost (offsets {offset} to {}): evicted from retention before they were read",
                        stream.as_str(),
                        offset + length
                    );
                    return Some(self.event(at_ms, "m", label.as_bytes()));
                }
                Chunk::Exit(_) => continue,
            }
        }
    }

    /// Reads ahead one chunk on every lane that has none: what retention
    /// holds now, then, following, what comes (whichever stream first).
    async fn read_ahead(&mut self) {
        for lane in &mut self.lanes {
            if lane.ahead.is_none() && !lane.done {
                match lane.follower.next(false).await {
                    Some(Chunk::Exit(info)) => {
                        lane.done = true;
                        self.exit.get_or_insert(*info);
                    }
                    Some(chunk) => lane.ahead = Some(chunk),
                    // Read to the end of what is retained now.
                    None if !self.follow => lane.done = true,
                    None => {}
                }
            }
        }
        let waiting = self.lanes.iter().any(|l| l.ahead.is_some());
        if waiting || !self.follow || self.lanes.iter().all(|l| l.done) {
            return;
        }
        // Following, with nothing read ahead: wait for either stream.
        let chunk = match self.lanes.as_mut_slice() {
            [one] => (0, one.follower.next(true).await),
            [a, b] => tokio::select! {
                chunk = a.follower.next(true), if !a.done => (0, chunk),
                chunk = b.follower.next(true), if !b.done => (1, chunk),
            },
            _ => return,
        };
        let lane = &mut self.lanes[chunk.0];
        match chunk.1 {
            Some(Chunk::Exit(info)) => {
                lane.done = true;
                self.exit.get_or_insert(*info);
            }
            Some(other) => lane.ahead = Some(other),
            None => lane.done = true,
        }
    }

    /// The part of a data chunk up to the next time mark or, on stdout,
    /// the next resize (so it comes between the bytes written before and
    /// after it); the rest waits as the lane's next chunk, with its own time.
    fn cut_at_next_mark(&mut self, lane: usize, chunk: Chunk) -> Chunk {
        let Chunk::Data {
            stream,
            offset,
            bytes,
        } = chunk
        else {
            return chunk;
        };
        let end = offset + bytes.len() as u64;
        let next_mark = self
            .process
            .output()
            .times(|t| t.next_after(stream.index(), offset));
        let next_resize = self
            .placed
            .front()
            .filter(|_| stream == StreamName::Stdout)
            .map(Placed::offset)
            .filter(|&at| at > offset);
        let cut_at = match (next_mark, next_resize) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match cut_at {
            Some(mark) if mark < end => {
                let cut = (mark - offset) as usize;
                self.lanes[lane].ahead = Some(Chunk::Data {
                    stream,
                    offset: mark,
                    bytes: bytes.slice(cut..),
                });
                Chunk::Data {
                    stream,
                    offset,
                    bytes: bytes.slice(..cut),
                }
            }
            _ => Chunk::Data {
                stream,
                offset,
                bytes,
            },
        }
    }

    fn time_of(&self, stream: StreamName, chunk: &Chunk) -> Option<u64> {
        let offset = match chunk {
            Chunk::Data { offset, .. } | Chunk::Dropped { offset, .. } => *offset,
            Chunk::Exit(_) => return None,
        };
        Some(
            self.process
                .output()
                .times(|t| t.time_of(stream.index(), offset))
                .unwrap_or(self.last_ms),
        )
    }

    fn header(&self) -> Bytes {
        let info = self.process.info();
        let (cols, rows) = match self.placed.front() {
            Some(Placed::Resize(s)) if s.offset == 0 => (s.cols, s.rows),
            _ => (80, 24),
        };
        let header = Header {
            version: self.version,
            term: (self.version == 3).then_some(Term { cols, rows }),
            width: (self.version == 2).then_some(cols),
            height: (self.version == 2).then_some(rows),
            timestamp: self.start_ms / 1000,
            command: info.argv.join(" "),
            title: self.title.clone().or(info.name),
        };
        header_line(&header)
    }

    /// An event at `at_ms`, its data UTF-8 text (invalid sequences are
    /// replaced).
    fn event(&mut self, at_ms: u64, code: &str, data: &[u8]) -> Bytes {
        event_line(self.time(at_ms), code, data)
    }

    /// The time of an event at `at_ms`, in ms, which it makes the last:
    /// v3 counts from the previous event, v2 from the start.
    fn time(&mut self, at_ms: u64) -> u64 {
        let at_ms = at_ms.max(self.last_ms);
        let time = if self.version == 3 {
            at_ms - self.last_ms
        } else {
            at_ms - self.start_ms
        };
        self.last_ms = at_ms;
        time
    }

    fn placed_event(&mut self, placed: Placed) -> Bytes {
        match placed {
            Placed::Resize(size) => {
                let text = format!("{}x{}", size.cols, size.rows);
                self.event(size.at_ms, "r", text.as_bytes())
            }
            // As typed: the bytes a UTF-8 sequence split across two
            // writes would lose are replaced, never guessed.
            Placed::Input(input) => self.event(input.at_ms, "i", &input.bytes),
            Placed::InputLost { at_ms, bytes, .. } => {
                let text = format!(
                    "tether: {bytes} bytes of earlier input not kept (the input log keeps the newest {} KiB)",
                    crate::retained::input_log::MAX_INPUT_BYTES >> 10
                );
                self.event(at_ms, "m", text.as_bytes())
            }
        }
    }

    /// The sizes and input after the last byte, and the exit (v3) if it
    /// came.
    fn last_events(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        loop {
            self.take_placed();
            let Some(placed) = self.placed.pop_front() else {
                break;
            };
            out.extend_from_slice(&self.placed_event(placed));
        }
        if let (Some(exit), 3) = (self.exit.take(), self.version) {
            let at_ms = exit
                .finished_at
                .as_deref()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(self.last_ms, |d| d.as_millis() as u64);
            let code = exit.exit_code.unwrap_or(-1).to_string();
            out.extend_from_slice(&self.event(at_ms, "x", code.as_bytes()));
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

/// What a recording puts between the stdout bytes written before and after
/// it.
enum Placed {
    Resize(SizeChange),
    Input(InputEvent),
    /// Input the log's bound let go, said once before the input kept.
    InputLost {
        offset: u64,
        at_ms: u64,
        bytes: u64,
    },
}

impl Placed {
    /// The stdout offset it goes before.
    fn offset(&self) -> u64 {
        match self {
            Placed::Resize(size) => size.offset,
            Placed::Input(input) => input.offset,
            Placed::InputLost { offset, .. } => *offset,
        }
    }
}
