//! Numbered input (`input=ID` on attach): each input stream of a process
//! keeps how far it has been applied, so that a client that resends what
//! it is unsure of after a reconnect has it applied once.
//!
//! A stream outlives its connections: the next attachment that names it
//! (`input=ID&input_resume=1`) carries on from where the last one stopped.
//! It is forgotten `--input-ttl-ms` after its last attachment went away.
//!
//! A stream belongs to whoever opened it (the operator, or one scoped
//! token): streams are named by owner and id, so another token naming the
//! same id reaches a stream of its own, never this one (it can neither
//! resume it nor move its position). A process keeps at most
//! `--max-input-streams` per owner, and [`OWNERS_PER_PROCESS`] times that
//! in all, so one token cannot use up the streams of another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::ApiError;
use crate::sync::LockExt;

/// Longest input id (ids are 1..=64 of `A-Z a-z 0-9 . _ -`).
pub const MAX_INPUT_ID: usize = 64;

/// How many owners' worth of streams (`--max-input-streams` each) one
/// process keeps at most.
pub const OWNERS_PER_PROCESS: usize = 4;

/// A stream's name: its owner (`operator`, `token:ID`) and its id.
type StreamKey = (String, String);

/// Bytes of stdin all the attachments of one process may have queued
/// together (each at most its own `STDIN_BUDGET` of it): with many
/// attachments, what a process can be made to hold stays this, whatever
/// their number.
pub const PROCESS_QUEUED_STDIN: usize = 8 << 20;

/// The input streams of one process, and the keys of its HTTP input.
pub struct InputStreams {
    streams: Mutex<HashMap<StreamKey, Arc<InputStream>>>,
    /// Bytes of stdin its attachments may still queue
    /// ([`PROCESS_QUEUED_STDIN`] in all).
    pub queued_stdin: Arc<tokio::sync::Semaphore>,
    /// `Idempotency-Key`s of `POST .../stdin`, `stdin/close`, `signal`,
    /// `resize`.
    pub http: super::input_once::OnceKeys,
}

impl Default for InputStreams {
    fn default() -> InputStreams {
        InputStreams {
            streams: Mutex::default(),
            queued_stdin: Arc::new(tokio::sync::Semaphore::new(PROCESS_QUEUED_STDIN)),
            http: Default::default(),
        }
    }
}

/// One input stream: the position up to which it has been applied.
pub struct InputStream {
    /// The next position to apply. Held while one action is carried out,
    /// so that two connections naming the same stream (a resume while the
    /// broken connection is still being read) never apply a unit twice.
    next: tokio::sync::Mutex<u64>,
    /// The same position, for the writers that acknowledge it.
    applied: watch::Sender<u64>,
    /// How many attachments hold it, and when the last one let go.
    holders: Mutex<(usize, Instant)>,
}

/// An attachment's hold on its input stream; letting go starts the TTL.
pub struct InputClaim {
    stream: Arc<InputStream>,
}

/// What to do with a numbered action, given where the stream stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Every unit of it was applied before: drop it.
    Duplicate,
    /// It starts past the next position: something before it is missing.
    Gap {
        /// Where the stream stands.
        expected: u64,
    },
    /// Apply it from its `skip`th unit (its head was applied before: a
    /// resent stdin frame that was partly new).
    Apply {
        /// Units of its head already applied.
        skip: u64,
    },
}

impl Plan {
    /// The plan for an action at `seq` of `units` when the stream is at
    /// `next`. An action of no units (empty stdin) at `next` applies nothing.
    pub fn of(seq: u64, units: u64, next: u64) -> Plan {
        if seq > next {
            return Plan::Gap { expected: next };
        }
        if seq.saturating_add(units) <= next && !(units == 0 && seq == next) {
            return Plan::Duplicate;
        }
        Plan::Apply { skip: next - seq }
    }
}

/// Checks an input id from the query string.
pub fn check_id(id: &str) -> Result<(), ApiError> {
    let ok = (1..=MAX_INPUT_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::InvalidRequest(format!(
            "input={id:?}: expected 1 to {MAX_INPUT_ID} of A-Z a-z 0-9 . _ -"
        )))
    }
}

impl InputStreams {
    fn lock(&self) -> MutexGuard<'_, HashMap<StreamKey, Arc<InputStream>>> {
        self.streams.lock_or_recover()
    }

    /// Takes hold of `owner`'s stream `id` for an attachment. A stream
    /// this process does not know is started at 0, unless `resume` says
    /// the client has sent input under this id before: then it has expired
    /// (or never reached this server, or is another owner's), and carrying
    /// on from 0 could apply twice what was applied before, so it is
    /// refused with `input_expired`.
    pub fn claim(
        &self,
        owner: &str,
        id: &str,
        resume: bool,
        ttl: Duration,
        max: usize,
    ) -> Result<InputClaim, ApiError> {
        let mut streams = self.lock();
        let now = Instant::now();
        streams.retain(|_, stream| !stream.expired(now, ttl));
        let key = (owner.to_string(), id.to_string());
        if let Some(stream) = streams.get(&key) {
            stream.hold();
            return Ok(InputClaim {
                stream: stream.clone(),
            });
        }
        if resume {
            return Err(ApiError::InputExpired(id.to_string(), ttl.as_millis()));
        }
        let owned = streams.keys().filter(|(o, _)| o == owner).count();
        if owned >= max || streams.len() >= max.saturating_mul(OWNERS_PER_PROCESS) {
            return Err(ApiError::TooManyInputStreams(max));
        }
        let stream = Arc::new(InputStream {
            next: tokio::sync::Mutex::new(0),
            applied: watch::Sender::new(0),
            holders: Mutex::new((1, now)),
        });
        streams.insert(key, stream.clone());
        Ok(InputClaim { stream })
    }
}

