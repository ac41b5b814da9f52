//! Idempotency records of HTTP input: `POST .../stdin`, `.../stdin/close`,
//! `.../signal` and `.../resize` with an `Idempotency-Key` are carried out
//! once; a retry with the same key (after a lost answer) gets the success
//! without doing it again, and a retry while the first attempt is still
//! being carried out waits for it. The same key on another route or with
//! another body is a 422 `idempotency_conflict`.
//!
//! A record is state a client makes the server hold, so it is bounded and
//! owned:
//!
//! - **Owned by its sender**: records are kept per holder of a token (the
//!   grant's identity: `operator` or `token:ID`), so the same key sent by
//!   another token is another key: it neither sees nor swallows the first
//!   one's request.
//! - **Kept only for what was carried out**: the first attempt holds a
//!   provisional record (so that a retry waits for it), removed when the
//!   attempt fails or is abandoned; the record stays only once the request
//!   succeeded, for `--input-ttl-ms` from then.
//! - **Bounded**: a key is 1 to [`MAX_KEY_BYTES`] bytes (longer is refused
//!   before anything is kept), stored once; a process keeps at most
//!   [`MAX_KEYS`] records per holder (its oldest carried-out one goes
//!   first) and [`MAX_RECORDS`] in all (past it, a holder's new key
//!   replaces its own oldest, never another's); and each record is charged
//!   its key plus [`RECORD_OVERHEAD`] bytes against the server-wide
//!   [`Quota`] (`--idempotency-total`). When there is no room, a new keyed
//!   request is refused with 503 `idempotency_exhausted` rather than grow.
//! - **Fingerprinted with a secret key**: the route and body are kept as
//!   an HMAC-SHA256 under a key drawn from the OS at start and never
//!   written out, so no one can compute two requests that pass for each
//!   other.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::OwnedMutexGuard;

use crate::budget::{Charge, Quota};

pub mod carry;
use crate::error::ApiError;
use crate::sync::LockExt;

/// Longest `Idempotency-Key` accepted, in bytes (spawns' too).
pub const MAX_KEY_BYTES: usize = 256;

/// Records kept per process for each holder of a token.
pub const MAX_KEYS: usize = 1024;

/// Records kept per process in all (four holders' worth): at most
/// `MAX_RECORDS * (MAX_KEY_BYTES + RECORD_OVERHEAD)` bytes, 2.5 MiB.
pub const MAX_RECORDS: usize = 4 * MAX_KEYS;

/// What a record costs besides its key, as charged to the quota: its map
/// slot and order slot (with their tables' spare room), the fingerprint,
/// the shared key's and the attempt lock's allocations. An estimate on the
/// high side of what is allocated (about 250 to 350 bytes).
pub const RECORD_OVERHEAD: u64 = 384;

/// What one record with this key is charged.
pub fn record_bytes(key: &str) -> u64 {
    key.len() as u64 + RECORD_OVERHEAD
}

/// An `Idempotency-Key` as its holder's: the same key from two holders is
/// two keys. Spawns (`POST /v1/processes`, `GET /v1/run`) use it too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IdempotencyKey {
    /// Who sent it: the grant's identity, `operator` or `token:ID`.
    pub owner: String,
    /// The header's value: 1 to [`MAX_KEY_BYTES`] bytes.
    pub key: String,
}

impl IdempotencyKey {
    /// The bytes it holds (owner and key).
    pub fn bytes(&self) -> usize {
        self.owner.len() + self.key.len()
    }
}

/// What a request was, for telling a retry from another request under the
/// same key: HMAC-SHA256 over its route and body, keyed with 32 random
/// bytes drawn when the server first needs them and kept in memory only.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a request to `route` with `body`.
    pub fn of(route: &str, body: &[u8]) -> Fingerprint {
        let key = fingerprint_key();
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"tether.idempotency.v1\n");
        mac.update(&(route.len() as u64).to_le_bytes());
        mac.update(route.as_bytes());
        mac.update(body);
        Fingerprint(mac.finalize().into_bytes().into())
    }
}

