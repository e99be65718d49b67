//! Whether an optional kind's CRD is installed, as the answers to its list
//! and watch tell, and when to look again while it is not. Pure: what the
//! API server answered and the time go in, what to do comes out; no I/O,
//! no clock.
//!
//! A `404` (the resource is not served: its CRD is not installed, or was
//! removed) makes the kind count as listed and empty; it is looked for again
//! after a wait that doubles from [`FIRST_RECHECK`] up to [`MAX_RECHECK`],
//! and starts from the short wait again once the kind was seen.
//!
//! Looking again is a list request answered from the API server's memory
//! (no storage read); capped at one per [`MAX_RECHECK`] per missing kind,
//! 5,000 nodes missing four CRDs ask about 170 times a second. Watching
//! `CustomResourceDefinitions` instead would need read access to every CRD
//! of the cluster; listing the kind needs only the access tollgate already
//! has to its objects.

use std::time::{Duration, Instant};

/// The first wait before looking again for a CRD found missing.
pub const FIRST_RECHECK: Duration = Duration::from_secs(1);
/// The longest wait between two looks for a missing CRD: how late, at
/// worst, the objects of a CRD installed long after the agent started are
/// enforced.
pub const MAX_RECHECK: Duration = Duration::from_secs(120);

/// What is known of an optional kind's CRD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Presence {
    /// Nothing answered yet.
    #[default]
    Unknown,
    /// Its list or watch answered.
    Installed,
    /// It answered `404`; looked for again at `recheck_at`.
    Missing {
        recheck_at: Instant,
        /// The wait that led to `recheck_at`.
        wait: Duration,
    },
}

/// What [`Presence::not_found`] asks of the watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotFound {
    /// The CRD was installed (or not known) until now: say so once, and
    /// drop the kind's objects.
    pub newly: bool,
    /// When to list the kind again.
    pub recheck_at: Instant,
}

impl Presence {
    /// The kind's list or watch answered `404` at `now`.
    pub fn not_found(&mut self, now: Instant) -> NotFound {
        let (newly, wait) = match *self {
            Presence::Missing { wait, .. } => (false, (wait * 2).min(MAX_RECHECK)),
            Presence::Unknown | Presence::Installed => (true, FIRST_RECHECK),
        };
        let recheck_at = now + wait;
        *self = Presence::Missing { recheck_at, wait };
        NotFound { newly, recheck_at }
    }

    /// The kind's list or watch answered. Returns whether the CRD was
    /// missing until now (it has just appeared).
    pub fn answered(&mut self) -> bool {
        let appeared = matches!(self, Presence::Missing { .. });
        *self = Presence::Installed;
        appeared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_crd_is_looked_for_with_a_doubling_wait() {
        let t0 = Instant::now();
        let mut presence = Presence::default();
        let first = presence.not_found(t0);
        assert_eq!(
            first,
            NotFound {
                newly: true,
                recheck_at: t0 + FIRST_RECHECK
            }
        );
        // Still missing at each look: said once, waits double up to the cap.
        let mut now = first.recheck_at;
        let mut waits = Vec::new();
        for _ in 0..9 {
            let again = presence.not_found(now);
            assert!(!again.newly);
            waits.push((again.recheck_at - now).as_secs());
            now = again.recheck_at;
        }
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 120, 120, 120]);
    }

    #[test]
    fn appearing_and_disappearing_again() {
        let t0 = Instant::now();
        let mut presence = Presence::default();
        // Installed from the start: nothing to say.
        assert!(!presence.answered());
        assert_eq!(presence, Presence::Installed);
        // Removed later: said once, objects dropped, short wait.
        let removed = presence.not_found(t0);
        assert!(removed.newly);
        presence.not_found(removed.recheck_at);
        // Appears: said once; answering again says nothing more.
        assert!(presence.answered());
        assert!(!presence.answered());
        // Removed again: the wait starts short again.
        let t1 = t0 + Duration::from_secs(100);
        assert_eq!(
            presence.not_found(t1),
            NotFound {
                newly: true,
                recheck_at: t1 + FIRST_RECHECK
            }
        );
    }
}