/// An input stream as a handover carries it (issue 43): its owner, id,
/// position and how long it has been without an attachment.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedInput {
    pub owner: String,
    pub id: String,
    pub next: u64,
    pub idle_ms: u64,
}

/// How long a handover waits for an action under way on a stream.
const CARRY_WAIT: Duration = Duration::from_secs(1);

impl InputStreams {
    /// Every stream as carried. Each stream's order is taken and never
    /// given back, so nothing more is applied in this binary after its
    /// position was read: a resume in the new binary applies each unit
    /// once. A stream busy past `CARRY_WAIT` is not carried (its resume
    /// is `input_expired`, never applied twice).
    pub async fn carried(&self) -> Vec<CarriedInput> {
        let streams: Vec<_> = self
            .lock()
            .iter()
            .map(|(key, stream)| (key.clone(), stream.clone()))
            .collect();
        let mut carried = Vec::with_capacity(streams.len());
        for ((owner, id), stream) in streams {
            let Ok(order) = tokio::time::timeout(CARRY_WAIT, stream.next.lock()).await else {
                tracing::warn!(id, "an input stream was busy at the handover: not carried");
                continue;
            };
            let next = *order;
            std::mem::forget(order);
            let (count, since) = *stream.holders();
            let idle_ms = if count > 0 {
                0
            } else {
                since.elapsed().as_millis() as u64
            };
            carried.push(CarriedInput {
                owner,
                id,
                next,
                idle_ms,
            });
        }
        carried
    }

    /// The streams a handover carried, with the records of HTTP input.
    pub fn adopted(carried: Vec<CarriedInput>, http: super::input_once::OnceKeys) -> InputStreams {
        let streams = InputStreams {
            http,
            ..InputStreams::default()
        };
        let now = Instant::now();
        {
            let mut map = streams.lock();
            for input in carried {
                let since = now
                    .checked_sub(Duration::from_millis(input.idle_ms))
                    .unwrap_or(now);
                map.insert(
                    (input.owner, input.id),
                    Arc::new(InputStream {
                        next: tokio::sync::Mutex::new(input.next),
                        applied: watch::Sender::new(input.next),
                        holders: Mutex::new((0, since)),
                    }),
                );
            }
        }
        streams
    }
}

impl InputStream {
    fn holders(&self) -> MutexGuard<'_, (usize, Instant)> {
        self.holders.lock_or_recover()
    }

    fn hold(&self) {
        self.holders().0 += 1;
    }

    fn expired(&self, now: Instant, ttl: Duration) -> bool {
        let (count, since) = *self.holders();
        count == 0 && now.duration_since(since) >= ttl
    }
}

impl InputClaim {
    /// The stream's order: lock it to plan and carry out one action.
    pub fn order(&self) -> &tokio::sync::Mutex<u64> {
        &self.stream.next
    }

    /// Publishes a new applied position to every writer that acknowledges
    /// this stream.
    pub fn applied(&self, next: u64) {
        self.stream.applied.send_replace(next);
    }

    /// A receiver of the applied position, for the writer's `input_ack`.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.stream.applied.subscribe()
    }
}

impl Drop for InputClaim {
    fn drop(&mut self) {
        let mut holders = self.stream.holders();
        holders.0 = holders.0.saturating_sub(1);
        if holders.0 == 0 {
            holders.1 = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_drop_duplicates_refuse_gaps_and_trim_overlaps() {
        assert_eq!(Plan::of(0, 5, 0), Plan::Apply { skip: 0 });
        assert_eq!(Plan::of(0, 5, 5), Plan::Duplicate);
        assert_eq!(Plan::of(2, 5, 5), Plan::Apply { skip: 3 });
        assert_eq!(Plan::of(6, 1, 5), Plan::Gap { expected: 5 });
        assert_eq!(Plan::of(5, 0, 5), Plan::Apply { skip: 0 });
        assert_eq!(Plan::of(4, 0, 5), Plan::Duplicate);
    }

    #[test]
    fn a_resume_of_an_unknown_stream_is_refused_and_a_released_one_expires() {
        let streams = InputStreams::default();
        let ttl = Duration::from_millis(0);
        assert!(matches!(
            streams.claim("op", "a", true, ttl, 4),
            Err(ApiError::InputExpired(..))
        ));
        let claim = streams
            .claim("op", "a", false, ttl, 4)
            .unwrap_or_else(|_| panic!());
        // Held: never expires.
        assert!(streams.claim("op", "a", true, ttl, 4).is_ok());
        drop(claim);
        assert!(matches!(
            streams.claim("op", "a", true, ttl, 4),
            Err(ApiError::InputExpired(..))
        ));
        let _held: Vec<_> = (0..4)
            .map(|i| streams.claim("op", &format!("s{i}"), false, ttl, 4))
            .collect();
        assert!(matches!(
            streams.claim("op", "s9", false, ttl, 4),
            Err(ApiError::TooManyInputStreams(4))
        ));
        // Another owner has streams of its own: the same id is another
        // stream, and its limit is its own.
        assert!(matches!(
            streams.claim("token:x", "a", true, ttl, 4),
            Err(ApiError::InputExpired(..))
        ));
        assert!(streams.claim("token:x", "s0", false, ttl, 4).is_ok());
        assert!(check_id("tab-1.x_Y").is_ok());
        assert!(check_id("").is_err() && check_id("a b").is_err());
    }
}
