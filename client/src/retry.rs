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

/// How long a refused connection is retried while the server has never
/// answered this client: a server being started may take that long to
/// listen; past it there is no server, and saying so at once is what
/// `docker` and `kubectl` do.
pub const FIRST_CONTACT_REFUSED: Duration = Duration::from_millis(400);

/// Tracks one run of consecutive transient failures against a policy.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: RetryPolicy,
    first_failure: Option<Instant>,
    attempts: u32,
    next_pause: Duration,
    /// Set once the server has answered this client; until then a refused
    /// connection gets [`FIRST_CONTACT_REFUSED`] at most.
    answered: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Backoff {
    pub(crate) fn new(policy: RetryPolicy) -> Backoff {
        Backoff {
            policy,
            first_failure: None,
            attempts: 0,
            next_pause: policy.initial_backoff,
            answered: None,
        }
    }

    /// Knows whether the server has answered before (see
    /// [`FIRST_CONTACT_REFUSED`]).
    pub(crate) fn first_contact(
        mut self,
        answered: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Backoff {
        self.answered = Some(answered);
        self
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
        let never_answered = self
            .answered
            .as_ref()
            .is_some_and(|a| !a.load(std::sync::atomic::Ordering::Relaxed));
        let budget = if never_answered
            && error.transport_kind() == Some(crate::error::TransportKind::Refused)
        {
            self.policy.budget.min(FIRST_CONTACT_REFUSED)
        } else {
            self.policy.budget
        };
        let remaining = budget.saturating_sub(elapsed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TransportKind;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn refused() -> Error {
        Error::Transport {
            url: "http://127.0.0.1:1/v1/processes".into(),
            message: "connection refused".into(),
            kind: TransportKind::Refused,
        }
    }

    /// Retries until the backoff gives up (bounded by the test's own
    /// budget), returning how long that took.
    async fn give_up_after(mut backoff: Backoff) -> Duration {
        let started = Instant::now();
        while backoff.failed(refused()).await.is_ok() {
            assert!(started.elapsed() < Duration::from_secs(10), "never gave up");
        }
        started.elapsed()
    }

    #[tokio::test]
    async fn a_refused_first_contact_is_retried_briefly_a_server_that_answered_for_the_budget() {
        let policy = RetryPolicy {
            budget: Duration::from_millis(1500),
            ..RetryPolicy::default()
        };
        let never = Arc::new(AtomicBool::new(false));
        let took = give_up_after(Backoff::new(policy).first_contact(never)).await;
        assert!(
            took < FIRST_CONTACT_REFUSED + Duration::from_millis(300),
            "{took:?}"
        );
        let answered = Arc::new(AtomicBool::new(true));
        let took = give_up_after(Backoff::new(policy).first_contact(answered)).await;
        assert!(took >= Duration::from_millis(1400), "{took:?}");
    }
}
