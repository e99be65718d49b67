//! Where policies and inventory come from: a [`Source`] ([`watch::Directory`],
//! [`kube::KubeSource`], [`docker::DockerSource`]) hands the agent the snapshot to enforce, and
//! bursts of changes are settled by one [`Debounce`]; a directory's files
//! are read only once [`Settling`] finds them still. Sources decode
//! objects; they never judge them ([`crate::validate`]) nor touch the kernel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Snapshot;
use crate::validate::Problem;

pub mod docker;
pub mod files;
pub mod kube;
pub mod watch;

pub use files::{
    load_and_validate, load_and_validate_within, load_paths, load_paths_within, SourceError,
};

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

/// When a burst of changes is acted on: a quiet time after the last
/// change, and at most a longer time after the first. Pure: the time is
/// passed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    quiet: Duration,
    max: Duration,
    /// (quiet deadline, hard deadline) while changes are pending.
    pending: Option<(Instant, Instant)>,
}

impl Debounce {
    /// Changes that come in steps: files (an editor or `kubectl cp`
    /// writes one in several) and the Docker Engine's events (a container
    /// starts in several): [`DEBOUNCE`], at most [`DEBOUNCE_MAX`].
    pub const STEPS: Debounce = Debounce {
        quiet: DEBOUNCE,
        max: DEBOUNCE_MAX,
        pending: None,
    };

    /// Whole objects: the Kubernetes API server's watch events, 100 ms, at
    /// most 1 s. The quiet time only gathers a burst (one `kubectl apply`
    /// of many objects, a rollout) into one reload; it was most of the
    /// time from a policy edit to its enforcement.
    pub const OBJECTS: Debounce = Debounce {
        quiet: Duration::from_millis(100),
        max: Duration::from_secs(1),
        pending: None,
    };

    /// The controller's snapshots (the policy side, Namespaces and Nodes;
    /// its Pods come as deltas and make none): 20 ms, at most 1 s. It
    /// computes the selections one span at a time and gathers what
    /// changes meanwhile into the next, so a longer quiet time would only
    /// delay each policy change's group.
    pub const POLICY_SIDE: Debounce = Debounce {
        quiet: Duration::from_millis(20),
        max: Duration::from_secs(1),
        pending: None,
    };

    /// Something changed at `now`.
    pub fn changed(&mut self, now: Instant) {
        // A change that could wait ([`Debounce::changed_within`]) does
        // not stretch the longest wait of one that cannot.
        let hard = self
            .pending
            .map_or(now + self.max, |(_, hard)| hard.min(now + self.max));
        self.pending = Some((now + self.quiet, hard));
    }

    /// Something changed at `now` that may wait up to `within`: due then,
    /// or sooner with a change that cannot wait (or one already pending).
    pub fn changed_within(&mut self, now: Instant, within: Duration) {
        if self.pending.is_none() {
            self.pending = Some((now + within, now + within));
        }
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

    /// Forgets whatever is pending.
    pub fn clear(&mut self) {
        self.pending = None;
    }
}

/// When the files of a directory count as settled enough to be read: the
/// newest status change is [`DEBOUNCE`] old by the files' own clock, or
/// their stamps stayed the same across [`DEBOUNCE`] of waiting (so a clock
/// step cannot stall it). Files that still change once [`DEBOUNCE_MAX`]
/// has passed are not read at all. Pure: the times are passed in.
#[derive(Clone, Debug)]
pub struct Settling<S> {
    started: Instant,
    /// The stamps last seen, and since when they are unchanged.
    seen: Option<(S, Instant)>,
}

/// What [`Settling::observe`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Read now.
    Yes,
    /// Look again at this time.
    WaitUntil(Instant),
    /// Still changing after [`DEBOUNCE_MAX`]; the time waited.
    StillChanging(Duration),
}

impl<S: PartialEq> Settling<S> {
    pub fn new(now: Instant) -> Settling<S> {
        Settling {
            started: now,
            seen: None,
        }
    }

