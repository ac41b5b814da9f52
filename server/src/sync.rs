//! The server's one way through a poisoned lock: poison is ignored, and
//! the data is used as the panic left it. Refusing a poisoned lock would
//! turn one panic into a server that fails every later user of that lock.
//! Every `std` lock is taken through [`LockExt::lock_or_recover`], and a
//! `Condvar` wait goes through [`recover`].

use std::sync::{LockResult, Mutex, MutexGuard, PoisonError};

/// Taking a lock whether or not a panic poisoned it.
pub trait LockExt<T: ?Sized> {
    /// The guard, poisoned or not.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        recover(self.lock())
    }
}

/// What a lock or a `Condvar` wait gives back, poisoned or not.
pub fn recover<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_with_its_data_as_left() {
        let lock = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let mut guard = lock.lock_or_recover();
            *guard = 2;
            panic!("poisons the lock");
        });
        assert!(lock.is_poisoned());
        assert_eq!(*lock.lock_or_recover(), 2);
    }
}
