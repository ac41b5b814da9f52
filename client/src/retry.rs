//! [`RetryPolicy`] and the backoff it drives: how the client retries
//! what is safe to retry (HTTP calls, reconnects).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How transient failures are retried: exponential backoff from
/// `initial_backoff`, doubling up to `max_backoff`, until `budget` has
/// passed since the call began, or since its last success (any success
/// starts the budget afresh, so a long wait survives many blips). A call
/// therefore ends within the larger of `budget` and its request timeout:
/// each attempt's timeout is cut to what is left of that.
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
    /// Total time to keep retrying, counted from the start of the call
    /// (or its last success), attempts included.
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
    /// When this run of attempts began: the call, or its last success.
    since: Instant,
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
            since: Instant::now(),
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

    /// A success: the budget starts afresh from now.
    pub(crate) fn reset(&mut self) {
        self.since = Instant::now();
        self.attempts = 0;
        self.next_pause = self.policy.initial_backoff;
    }

    /// The timeout of the next attempt: `timeout`, cut to what is left of
    /// the call's deadline (the larger of the budget and `timeout`, from
    /// the start of the run), so that retries never stretch a call past
    /// it. A retry that would have no time left is not made: `failed`
    /// reports the budget spent first.
    pub(crate) fn attempt_timeout(&self, timeout: Duration) -> Duration {
        let deadline = self.policy.budget.max(timeout);
        let left = deadline.saturating_sub(self.since.elapsed());
        timeout.min(left).max(Duration::from_millis(1))
    }

    /// After a failure: sleeps and returns `Ok` when another attempt fits
    /// in the budget, else the error to report.
    pub(crate) async fn failed(&mut self, error: Error) -> Result<()> {
        if !error.is_transient() {
            return Err(error);
        }
        self.attempts += 1;
        let elapsed = self.since.elapsed();
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

    /// A server that accepts and never answers: the first attempt takes
    /// the whole request timeout, and no retry follows it, so the call
    /// ends at its stated time, not twice that.
    #[tokio::test]
    async fn the_budget_counts_from_the_call_so_a_slow_failure_is_not_retried() {
        let policy = RetryPolicy {
            budget: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let mut backoff = Backoff::new(policy);
        let timeout = backoff.attempt_timeout(Duration::from_millis(500));
        assert!(timeout > Duration::from_millis(450), "{timeout:?}");
        tokio::time::sleep(timeout).await;
        let timed_out = Error::Transport {
            url: "http://127.0.0.1:1/".into(),
            message: "timed out".into(),
            kind: TransportKind::Timeout,
        };
        assert!(matches!(
            backoff.failed(timed_out).await,
            Err(Error::BudgetExhausted { attempts: 1, .. })
        ));
        // Late in a run, an attempt gets only what is left.
        let backoff = Backoff::new(RetryPolicy {
            budget: Duration::from_secs(10),
            ..RetryPolicy::default()
        });
        assert!(backoff.attempt_timeout(Duration::from_secs(30)) <= Duration::from_secs(30));
    }
}
