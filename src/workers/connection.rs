//! The connection queues' handler: the first packet of a connection goes
//! through the pure [`crate::decide::step`] with the policy in force and the
//! FQDN table; it counts, records verdict metrics and hands audit records,
//! the decision (to [`super::observe`]) and cacheable verdicts (to
//! [`super::cache`], for the sets of the generation of the ruleset that
//! decided) on without waiting. It never
//! blocks on I/O or logs per packet.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

use super::audit::AuditSink;
use super::cache::{CacheSink, CountFate, Fate, Sightings};
use super::nfqueue::Queue;
use super::observe::ObserveSink;
use super::runtime::{self, wall_clock, Handler, QueueError, QueueSpec, Verdicts};
use crate::config::DatapathConfig;
use crate::counters;
use crate::decide::{step, Outcome, Policy, StepConfig};
use crate::fqdn::FqdnTable;
use crate::marks::FailMode;
use crate::observe::Observed;
use crate::packet::flow::Verdict;
use crate::packet::{Action, Queued};
use crate::telemetry::{Metrics, WorkerMetrics};

/// Bytes of each packet copied to userspace: IPv4/IPv6 header with
/// extension headers and the transport header.
const COPY_RANGE: u16 = 128;
/// Packets the kernel holds per queue before it drops (fail-closed) or
/// accepts (fail-open) new ones.
const QUEUE_MAX_LEN: u32 = 4096;

counters! {
    /// What one connection queue's worker decided.
    pub struct ConnectionCounters: one per queue {
        allowed: Counter "queue_allowed" = "New connections allowed",
        dropped: Counter "queue_dropped" = "New connections dropped",
        rejected: Counter "queue_rejected" = "New connections rejected",
        malformed: Counter "queue_malformed" = "Queued packets that could not be parsed (fail mode applied)",
        bypassed: Counter "queue_bypassed" = "Queued packets accepted without a decision (malformed, fail-open)",
        cache_misses: Counter "verdict_cache_misses" = "New connections a worker decided while the verdict cache was on (the kernel's cache had no entry for them)",
        cache_inserted: Counter "verdict_cache_inserts" = "Verdicts added to the kernel's verdict cache (or whose entry was refreshed)",
        cache_full: Counter "verdict_cache_full" = "Verdicts the kernel refused to cache because the set held verdictCache.maxEntries entries (the next connection is decided by a worker again)",
        cache_failed: Counter "verdict_cache_failed" = "Verdicts not cached because their set was replaced meanwhile (a ruleset change) or the write failed",
        cache_dropped: Counter "verdict_cache_dropped" = "Verdicts not cached because the cache writer was behind",
    }
}

