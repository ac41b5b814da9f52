//! The retention budget: memory (`--retain-total`) and disk
//! (`--retain-disk-total`) reserved by every known process, every spawn
//! under way and every exec in flight.
//!
//! A [`Share`] is one holder's part. It is taken under the table lock, where
//! admission decides whether it fits (so two spawns cannot both take the
//! last room), and only ever grows there; it may shrink anywhere, at any
//! time: when a process exits its windows settle to what they hold
//! ([`Share::lower_to`]), and when it is forgotten or dropped its share is
//! given back whole. A share lowered concurrently with a check only leaves
//! more room than the check saw, so the budget stays a bound.
//!
//! A [`Quota`] is a bound of its own for one kind of small record
//! (idempotency records, `--idempotency-total`): a [`Charge`] is taken only
//! if it fits, by one atomic step, and given back when dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What is reserved now, in memory and on disk, across all holders.
#[derive(Debug, Default)]
pub struct Budget {
    memory: AtomicU64,
    disk: AtomicU64,
}

/// Memory and disk bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    /// Against `--retain-total`.
    pub memory: u64,
    /// Against `--retain-disk-total`.
    pub disk: u64,
}

impl Bytes {
    /// Memory only.
    pub fn memory(memory: u64) -> Bytes {
        Bytes { memory, disk: 0 }
    }

    /// Each part less `other`'s, at least 0.
    pub fn saturating_sub(self, other: Bytes) -> Bytes {
        Bytes {
            memory: self.memory.saturating_sub(other.memory),
            disk: self.disk.saturating_sub(other.disk),
        }
    }

    /// Whether either part is more than `total`'s.
    pub fn exceeds(self, total: Bytes) -> bool {
        self.memory > total.memory || self.disk > total.disk
    }
}

impl std::ops::Add for Bytes {
    type Output = Bytes;
    fn add(self, other: Bytes) -> Bytes {
        Bytes {
            memory: self.memory + other.memory,
            disk: self.disk + other.disk,
        }
    }
}

impl std::ops::AddAssign for Bytes {
    fn add_assign(&mut self, other: Bytes) {
        *self = *self + other;
    }
}

impl Budget {
    /// Reserved now, across all holders.
    pub fn reserved(&self) -> Bytes {
        Bytes {
            memory: self.memory.load(Ordering::Acquire),
            disk: self.disk.load(Ordering::Acquire),
        }
    }

    /// Reserves `bytes` for one holder; the caller has checked that it
    /// fits (under the table lock). Given back when the share is dropped.
    pub fn share(self: &Arc<Self>, bytes: Bytes) -> Share {
        self.memory.fetch_add(bytes.memory, Ordering::AcqRel);
        self.disk.fetch_add(bytes.disk, Ordering::AcqRel);
        Share {
            budget: self.clone(),
            memory: AtomicU64::new(bytes.memory),
            disk: AtomicU64::new(bytes.disk),
        }
    }
}

/// One holder's reservation. Dropping it gives the rest back.
#[derive(Debug)]
pub struct Share {
    budget: Arc<Budget>,
    memory: AtomicU64,
    disk: AtomicU64,
}

impl Share {
    /// Held now.
    pub fn held(&self) -> Bytes {
        Bytes {
            memory: self.memory.load(Ordering::Acquire),
            disk: self.disk.load(Ordering::Acquire),
        }
    }

    /// Sets the memory part to `bytes` (a PTY's screen at a new size):
    /// under the table lock, where a growth was checked to fit.
    pub fn set_memory(&self, bytes: u64) {
        let grown = bytes.saturating_sub(self.memory.load(Ordering::Acquire));
        if grown > 0 {
            self.memory.fetch_add(grown, Ordering::AcqRel);
            self.budget.memory.fetch_add(grown, Ordering::AcqRel);
        } else {
            Self::lower(&self.memory, &self.budget.memory, bytes);
        }
    }

    /// Lowers each part to at most `bytes` (never raises it), giving the
    /// difference back: what an exited process really holds.
    pub fn lower_to(&self, bytes: Bytes) {
        Self::lower(&self.memory, &self.budget.memory, bytes.memory);
        Self::lower(&self.disk, &self.budget.disk, bytes.disk);
    }

    /// Gives everything back now (the holder is forgotten, even if
    /// something still holds it).
    pub fn release(&self) {
        self.lower_to(Bytes::default());
    }

