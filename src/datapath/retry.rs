//! When to try writing the kernel again after a failed apply: exponential
//! backoff (200 ms doubling to a 30 s cap) and the small state machine the
//! agent's run loop follows. Pure: the time is passed in; it never sleeps,
//! reads the clock or touches the kernel.
//!
//! The machine only counts and schedules. What a retry does is the
//! caller's business, and it is always a fresh reconcile (read the
//! installed state, diff, write), never a replay of the failed input. A
//! newer desired state does not wait for a pending retry: the caller tries
//! it at once, and if that fails too the backoff keeps growing from where
//! it was, so a broken `iptables-restore` is not hammered by a stream of
//! policy changes.

use std::time::{Duration, Instant};

/// Exponential backoff: `initial`, doubled per consecutive failure, at
/// most `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// 200 ms, 400 ms, 800 ms, … 25.6 s, then 30 s.
    pub const DEFAULT: Backoff = Backoff {
        initial: Duration::from_millis(200),
        cap: Duration::from_secs(30),
    };

    /// The wait after the `failures`-th consecutive failure (1-based; 0 is
    /// treated as 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }
}

/// Whether the kernel matches the desired state, and if not, when to try
/// again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retry {
    backoff: Backoff,
    /// Consecutive failed attempts since the kernel last matched.
    failures: u32,
    /// When the next attempt is due; `None` while in sync.
    due: Option<Instant>,
}

/// What a successful attempt ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Attempts it took, the successful one included (at least 2).
    pub attempts: u32,
}

impl Retry {
    pub fn new(backoff: Backoff) -> Retry {
        Retry {
            backoff,
            failures: 0,
            due: None,
        }
    }

    /// An attempt failed at `now`: the next one is due after the returned
    /// delay.
    pub fn failed(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let delay = self.backoff.delay(self.failures);
        self.due = Some(now + delay);
        delay
    }

    /// An attempt succeeded: the kernel matches the desired state. Returns
    /// how many attempts the recovery took when there were failures.
    pub fn succeeded(&mut self) -> Option<Recovered> {
        let failures = std::mem::take(&mut self.failures);
        self.due = None;
        (failures > 0).then(|| Recovered {
            attempts: failures.saturating_add(1),
        })
    }

    /// Whether the kernel is behind the desired state (the last attempt
    /// failed).
    pub fn behind(&self) -> bool {
        self.failures > 0
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// How long the run loop may wait for other events before the retry is
    /// due: `None` while in sync (wait indefinitely), zero once due.
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        self.due.map(|due| due.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_200ms_to_a_30s_cap() {
        let b = Backoff::DEFAULT;
        let ms: Vec<u128> = (1..=10).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(
            ms,
            [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
        );
        assert_eq!(b.delay(0), Duration::from_millis(200));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(30));
        let huge = Backoff {
            initial: Duration::from_secs(u64::MAX / 2),
            cap: Duration::from_secs(7),
        };
        assert_eq!(huge.delay(40), Duration::from_secs(7), "overflow caps");
    }

    #[test]
    fn failures_schedule_retries_and_success_reports_recovery() {
        let t0 = Instant::now();
        let mut retry = Retry::new(Backoff::DEFAULT);
        assert!(!retry.behind());
        assert_eq!(retry.wait(t0), None);
        assert_eq!(retry.succeeded(), None, "in sync: nothing recovered");

        assert_eq!(retry.failed(t0), Duration::from_millis(200));
        assert!(retry.behind());
        assert_eq!(retry.wait(t0), Some(Duration::from_millis(200)));
        let t1 = t0 + Duration::from_millis(150);
        assert_eq!(retry.wait(t1), Some(Duration::from_millis(50)));
        let t2 = t0 + Duration::from_millis(250);
        assert_eq!(retry.wait(t2), Some(Duration::ZERO), "overdue is due");

        assert_eq!(retry.failed(t2), Duration::from_millis(400));
        assert_eq!(retry.wait(t2), Some(Duration::from_millis(400)));
        assert_eq!(retry.failures(), 2);
        assert_eq!(retry.succeeded(), Some(Recovered { attempts: 3 }));
        assert!(!retry.behind());
        assert_eq!(retry.wait(t2), None);

        // After a recovery the schedule starts over.
        assert_eq!(retry.failed(t2), Duration::from_millis(200));
    }

    #[test]
    fn a_newer_desired_state_is_tried_at_once_and_keeps_the_backoff() {
        // The caller tries a new desired state immediately, whatever is
        // pending; the machine only sees another attempt.
        let t0 = Instant::now();
        let mut retry = Retry::new(Backoff::DEFAULT);
        for _ in 0..5 {
            retry.failed(t0);
        }
        assert_eq!(retry.wait(t0), Some(Duration::from_millis(3200)));
        let superseded_at = t0 + Duration::from_millis(10);
        assert_eq!(retry.failed(superseded_at), Duration::from_millis(6400));
        assert_eq!(
            retry.wait(superseded_at),
            Some(Duration::from_millis(6400)),
            "the old deadline is replaced, not kept"
        );
        assert_eq!(retry.succeeded(), Some(Recovered { attempts: 7 }));
    }
}