impl CountFate for ConnectionCounters {
    fn count(&self, fate: Fate) {
        let counter = match fate {
            Fate::Inserted => &self.cache_inserted,
            Fate::Full => &self.cache_full,
            Fate::Failed => &self.cache_failed,
            Fate::Dropped => &self.cache_dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl ConnectionCounters {
    fn record(&self, outcome: &Outcome, action: Action) {
        let counter = match outcome {
            Outcome::Decided {
                verdict: Verdict::Allow,
                ..
            } => &self.allowed,
            Outcome::Decided {
                verdict: Verdict::Drop,
                ..
            } => &self.dropped,
            Outcome::Decided {
                verdict: Verdict::Reject,
                ..
            } => &self.rejected,
            Outcome::Malformed(_) => &self.malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if action == Action::Accept {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Where a worker reports what it decided: the metrics (and the counter
/// registry in them), `tollgate observe`, and the audit log when one is
/// configured.
#[derive(Clone)]
pub struct Observers {
    pub metrics: Arc<Metrics>,
    pub observe: ObserveSink,
    pub audit: Option<AuditSink>,
    /// Where cacheable verdicts go; `None` when the cache is off.
    pub cache: Option<CacheSink>,
}

/// A running connection worker.
pub struct Worker {
    pub queue: u16,
    pub stats: Arc<ConnectionCounters>,
}

impl Worker {
    /// Binds `queue` (errors are returned here, before any thread runs)
    /// and starts the thread. The thread runs until the process exits;
    /// the runtime binds the queue again if the worker panics.
    pub fn spawn<P>(
        queue_number: u16,
        datapath: &DatapathConfig,
        policy: Arc<ArcSwap<P>>,
        fqdn: Arc<FqdnTable>,
        observers: Observers,
    ) -> Result<Worker, QueueError>
    where
        P: Policy + Send + Sync + 'static,
    {
        let spec = QueueSpec {
            queue: queue_number,
            name: "queue",
            copy_range: COPY_RANGE,
            max_len: QUEUE_MAX_LEN,
            fail_open: datapath.fail_mode == FailMode::Open,
            // Headers only, never rewritten: a GSO packet need not be cut
            // into segments first.
            gso: true,
            receive_buffer: datapath.queue_receive_buffer_bytes,
        };
        let config = StepConfig {
            marks: datapath.mark_mask,
            fail_mode: datapath.fail_mode,
        };
        let stats = Arc::new(ConnectionCounters::default());
        let metrics = Arc::clone(&observers.metrics);
        let handler_stats = Arc::clone(&stats);
        let open = move || {
            let handler = Connections {
                policy: Arc::clone(&policy),
                fqdn: Arc::clone(&fqdn),
                config,
                stats: Arc::clone(&handler_stats),
                metrics: WorkerMetrics::new(Arc::clone(&observers.metrics)),
                observe: observers.observe.clone(),
                audit: observers.audit.clone(),
                cache: observers.cache.clone(),
                sightings: Sightings::new(),
            };
            Ok((Queue::open(spec)?, handler))
        };
        runtime::spawn(open, Arc::clone(&stats) as _, &metrics)?;
        Ok(Worker {
            queue: queue_number,
            stats,
        })
    }
}

/// The handler of one connection queue.
struct Connections<P> {
    policy: Arc<ArcSwap<P>>,
    fqdn: Arc<FqdnTable>,
    config: StepConfig,
    stats: Arc<ConnectionCounters>,
    metrics: WorkerMetrics,
    observe: ObserveSink,
    audit: Option<AuditSink>,
    cache: Option<CacheSink>,
    /// The cacheable tuples this worker has decided.
    sightings: Sightings,
}

impl<P: Policy> Handler for Connections<P> {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let policy = self.policy.load();
        let time = wall_clock();
        let step = step(
            &packet,
            &**policy,
            &self.fqdn.lookup(now),
            &self.config,
            time,
        );
        out.give(packet.id, step.action);
        // The generation of the ruleset that decided, loaded once with it.
        let decided = matches!(step.outcome, Outcome::Decided { .. });
        if let (Some(sink), Some(cache), true) = (&self.cache, policy.verdict_cache(), decided) {
            self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
            if let Some(entry) = step.cache {
                if self.sightings.seen_before(&entry, cache.generation) {
                    sink.offer(entry, cache, Arc::clone(&self.stats) as Arc<dyn CountFate>);
                }
            }
        }
        self.stats.record(&step.outcome, step.action);
        if let Outcome::Decided { verdict, by } = &step.outcome {
            self.metrics.decided(*verdict, by);
            if let Some(flow) = step.flow {
                self.observe.offer(Observed {
                    time,
                    flow,
                    verdict: *verdict,
                    by: by.clone(),
                    request: None,
                });
            }
        }
        if let Some(dry_run) = &step.dry_run {
            self.metrics.dry_run(dry_run.verdict, &dry_run.cause);
        }
        if let Some(audit) = &self.audit {
            let dry_run = step.dry_run.map(|d| d.record);
            for record in step.audit.into_iter().chain(dry_run) {
                audit.offer(record);
            }
        }
    }
}