    /// Lowers `part` to `target` if it is above it, and the total by
    /// exactly what left the part: a racing lower or release takes only
    /// what is still there, so nothing is given back twice.
    fn lower(part: &AtomicU64, total: &AtomicU64, target: u64) {
        let lowered = part.fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
            (current > target).then_some(target)
        });
        if let Ok(before) = lowered {
            total.fetch_sub(before - target, Ordering::AcqRel);
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.release();
    }
}

/// A server-wide bound on the bytes of one kind of record, apart from the
/// retention budget: a charge is taken whole or not at all.
#[derive(Debug)]
pub struct Quota {
    total: u64,
    used: AtomicU64,
}

impl Quota {
    /// A quota of `total` bytes, none of it used.
    pub fn new(total: u64) -> Arc<Quota> {
        Arc::new(Quota {
            total,
            used: AtomicU64::new(0),
        })
    }

    /// The bound.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Charges `bytes` if they fit under the bound (never past it, however
    /// many take at once); `None` when they do not.
    pub fn try_charge(self: &Arc<Self>, bytes: u64) -> Option<Charge> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.total)
            })
            .ok()?;
        Some(Charge {
            quota: self.clone(),
            bytes,
        })
    }
}

/// Bytes charged to a [`Quota`]; dropping it gives them back.
#[derive(Debug)]
pub struct Charge {
    quota: Arc<Quota>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.quota.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(memory: u64, disk: u64) -> Bytes {
        Bytes { memory, disk }
    }

    #[test]
    fn a_share_counts_until_dropped() {
        let budget = Arc::new(Budget::default());
        let a = budget.share(bytes(10, 100));
        let b = budget.share(bytes(5, 0));
        assert_eq!(budget.reserved(), bytes(15, 100));
        drop(a);
        assert_eq!(budget.reserved(), bytes(5, 0));
        drop(b);
        assert_eq!(budget.reserved(), bytes(0, 0));
    }

    #[test]
    fn lowering_never_raises_and_never_gives_back_twice() {
        let budget = Arc::new(Budget::default());
        let share = budget.share(bytes(10, 100));
        share.lower_to(bytes(4, 200));
        assert_eq!(share.held(), bytes(4, 100));
        assert_eq!(budget.reserved(), bytes(4, 100));
        share.release();
        share.lower_to(bytes(2, 2));
        share.release();
        assert_eq!(budget.reserved(), bytes(0, 0));
        drop(share);
        assert_eq!(budget.reserved(), bytes(0, 0));
    }

    #[test]
    fn a_screen_grows_and_shrinks_its_memory_part() {
        let budget = Arc::new(Budget::default());
        let share = budget.share(bytes(10, 0));
        share.set_memory(15);
        assert_eq!(budget.reserved(), bytes(15, 0));
        share.set_memory(7);
        assert_eq!(
            (share.held(), budget.reserved()),
            (bytes(7, 0), bytes(7, 0))
        );
    }

    #[test]
    fn a_quota_charges_only_what_fits_and_takes_it_back_on_drop() {
        let quota = Quota::new(100);
        let a = quota.try_charge(60);
        assert!(a.is_some());
        assert!(quota.try_charge(41).is_none(), "past the bound");
        let b = quota.try_charge(40);
        assert!(b.is_some());
        assert_eq!(quota.used(), 100);
        assert!(quota.try_charge(1).is_none());
        drop(a);
        assert_eq!(quota.used(), 40);
        assert!(quota.try_charge(u64::MAX).is_none(), "no overflow");
        drop(b);
        assert_eq!(quota.used(), 0);
    }

    #[test]
    fn racing_charges_never_pass_the_bound() {
        let quota = Quota::new(1000);
        let charges = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        if let Some(charge) = quota.try_charge(7) {
                            charges
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(charge);
                        }
                    }
                });
            }
        });
        assert_eq!(quota.used(), 994, "142 charges of 7 fit in 1000");
        drop(charges);
        assert_eq!(quota.used(), 0);
    }

    #[test]
    fn racing_lowers_give_back_exactly_what_was_held() {
        let budget = Arc::new(Budget::default());
        let shares: Vec<_> = (0..64)
            .map(|_| Arc::new(budget.share(bytes(1000, 1000))))
            .collect();
        std::thread::scope(|scope| {
            for target in [0, 10, 500, 999] {
                let shares = &shares;
                scope.spawn(move || {
                    for share in shares {
                        share.lower_to(bytes(target, target));
                    }
                });
            }
            for share in &shares {
                scope.spawn(move || share.release());
            }
        });
        assert_eq!(budget.reserved(), bytes(0, 0));
    }
}
