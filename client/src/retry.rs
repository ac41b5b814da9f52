//! [`RetryPolicy`] and the backoff it drives: how the client retries
//! what is safe to retry (HTTP calls, reconnects).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How transient failures are retried: exponential backoff from
/// `initial_backoff`, doubling up to `max_backoff`, until `budget` has
/// passed since the first failure of a run of consecutive failures (any
/// success starts the budget afresh, so a long wait survives many blips).
///
/// ```
/// use std::time::Duration;
/// use tether_client::RetryPolicy;
///
/// let policy = RetryPolicy { budget: Duration::from_secs(5), ..RetryPolicy::default() };
/// assert_eq!(policy.max_backoff, Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total time to keep retrying after the first failure.
    pub budget: Duration,
    /// The first pause between attempts.
    pub initial_backoff: Duration,
    /// The longest pause between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: Duration::from_secs(30),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// No retries: the first failure is final.
    pub fn none() -> Self {
        RetryPolicy {
            budget: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }
}

/// Tracks one run of consecutive transient failures against a policy.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: RetryPolicy,
    first_failure: Option<Instant>,
    attempts: u32,
    next_pause: Duration,
}

impl Backoff {
    pub(crate) fn new(policy: RetryPolicy) -> Backoff {
        Backoff {
            policy,
            first_failure: None,
            attempts: 0,
            next_pause: policy.initial_backoff,
        }
    }

    /// A success: the next failure starts a new budget.
    pub(crate) fn reset(&mut self) {
        self.first_failure = None;
        self.attempts = 0;
        self.next_pause = self.policy.initial_backoff;
    }

    /// After a failure: sleeps and returns `Ok` when another attempt fits
    /// in the budget, else the error to report.
    pub(crate) async fn failed(&mut self, error: Error) -> Result<()> {
        if !error.is_transient() {
            return Err(error);
        }
        let now = Instant::now();
        let first = *self.first_failure.get_or_insert(now);
        self.attempts += 1;
        let elapsed = now.duration_since(first);
        let remaining = self.policy.budget.saturating_sub(elapsed);
        if remaining.is_zero() {
            return Err(Error::BudgetExhausted {
                attempts: self.attempts,
                elapsed,
                last: Box::new(error),
            });
        }
        let pause = jitter(self.next_pause).min(remaining);
        self.next_pause = (self.next_pause * 2).min(self.policy.max_backoff);
        tokio::time::sleep(pause).await;
        Ok(())
    }
}

/// 75% to 100% of `pause`, so that many clients do not retry in lockstep.
fn jitter(pause: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let quarter = pause / 4;
    pause - quarter.mul_f64(f64::from(nanos % 1000) / 1000.0)
}
