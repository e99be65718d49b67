//! The exposition text of each family.

use std::sync::Arc;

use std::sync::atomic::Ordering;

use super::*;
use crate::agent::{ReloadResult, Sets};
use crate::counters;
use crate::ruleset::{PolicyKind, PolicyRef};

counters! {
    /// Series shaped like a connection queue's.
    struct QueueSet: one per queue {
        packets: Counter "queue_packets" = "Packets received from the queue by its worker",
        bypassed: Counter "queue_bypassed" = "Queued packets accepted without a decision",
    }
}

counters! {
    /// Series shaped like the DNS and L7 workers'.
    struct AgentSet: one per agent {
        parsed: Counter "dns_replies" { result = "parsed" } = "DNS replies inspected, by result",
        failed: Counter "dns_replies" { result = "failed" } = "DNS replies inspected, by result",
        learned: Counter "fqdn_addresses_learned" = "Addresses added to FQDN sets",
        expired: Counter "fqdn_addresses_expired" = "FQDN set addresses whose TTL passed",
        addresses: Gauge "fqdn_addresses" = "Addresses currently in FQDN sets",
        denied: Counter "l7_requests" { result = "denied" } = "HTTP requests decided by L7 rules",
        flows: Gauge "l7_flows_active" = "Connections under L7 inspection",
    }
}
use crate::model::{Direction, RuleAction};
use crate::ruleset::DecidedBy;

fn rule(name: &str, tier: Option<&str>) -> RuleRef {
    RuleRef {
        policy: PolicyRef {
            kind: PolicyKind::AntreaClusterNetworkPolicy,
            namespace: None,
            name: "p".into(),
        },
        tier: tier.map(str::to_string),
        tier_priority: None,
        policy_priority: None,
        name: Some(name.into()),
        index: 0,
        direction: Direction::Ingress,
        action: RuleAction::Drop,
        enable_logging: false,
        log_label: None,
        rank: 1,
        l7: Arc::new([]),
        dry_run: false,
    }
}

