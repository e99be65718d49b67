//! Where policies and inventory come from: a [`Source`] ([`watch::Directory`],
//! [`kube::KubeSource`]) hands the agent the snapshot to enforce, and
//! bursts of changes are settled by one [`Debounce`]. Sources decode
//! objects; they never judge them ([`crate::validate`]) nor touch the kernel.
#![allow(clippy::disallowed_methods)] // sources watch files and the API server over time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Snapshot;
use crate::validate::Problem;

pub mod files;
pub mod kube;
pub mod watch;

pub use files::{load_and_validate, load_paths, parse_documents, SourceError};

/// Quiet time after the last change before it is acted on: editors,
/// `kubectl cp` and the API server change things in several steps.
pub const DEBOUNCE: Duration = Duration::from_millis(300);
/// Longest a stream of changes can postpone acting on them.
pub const DEBOUNCE_MAX: Duration = Duration::from_secs(3);

/// Where the objects to enforce come from.
pub trait Source {
    /// The objects to enforce now, admitted; `None` while the source has
    /// no complete snapshot yet (Kubernetes: some kind not listed once),
    /// which nothing may be decided by. Problems mean the source has
    /// nothing it can vouch for: the ruleset in force then stays.
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>>;
}

/// When a burst of changes is acted on: [`DEBOUNCE`] after the last
/// change, and at most [`DEBOUNCE_MAX`] after the first. Pure: the time is
/// passed in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Debounce {
    /// (quiet deadline, hard deadline) while changes are pending.
    pending: Option<(Instant, Instant)>,
}

impl Debounce {
    /// Something changed at `now`.
    pub fn changed(&mut self, now: Instant) {
        let hard = self.pending.map_or(now + DEBOUNCE_MAX, |(_, hard)| hard);
        self.pending = Some((now + DEBOUNCE, hard));
    }

    /// When the pending changes are due; `None` when nothing is pending.
    pub fn due(&self) -> Option<Instant> {
        self.pending.map(|(quiet, hard)| quiet.min(hard))
    }

    /// Whether the pending changes are due at `now`; if so, they are
    /// taken and nothing is pending any more.
    pub fn take(&mut self, now: Instant) -> bool {
        let due = self.due().is_some_and(|due| due <= now);
        if due {
            self.pending = None;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debounce_waits_for_quiet_but_not_forever() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::default();
        assert_eq!(debounce.due(), None);
        assert!(!debounce.take(t0));
        debounce.changed(t0);
        assert_eq!(debounce.due(), Some(t0 + DEBOUNCE));
        debounce.changed(t0 + ms(200));
        assert_eq!(debounce.due(), Some(t0 + ms(200) + DEBOUNCE));
        assert!(!debounce.take(t0 + ms(300)));
        // A change every 200 ms is acted on at the hard deadline.
        for step in 2..20 {
            debounce.changed(t0 + ms(200) * step);
        }
        assert_eq!(debounce.due(), Some(t0 + DEBOUNCE_MAX));
        assert!(debounce.take(t0 + DEBOUNCE_MAX));
        assert_eq!(debounce.due(), None, "taken");
    }
}
