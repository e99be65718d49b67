//! Which ruleset is in force, which one waits, and how the kernel gets
//! from one to the other: a [`Reconciler`] over any [`Kernel`] widens,
//! switches, narrows and retries with backoff. It never logs, meters or
//! reads the clock: the time comes in, a [`Converged`] goes out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::datapath::{
    known_or_read, reconcile_from, transition, transition::NextCache, ApplyError, Backoff, Changes,
    Kernel, Recovered, Retry, State, Step,
};
use crate::fqdn::FqdnPattern;
use crate::ruleset::{Enforced, Ruleset};

/// What the rest of the agent does at the two points of a switch where
/// the order matters.
pub trait Handover {
    /// The kernel is about to queue DNS replies for `selectors` (those of
    /// both rulesets): whoever learns from them must be ready.
    fn widening(&mut self, selectors: &[FqdnPattern]);
    /// `ruleset` is in force now.
    fn switched(&mut self, ruleset: &Ruleset);
}

/// The ruleset in force, the one waiting to be, and the kernel's progress.
pub struct Reconciler {
    /// What the workers decide by.
    in_force: Arc<ArcSwap<Ruleset>>,
    /// A valid ruleset waiting for the kernel to queue what it needs; a
    /// newer one replaces it.
    pending: Option<Arc<Ruleset>>,
    /// What the kernel enforced when the agent started, until the first
    /// attempt has bridged from it ([`transition::adopted`]).
    adopting: Option<Enforced>,
    /// Generation of the ruleset in force (the first is 1).
    generation: u64,
    /// Last generation the kernel was seen to match in full.
    realized: u64,
    /// The owned kernel state as this agent last wrote it, or read it when
    /// a drift check found it changed: what the next attempt diffs from
    /// without reading the kernel (every table and set, one `*-save`
    /// process each). `None` until the first attempt succeeds and after a
    /// failed one, whose retry reads.
    known: Option<State>,
    retry: Retry,
}

/// What one attempt did, for the run loop to log and meter.
#[derive(Debug)]
pub struct Converged {
    /// Whether anything was written to the kernel.
    pub changed: bool,
    /// The generation in force after the attempt.
    pub generation: u64,
    /// Whether this attempt put a pending ruleset in force.
    pub switched: bool,
    /// Whether the kernel now matches `generation` for the first time.
    pub realized: bool,
    /// Set when this attempt ended a run of failures.
    pub recovered: Option<Recovered>,
    /// Why the attempt stopped, and when the next one is due.
    pub failed: Option<(ApplyError, Duration)>,
    /// Whether a ruleset still waits to be put in force.
    pub pending: bool,
}

impl Reconciler {
    /// `initial` is in force from the first packet (generation 1); the
    /// kernel is reconciled to it directly (tests; the agent adopts).
    #[cfg(test)]
    pub fn new(initial: Ruleset, backoff: Backoff) -> Reconciler {
        Reconciler {
            in_force: Arc::new(ArcSwap::from_pointee(initial)),
            pending: None,
            adopting: None,
            generation: 1,
            realized: 0,
            known: None,
            retry: Retry::new(backoff),
        }
    }

    /// `initial` is put in force in `in_force` (generation 1) over a kernel
    /// that enforces `installed` (what an earlier agent left): the first
    /// attempt widens to the bridge of both before it narrows to
    /// `initial`, so no connection both deny passes meanwhile.
    pub fn adopting(
        in_force: Arc<ArcSwap<Ruleset>>,
        initial: Ruleset,
        installed: Enforced,
        backoff: Backoff,
    ) -> Reconciler {
        in_force.store(Arc::new(initial));
        Reconciler {
            in_force,
            pending: None,
            adopting: Some(installed),
            generation: 1,
            realized: 0,
            known: None,
            retry: Retry::new(backoff),
        }
    }

