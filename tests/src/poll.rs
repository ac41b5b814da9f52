//! Bounded polls, for conditions with no event to wait on (a count in
//! /proc, a tmux pane, a file, a server's answer changing): every one goes
//! through these, bounded by [`WAIT`] or a bound given, never a fixed
//! sleep.

use std::time::Duration;

use crate::WAIT;

/// Polls `probe` (every 20 ms, bounded by [`WAIT`]) until `done` holds for
/// its value; returns the last value either way. For quantities with no
/// event to wait on, such as a server's fd count settling.
pub async fn settle<T>(probe: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    settle_within(WAIT, probe, done).await
}

/// [`settle`] for a probe that must await (an HTTP request): polls every
/// 20 ms, bounded by [`WAIT`], until `done` holds; returns the last value
/// either way, for the caller to assert on.
pub async fn settle_async<T, F>(mut probe: impl FnMut() -> F, done: impl Fn(&T) -> bool) -> T
where
    F: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let value = probe().await;
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`settle`] with a bound of the caller's instead of [`WAIT`].
pub async fn settle_within<T>(
    within: Duration,
    mut probe: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = probe();
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`settle`] for tests without a runtime (threads driving tmux or a
/// child process): polls every 20 ms until `done` holds or `within` has
/// passed; returns the last value either way.
pub fn settle_blocking<T>(
    within: Duration,
    mut probe: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        let value = probe();
        if done(&value) || std::time::Instant::now() >= deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
