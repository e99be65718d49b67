//! The Prometheus metrics: what needs Prometheus's own types — verdicts by
//! Tier, rule hits and dry-run verdicts (labels from the ruleset; rule hits
//! and dry-run verdicts capped, see [`MAX_RULE_SERIES`]), the verdict latency and kernel-write histograms,
//! the last reload's wall-clock time, build info and the `process_*`
//! metrics — and one collector over every counter set registered in the
//! [`Registry`] (queues and subsystems, each declared once by its owner
//! with `counters!`), read at scrape time; `tollgate status` reads the
//! subsystems' series from the same counters ([`Metrics::agent_series`]).
//! Never blocks a packet on I/O; label values come from bounded sets, and
//! the families of known label values are exported at zero from the start.
#![allow(clippy::disallowed_methods)] // stamps the last successful reload with the wall clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;

use super::health::Health;
use super::process::ProcessCollector;
use super::registry::Registry;
use crate::counters::{Kind, Scope, Series};
use crate::model::RuleAction;
use crate::packet::flow::Verdict;
use crate::ruleset::{DecidedBy, DryRunCause, PolicyRef};
use crate::ruleset::{RuleRef, Ruleset};

/// At most this many distinct (policy, rule) series of rule hits, and as
/// many of dry-run verdicts; further ones are counted under
/// `policy="_other", rule="_other"`.
pub const MAX_RULE_SERIES: usize = 500;

/// The `rule` label of a dry-run verdict that comes from the isolation a
/// dry-run Kubernetes NetworkPolicy would add (its default drop).
pub const DRY_RUN_ISOLATION_RULE: &str = "default-drop";

/// The `tier` label of decisions no rule made (no policy applies, or the
/// applied policies did not match: Antrea policies do not isolate).
pub const TIER_NONE: &str = "none";
/// The `tier` label of Kubernetes NetworkPolicy decisions, their implicit
/// default drop included.
pub const TIER_K8S: &str = "k8s-networkpolicy";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    action: String,
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    policy: String,
    rule: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpoofLabels {
    endpoint: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

/// The commit the binary was built from (`build.rs`), `unknown` outside git.
pub const COMMIT: &str = env!("TOLLGATE_COMMIT");

/// The latency histogram of one queue.
type LatencyFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// The metrics of one agent. Cheap to share (`Arc<Metrics>`).
#[derive(Debug)]
pub struct Metrics {
    registry: prometheus_client::registry::Registry,
    /// The unprefixed `process_*` metrics.
    process: prometheus_client::registry::Registry,
    verdicts: Family<VerdictLabels, Counter>,
    rule_hits: Family<RuleLabels, Counter>,
    rule_series: AtomicUsize,
    dry_run_verdicts: Family<RuleLabels, Counter>,
    dry_run_series: AtomicUsize,
    latency: LatencyFamily,
    last_reload_ok_time: Gauge<f64, std::sync::atomic::AtomicU64>,
    apply_duration: Histogram,
    last_apply_duration: Gauge<f64, std::sync::atomic::AtomicU64>,
    antispoof_dropped: Family<SpoofLabels, Counter>,
    antispoof_guarded: Gauge,
    antispoof_unguarded: Gauge,
    /// The endpoints whose `antispoof_dropped` series exist.
    antispoof_known: std::sync::Mutex<Vec<String>>,
    counters: Arc<Registry>,
    health: Arc<Health>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// 1 ms … ~65 s in factors of 2: a reconcile runs iptables-restore and
/// ipset, milliseconds when small, seconds for large sets.
fn apply_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 17))
}