    /// The ruleset in force, shared with whoever decides by it.
    pub fn in_force(&self) -> &Arc<ArcSwap<Ruleset>> {
        &self.in_force
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A newer ruleset: it replaces any pending one and is tried on the
    /// next [`Reconciler::converge`].
    pub fn offer(&mut self, next: Ruleset) {
        self.pending = Some(Arc::new(next));
    }

    /// What the kernel lacks or holds beyond the state of the ruleset in
    /// force, once that state was realized and nothing waits (otherwise
    /// the next attempt writes anyway): empty when it matches. While
    /// attempts succeed this is the only read of the kernel, so the only
    /// one that sees a change made by anyone else; the attempt that
    /// repairs it is [`Reconciler::converge`], which diffs from the state
    /// read here.
    pub fn drift(
        &mut self,
        kernel: &impl Kernel,
        plan: impl Fn(&Enforced, &[FqdnPattern]) -> State,
    ) -> Result<Changes, ApplyError> {
        if self.pending.is_some() || self.adopting.is_some() || self.realized != self.generation {
            return Ok(Changes::default());
        }
        let installed = kernel.installed().map_err(ApplyError::Read)?;
        let ruleset = self.in_force.load();
        let drift = Changes::between(
            &plan(ruleset.enforced(), ruleset.fqdn_patterns()),
            &installed,
        );
        if !drift.is_empty() {
            self.known = Some(installed);
        }
        Ok(drift)
    }

    /// How long until a failed attempt is due again; `None` while the
    /// kernel matches.
    pub fn retry_in(&self, now: Instant) -> Option<Duration> {
        self.retry.wait(now)
    }

    /// Brings the kernel and the ruleset in force to the desired state: a
    /// pending ruleset is put in force once the bridge to it is installed,
    /// then the kernel is narrowed to the ruleset in force. An attempt
    /// starts from the state the last one left (read from the kernel when
    /// that one failed or none succeeded yet), so it is also the retry.
    /// `plan` is the desired kernel state of a ruleset's needs.
    pub fn converge(
        &mut self,
        kernel: &mut impl Kernel,
        plan: impl Fn(&Enforced, &[FqdnPattern]) -> State,
        handover: &mut impl Handover,
        now: Instant,
    ) -> Converged {
        let mut changed = false;
        let mut switched = false;
        let result = self.attempt(kernel, &plan, handover, &mut changed, &mut switched);
        let (mut realized, mut recovered, mut failed) = (false, None, None);
        match result {
            Ok(written) => {
                self.known = Some(written);
                recovered = self.retry.succeeded();
                realized = self.realized != self.generation;
                self.realized = self.generation;
            }
            Err(error) => failed = Some((error, self.retry.failed(now))),
        }
        Converged {
            changed,
            generation: self.generation,
            switched,
            realized,
            recovered,
            failed,
            pending: self.pending.is_some(),
        }
    }

    fn attempt(
        &mut self,
        kernel: &mut impl Kernel,
        plan: &impl Fn(&Enforced, &[FqdnPattern]) -> State,
        handover: &mut impl Handover,
        changed: &mut bool,
        switched: &mut bool,
    ) -> Result<State, ApplyError> {
        // The state the kernel is in: what the last attempt or this one
        // wrote (`None`, read first, after a failure).
        let mut written = self.known.take();
        if let Some(installed) = &self.adopting {
            let current = self.in_force.load_full();
            let bridge = transition::bridge(
                plan,
                (installed, &[]),
                (current.enforced(), current.fqdn_patterns()),
                NextCache::Deferred,
            );
            let done = reconcile_from(kernel, written, bridge)?;
            *changed |= done.changed;
            written = Some(done.state);
            self.adopting = None;
        }
        if let Some(next) = self.pending.clone() {
            let current = self.in_force.load_full();
            // Lookups are by selector, so the ruleset in force keeps
            // finding its own while both are learned for.
            handover.widening(&transition::union(
                current.fqdn_patterns(),
                next.fqdn_patterns(),
            ));
            let next_cache;
            (written, next_cache) =
                prepare_next_cache(kernel, written, current.enforced(), next.enforced())?;
            let bridge = transition::bridge(
                plan,
                (current.enforced(), current.fqdn_patterns()),
                (next.enforced(), next.fqdn_patterns()),
                next_cache,
            );
            let done = reconcile_from(kernel, written, bridge)?;
            *changed |= done.changed;
            written = Some(done.state);
            self.in_force.store(Arc::clone(&next));
            self.pending = None;
            self.generation += 1;
            *switched = true;
            handover.switched(&next);
        }
        let ruleset = self.in_force.load();
        let desired = plan(ruleset.enforced(), ruleset.fqdn_patterns());
        let done = reconcile_from(kernel, written, desired)?;
        *changed |= done.changed;
        Ok(done.state)
    }
}

/// Creates the verdict cache sets of `next`'s generation ahead of the
/// bridge, in an `ipset` write of their own, so that the bridge answers
/// from them and the narrowing has no cache rule left to rewrite
/// ([`transition::NextCache`]). A failure only defers them to the
/// narrowing, which writes them like any set and fails and retries like
/// any write: a change that needs no set is not held back by a failing
/// `ipset`. Returns the state the kernel is in (`None`: unknown, after a
/// failure) and whether the sets are ready.
fn prepare_next_cache(
    kernel: &mut impl Kernel,
    written: Option<State>,
    current: &Enforced,
    next: &Enforced,
) -> Result<(Option<State>, NextCache), ApplyError> {
    let mut installed = known_or_read(kernel, written)?;
    let changes = Changes {
        create_cache: transition::next_cache_sets(current, next, &installed),
        ..Changes::default()
    };
    if changes.create_cache.is_empty() {
        return Ok((Some(installed), NextCache::Ready));
    }
    match kernel.write(Step::PrepareSets, &changes) {
        Ok(()) => {
            installed.cache.extend(changes.create_cache);
            Ok((Some(installed), NextCache::Ready))
        }
        Err(_) => Ok((None, NextCache::Deferred)),
    }
}

#[cfg(test)]
mod tests;