    /// The files' `stamps` at `now`; `age` is how long ago the newest of
    /// them changed by the file system's clock (`None`: in the future).
    pub fn observe(&mut self, stamps: S, age: Option<Duration>, now: Instant) -> Settled {
        let deadline = self.started + DEBOUNCE_MAX;
        let since = match self.seen.take() {
            Some((seen, since)) if seen == stamps => since,
            Some(_) if now >= deadline => return Settled::StillChanging(now - self.started),
            _ => now,
        };
        self.seen = Some((stamps, since));
        if age.is_some_and(|age| age >= DEBOUNCE) || now >= since + DEBOUNCE {
            return Settled::Yes;
        }
        if now >= deadline {
            return Settled::StillChanging(now - self.started);
        }
        let changed_at = age.and_then(|age| now.checked_sub(age)).unwrap_or(since);
        let quiet = changed_at + DEBOUNCE;
        Settled::WaitUntil(quiet.min(since + DEBOUNCE).min(deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debounce_waits_for_quiet_but_not_forever() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::STEPS;
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

    #[test]
    fn the_api_servers_events_wait_100_ms_of_quiet_and_1_s_at_most() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::OBJECTS;
        debounce.changed(t0);
        assert_eq!(debounce.due(), Some(t0 + ms(100)));
        // A change every 50 ms is acted on after 1 s.
        for step in 1..40 {
            debounce.changed(t0 + ms(50) * step);
        }
        assert_eq!(debounce.due(), Some(t0 + ms(1000)));
        debounce.clear();
        assert_eq!(debounce.due(), None);
    }

    /// Mutations (tried, both fail): `changed` keeping the deferred hard
    /// deadline (a steady stream is due 10 s later), `changed_within`
    /// replacing a pending change's deadlines (a deferred change is pushed
    /// back, and so is one that cannot wait).
    #[test]
    fn a_change_that_can_wait_goes_out_with_the_next_or_within_its_bound() {
        let t0 = Instant::now();
        let within = Duration::from_secs(10);
        let mut debounce = Debounce::OBJECTS;
        debounce.changed_within(t0, within);
        assert_eq!(debounce.due(), Some(t0 + within));
        debounce.changed_within(t0 + Duration::from_secs(3), within);
        assert_eq!(debounce.due(), Some(t0 + within), "not pushed back");
        // A change that cannot wait takes it along, after 100 ms of quiet.
        let t1 = t0 + Duration::from_secs(4);
        debounce.changed(t1);
        assert_eq!(debounce.due(), Some(t1 + Duration::from_millis(100)));
        // And, under a steady stream, at most 1 s after the first of them.
        for ms in (50..2000).step_by(50) {
            debounce.changed(t1 + Duration::from_millis(ms));
        }
        assert_eq!(debounce.due(), Some(t1 + Duration::from_secs(1)));
        assert!(debounce.take(t1 + Duration::from_secs(1)));
        // A pending change that cannot wait is not delayed by one that can.
        debounce.changed(t1 + Duration::from_secs(5));
        debounce.changed_within(t1 + Duration::from_secs(5), within);
        assert_eq!(
            debounce.due(),
            Some(t1 + Duration::from_secs(5) + Duration::from_millis(100))
        );
    }

    #[test]
    fn settling_reads_files_quiet_by_their_clock_at_once() {
        let t0 = Instant::now();
        let mut settling = Settling::new(t0);
        assert_eq!(settling.observe(1, Some(DEBOUNCE), t0), Settled::Yes);
    }

    #[test]
    fn settling_waits_for_a_recent_change_to_age() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut settling = Settling::new(t0);
        // Changed 100 ms ago: look again when it is DEBOUNCE old.
        assert_eq!(
            settling.observe(1, Some(ms(100)), t0),
            Settled::WaitUntil(t0 + DEBOUNCE - ms(100))
        );
        let t1 = t0 + DEBOUNCE - ms(100);
        assert_eq!(settling.observe(1, Some(DEBOUNCE), t1), Settled::Yes);
    }

    #[test]
    fn settling_without_a_usable_clock_compares_stamps_across_the_interval() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut settling = Settling::new(t0);
        assert_eq!(
            settling.observe(1, None, t0),
            Settled::WaitUntil(t0 + DEBOUNCE)
        );
        // Changed meanwhile: the interval starts again.
        assert_eq!(
            settling.observe(2, None, t0 + DEBOUNCE),
            Settled::WaitUntil(t0 + DEBOUNCE * 2)
        );
        assert_eq!(
            settling.observe(2, None, t0 + ms(500)),
            Settled::WaitUntil(t0 + DEBOUNCE * 2)
        );
        assert_eq!(settling.observe(2, None, t0 + DEBOUNCE * 2), Settled::Yes);
    }

    #[test]
    fn settling_gives_up_on_files_that_keep_changing() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut settling = Settling::new(t0);
        let mut now = t0;
        let mut stamp = 0;
        while now < t0 + DEBOUNCE_MAX {
            let seen = settling.observe(stamp, Some(ms(10)), now);
            assert!(
                matches!(seen, Settled::WaitUntil(at) if at <= t0 + DEBOUNCE_MAX),
                "{seen:?}"
            );
            stamp += 1;
            now += ms(100);
        }
        assert_eq!(
            settling.observe(stamp, Some(DEBOUNCE), now),
            Settled::StillChanging(now - t0),
            "changed again past the deadline, however old it looks"
        );
    }
}
