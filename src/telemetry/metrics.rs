//! The Prometheus metrics: verdicts by Tier, rule hits (capped, see
//! [`MAX_RULE_SERIES`]), the verdict latency histogram, agent-level events
//! (build, reloads and their time, datapath apply durations, enforced
//! endpoints, Kubernetes sync), one collector over every registered counter
//! set, read at scrape time, and the `process_*` metrics; `tollgate status`
//! reads the agent-level series from the same counters
//! ([`Metrics::agent_series`]). Never blocks a
//! packet on I/O; label values come from bounded sets, and the families of
//! known label values are exported at zero from the start.
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

use super::counters::{Kind, Scope, Series};
use super::health::Health;
use super::process::ProcessCollector;
use super::registry::Registry;
use crate::model::RuleAction;
use crate::packet::flow::Verdict;
use crate::ruleset::DecidedBy;
use crate::ruleset::{RuleRef, Ruleset};

/// At most this many distinct (policy, rule) series; hits of further rules
/// are counted under `policy="_other", rule="_other"`.
pub const MAX_RULE_SERIES: usize = 500;

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
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
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

/// Every `step` label of `datapath_apply_failures`.
const APPLY_STEPS: [&str; 6] = [
    "read",
    "ipset_prepare",
    "iptables",
    "ip6tables",
    "ebtables",
    "ipset_cleanup",
];

/// Why an audit line was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditSkip {
    /// The channel to the writer was full (workers never wait for it).
    Queue,
    /// The rate limit was exhausted.
    Rate,
    /// Writing the file failed.
    Io,
}

impl AuditSkip {
    const ALL: [AuditSkip; 3] = [AuditSkip::Queue, AuditSkip::Rate, AuditSkip::Io];

    fn label(self) -> &'static str {
        match self {
            AuditSkip::Queue => "queue_full",
            AuditSkip::Rate => "rate_limit",
            AuditSkip::Io => "io_error",
        }
    }
}

/// What became of one Kubernetes Event report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeEvent {
    /// A new Event was created.
    Created,
    /// An Event's count was raised.
    Updated,
    /// The API server refused or did not answer.
    Failed,
    /// The queue to the Event writer was full (the watch never waits).
    Dropped,
}