fn latency_histogram() -> Histogram {
    // 2 µs … ~8 s in factors of 2.
    Histogram::new(exponential_buckets(2e-6, 2.0, 22))
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: prometheus_client::registry::Registry::with_prefix("tollgate"),
            process: prometheus_client::registry::Registry::default(),
            verdicts: Family::default(),
            rule_hits: Family::default(),
            rule_series: AtomicUsize::new(0),
            dry_run_verdicts: Family::default(),
            dry_run_series: AtomicUsize::new(0),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            last_reload_ok_time: Gauge::default(),
            apply_duration: apply_histogram(),
            last_apply_duration: Gauge::default(),
            antispoof_dropped: Family::default(),
            antispoof_guarded: Gauge::default(),
            antispoof_unguarded: Gauge::default(),
            antispoof_known: std::sync::Mutex::new(Vec::new()),
            counters: Arc::new(Registry::default()),
            health: Arc::new(Health::default()),
        };
        m.zero_known_series();
        let mut r = m.registry;
        r.register(
            "build",
            "The version and the commit tollgate was built from",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: COMMIT.into(),
            }),
        );
        r.register(
            "verdicts",
            "New connections decided, by action and by the Tier of the deciding rule",
            m.verdicts.clone(),
        );
        r.register(
            "rule_hits",
            "New connections decided by each rule (at most 500 series, the rest under _other)",
            m.rule_hits.clone(),
        );
        r.register(
            "dry_run_verdicts",
            "New connections a dry-run policy would have decided otherwise than the enforced policy did, by the dry-run rule and the action it would have taken (at most 500 series, the rest under _other)",
            m.dry_run_verdicts.clone(),
        );
        r.register(
            "verdict_latency_seconds",
            "Time from receiving a queued packet to handing its verdict to the kernel",
            m.latency.clone(),
        );
        r.register(
            "last_reload_success_timestamp_seconds",
            "Unix time of the last start or reload that applied",
            m.last_reload_ok_time.clone(),
        );
        r.register(
            "datapath_apply_duration_seconds",
            "Time of each kernel write (reconcile) that changed the kernel or failed",
            m.apply_duration.clone(),
        );
        r.register(
            "datapath_last_apply_duration_seconds",
            "Time of the last kernel write (reconcile) that changed the kernel or failed",
            m.last_apply_duration.clone(),
        );
        r.register(
            "antispoof_dropped_packets",
            "Packets the anti-spoofing guards dropped, by endpoint and reason: source (it sent from a source, IP or MAC, not its own), neighbour (it claimed an address not its own in ARP or neighbour discovery, or sent a router advertisement or redirect), address (someone else sent from its address); read from the guards' rule counters at every drift check, every 10 s without them, and before the guards change",
            m.antispoof_dropped.clone(),
        );
        r.register(
            "antispoof_guarded_endpoints",
            "Local endpoints whose interface (routed veth or bridge port) the anti-spoofing guards hold to their addresses",
            m.antispoof_guarded.clone(),
        );
        r.register(
            "antispoof_unguarded_endpoints",
            "Local endpoints (or some of their addresses) left unguarded because their interface is unknown or not their own; tollgate status names them and why",
            m.antispoof_unguarded.clone(),
        );
        r.register_collector(Box::new(CounterCollector(Arc::clone(&m.counters))));
        let mut process = m.process;
        process.register_collector(Box::new(ProcessCollector));
        Metrics {
            registry: r,
            process,
            ..m
        }
    }

    /// Creates the series of every known label value, so that they are
    /// exported at zero before the first event (a rate over a series that
    /// appears with its first increment misses that increment).
    fn zero_known_series(&self) {
        let tiers = crate::model::STATIC_TIERS
            .iter()
            .map(|(tier, _)| *tier)
            .chain([TIER_NONE, TIER_K8S]);
        for tier in tiers {
            for verdict in [Verdict::Allow, Verdict::Drop, Verdict::Reject] {
                let _ = self.verdicts.get_or_create(&VerdictLabels {
                    action: verdict.to_string(),
                    tier: tier.into(),
                });
            }
        }
    }

    /// The exposition text (OpenMetrics, which Prometheus scrapes natively).
    pub fn render(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        let _ = text::encode_registry(&mut out, &self.process);
        let _ = text::encode_eof(&mut out);
        out
    }

    /// The series `tollgate status` shows: every subsystem set's (the
    /// agent's, the sources', the audit writer's), each as the exposition
    /// names it (`tollgate_reloads_total{result="applied"}`) with the value
    /// read from the same counter the exposition reads, then the last
    /// kernel write's duration.
    pub fn agent_series(&self) -> Vec<(String, f64)> {
        let mut rows: Vec<(String, f64)> = self
            .counters
            .subsystem_samples()
            .into_iter()
            .map(|sample| (sample.series.exposed_name(), sample.value as f64))
            .collect();
        rows.push((
            "tollgate_datapath_last_apply_duration_seconds".into(),
            self.last_apply_duration.get(),
        ));
        rows
    }

    // ------------------------------------------------------------ workers

    /// The counter sets of every queue, exported at every scrape (and read
    /// by `tollgate status` and the shutdown log).
    pub fn counters(&self) -> &Arc<Registry> {
        &self.counters
    }

    /// Every worker's heartbeat, read by `/livez` and `status --check live`.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// One new connection decided: `rule` is the deciding rule, `None` for
    /// no rule; `k8s_default` marks the implicit Kubernetes default drop.
    /// For the tests: workers go through [`WorkerMetrics`], which caches
    /// the series.
    #[cfg(test)]
    pub(crate) fn verdict(&self, verdict: Verdict, rule: Option<&RuleRef>, k8s_default: bool) {
        let (by_tier, by_rule) = self.verdict_series(verdict, rule, k8s_default);
        by_tier.inc();
        if let Some(by_rule) = by_rule {
            by_rule.inc();
        }
    }

    /// The verdict counter and the rule-hit counter a decision increments.
    fn verdict_series(
        &self,
        verdict: Verdict,
        rule: Option<&RuleRef>,
        k8s_default: bool,
    ) -> (Counter, Option<Counter>) {
        let tier = match rule {
            Some(rule) => rule.tier.as_deref().unwrap_or(TIER_K8S),
            None if k8s_default => TIER_K8S,
            None => TIER_NONE,
        };
        let action = verdict.to_string();
        let by_tier = self.verdicts.get_or_create_owned(&VerdictLabels {
            action: action.clone(),
            tier: tier.to_string(),
        });
        let by_rule = rule.map(|rule| self.rule_hits_of(rule, action));
        (by_tier, by_rule)
    }

    /// The rule-hit counter of `rule` deciding `action`: its own while
    /// fewer than [`MAX_RULE_SERIES`] exist, else the `_other` one.
    fn rule_hits_of(&self, rule: &RuleRef, action: String) -> Counter {
        capped(
            &self.rule_hits,
            &self.rule_series,
            RuleLabels {
                policy: rule.policy.to_string(),
                rule: rule_label(rule),
                action,
            },
        )
    }

    /// The dry-run counter of `cause` (a dry-run rule, or the isolation of
    /// a dry-run policy) would-be deciding `verdict`, capped as rule hits
    /// are.
    fn dry_run_of(&self, cause: &DryRunCause, verdict: Verdict) -> Counter {
        let (policy, rule) = match cause {
            DryRunCause::Rule { rule } => (&rule.policy, rule_label(rule)),
            DryRunCause::Isolation { policy } => (&**policy, DRY_RUN_ISOLATION_RULE.to_string()),
        };
        capped(
            &self.dry_run_verdicts,
            &self.dry_run_series,
            RuleLabels {
                policy: policy.to_string(),
                rule,
                action: verdict.to_string(),
            },
        )
    }

    /// The histogram of the time a queued packet of `queue` waits in
    /// userspace for its verdict.
    pub fn queue_latency(&self, queue: u16) -> Histogram {
        self.latency.get_or_create_owned(&QueueLabels {
            queue: queue.to_string(),
        })
    }

    // ------------------------------------------------------------ agent

    /// `ruleset` was put in force. The verdict series of each of its
    /// Tiers (custom ones included) and the rule-hit series of each of its
    /// Allow, Drop and Reject rules (up to [`MAX_RULE_SERIES`] in all) are
    /// created at zero, so the first decision of a rule is a change a rate
    /// sees. A `Pass` rule decides nothing: it has none.
    pub fn ruleset_applied(&self, ruleset: &Ruleset) {
        let tiers: std::collections::BTreeSet<&str> = ruleset
            .policies()
            .iter()
            .filter_map(|p| p.tier.as_deref())
            .collect();
        for tier in tiers {
            for verdict in [Verdict::Allow, Verdict::Drop, Verdict::Reject] {
                let _ = self.verdicts.get_or_create(&VerdictLabels {
                    action: verdict.to_string(),
                    tier: tier.into(),
                });
            }
        }
        for rule in ruleset.rule_refs() {
            let verdict = match rule.action {
                RuleAction::Allow => Verdict::Allow,
                RuleAction::Drop => Verdict::Drop,
                RuleAction::Reject => Verdict::Reject,
                RuleAction::Pass => continue,
            };
            if rule.dry_run {
                let cause = DryRunCause::Rule {
                    rule: Arc::new(rule.clone()),
                };
                let _ = self.dry_run_of(&cause, verdict);
            } else {
                let _ = self.rule_hits_of(rule, verdict.to_string());
            }
        }
    }

    /// A kernel write (reconcile) took `took`.
    pub fn datapath_applied(&self, took: Duration) {
        self.apply_duration.observe(took.as_secs_f64());
        self.last_apply_duration.set(took.as_secs_f64());
    }

    /// Stamps a start or reload that applied with the wall clock.
    pub fn reload_succeeded(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_reload_ok_time.set(now);
    }
    /// The anti-spoofing guards hold `endpoints` (their series exported
    /// from zero, one per drop reason of `reasons`; those of endpoints no
    /// longer guarded removed) and leave `unguarded` endpoints unguarded.
    pub fn antispoof_endpoints(
        &self,
        endpoints: &[String],
        unguarded: usize,
        reasons: &[&'static str],
    ) {
        self.antispoof_guarded.set(endpoints.len() as i64);
        self.antispoof_unguarded.set(unguarded as i64);
        let wanted: Vec<SpoofLabels> = endpoints
            .iter()
            .flat_map(|endpoint| {
                reasons.iter().map(|reason| SpoofLabels {
                    endpoint: endpoint.clone(),
                    reason: (*reason).into(),
                })
            })
            .collect();
        let mut known = self
            .antispoof_known
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for endpoint in known.iter().filter(|e| !endpoints.contains(e)) {
            for reason in reasons {
                self.antispoof_dropped.remove(&SpoofLabels {
                    endpoint: endpoint.clone(),
                    reason: (*reason).into(),
                });
            }
        }
        *known = endpoints.to_vec();
        for labels in &wanted {
            let _ = self.antispoof_dropped.get_or_create(labels);
        }
    }

    /// Counts `gained` packets the guards dropped for `endpoint` and
    /// `reason`.
    pub fn antispoof_dropped(&self, endpoint: &str, reason: &str, gained: u64) {
        self.antispoof_dropped
            .get_or_create(&SpoofLabels {
                endpoint: endpoint.into(),
                reason: reason.into(),
            })
            .inc_by(gained);
    }

    /// The drops counted for `endpoint`, by reason label (of `reasons`).
    pub fn antispoof_dropped_of(
        &self,
        endpoint: &str,
        reasons: &[&'static str],
    ) -> Vec<(&'static str, u64)> {
        reasons
            .iter()
            .map(|reason| {
                let labels = SpoofLabels {
                    endpoint: endpoint.into(),
                    reason: (*reason).into(),
                };
                (*reason, self.antispoof_dropped.get_or_create(&labels).get())
            })
            .collect()
    }
}

/// A cached rule (kept alive so its address stays unique), its verdict
/// counter and its rule-hit counter.
type CachedRule = (Weak<RuleRef>, Counter, Option<Counter>);

/// One connection worker's view of the verdict metrics: a cache of the
/// counters each (rule, verdict) increments, so a decided connection costs
/// two atomic increments and a small hash lookup instead of building label
/// strings. The cache holds a weak reference to the rule (its allocation,
/// so its address is not reused while cached, but not the rule). A rule no
/// ruleset holds any more is gone: such entries are dropped whenever a new
/// rule is cached, so policy reloads do not pile up entries; and the cache
/// is emptied if it reaches [`WorkerMetrics::MAX_CACHED`] entries all the
/// same.
pub struct WorkerMetrics {
    metrics: Arc<Metrics>,
    rules: HashMap<(usize, Verdict), CachedRule>,
    unattributed: HashMap<(Verdict, bool), Counter>,
    /// Dry-run counters by cause (its allocation) and verdict.
    dry_runs: HashMap<(usize, Verdict), (DryRunHeld, Counter)>,
}

/// A cached dry-run cause, held weakly as a cached rule is.
enum DryRunHeld {
    Rule(Weak<RuleRef>),
    Isolation(Weak<PolicyRef>),
}

impl DryRunHeld {
    fn of(cause: &DryRunCause) -> (usize, DryRunHeld) {
        match cause {
            DryRunCause::Rule { rule } => (
                Arc::as_ptr(rule) as usize,
                DryRunHeld::Rule(Arc::downgrade(rule)),
            ),
            DryRunCause::Isolation { policy } => (
                Arc::as_ptr(policy) as usize,
                DryRunHeld::Isolation(Arc::downgrade(policy)),
            ),
        }
    }

    fn alive(&self) -> bool {
        match self {
            DryRunHeld::Rule(rule) => rule.strong_count() > 0,
            DryRunHeld::Isolation(policy) => policy.strong_count() > 0,
        }
    }
}

impl WorkerMetrics {
    pub const MAX_CACHED: usize = 4096;

    pub fn new(metrics: Arc<Metrics>) -> WorkerMetrics {
        WorkerMetrics {
            metrics,
            rules: HashMap::new(),
            unattributed: HashMap::new(),
            dry_runs: HashMap::new(),
        }
    }

    /// A connection the dry-run policies would have decided `verdict`,
    /// because of `cause`.
    pub fn dry_run(&mut self, verdict: Verdict, cause: &DryRunCause) {
        let (address, held) = DryRunHeld::of(cause);
        let key = (address, verdict);
        if !self.dry_runs.contains_key(&key) {
            self.dry_runs.retain(|_, (held, _)| held.alive());
            if self.dry_runs.len() >= Self::MAX_CACHED {
                self.dry_runs.clear();
            }
        }
        let metrics = &self.metrics;
        self.dry_runs
            .entry(key)
            .or_insert_with(|| (held, metrics.dry_run_of(cause, verdict)))
            .1
            .inc();
    }

    /// A connection decided by `by`.
    pub fn decided(&mut self, verdict: Verdict, by: &DecidedBy) {
        match by {
            DecidedBy::Rule(rule) => {
                let key = (Arc::as_ptr(rule) as usize, verdict);
                if !self.rules.contains_key(&key) {
                    self.rules
                        .retain(|_, (cached, _, _)| cached.strong_count() > 0);
                    if self.rules.len() >= Self::MAX_CACHED {
                        self.rules.clear();
                    }
                }
                let metrics = &self.metrics;
                let (_, by_tier, by_rule) = self.rules.entry(key).or_insert_with(|| {
                    let (by_tier, by_rule) = metrics.verdict_series(verdict, Some(rule), false);
                    (Arc::downgrade(rule), by_tier, by_rule)
                });
                by_tier.inc();
                if let Some(by_rule) = by_rule {
                    by_rule.inc();
                }
            }
            DecidedBy::K8sDefaultDrop | DecidedBy::NoRule => {
                let k8s_default = *by == DecidedBy::K8sDefaultDrop;
                let metrics = &self.metrics;
                self.unattributed
                    .entry((verdict, k8s_default))
                    .or_insert_with(|| metrics.verdict_series(verdict, None, k8s_default).0)
                    .inc();
            }
        }
    }
}

/// A rule's `rule` label: its name, else `Direction[index]` (Kubernetes
/// rules have none).
fn rule_label(rule: &RuleRef) -> String {
    rule.name
        .clone()
        .unwrap_or_else(|| format!("{}[{}]", rule.direction.as_str(), rule.index))
}

/// The counter of `labels` in `family`: its own while fewer than
/// [`MAX_RULE_SERIES`] are counted in `series`, else the `_other` one of
/// its action.
fn capped(
    family: &Family<RuleLabels, Counter>,
    series: &AtomicUsize,
    labels: RuleLabels,
) -> Counter {
    if let Some(counter) = family.get(&labels) {
        return counter.clone();
    }
    let labels = if series.fetch_add(1, Ordering::Relaxed) < MAX_RULE_SERIES {
        labels
    } else {
        series.fetch_sub(1, Ordering::Relaxed);
        RuleLabels {
            policy: "_other".into(),
            rule: "_other".into(),
            action: labels.action,
        }
    };
    family.get_or_create_owned(&labels)
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every registered counter set, read at scrape time (no second copy to
/// keep in sync): one family per metric name, a `queue` label on the series
/// of per-queue sets.
struct CounterCollector(Arc<Registry>);

impl std::fmt::Debug for CounterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CounterCollector")
    }
}

/// The rows of one family: labels and value.
type Rows = Vec<(Vec<(&'static str, String)>, u64)>;

impl Collector for CounterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut families: Vec<(&'static Series, Rows)> = Vec::new();
        let subsystems = std::iter::once((None, self.0.subsystem_samples()));
        let queues = self
            .0
            .snapshot()
            .into_iter()
            .map(|q| (Some(q.queue), q.samples));
        for (queue, samples) in subsystems.chain(queues) {
            for sample in samples {
                let mut labels = Vec::new();
                if let (Scope::Queue, Some(queue)) = (sample.scope, queue) {
                    labels.push(("queue", queue.to_string()));
                }
                if let Some((key, value)) = sample.series.label {
                    labels.push((key, value.to_string()));
                }
                let metric = sample.series.metric;
                match families.iter_mut().find(|(s, _)| s.metric == metric) {
                    Some((_, rows)) => rows.push((labels, sample.value)),
                    None => families.push((sample.series, vec![(labels, sample.value)])),
                }
            }
        }
        for (series, rows) in families {
            let kind = match series.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut family = encoder.encode_descriptor(series.metric, series.help, None, kind)?;
            match rows.as_slice() {
                // A set with at most one instance and no label of its own.
                [(labels, value)] if labels.is_empty() => {
                    encode_value(series.kind, *value, family)?
                }
                _ => {
                    for (labels, value) in rows {
                        encode_value(series.kind, value, family.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_value(kind: Kind, value: u64, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
    match kind {
        Kind::Counter => ConstCounter::new(value).encode(encoder),
        Kind::Gauge => ConstGauge::new(saturating_i64(value)).encode(encoder),
    }
}

#[cfg(test)]
mod tests;
