//! The idempotency records of HTTP input as a handover carries them
//! (issue 43): every carried-out record, with its fingerprint and age, so
//! that a retry of a request that succeeded before the handover still does
//! nothing after it. A record still provisional (its request in flight)
//! is not carried: that request's connection ends with the old binary, so
//! it failed as far as the client knows, and a retry tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{record_bytes, Entry, Fingerprint, Holder, OnceKeys, State};
use crate::budget::Quota;
use crate::sync::LockExt;

/// One carried-out record.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedRecord {
    pub owner: String,
    pub key: String,
    pub fingerprint: [u8; 32],
    /// Milliseconds since it was carried out.
    pub age_ms: u64,
}

impl OnceKeys {
    /// Every carried-out record, oldest first per holder.
    pub fn carried(&self) -> Vec<CarriedRecord> {
        let keys = self.lock();
        let now = Instant::now();
        let mut carried = Vec::new();
        for (owner, holder) in &keys.holders {
            for (at, key) in &holder.done {
                if let Some(entry) = holder.by_key.get(key) {
                    carried.push(CarriedRecord {
                        owner: owner.to_string(),
                        key: key.to_string(),
                        fingerprint: entry.fingerprint.0,
                        age_ms: now.duration_since(*at).as_millis() as u64,
                    });
                }
            }
        }
        carried
    }

    /// The records a handover carried, each charged to `quota` again (one
    /// that finds no room is dropped, and said).
    pub fn adopted(records: Vec<CarriedRecord>, quota: &Arc<Quota>) -> OnceKeys {
        let once = OnceKeys::default();
        {
            let mut keys = once.keys.lock_or_recover();
            let now = Instant::now();
            for record in records {
                let Some(charge) = quota.try_charge(record_bytes(&record.key)) else {
                    tracing::warn!(
                        key = record.key,
                        "no room for a carried idempotency record: dropped"
                    );
                    continue;
                };
                let at = now
                    .checked_sub(Duration::from_millis(record.age_ms))
                    .unwrap_or(now);
                let key: Arc<str> = Arc::from(record.key.as_str());
                let holder: &mut Holder = keys
                    .holders
                    .entry(Arc::from(record.owner.as_str()))
                    .or_default();
                holder.by_key.insert(
                    key.clone(),
                    Entry {
                        fingerprint: Fingerprint(record.fingerprint),
                        state: Arc::new(tokio::sync::Mutex::new(State::Done)),
                        _charge: charge,
                    },
                );
                holder.done.push_back((at, key));
            }
        }
        once
    }
}
