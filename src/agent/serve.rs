//! The run loop of the agent: events in (policy changes, SIGHUP,
//! shutdown, a retry or a drift check falling due), reloads and
//! convergence attempts out. It logs and meters what the
//! [`Reconciler`](super::converge::Reconciler) reports and decides nothing
//! itself.
#![allow(clippy::disallowed_methods)] // the serve loop times its drift checks and reloads on the clock.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{AgentError, ReloadResult};
use crate::datapath;
use crate::ruleset::Ruleset;

use super::compiler::Compiled;
use super::signals::{self, Event};
use super::{bridge, host, Running};

/// How often bridged traffic and the verdict cache's hits are checked
/// when drift checks are off.
const CHECKS_WITHOUT_DRIFT: Duration = Duration::from_secs(10);

impl Running {
    /// Handles events until a shutdown is asked for, or the workers held
    /// back at the start cannot be started; retries a failed apply and
    /// checks for drift when due.
    pub(super) fn serve(&mut self, inbox: &Receiver<Event>) -> Result<(), AgentError> {
        loop {
            if let Some(error) = self.fatal.take() {
                return Err(error);
            }
            let now = Instant::now();
            // A pending retry rewrites the kernel anyway: the drift check
            // waits for it.
            let wait = self
                .reconciler
                .retry_in(now)
                .unwrap_or_else(|| self.checks_due.saturating_duration_since(now));
            let received = inbox.recv_timeout(wait);
            let event = match received {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    match self.reconciler.retry_in(now) {
                        Some(wait) if wait.is_zero() => {
                            self.sync();
                        }
                        Some(_) => {}
                        None => self.periodic_checks(now),
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let event = match event {
                Event::PolicyChanged => signals::settle(inbox),
                Event::Settled => signals::drain(inbox),
                other => other,
            };
            match event {
                Event::Shutdown => return Ok(()),
                Event::Reload => self.reload(true),
                Event::PolicyChanged | Event::Settled => self.reload(false),
            }
        }
    }

    /// How often the periodic checks run: every drift check, or every
    /// [`CHECKS_WITHOUT_DRIFT`] when drift checks are off.
    pub(super) fn checks_every(config: &crate::config::AgentConfig) -> Duration {
        config
            .datapath
            .drift_check()
            .unwrap_or(CHECKS_WITHOUT_DRIFT)
    }

    /// When due: the heap's free pages handed back after a ruleset was
    /// replaced, whether bridged traffic is seen, the verdict cache's
    /// hits, and (when drift checks are on) the kernel compared with the
    /// state of the ruleset in force, what differs restored (logged and
    /// counted); then schedules the next round.
    fn periodic_checks(&mut self, now: Instant) {
        if self.checks_due > now {
            return;
        }
        self.checks_due = now + Running::checks_every(&self.base.config);
        if std::mem::take(&mut self.replaced) {
            // What building the last rulesets allocated and freed, kept by
            // the allocator: 114 MiB of an agent's 327 at 150,000 Pods.
            crate::sys::release_free_memory();
        }
        self.check_bridges();
        self.read_cache_hits();
        let base = &mut self.base;
        base.antispoof
            .count(&base.kernel, &base.metrics, &base.status);
        if base
            .antispoof
            .refresh(&base.kernel, &base.metrics, &base.counters, &base.status)
        {
            self.sync();
        }
        if self.base.config.datapath.drift_check().is_none() {
            return;
        }
        let config = &self.base.config;
        let queues = config.queue_numbers();
        let guards = &self.base.antispoof;
        let found = self.reconciler.drift(&self.base.kernel, |enforced, fqdn| {
            let mut state = datapath::desired(&config.datapath, &queues, enforced, fqdn);
            guards.install(&mut state);
            state
        });
        match found {
            Ok(changes) if changes.is_empty() => {}
            Ok(changes) => {
                tracing::warn!(
                    "datapath drift: the kernel state changed behind the agent ({}); restoring it",
                    changes.summary()
                );
                self.base
                    .counters
                    .drift_repairs
                    .fetch_add(1, Ordering::Relaxed);
                self.sync();
            }
            Err(error) => tracing::warn!("datapath drift check failed: {error}"),
        }
    }

    /// Counts the connections the verdict cache answered since the last
    /// reading (metrics and status); nothing when the cache is off.
    fn read_cache_hits(&mut self) {
        if !self.base.config.verdict_cache.enabled() {
            return;
        }
        match self.base.kernel.cache_hits() {
            Ok(reading) => {
                let gained = self.cache_hits.gained(reading);
                let hits = self
                    .base
                    .counters
                    .verdict_cache_hits
                    .fetch_add(gained, Ordering::Relaxed)
                    + gained;
                self.base.status.verdict_cache_hits(hits);
            }
            Err(error) => tracing::debug!("reading the verdict cache's counters failed: {error}"),
        }
    }

    /// Whether bridged traffic reaches iptables: published in the status
    /// and the `bridge_netfilter_off` gauge; logged when it changes.
    pub(super) fn check_bridges(&mut self) {
        let unseen = bridge::unseen(&bridge::read());
        if unseen == self.bridged_unseen {
            return;
        }
        match &unseen {
            Some(why) => tracing::warn!("bridged traffic is not seen by iptables: {why}"),
            None => tracing::info!("bridged traffic is seen by iptables again"),
        }
        self.base
            .counters
            .bridge_netfilter_off
            .store(u64::from(unseen.is_some()), Ordering::Relaxed);
        self.base.status.bridged_traffic(unseen.clone());
        self.bridged_unseen = unseen;
    }

    /// Reads the source again and converges to it: the new ruleset
    /// replaces any pending one and is tried at once (workers pick it up
    /// with their next packet once the kernel is ready for it). An invalid
    /// or missing policy directory leaves everything as it was. A change
    /// the Kubernetes source reports (`asked` false) for which the
    /// compiler built no ruleset offers nothing; a SIGHUP (`asked`) and a
    /// policy directory's edit always offer one.
    fn reload(&mut self, asked: bool) {
        let snapshot = self.base.source.latest();
        let node = match host::local_node(&self.base.config.node) {
            Ok(node) => node,
            Err(error) => {
                tracing::error!(%error, "reload failed");
                self.reloaded(ReloadResult::Failed, Some(error.to_string()));
                return;
            }
        };
        match snapshot {
            // Once complete, a source stays complete.
            Ok(None) => {}
            Ok(Some(snapshot)) => {
                let base = &mut self.base;
                // Controller mode, a group missing: the ruleset in force
                // stays (status and metrics say what it waits for).
                let Some(Compiled {
                    ruleset: compiled,
                    new,
                }) = base.compiler.compile(&snapshot, &node, &base.counters)
                else {
                    return;
                };
                base.warnings
                    .reloaded(&snapshot, &node, &compiled, &base.counters, &base.status);
                base.antispoof.inventory(&snapshot);
                base.status.compiled(Arc::clone(&snapshot), &node);
                let guards_changed = base.antispoof.refresh(
                    &base.kernel,
                    &base.metrics,
                    &base.counters,
                    &base.status,
                );
                if !new && !asked && base.keeps_unchanged {
                    // Nothing a decision reads changed (a Namespace label
                    // no rule here reads, a Pod no selection holds): the
                    // ruleset in force stays, and with it the verdict
                    // cache's generation and its entries; only the guards
                    // follow the snapshot's local Pods. A reload asked for
                    // (SIGHUP), or an edit of a policy directory, always
                    // offers one.
                    tracing::info!("reload changed nothing enforced; the ruleset in force stays");
                    if guards_changed {
                        self.sync();
                    }
                    return;
                }
                let groups = base.compiler.groups();
                let ruleset = base.generations.stamp(compiled, &snapshot, groups, &node);
                // The cached verdicts' chains, whose counters count the
                // hits, outlive a generation; a cached Allow's is
                // rewritten only when DNS snooping starts or stops.
                let snooping = |r: &Ruleset| !r.fqdn_patterns().is_empty();
                if snooping(&ruleset) != snooping(&self.reconciler.in_force().load()) {
                    self.read_cache_hits();
                }
                self.reconciler.offer(ruleset);
                if let Some(error) = self.sync() {
                    self.reloaded(ReloadResult::Failed, Some(error));
                }
            }
            Err(problems) => {
                let text = problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                tracing::error!("reload rejected: {text}");
                self.reloaded(ReloadResult::Rejected, Some(format!("rejected: {text}")));
            }
        }
    }

    /// One attempt to converge, logged and metered; a failure schedules
    /// the retry. Returns why a pending ruleset is still not in force.
    pub(super) fn sync(&mut self) -> Option<String> {
        let config = &self.base.config;
        let queues = config.queue_numbers();
        let started = Instant::now();
        let guards = &self.base.antispoof;
        let done = self.reconciler.converge(
            &mut self.base.kernel,
            |enforced, fqdn| {
                let mut state = datapath::desired(&config.datapath, &queues, enforced, fqdn);
                guards.install(&mut state);
                state
            },
            &mut self.fqdn,
            started,
        );
        if done.changed || done.failed.is_some() {
            self.base.metrics.datapath_applied(started.elapsed());
        }
        if done.switched {
            self.replaced = true;
            self.put_in_force();
            self.reloaded(ReloadResult::Applied, None);
        }
        let Some((error, delay)) = done.failed else {
            // The kernel is this agent's: its queues get what they expect.
            if self.unbound.is_some() {
                if let Err(error) = self.bind() {
                    tracing::error!(%error, "starting the workers failed");
                    self.fatal = Some(error);
                    return None;
                }
                tracing::info!("kernel state rewritten: queues bound");
            }
            if let Some(recovered) = done.recovered {
                tracing::info!(
                    "datapath apply recovered after {} attempts",
                    recovered.attempts
                );
            }
            self.base
                .counters
                .datapath_behind
                .store(0, Ordering::Relaxed);
            self.base.status.datapath(None);
            if done.realized {
                self.fqdn.realized(&self.reconciler.in_force().load());
                if done.generation == 1 {
                    self.base
                        .counters
                        .last_reload_success
                        .store(1, Ordering::Relaxed);
                    self.base.metrics.reload_succeeded();
                }
                let (generation, changed) = (done.generation, done.changed);
                tracing::info!(generation, changed, "ruleset applied");
            }
            return None;
        };
        tracing::error!("datapath apply failed: {error}; retrying in {delay:?}");
        self.base.counters.apply_failed(&error);
        self.base
            .counters
            .datapath_behind
            .store(1, Ordering::Relaxed);
        self.base.status.datapath(Some(error.to_string()));
        done.pending.then(|| error.to_string())
    }

    /// Publishes the ruleset in force as the current generation.
    pub(super) fn put_in_force(&self) {
        let ruleset = self.reconciler.in_force().load();
        let generation = self.reconciler.generation();
        self.base.metrics.ruleset_applied(&ruleset);
        self.base.counters.ruleset_applied(generation, &ruleset);
        self.base.status.applied(generation);
    }

    /// Records how a reload ended.
    fn reloaded(&self, result: ReloadResult, error: Option<String>) {
        self.base.counters.reload(result);
        if result == ReloadResult::Applied {
            self.base.metrics.reload_succeeded();
        }
        self.base.status.reloaded(error);
    }
}