/// The key of request fingerprints, drawn when first needed.
static FINGERPRINT_KEY: OnceLock<[u8; 32]> = OnceLock::new();

/// The fingerprint key (a handover carries it, issue 43).
pub fn fingerprint_key() -> [u8; 32] {
    *FINGERPRINT_KEY.get_or_init(crate::token::random_bytes)
}

/// Sets the key a handover carried; before any request is fingerprinted.
pub fn set_fingerprint_key(key: [u8; 32]) {
    let _ = FINGERPRINT_KEY.set(key);
}

/// The idempotency records of one process's HTTP input requests.
#[derive(Default)]
pub struct OnceKeys {
    keys: Arc<Mutex<Keys>>,
}

#[derive(Default)]
struct Keys {
    /// Holder (`operator`, `token:ID`) -> its records; a holder without
    /// records is removed.
    holders: HashMap<Arc<str>, Holder>,
}

#[derive(Default)]
struct Holder {
    /// Key -> record, provisional or carried out.
    by_key: HashMap<Arc<str>, Entry>,
    /// The keys of the carried-out records, oldest first, with when they
    /// were carried out (the same allocation as the map's key).
    done: VecDeque<(Instant, Arc<str>)>,
}

struct Entry {
    /// The route and body the key was first used with.
    fingerprint: Fingerprint,
    /// Held by the first attempt while it is carried out.
    state: Arc<tokio::sync::Mutex<State>>,
    /// Its share of `--idempotency-total`, given back with the record.
    _charge: Charge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Being carried out.
    Pending,
    /// Carried out: a retry does nothing.
    Done,
    /// Failed or abandoned: the record is gone, a retry tries again.
    Failed,
}

/// What to do with a request that carries a key.
pub enum Once {
    /// It was carried out before: answer success, do nothing.
    Done,
    /// Carry it out, then [`FirstAttempt::succeeded`].
    First(FirstAttempt),
}

/// The right to carry out a keyed request; retries wait while it is held.
/// Dropped without [`FirstAttempt::succeeded`] (the request failed, or its
/// connection went away), it removes its provisional record.
pub struct FirstAttempt {
    guard: Option<OwnedMutexGuard<State>>,
    keys: Arc<Mutex<Keys>>,
    owner: Arc<str>,
    key: Arc<str>,
}

impl FirstAttempt {
    /// Records the success: retries with the key do nothing, for
    /// `--input-ttl-ms` from now.
    pub fn succeeded(mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        *guard = State::Done;
        let mut keys = self.keys.lock_or_recover();
        if let Some(holder) = keys.holders.get_mut(&*self.owner) {
            if holder.is_ours(&self.key, &guard) {
                holder.done.push_back((Instant::now(), self.key.clone()));
            }
        }
    }
}

impl Drop for FirstAttempt {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        // Waiters see it failed and try again themselves.
        *guard = State::Failed;
        let mut keys = self.keys.lock_or_recover();
        if let Some(holder) = keys.holders.get_mut(&*self.owner) {
            if holder.is_ours(&self.key, &guard) {
                holder.by_key.remove(&*self.key);
            }
            if holder.by_key.is_empty() {
                keys.holders.remove(&*self.owner);
            }
        }
    }
}