#[test]
fn verdicts_by_action_and_tier_and_rule_hits() {
    let m = Metrics::new();
    let r = rule("deny-ssh", Some("securityops"));
    m.verdict(Verdict::Drop, Some(&r), false);
    m.verdict(Verdict::Drop, Some(&r), false);
    m.verdict(Verdict::Allow, None, false);
    m.verdict(Verdict::Drop, None, true);
    let text = m.render();
    for line in [
        "tollgate_verdicts_total{action=\"Drop\",tier=\"securityops\"} 2",
        "tollgate_verdicts_total{action=\"Allow\",tier=\"none\"} 1",
        "tollgate_verdicts_total{action=\"Drop\",tier=\"k8s-networkpolicy\"} 1",
        "tollgate_rule_hits_total{policy=\"AntreaClusterNetworkPolicy:p\",rule=\"deny-ssh\",action=\"Drop\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn rule_series_are_capped() {
    let m = Metrics::new();
    for i in 0..MAX_RULE_SERIES + 10 {
        m.verdict(Verdict::Allow, Some(&rule(&format!("r{i}"), None)), false);
    }
    let text = m.render();
    let series = text
        .lines()
        .filter(|l| l.starts_with("tollgate_rule_hits_total{"))
        .count();
    assert_eq!(series, MAX_RULE_SERIES + 1);
    assert!(
        text.contains("rule=\"_other\",action=\"Allow\"} 10"),
        "{text}"
    );
}

#[test]
fn queue_counters_are_read_at_scrape_time() {
    let m = Metrics::new();
    let stats = Arc::new(QueueSet::default());
    m.counters()
        .register(7, "queue", vec![Arc::clone(&stats) as _]);
    stats.packets.fetch_add(4, Ordering::Relaxed);
    stats.bypassed.fetch_add(1, Ordering::Relaxed);
    let text = m.render();
    assert!(
        text.contains("tollgate_queue_packets_total{queue=\"7\"} 4"),
        "{text}"
    );
    assert!(text.contains("tollgate_queue_bypassed_total{queue=\"7\"} 1"));
    stats.packets.fetch_add(1, Ordering::Relaxed);
    assert!(m
        .render()
        .contains("tollgate_queue_packets_total{queue=\"7\"} 5"));
}

#[test]
fn the_other_families() {
    let m = Metrics::new();
    m.queue_latency(100).observe(30e-6);
    let set = Arc::new(AgentSet::default());
    m.counters()
        .register(53, "dns", vec![Arc::clone(&set) as _]);
    for (counter, n) in [
        (&set.parsed, 1),
        (&set.failed, 1),
        (&set.learned, 4),
        (&set.expired, 1),
        (&set.addresses, 3),
        (&set.denied, 1),
        (&set.flows, 2),
    ] {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    let sets = Sets::registered(&m);
    m.ruleset_applied(&empty_ruleset());
    sets.agent.ruleset_applied(2, &empty_ruleset());
    sets.agent.reload(ReloadResult::Rejected);
    sets.agent
        .apply_failed(&crate::datapath::ApplyError::Write {
            step: crate::datapath::Step::Table(crate::datapath::Family::V6),
            source: crate::datapath::DatapathError::UnknownBackend {
                version: String::new(),
            },
        });
    sets.agent.datapath_behind.store(1, Ordering::Relaxed);
    sets.agent.bridge_netfilter_off.store(1, Ordering::Relaxed);
    sets.audit.written.fetch_add(5, Ordering::Relaxed);
    sets.audit
        .skipped_rate_limit
        .fetch_add(2, Ordering::Relaxed);
    let text = m.render();
    for line in [
        "tollgate_verdict_latency_seconds_count{queue=\"100\"} 1",
        "tollgate_dns_replies_total{result=\"failed\"} 1",
        "tollgate_fqdn_addresses_learned_total 4",
        "tollgate_fqdn_addresses_expired_total 1",
        "tollgate_fqdn_addresses 3",
        "tollgate_l7_requests_total{result=\"denied\"} 1",
        "tollgate_l7_flows_active 2",
        "tollgate_ruleset_generation 2",
        "tollgate_policies 0",
        "tollgate_rules 0",
        "tollgate_enforced_endpoints 1",
        "tollgate_reloads_total{result=\"rejected\"} 1",
        "tollgate_last_reload_success 0",
        "tollgate_datapath_apply_failures_total{step=\"ip6tables\"} 1",
        "tollgate_datapath_behind 1",
        "tollgate_bridge_netfilter_off 1",
        "tollgate_audit_lines_written_total 5",
        "tollgate_audit_lines_skipped_total{reason=\"rate_limit\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}

/// No policy: the local Node is the one endpoint.
fn empty_ruleset() -> Ruleset {
    crate::compile::compile(
        &crate::model::Snapshot::default(),
        &crate::compile::LocalNode::default(),
    )
}

/// The structs declared with `counters!` anywhere under `src/` and `core/src/`.
fn declared_sets() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                // The macro's own test set, in the core's tests.
                && !path.ends_with("core/src/counters.rs")
            {
                let text = std::fs::read_to_string(&path).unwrap();
                let mut lines = text.lines();
                while let Some(line) = lines.next() {
                    if line.trim() != "counters! {" {
                        continue;
                    }
                    let name = lines
                        .by_ref()
                        .find_map(|l| l.split_once("struct ")?.1.split(':').next())
                        .unwrap();
                    out.push(name.trim().to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    walk(&root.join("src"), &mut out);
    walk(&root.join("core/src"), &mut out);
    out.sort();
    out
}

/// Every set the product declares with `counters!`, by name.
fn product_sets() -> Vec<(&'static str, &'static [Series])> {
    use crate::agent::AgentCounters;
    use crate::controller::ControllerCounters;
    use crate::source::docker::DockerCounters;
    use crate::source::kube::KubeCounters;
    use crate::status::ReadinessCounters;
    use crate::telemetry::kernel::KernelCounters;
    use crate::workers::audit::AuditCounters;
    use crate::workers::observe::ObserveCounters;
    use crate::workers::{ConnectionCounters, DnsCounters, L7Counters, QueueCounters};
    vec![
        ("QueueCounters", QueueCounters::SERIES),
        ("ConnectionCounters", ConnectionCounters::SERIES),
        ("DnsCounters", DnsCounters::SERIES),
        ("L7Counters", L7Counters::SERIES),
        ("KernelCounters", KernelCounters::SERIES),
        ("AgentCounters", AgentCounters::SERIES),
        ("KubeCounters", KubeCounters::SERIES),
        ("DockerCounters", DockerCounters::SERIES),
        ("AuditCounters", AuditCounters::SERIES),
        ("ControllerCounters", ControllerCounters::SERIES),
        ("ObserveCounters", ObserveCounters::SERIES),
        ("ReadinessCounters", ReadinessCounters::SERIES),
    ]
}

/// Every `tollgate_*` metric has one declaration: a metric name belongs to
/// one counter set or one family of [`Metrics`], and no set declares a
/// series (name and label) twice. The one declaration is what metrics,
/// status and the shutdown log all read.
#[test]
fn every_metric_is_declared_once() {
    let mut owner: std::collections::BTreeMap<&str, String> = Default::default();
    for (set, series) in product_sets() {
        let mut seen = std::collections::BTreeSet::new();
        for s in series {
            assert!(
                seen.insert((s.metric, s.label)),
                "{set} declares {s:?} twice"
            );
            if let Some(other) = owner.insert(s.metric, set.to_string()) {
                assert_eq!(
                    other, set,
                    "tollgate_{} is declared by {other} and {set}",
                    s.metric
                );
            }
        }
    }
    // The families Metrics registers itself (no set registered here).
    let text = Metrics::new().render();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE tollgate_")?.split(' ').next())
        .collect();
    assert!(families.contains(&"verdicts"), "{text}");
    for family in families {
        let metric = family.strip_suffix("_total").unwrap_or(family);
        if let Some(set) = owner.get(metric) {
            panic!("tollgate_{family} is declared by Metrics and by {set}");
        }
    }
}

/// The scrape-and-check test: every counter declared with `counters!` is
/// exported by `/metrics` with its label, and none is forgotten here (a
/// new set fails the test until it is added).
#[test]
fn every_declared_counter_is_exported() {
    use crate::telemetry::kernel::KernelCounters;
    use crate::workers::{ConnectionCounters, DnsCounters, L7Counters, QueueCounters};
    let mut sets = product_sets();
    sets.extend([
        // The test sets of the telemetry tests.
        (
            "TestCounters",
            crate::telemetry::registry::tests::TestCounters::SERIES,
        ),
        ("QueueSet", QueueSet::SERIES),
        ("AgentSet", AgentSet::SERIES),
    ]);
    sets.sort_by_key(|(name, _)| *name);
    let names: Vec<String> = sets.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(declared_sets(), names, "a counters! set is missing here");

    // Registered as the agent does: its subsystems' sets, each worker's
    // queue set and its own.
    let m = Metrics::new();
    Sets::registered(&m);
    // As the status API registers it.
    m.counters()
        .register_set(Arc::new(crate::status::ReadinessCounters::default()));
    // As `tollgate controller` registers it.
    m.counters()
        .register_set(Arc::new(crate::controller::ControllerCounters::default()));
    m.counters().register(
        100,
        "queue",
        vec![
            Arc::new(QueueCounters::default()),
            Arc::new(ConnectionCounters::default()),
            Arc::new(KernelCounters::default()),
        ],
    );
    m.counters().register(
        53,
        "dns",
        vec![
            Arc::new(QueueCounters::default()),
            Arc::new(DnsCounters::default()),
        ],
    );
    m.counters().register(
        101,
        "L7 queue",
        vec![
            Arc::new(QueueCounters::default()),
            Arc::new(L7Counters::default()),
        ],
    );
    let text = m.render();
    let exported = |series: &Series| {
        let name = match series.kind {
            Kind::Counter => format!("tollgate_{}_total", series.metric),
            Kind::Gauge => format!("tollgate_{}", series.metric),
        };
        text.lines().any(|line| {
            let Some(rest) = line.strip_prefix(&name) else {
                return false;
            };
            let labelled = series
                .label
                .is_none_or(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (rest.starts_with(' ') || rest.starts_with('{')) && labelled && rest.ends_with(" 0")
        })
    };
    for (_, series) in &sets[..] {
        if std::ptr::eq(*series, QueueSet::SERIES)
            || std::ptr::eq(*series, AgentSet::SERIES)
            || std::ptr::eq(
                *series,
                crate::telemetry::registry::tests::TestCounters::SERIES,
            )
        {
            continue;
        }
        for series in *series {
            assert!(
                exported(series),
                "{} ({}) missing in\n{text}",
                series.metric,
                series.key
            );
        }
    }
}

#[test]
fn agent_families_are_exported_from_the_start() {
    let m = Metrics::new();
    let sets = Sets::registered(&m);
    let text = m.render();
    for line in [
        "tollgate_verdicts_total{action=\"Drop\",tier=\"securityops\"} 0",
        "tollgate_verdicts_total{action=\"Reject\",tier=\"baseline\"} 0",
        "tollgate_verdicts_total{action=\"Allow\",tier=\"none\"} 0",
        "tollgate_verdicts_total{action=\"Drop\",tier=\"k8s-networkpolicy\"} 0",
        "tollgate_reloads_total{result=\"applied\"} 0",
        "tollgate_reloads_total{result=\"rejected\"} 0",
        "tollgate_reloads_total{result=\"failed\"} 0",
        "tollgate_datapath_apply_failures_total{step=\"read\"} 0",
        "tollgate_datapath_apply_failures_total{step=\"ipset_prepare\"} 0",
        "tollgate_datapath_apply_failures_total{step=\"iptables\"} 0",
        "tollgate_datapath_apply_failures_total{step=\"ip6tables\"} 0",
        "tollgate_datapath_apply_failures_total{step=\"ipset_cleanup\"} 0",
        "tollgate_audit_lines_skipped_total{reason=\"queue_full\"} 0",
        "tollgate_audit_lines_skipped_total{reason=\"rate_limit\"} 0",
        "tollgate_audit_lines_skipped_total{reason=\"io_error\"} 0",
        "tollgate_last_reload_success_timestamp_seconds 0.0",
        "tollgate_datapath_apply_duration_seconds_count 0",
        "tollgate_enforced_endpoints 0",
        "tollgate_kubernetes_synced 0",
        &format!(
            "tollgate_build_info{{version=\"{}\",commit=\"{COMMIT}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_virtual_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing in\n{text}"
        );
    }
    assert!(!COMMIT.is_empty());
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    assert!(text.ends_with("# EOF\n"));

    // The events that move them.
    sets.agent.last_reload_success.store(1, Ordering::Relaxed);
    m.reload_succeeded();
    m.datapath_applied(Duration::from_millis(3));
    sets.kube.skipped.store(0, Ordering::Relaxed);
    sets.kube.synced.store(1, Ordering::Relaxed);
    m.ruleset_applied(&empty_ruleset());
    sets.agent.ruleset_applied(1, &empty_ruleset());
    let text = m.render();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
    };
    assert!(value("tollgate_last_reload_success_timestamp_seconds") > 1.6e9);
    assert_eq!(value("tollgate_datapath_apply_duration_seconds_count"), 1.0);
    assert_eq!(value("tollgate_kubernetes_synced"), 1.0);
    assert_eq!(value("tollgate_enforced_endpoints"), 1.0);
}

/// A ruleset with a custom Tier: its verdict series and the rule-hit
/// series of each deciding rule exist at zero once it is applied; a Pass
/// rule, which decides nothing, has none.
#[test]
fn a_rulesets_tiers_and_rules_are_exported_at_zero_when_applied() {
    let yaml = "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: edge}\nspec: {priority: 20}\n---\n\
apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}\n---\n\
apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: guard}\nspec:\n  priority: 1\n  tier: edge\n  appliedTo: [{nodeSelector: {}}]\n  ingress:\n  - {name: let-admin, action: Allow, from: [{ipBlock: {cidr: 10.9.0.0/16}}]}\n  - {name: to-k8s, action: Pass, from: [{ipBlock: {cidr: 10.8.0.0/16}}]}\n  - {name: bounce, action: Reject, from: [{ipBlock: {cidr: 10.7.0.0/16}}]}\n  - {action: Drop, from: [{ipBlock: {cidr: 0.0.0.0/0}}]}\n";
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let local = crate::compile::LocalNode {
        name: "n1".into(),
        ..Default::default()
    };
    let ruleset = crate::compile::compile(&crate::model::Snapshot { objects }, &local);
    let m = Metrics::new();
    assert!(!m.render().contains("tier=\"edge\""));
    m.ruleset_applied(&ruleset);
    let text = m.render();
    let policy = "policy=\"AntreaClusterNetworkPolicy:guard\"";
    let generated = ruleset.policies()[0].rule_names[3].clone();
    for line in [
        "tollgate_verdicts_total{action=\"Allow\",tier=\"edge\"} 0".to_string(),
        "tollgate_verdicts_total{action=\"Drop\",tier=\"edge\"} 0".into(),
        "tollgate_verdicts_total{action=\"Reject\",tier=\"edge\"} 0".into(),
        format!("tollgate_rule_hits_total{{{policy},rule=\"let-admin\",action=\"Allow\"}} 0"),
        format!("tollgate_rule_hits_total{{{policy},rule=\"bounce\",action=\"Reject\"}} 0"),
        format!("tollgate_rule_hits_total{{{policy},rule=\"{generated}\",action=\"Drop\"}} 0"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    assert!(!text.contains("rule=\"to-k8s\""), "{text}");
    // The first decision moves the series created at zero.
    let r = ruleset
        .rule_refs()
        .find(|r| r.name.as_deref() == Some("bounce"))
        .unwrap();
    m.verdict(Verdict::Reject, Some(r), false);
    assert!(m.render().lines().any(|l| l
        == format!("tollgate_rule_hits_total{{{policy},rule=\"bounce\",action=\"Reject\"}} 1")));
}

#[test]
fn worker_cache_counts_into_the_shared_series() {
    let m = Arc::new(Metrics::new());
    let mut w = WorkerMetrics::new(Arc::clone(&m));
    let r = Arc::new(rule("allow-web", Some("application")));
    for _ in 0..3 {
        w.decided(Verdict::Allow, &DecidedBy::Rule(Arc::clone(&r)));
    }
    w.decided(Verdict::Drop, &DecidedBy::Rule(Arc::clone(&r)));
    w.decided(Verdict::Drop, &DecidedBy::K8sDefaultDrop);
    w.decided(Verdict::Allow, &DecidedBy::NoRule);
    m.queue_latency(101).observe(10e-6);
    // The same series as the uncached path.
    m.verdict(Verdict::Allow, Some(&r), false);
    let text = m.render();
    for line in [
        "tollgate_verdicts_total{action=\"Allow\",tier=\"application\"} 4",
        "tollgate_verdicts_total{action=\"Drop\",tier=\"application\"} 1",
        "tollgate_verdicts_total{action=\"Drop\",tier=\"k8s-networkpolicy\"} 1",
        "tollgate_verdicts_total{action=\"Allow\",tier=\"none\"} 1",
        "tollgate_rule_hits_total{policy=\"AntreaClusterNetworkPolicy:p\",rule=\"allow-web\",action=\"Allow\"} 4",
        "tollgate_verdict_latency_seconds_count{queue=\"101\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}

#[test]
fn worker_cache_lets_go_of_rules_no_ruleset_holds() {
    let m = Arc::new(Metrics::new());
    let mut w = WorkerMetrics::new(Arc::clone(&m));
    // A second worker caches the same rules: it must not keep them alive.
    let mut other = WorkerMetrics::new(Arc::clone(&m));
    // Rulesets after one another (a reload each): the previous one's rules
    // are dropped by the agent, the cache keeps only the ruleset in force.
    let mut previous: Vec<Arc<RuleRef>> = Vec::new();
    for generation in 0..50 {
        let current: Vec<Arc<RuleRef>> = (0..6)
            .map(|i| Arc::new(rule(&format!("r{i}"), None)))
            .collect();
        drop(previous);
        for r in &current {
            w.decided(Verdict::Allow, &DecidedBy::Rule(Arc::clone(r)));
            w.decided(Verdict::Allow, &DecidedBy::Rule(Arc::clone(r)));
            other.decided(Verdict::Drop, &DecidedBy::Rule(Arc::clone(r)));
        }
        assert_eq!(w.rules.len(), 6, "generation {generation}");
        assert_eq!(other.rules.len(), 6, "generation {generation}");
        previous = current;
    }
    let hits: f64 = m
        .render()
        .lines()
        .filter(|l| l.starts_with("tollgate_rule_hits_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(hits, 50.0 * 6.0 * 3.0);
}

#[test]
fn worker_cache_is_bounded() {
    let m = Arc::new(Metrics::new());
    let mut w = WorkerMetrics::new(Arc::clone(&m));
    let rules: Vec<Arc<RuleRef>> = (0..WorkerMetrics::MAX_CACHED + 5)
        .map(|i| Arc::new(rule(&format!("r{}", i % 7), None)))
        .collect();
    for r in &rules {
        w.decided(Verdict::Allow, &DecidedBy::Rule(Arc::clone(r)));
    }
    assert!(w.rules.len() <= WorkerMetrics::MAX_CACHED);
    let total: f64 = m
        .render()
        .lines()
        .filter(|l| l.starts_with("tollgate_rule_hits_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(total, rules.len() as f64);
}

#[test]
fn dry_run_verdicts_by_rule_and_isolation_apart_from_rule_hits() {
    let m = Arc::new(Metrics::new());
    let mut w = WorkerMetrics::new(Arc::clone(&m));
    let mut r = rule("deny-web", None);
    r.dry_run = true;
    let r = DryRunCause::Rule { rule: Arc::new(r) };
    let isolation = DryRunCause::Isolation {
        policy: Arc::new(PolicyRef {
            kind: PolicyKind::K8sNetworkPolicy,
            namespace: Some("shop".into()),
            name: "deny-all".into(),
        }),
    };
    w.dry_run(Verdict::Drop, &r);
    w.dry_run(Verdict::Drop, &r);
    w.dry_run(Verdict::Drop, &isolation);
    let text = m.render();
    for line in [
        "tollgate_dry_run_verdicts_total{policy=\"AntreaClusterNetworkPolicy:p\",rule=\"deny-web\",action=\"Drop\"} 2",
        "tollgate_dry_run_verdicts_total{policy=\"K8sNetworkPolicy:shop/deny-all\",rule=\"default-drop\",action=\"Drop\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    // Never a rule hit nor a verdict: the enforced policy decided those.
    let counted = |l: &&str| {
        (l.starts_with("tollgate_rule_hits_total{") || l.starts_with("tollgate_verdicts_total{"))
            && !l.ends_with("} 0")
    };
    assert!(!text.lines().any(|l| counted(&l)), "{text}");
}

/// A dry-run policy's rules are exported at zero under
/// `tollgate_dry_run_verdicts_total` when the ruleset is applied, never
/// under rule hits (they decide no connection).
#[test]
fn a_dry_run_policys_rules_are_exported_at_zero_as_dry_run_verdicts() {
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}\n---\n\
apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: trial, annotations: {tollgate.io/dry-run: 'true'}}\nspec:\n  priority: 1\n  appliedTo: [{nodeSelector: {}}]\n  ingress:\n  - {name: drop-web, action: Drop, ports: [{protocol: TCP, port: 80}]}\n";
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let local = crate::compile::LocalNode {
        name: "n1".into(),
        ..Default::default()
    };
    let ruleset = crate::compile::compile(&crate::model::Snapshot { objects }, &local);
    let m = Metrics::new();
    m.ruleset_applied(&ruleset);
    let text = m.render();
    let line = "tollgate_dry_run_verdicts_total{policy=\"AntreaClusterNetworkPolicy:trial\",rule=\"drop-web\",action=\"Drop\"} 0";
    assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    assert!(
        !text.contains("tollgate_rule_hits_total{policy=\"AntreaClusterNetworkPolicy:trial\""),
        "{text}"
    );
}
