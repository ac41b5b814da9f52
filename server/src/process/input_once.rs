//! HTTP input applied once per `Idempotency-Key`: `POST .../stdin`,
//! `.../stdin/close`, `.../signal` and `.../resize` with the header are
//! carried out once; a retry with the same key (after a lost answer) gets
//! the success without doing it again, and a retry while the first attempt
//! is still being carried out waits for it. A failed attempt is not
//! recorded (nothing was applied), so its retry tries again. The same key
//! on another route or with another body is a 422 `idempotency_conflict`.
//!
//! Bounded: a key is kept `--input-ttl-ms` after its request, and a
//! process keeps at most [`MAX_KEYS`] (the oldest goes first).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use crate::error::ApiError;
use crate::sync::LockExt;

/// Keys kept per process.
pub const MAX_KEYS: usize = 1024;

/// The keys of one process's HTTP input requests.
#[derive(Default)]
pub struct OnceKeys {
    keys: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    by_key: HashMap<String, Entry>,
    /// Keys oldest first, with when they came.
    order: VecDeque<(Instant, String)>,
}

struct Entry {
    /// The route and body the key was first used with.
    fingerprint: u64,
    /// True once the request succeeded; held while it is carried out.
    done: Arc<tokio::sync::Mutex<bool>>,
}

/// What to do with a request that carries a key.
pub enum Once {
    /// It succeeded before: answer success, do nothing.
    Done,
    /// Carry it out, then [`FirstAttempt::succeeded`].
    First(FirstAttempt),
}

/// The right to carry out a keyed request; retries wait while it is held.
pub struct FirstAttempt(OwnedMutexGuard<bool>);

impl FirstAttempt {
    /// Records the success: retries with the key do nothing.
    pub fn succeeded(mut self) {
        *self.0 = true;
    }
}

impl OnceKeys {
    /// Looks `key` up for `route` with `body`, waiting while an earlier
    /// attempt with it is being carried out.
    pub async fn begin(
        &self,
        key: &str,
        route: &str,
        body: &[u8],
        ttl: Duration,
    ) -> Result<Once, ApiError> {
        let mut hasher = DefaultHasher::new();
        route.hash(&mut hasher);
        body.hash(&mut hasher);
        let fingerprint = hasher.finish();
        let done = {
            let mut keys = self.keys.lock_or_recover();
            keys.expire(Instant::now(), ttl);
            match keys.by_key.get(key) {
                Some(entry) if entry.fingerprint != fingerprint => {
                    return Err(ApiError::IdempotencyConflict(key.to_string()))
                }
                Some(entry) => entry.done.clone(),
                None => {
                    let done = Arc::new(tokio::sync::Mutex::new(false));
                    keys.insert(key, fingerprint, done.clone());
                    done
                }
            }
        };
        let guard = done.lock_owned().await;
        Ok(if *guard {
            Once::Done
        } else {
            Once::First(FirstAttempt(guard))
        })
    }
}

impl Keys {
    fn expire(&mut self, now: Instant, ttl: Duration) {
        while let Some((at, key)) = self.order.front() {
            if now.duration_since(*at) < ttl && self.order.len() < MAX_KEYS {
                break;
            }
            self.by_key.remove(key);
            self.order.pop_front();
        }
    }

    fn insert(&mut self, key: &str, fingerprint: u64, done: Arc<tokio::sync::Mutex<bool>>) {
        self.by_key
            .insert(key.to_string(), Entry { fingerprint, done });
        self.order.push_back((Instant::now(), key.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_succeeds_once_fails_for_retry_and_conflicts_on_another_body() {
        let keys = OnceKeys::default();
        let ttl = Duration::from_secs(60);
        let Ok(Once::First(first)) = keys.begin("k", "stdin", b"x", ttl).await else {
            panic!("first")
        };
        // A failure (dropped without success) leaves the retry to do it.
        drop(first);
        let Ok(Once::First(again)) = keys.begin("k", "stdin", b"x", ttl).await else {
            panic!("retry after failure")
        };
        again.succeeded();
        assert!(matches!(
            keys.begin("k", "stdin", b"x", ttl).await,
            Ok(Once::Done)
        ));
        assert!(matches!(
            keys.begin("k", "stdin", b"y", ttl).await,
            Err(ApiError::IdempotencyConflict(_))
        ));
        assert!(matches!(
            keys.begin("k", "signal", b"x", ttl).await,
            Err(ApiError::IdempotencyConflict(_))
        ));
    }
}