impl KubeEvent {
    const ALL: [KubeEvent; 4] = [
        KubeEvent::Created,
        KubeEvent::Updated,
        KubeEvent::Failed,
        KubeEvent::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            KubeEvent::Created => "created",
            KubeEvent::Updated => "updated",
            KubeEvent::Failed => "failed",
            KubeEvent::Dropped => "dropped",
        }
    }
}

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
    latency: LatencyFamily,
    generation: Gauge,
    policies: Gauge,
    rules: Gauge,
    reloads: Family<ResultLabels, Counter>,
    last_reload_ok: Gauge,
    last_reload_ok_time: Gauge<f64, std::sync::atomic::AtomicU64>,
    apply_duration: Histogram,
    last_apply_duration: Gauge<f64, std::sync::atomic::AtomicU64>,
    enforced_endpoints: Gauge,
    kubernetes_synced: Gauge,
    datapath_apply_failures: Family<StepLabels, Counter>,
    datapath_behind: Gauge,
    datapath_drift_repairs: Counter,
    bridge_netfilter_off: Gauge,
    antispoof_dropped: Family<SpoofLabels, Counter>,
    antispoof_guarded: Gauge,
    antispoof_unguarded: Gauge,
    /// The endpoints whose `antispoof_dropped` series exist.
    antispoof_known: std::sync::Mutex<Vec<String>>,
    verdict_cache_hits: Counter,
    audit_written: Counter,
    audit_skipped: Family<ReasonLabels, Counter>,
    kubernetes_skipped: Gauge,
    kubernetes_watch_errors: Counter,
    kubernetes_events: Family<ResultLabels, Counter>,
    docker_api_errors: Counter,
    docker_containers: Gauge,
    docker_connected: Gauge,
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
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            generation: Gauge::default(),
            policies: Gauge::default(),
            rules: Gauge::default(),
            reloads: Family::default(),
            last_reload_ok: Gauge::default(),
            last_reload_ok_time: Gauge::default(),
            apply_duration: apply_histogram(),
            last_apply_duration: Gauge::default(),
            enforced_endpoints: Gauge::default(),
            kubernetes_synced: Gauge::default(),
            datapath_apply_failures: Family::default(),
            datapath_behind: Gauge::default(),
            datapath_drift_repairs: Counter::default(),
            bridge_netfilter_off: Gauge::default(),
            antispoof_dropped: Family::default(),
            antispoof_guarded: Gauge::default(),
            antispoof_unguarded: Gauge::default(),
            antispoof_known: std::sync::Mutex::new(Vec::new()),
            verdict_cache_hits: Counter::default(),
            audit_written: Counter::default(),
            audit_skipped: Family::default(),
            kubernetes_skipped: Gauge::default(),
            kubernetes_watch_errors: Counter::default(),
            kubernetes_events: Family::default(),
            docker_api_errors: Counter::default(),
            docker_containers: Gauge::default(),
            docker_connected: Gauge::default(),
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
            "verdict_latency_seconds",
            "Time from receiving a queued packet to handing its verdict to the kernel",
            m.latency.clone(),
        );
        r.register(
            "ruleset_generation",
            "Generation of the ruleset in force (1 at start, +1 per applied reload)",
            m.generation.clone(),
        );
        r.register(
            "policies",
            "Policies in the ruleset in force",
            m.policies.clone(),
        );
        r.register(
            "rules",
            "Compiled rule instances in the ruleset in force",
            m.rules.clone(),
        );
        r.register(
            "reloads",
            "Reloads of the policy directory, by result (applied, rejected, failed)",
            m.reloads.clone(),
        );
        r.register(
            "last_reload_success",
            "1 when the last reload (or the start) applied, 0 when it was rejected or failed",
            m.last_reload_ok.clone(),
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
            "enforced_endpoints",
            "Endpoints this node enforces policy for in the ruleset in force (the Node and its local Pods and ExternalEntities)",
            m.enforced_endpoints.clone(),
        );
        r.register(
            "kubernetes_synced",
            "1 while the Kubernetes source is in step with the API server (a complete snapshot published, no list or watch failing since), 0 before, while a watch fails until its kind is listed again, and in standalone mode",
            m.kubernetes_synced.clone(),
        );
        r.register(
            "datapath_apply_failures",
            "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
            m.datapath_apply_failures.clone(),
        );
        r.register(
            "datapath_behind",
            "1 while the kernel does not match the desired state (the last apply failed and a retry is scheduled)",
            m.datapath_behind.clone(),
        );
        r.register(
            "datapath_drift_repairs",
            "Times the periodic check found the kernel state changed behind the agent's back (datapath.driftCheckSeconds) and restored it",
            m.datapath_drift_repairs.clone(),
        );
        r.register(
            "bridge_netfilter_off",
            "1 while the namespace has a Linux bridge whose internal traffic bypasses iptables (br_netfilter not loaded, or net.bridge.bridge-nf-call-ip(6)tables = 0): container-to-container traffic on one bridge is not enforced",
            m.bridge_netfilter_off.clone(),
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
        r.register(
            "verdict_cache_hits",
            "New connections the kernel answered from the verdict cache without a worker (the cache rules' packet counters, read at every drift check, every 10 s without them, and before a ruleset change replaces the rules)",
            m.verdict_cache_hits.clone(),
        );
        r.register(
            "audit_lines_written",
            "Audit log lines written",
            m.audit_written.clone(),
        );
        r.register(
            "audit_lines_skipped",
            "Audit log lines not written, by reason",
            m.audit_skipped.clone(),
        );
        r.register(
            "kubernetes_objects_skipped",
            "Objects from the API server left out of the last snapshot because they are invalid",
            m.kubernetes_skipped.clone(),
        );
        r.register(
            "kubernetes_watch_errors",
            "Failed list or watch requests to the API server (each is retried)",
            m.kubernetes_watch_errors.clone(),
        );
        r.register(
            "kubernetes_events",
            "Kubernetes Events on skipped or partly enforced objects, by result (created, updated: count raised, failed: refused by the API server, dropped: queue full)",
            m.kubernetes_events.clone(),
        );
        r.register(
            "docker_api_errors",
            "Failed list, inspect or event-stream requests to the Docker API (docker.enabled); the last inventory stays enforced and the request is retried with backoff",
            m.docker_api_errors.clone(),
        );
        r.register(
            "docker_containers",
            "Containers in the last Docker inventory published (docker.enabled)",
            m.docker_containers.clone(),
        );
        r.register(
            "docker_connected",
            "1 while the Docker API answers (docker.enabled), 0 while it is unreachable and the last inventory stays enforced",
            m.docker_connected.clone(),
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
        for result in ReloadResult::ALL {
            let _ = self.reloads.get_or_create(&ResultLabels {
                result: result.label().into(),
            });
        }
        for step in APPLY_STEPS {
            let _ = self
                .datapath_apply_failures
                .get_or_create(&StepLabels { step: step.into() });
        }
        for event in KubeEvent::ALL {
            let _ = self.kubernetes_events.get_or_create(&ResultLabels {
                result: event.label().into(),
            });
        }
        for reason in AuditSkip::ALL {
            let _ = self.audit_skipped.get_or_create(&ReasonLabels {
                reason: reason.label().into(),
            });
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

    /// The agent-level series `tollgate status` shows, each as the
    /// exposition names it (`tollgate_reloads_total{result="applied"}`)
    /// with the value read from the same counter or gauge the exposition
    /// reads: reloads by result and the last one's success, the last
    /// kernel write's duration, failed kernel writes by step, drift
    /// repairs, audit lines written and skipped by reason, Kubernetes
    /// watch errors and Events by result.
    pub fn agent_series(&self) -> Vec<(String, f64)> {
        let counter = |name: &str, label: Option<(&str, &str)>, value: u64| {
            let labels = label.map_or(String::new(), |(k, v)| format!("{{{k}=\"{v}\"}}"));
            (format!("tollgate_{name}_total{labels}"), value as f64)
        };
        let mut rows = Vec::new();
        for result in ReloadResult::ALL {
            let value = self
                .reloads
                .get_or_create(&ResultLabels {
                    result: result.label().into(),
                })
                .get();
            rows.push(counter("reloads", Some(("result", result.label())), value));
        }
        rows.push((
            "tollgate_last_reload_success".into(),
            self.last_reload_ok.get() as f64,
        ));
        rows.push((
            "tollgate_datapath_last_apply_duration_seconds".into(),
            self.last_apply_duration.get(),
        ));
        for step in APPLY_STEPS {
            let value = self
                .datapath_apply_failures
                .get_or_create(&StepLabels { step: step.into() })
                .get();
            rows.push(counter(
                "datapath_apply_failures",
                Some(("step", step)),
                value,
            ));
        }
        rows.push(counter(
            "datapath_drift_repairs",
            None,
            self.datapath_drift_repairs.get(),
        ));
        rows.push(counter(
            "audit_lines_written",
            None,
            self.audit_written.get(),
        ));
        for reason in AuditSkip::ALL {
            let value = self
                .audit_skipped
                .get_or_create(&ReasonLabels {
                    reason: reason.label().into(),
                })
                .get();
            rows.push(counter(
                "audit_lines_skipped",
                Some(("reason", reason.label())),
                value,
            ));
        }
        rows.push(counter(
            "kubernetes_watch_errors",
            None,
            self.kubernetes_watch_errors.get(),
        ));
        for event in KubeEvent::ALL {
            let value = self
                .kubernetes_events
                .get_or_create(&ResultLabels {
                    result: event.label().into(),
                })
                .get();
            rows.push(counter(
                "kubernetes_events",
                Some(("result", event.label())),
                value,
            ));
        }
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
        let labels = RuleLabels {
            policy: rule.policy.to_string(),
            rule: rule
                .name
                .clone()
                .unwrap_or_else(|| format!("{}[{}]", rule.direction.as_str(), rule.index)),
            action,
        };
        if let Some(counter) = self.rule_hits.get(&labels) {
            return counter.clone();
        }
        let labels = if self.rule_series.fetch_add(1, Ordering::Relaxed) < MAX_RULE_SERIES {
            labels
        } else {
            self.rule_series.fetch_sub(1, Ordering::Relaxed);
            RuleLabels {
                policy: "_other".into(),
                rule: "_other".into(),
                action: labels.action,
            }
        };
        self.rule_hits.get_or_create_owned(&labels)
    }

    /// The histogram of the time a queued packet of `queue` waits in
    /// userspace for its verdict.
    pub fn queue_latency(&self, queue: u16) -> Histogram {
        self.latency.get_or_create_owned(&QueueLabels {
            queue: queue.to_string(),
        })
    }

    // ------------------------------------------------------------ agent

    /// `ruleset` was put in force as `generation`. The verdict series of
    /// each of its Tiers (custom ones included) and the rule-hit series of
    /// each of its Allow, Drop and Reject rules (up to [`MAX_RULE_SERIES`]
    /// in all) are created at zero, so the first decision of a rule is a
    /// change a rate sees. A `Pass` rule decides nothing: it has none.
    pub fn ruleset_applied(&self, generation: u64, ruleset: &Ruleset) {
        let count = |n: usize| saturating_i64(n as u64);
        self.generation.set(saturating_i64(generation));
        self.policies.set(count(ruleset.policies().len()));
        self.rules.set(count(ruleset.rule_count()));
        self.enforced_endpoints
            .set(count(ruleset.endpoints().len()));
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
            let _ = self.rule_hits_of(rule, verdict.to_string());
        }
    }

    /// A kernel write (reconcile) took `took`.
    pub fn datapath_applied(&self, took: Duration) {
        self.apply_duration.observe(took.as_secs_f64());
        self.last_apply_duration.set(took.as_secs_f64());
    }

    /// Stamps the last successful start or reload with the wall clock.
    fn reload_succeeded(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_reload_ok_time.set(now);
    }

    /// A reload (not the start) ended: `applied`, `rejected` (invalid
    /// policies) or `failed` (datapath or node lookup).
    pub fn reload(&self, result: ReloadResult) {
        self.reloads
            .get_or_create(&ResultLabels {
                result: result.label().into(),
            })
            .inc();
        self.last_reload_ok
            .set(i64::from(result == ReloadResult::Applied));
        if result == ReloadResult::Applied {
            self.reload_succeeded();
        }
    }

    /// The start applied its ruleset.
    pub fn started(&self) {
        self.last_reload_ok.set(1);
        self.reload_succeeded();
    }

    /// A reconcile failed.
    pub fn datapath_apply_failed(&self, error: &crate::datapath::ApplyError) {
        self.datapath_apply_failures
            .get_or_create(&StepLabels {
                step: error.label().into(),
            })
            .inc();
    }

    /// The drift check found the kernel changed and a repair was started.
    pub fn datapath_drift_repaired(&self) {
        self.datapath_drift_repairs.inc();
    }

    /// Whether traffic inside a bridge bypasses iptables.
    pub fn bridge_netfilter_off(&self, off: bool) {
        self.bridge_netfilter_off.set(i64::from(off));
    }

    /// The anti-spoofing guards hold `endpoints` (their series exported
    /// from zero, those of endpoints no longer guarded removed) and leave
    /// `unguarded` endpoints unguarded.
    pub fn antispoof_endpoints(&self, endpoints: &[String], unguarded: usize) {
        self.antispoof_guarded.set(endpoints.len() as i64);
        self.antispoof_unguarded.set(unguarded as i64);
        let reasons = crate::datapath::antispoof::Reason::ALL;
        let wanted: Vec<SpoofLabels> = endpoints
            .iter()
            .flat_map(|endpoint| {
                reasons.iter().map(|reason| SpoofLabels {
                    endpoint: endpoint.clone(),
                    reason: reason.label().into(),
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
                    reason: reason.label().into(),
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

    /// The drops counted for `endpoint`, by reason label.
    pub fn antispoof_dropped_of(&self, endpoint: &str) -> Vec<(&'static str, u64)> {
        crate::datapath::antispoof::Reason::ALL
            .iter()
            .map(|reason| {
                let labels = SpoofLabels {
                    endpoint: endpoint.into(),
                    reason: reason.label().into(),
                };
                (
                    reason.label(),
                    self.antispoof_dropped.get_or_create(&labels).get(),
                )
            })
            .collect()
    }

    /// Counts `gained` more connections the verdict cache answered;
    /// returns the hits counted so far.
    pub fn verdict_cache_hits(&self, gained: u64) -> u64 {
        self.verdict_cache_hits.inc_by(gained);
        self.verdict_cache_hits.get()
    }

    /// Whether the kernel is behind the desired state.
    pub fn datapath_behind(&self, behind: bool) {
        self.datapath_behind.set(i64::from(behind));
    }

    // ------------------------------------------------------------ kubernetes

    /// The Kubernetes source published a snapshot without `skipped` objects.
    pub fn kubernetes_snapshot(&self, skipped: usize) {
        self.kubernetes_skipped.set(saturating_i64(skipped as u64));
    }

    /// Whether the Kubernetes source is in step with the API server: a
    /// complete snapshot published and no watch failing since.
    pub fn kubernetes_synced(&self, synced: bool) {
        self.kubernetes_synced.set(i64::from(synced));
    }

    /// What became of a Kubernetes Event report.
    pub fn kubernetes_event(&self, event: KubeEvent) {
        self.kubernetes_events
            .get_or_create(&ResultLabels {
                result: event.label().into(),
            })
            .inc();
    }

    /// A list or watch request to the API server failed.
    pub fn kubernetes_watch_error(&self) {
        self.kubernetes_watch_errors.inc();
    }

    // ------------------------------------------------------------ docker

    /// The Docker source published an inventory of `containers`.
    pub fn docker_inventory(&self, containers: usize) {
        self.docker_connected.set(1);
        self.docker_containers
            .set(saturating_i64(containers as u64));
    }

    /// A request to the Docker API failed.
    pub fn docker_api_error(&self) {
        self.docker_api_errors.inc();
        self.docker_connected.set(0);
    }

    // ------------------------------------------------------------ audit

    pub fn audit_written(&self, n: u64) {
        self.audit_written.inc_by(n);
    }

    pub fn audit_skipped(&self, reason: AuditSkip, n: u64) {
        self.audit_skipped
            .get_or_create(&ReasonLabels {
                reason: reason.label().into(),
            })
            .inc_by(n);
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
}

impl WorkerMetrics {
    pub const MAX_CACHED: usize = 4096;

    pub fn new(metrics: Arc<Metrics>) -> WorkerMetrics {
        WorkerMetrics {
            metrics,
            rules: HashMap::new(),
            unattributed: HashMap::new(),
        }
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

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How a reload ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadResult {
    Applied,
    Rejected,
    Failed,
}

impl ReloadResult {
    const ALL: [ReloadResult; 3] = [
        ReloadResult::Applied,
        ReloadResult::Rejected,
        ReloadResult::Failed,
    ];

    fn label(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Rejected => "rejected",
            ReloadResult::Failed => "failed",
        }
    }
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
        for queue in self.0.snapshot() {
            for sample in queue.samples {
                let mut labels = Vec::new();
                if sample.scope == Scope::Queue {
                    labels.push(("queue", queue.queue.to_string()));
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