impl OnceKeys {
    fn lock(&self) -> MutexGuard<'_, Keys> {
        self.keys.lock_or_recover()
    }

    /// Looks `key` up for the request `fingerprint`, waiting while an
    /// earlier attempt with it is being carried out. A new key takes a
    /// provisional record, charged to `quota`.
    pub async fn begin(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        ttl: Duration,
        quota: &Arc<Quota>,
    ) -> Result<Once, ApiError> {
        loop {
            let state = {
                let mut keys = self.lock();
                keys.expire(Instant::now(), ttl);
                match keys.find(key) {
                    Some(entry) if entry.fingerprint != fingerprint => {
                        return Err(ApiError::IdempotencyConflict(key.key.clone()))
                    }
                    Some(entry) => entry.state.clone(),
                    None => {
                        let first = keys.start(key, fingerprint, quota, &self.keys)?;
                        return Ok(Once::First(first));
                    }
                }
            };
            let outcome = *state.lock().await;
            if outcome == State::Done {
                return Ok(Once::Done);
            }
            // The attempt it waited for failed and took its record away:
            // this one tries again (perhaps as the first).
        }
    }

    /// Forgets the records older than `ttl`, giving their bytes back.
    pub fn expire(&self, ttl: Duration) {
        self.lock().expire(Instant::now(), ttl);
    }

    /// Forgets every record (the process is forgotten).
    pub fn clear(&self) {
        self.lock().holders.clear();
    }
}

impl Keys {
    fn find(&self, key: &IdempotencyKey) -> Option<&Entry> {
        self.holders
            .get(key.owner.as_str())
            .and_then(|holder| holder.by_key.get(key.key.as_str()))
    }

    fn expire(&mut self, now: Instant, ttl: Duration) {
        self.holders.retain(|_, holder| {
            while let Some((at, _)) = holder.done.front() {
                if now.duration_since(*at) < ttl {
                    break;
                }
                holder.evict_oldest();
            }
            !holder.by_key.is_empty()
        });
    }

    /// A provisional record for a key its holder does not have (`shared`
    /// is where these keys live, for the attempt to come back to).
    fn start(
        &mut self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        quota: &Arc<Quota>,
        shared: &Arc<Mutex<Keys>>,
    ) -> Result<FirstAttempt, ApiError> {
        let owner: Arc<str> = match self.holders.get_key_value(key.owner.as_str()) {
            Some((owner, _)) => owner.clone(),
            None => Arc::from(key.owner.as_str()),
        };
        let records: usize = self.holders.values().map(|h| h.by_key.len()).sum();
        let holder = self.holders.entry(owner.clone()).or_default();
        let started = holder.start(&key.key, fingerprint, quota, records >= MAX_RECORDS);
        if holder.by_key.is_empty() {
            self.holders.remove(&owner);
        }
        let (stored, guard) = started?;
        Ok(FirstAttempt {
            guard: Some(guard),
            keys: shared.clone(),
            owner,
            key: stored,
        })
    }
}

impl Holder {
    /// A provisional record for `key`; at a bound (this holder's, or the
    /// process's when `process_full`), in place of this holder's oldest
    /// carried-out record.
    fn start(
        &mut self,
        key: &str,
        fingerprint: Fingerprint,
        quota: &Arc<Quota>,
        process_full: bool,
    ) -> Result<(Arc<str>, OwnedMutexGuard<State>), ApiError> {
        if (process_full || self.by_key.len() >= MAX_KEYS) && !self.evict_oldest() {
            return Err(ApiError::IdempotencyExhausted(format!(
                "this process keeps idempotency records of at most {MAX_KEYS} requests per token and {MAX_RECORDS} in all, and none of this token's can make room; retry later, or without an Idempotency-Key"
            )));
        }
        let charge = quota.try_charge(record_bytes(key)).ok_or_else(|| {
            ApiError::IdempotencyExhausted(format!(
                "no room for another idempotency record: {} of {} bytes (--idempotency-total) are held by requests carried out in the last --input-ttl-ms; retry later, or without an Idempotency-Key",
                quota.used(),
                quota.total()
            ))
        })?;
        let state = Arc::new(tokio::sync::Mutex::new(State::Pending));
        let guard = state
            .clone()
            .try_lock_owned()
            .map_err(|_| ApiError::Internal("a new idempotency record was locked".into()))?;
        let stored: Arc<str> = Arc::from(key);
        self.by_key.insert(
            stored.clone(),
            Entry {
                fingerprint,
                state,
                _charge: charge,
            },
        );
        Ok((stored, guard))
    }

