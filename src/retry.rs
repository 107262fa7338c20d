//! The one retry policy: which failures are tried again
//! ([`Error::directive`]), and how long to pause before each attempt
//! ([`Backoff`]). Every loop that retries goes through here, each with its
//! own named schedule.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Directive, Error, Result};

/// Pauses that start at `first` and double after each failure, up to
/// `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
}

impl Backoff {
    /// A schedule from `first` up to `max` (the same pause every time when
    /// they are equal).
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// The pause after `failures` failures in a row (the first failure
    /// pauses `first`).
    pub fn after(&self, failures: u32) -> Duration {
        let doublings = failures.clamp(1, 32) - 1;
        self.first
            .checked_mul(1u32 << doublings.min(20))
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// Whether trying again may help: the error is transient, by the one place
/// that decides ([`Error::directive`]). An error that needs the operator,
/// or a stop, is never retried.
pub fn may_retry(e: &Error) -> bool {
    e.directive() == Directive::Retry
}

/// Sleeps `pause`, or less when `cancel` fires: then it fails with
/// [`Error::Interrupted`].
pub async fn pause(pause: Duration, cancel: &CancellationToken) -> Result<()> {
    tokio::select! {
        _ = cancel.cancelled() => Err(Error::Interrupted),
        _ = tokio::time::sleep(pause) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_ceiling() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let waits: Vec<u64> = (1..=9).map(|f| b.after(f).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.after(0).as_secs(), 5);
        assert_eq!(b.after(u32::MAX).as_secs(), 300);
        let fixed = Backoff::new(Duration::from_millis(500), Duration::from_millis(500));
        assert_eq!(fixed.after(7), Duration::from_millis(500));
    }

    #[test]
    fn only_transient_errors_are_retried() {
        assert!(may_retry(&Error::Busy {
            work: "replication slot s".into(),
            holder: "another process".into(),
            fix: "stop it".into(),
        }));
        assert!(!may_retry(&Error::Problems(vec!["no key".into()])));
        assert!(!may_retry(&Error::Interrupted));
    }
}
