//! The FQDN table every worker shares: the learner behind a `RwLock`, on a
//! monotonic millisecond clock that starts when the table is made. The DNS
//! worker writes it, the classifier reads it through [`FqdnTable::lookup`].
//! It never writes a kernel set and never reads the clock (callers pass
//! `now`); its lock is held for one step or lookup.

use std::net::IpAddr;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use super::{FqdnLearner, FqdnPattern, LearnerConfig, RestoredEntry, Source};
use crate::fqdn::FqdnLookup;

/// The shared table. A `RwLock`: readers take it only for FQDN peers and
/// hold it for one hash lookup; the writer parses outside it and holds it
/// only to learn the addresses of one reply (about a microsecond).
pub struct FqdnTable {
    learner: RwLock<FqdnLearner>,
    /// Origin of the monotonic milliseconds the learner works in.
    origin: Instant,
}

/// What an expiry pass did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// Entries whose timeout had passed.
    pub expired: u64,
    /// Entries left.
    pub addresses: u64,
}

impl FqdnTable {
    /// A table for `selectors`, restored from what the kernel sets hold
    /// (`entries` by selector index; see
    /// [`crate::workers::fqdn_sets::restored_entries`]). Returns it and how many
    /// entries were restored. Its clock starts at `now`, at 0 ms.
    pub fn restore(
        selectors: Vec<FqdnPattern>,
        config: LearnerConfig,
        entries: &[RestoredEntry],
        now: Instant,
    ) -> (FqdnTable, usize) {
        let mut learner = FqdnLearner::new(selectors, config);
        let restored = learner.restore(entries, 0);
        let table = FqdnTable {
            learner: RwLock::new(learner),
            origin: now,
        };
        (table, restored)
    }

    /// The table's milliseconds at `at`.
    pub fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Switches to a new selector list, keeping what kept selectors have
    /// learned. Nothing changes when the list is the same.
    pub fn reselect(&self, selectors: &[FqdnPattern], now: Instant) {
        let now = self.millis(now);
        let mut learner = self.write();
        if learner.selectors() == selectors {
            return;
        }
        *learner = learner.reselect(selectors.to_vec(), now);
    }

    /// Forgets the entries timed out at `now_ms` (the kernel has removed
    /// them already: nothing to write).
    pub fn expire(&self, now_ms: u64) -> Expired {
        let mut learner = self.write();
        let before = learner.counters().expired;
        learner.expire(now_ms);
        Expired {
            expired: learner.counters().expired.saturating_sub(before),
            addresses: learner.installed() as u64,
        }
    }

    /// Every live entry at `now`, by selector and address, with how it
    /// was learned (what `tollgate get fqdn` shows).
    pub fn sources(&self, now: Instant) -> Vec<(FqdnPattern, IpAddr, Source)> {
        let now = self.millis(now);
        let learner = self.read();
        learner
            .entries(now)
            .into_iter()
            .filter_map(|e| {
                let pattern = learner.selectors().get(e.selector)?.clone();
                Some((pattern, e.address, learner.source(e.selector, e.address)))
            })
            .collect()
    }

    /// A lookup for the classifier: what the table holds at `now`.
    pub fn lookup(&self, now: Instant) -> TableLookup<'_> {
        TableLookup {
            table: self,
            now: self.millis(now),
        }
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, FqdnLearner> {
        // A worker that panicked while writing leaves consistent data
        // behind (each learning step completes or is not visible).
        self.learner.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, FqdnLearner> {
        self.learner.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`FqdnLookup`] over the shared table at one time (table milliseconds).
pub struct TableLookup<'a> {
    table: &'a FqdnTable,
    now: u64,
}

impl FqdnLookup for TableLookup<'_> {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool {
        self.table.read().resolves_to(pattern, ip, self.now)
    }
}