    /// Forgets the oldest carried-out record; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        match self.done.pop_front() {
            Some((_, key)) => {
                self.by_key.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Whether the record under `key` is the one `guard` locks (not one
    /// made after it was forgotten).
    fn is_ours(&self, key: &str, guard: &OwnedMutexGuard<State>) -> bool {
        self.by_key
            .get(key)
            .is_some_and(|entry| Arc::ptr_eq(&entry.state, OwnedMutexGuard::mutex(guard)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn key(owner: &str, key: &str) -> IdempotencyKey {
        IdempotencyKey {
            owner: owner.into(),
            key: key.into(),
        }
    }

    async fn begin(keys: &OnceKeys, k: &IdempotencyKey, body: &[u8], quota: &Arc<Quota>) -> Once {
        match keys
            .begin(k, Fingerprint::of("stdin", body), TTL, quota)
            .await
        {
            Ok(once) => once,
            Err(e) => panic!("{e}"),
        }
    }

    fn first(once: Once) -> FirstAttempt {
        match once {
            Once::First(first) => first,
            Once::Done => panic!("expected a first attempt"),
        }
    }

    #[tokio::test]
    async fn a_key_succeeds_once_and_conflicts_on_another_body_or_route() {
        let keys = OnceKeys::default();
        let quota = Quota::new(1 << 20);
        let k = key("operator", "k");
        first(begin(&keys, &k, b"x", &quota).await).succeeded();
        assert!(matches!(begin(&keys, &k, b"x", &quota).await, Once::Done));
        assert!(matches!(
            keys.begin(&k, Fingerprint::of("stdin", b"y"), TTL, &quota)
                .await,
            Err(ApiError::IdempotencyConflict(_))
        ));
        assert!(matches!(
            keys.begin(&k, Fingerprint::of("signal", b"x"), TTL, &quota)
                .await,
            Err(ApiError::IdempotencyConflict(_))
        ));
        assert_eq!(quota.used(), record_bytes("k"));
    }

    #[tokio::test]
    async fn a_failed_attempt_leaves_nothing_so_the_key_takes_another_body() {
        let keys = OnceKeys::default();
        let quota = Quota::new(1 << 20);
        let k = key("operator", "k");
        let attempt = first(begin(&keys, &k, b"bad", &quota).await);
        assert_eq!(quota.used(), record_bytes("k"), "provisional, charged");
        drop(attempt);
        assert_eq!(quota.used(), 0);
        assert!(keys.lock().holders.is_empty());
        first(begin(&keys, &k, b"good", &quota).await).succeeded();
        assert!(matches!(
            begin(&keys, &k, b"good", &quota).await,
            Once::Done
        ));
    }

    #[tokio::test]
    async fn each_holder_has_its_own_keys() {
        let keys = OnceKeys::default();
        let quota = Quota::new(1 << 20);
        first(begin(&keys, &key("operator", "k"), b"a", &quota).await).succeeded();
        // Another holder's same key and another body: its own first attempt.
        first(begin(&keys, &key("token:1", "k"), b"b", &quota).await).succeeded();
        // Another holder's same key and the same body: carried out again.
        first(begin(&keys, &key("token:2", "k"), b"a", &quota).await).succeeded();
        assert!(matches!(
            begin(&keys, &key("token:1", "k"), b"b", &quota).await,
            Once::Done
        ));
    }

    #[tokio::test]
    async fn a_retry_waits_for_the_first_and_tries_again_if_it_failed() {
        let keys = Arc::new(OnceKeys::default());
        let quota = Quota::new(1 << 20);
        let k = key("operator", "k");
        let attempt = first(begin(&keys, &k, b"x", &quota).await);
        let retry = {
            let (keys, quota, k) = (keys.clone(), quota.clone(), k.clone());
            tokio::spawn(async move {
                matches!(
                    keys.begin(&k, Fingerprint::of("stdin", b"x"), TTL, &quota)
                        .await,
                    Ok(Once::First(_))
                )
            })
        };
        tokio::task::yield_now().await;
        drop(attempt);
        assert!(retry.await.unwrap_or(false), "the retry carries it out");

        let attempt = first(begin(&keys, &k, b"x", &quota).await);
        let retry = {
            let (keys, quota, k) = (keys.clone(), quota.clone(), k.clone());
            tokio::spawn(async move {
                matches!(
                    keys.begin(&k, Fingerprint::of("stdin", b"x"), TTL, &quota)
                        .await,
                    Ok(Once::Done)
                )
            })
        };
        tokio::task::yield_now().await;
        attempt.succeeded();
        assert!(retry.await.unwrap_or(false), "the retry is answered done");
    }

    #[tokio::test]
    async fn a_full_quota_refuses_a_new_key_but_answers_a_retry() {
        let keys = OnceKeys::default();
        let quota = Quota::new(2 * record_bytes("k0"));
        first(begin(&keys, &key("operator", "k0"), b"x", &quota).await).succeeded();
        first(begin(&keys, &key("operator", "k1"), b"x", &quota).await).succeeded();
        assert!(matches!(
            keys.begin(
                &key("operator", "k2"),
                Fingerprint::of("stdin", b"x"),
                TTL,
                &quota
            )
            .await,
            Err(ApiError::IdempotencyExhausted(_))
        ));
        assert!(matches!(
            begin(&keys, &key("operator", "k0"), b"x", &quota).await,
            Once::Done
        ));
        // Expired records give their bytes back.
        keys.expire(Duration::ZERO);
        assert_eq!(quota.used(), 0);
        keys.clear();
    }

    #[tokio::test]
    async fn a_full_process_takes_a_holders_new_key_only_in_place_of_its_own() {
        let keys = OnceKeys::default();
        let quota = Quota::new(1 << 30);
        for holder in 0..4 {
            for i in 0..MAX_KEYS {
                let k = key(&format!("token:{holder}"), &format!("{i:04}"));
                first(begin(&keys, &k, b"x", &quota).await).succeeded();
            }
        }
        // A fifth holder has nothing to give: refused, nobody's record lost.
        assert!(matches!(
            keys.begin(
                &key("token:4", "k"),
                Fingerprint::of("stdin", b"x"),
                TTL,
                &quota
            )
            .await,
            Err(ApiError::IdempotencyExhausted(_))
        ));
        for holder in 0..4 {
            let k = key(&format!("token:{holder}"), "0000");
            assert!(matches!(begin(&keys, &k, b"x", &quota).await, Once::Done));
        }
        // A holder with records replaces its own oldest.
        first(begin(&keys, &key("token:0", "new"), b"x", &quota).await).succeeded();
        assert_eq!(quota.used(), MAX_RECORDS as u64 * record_bytes("0000") - 1);
        keys.clear();
    }

    #[tokio::test]
    async fn a_holder_keeps_at_most_max_keys_per_process_its_oldest_going_first() {
        let keys = OnceKeys::default();
        let quota = Quota::new(1 << 30);
        for i in 0..=MAX_KEYS {
            first(begin(&keys, &key("token:1", &format!("{i:04}")), b"x", &quota).await)
                .succeeded();
        }
        assert_eq!(quota.used(), MAX_KEYS as u64 * record_bytes("0000"));
        // The oldest went: its key is new again.
        first(begin(&keys, &key("token:1", "0000"), b"y", &quota).await).succeeded();
        assert!(matches!(
            begin(&keys, &key("token:1", "1024"), b"x", &quota).await,
            Once::Done
        ));
        keys.clear();
        assert_eq!(quota.used(), 0);
    }
}
