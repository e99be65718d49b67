use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::client::request_within;
use super::server::MAX_REQUEST;
use super::*;
use crate::commands::render_status;
use crate::workers::ConnectionCounters;

fn status() -> Arc<AgentStatus> {
    status_with(Arc::new(Metrics::new()))
}

fn facts() -> AgentFacts {
    AgentFacts {
        node_name: "n1".into(),
        fail_mode: FailMode::Closed,
        privileged: Vec::new(),
        audit_log: None,
        metrics_address: None,
        config: "AgentConfig { .. }".into(),
        kernel: None,
    }
}

fn status_with(metrics: Arc<Metrics>) -> Arc<AgentStatus> {
    let ruleset = Arc::new(ArcSwap::from_pointee(Ruleset::default()));
    let stats = Arc::new(ConnectionCounters::default());
    stats.allowed.fetch_add(2, Ordering::Relaxed);
    metrics.counters().register(100, "queue", vec![stats]);
    Arc::new(AgentStatus::new(
        AgentFacts {
            metrics_address: Some("127.0.0.1:9100".into()),
            ..facts()
        },
        ruleset,
        metrics,
    ))
}

fn check(s: &AgentStatus, probe: Check) -> CheckReport {
    match s.answer(&Request::Check { probe }) {
        Response::Check(report) => report,
        other => panic!("{other:?}"),
    }
}

#[test]
fn ready_once_a_complete_snapshot_is_in_the_kernel_live_while_workers_run() {
    let metrics = Arc::new(Metrics::new());
    let s = status_with(Arc::clone(&metrics));
    let not = |why: &str| CheckReport {
        ok: false,
        reason: Some(why.into()),
    };
    let ok = CheckReport {
        ok: true,
        reason: None,
    };
    assert_eq!(
        check(&s, Check::Ready),
        not("no complete policy snapshot applied yet")
    );
    // The kernel matches, but no complete snapshot is in force yet
    // (e.g. the startup policy): still not ready.
    s.applied(1);
    s.datapath(None);
    assert!(!check(&s, Check::Ready).ok);
    let gauge = || s.readiness.ready.load(Ordering::Relaxed);
    assert_eq!(gauge(), 0);
    s.set_snapshot_complete(true);
    assert_eq!(check(&s, Check::Ready), ok);
    assert_eq!(gauge(), 1, "tollgate_ready follows readiness");
    s.datapath(Some("iptables-restore: exited with 1".into()));
    assert_eq!(
        check(&s, Check::Ready),
        not("the kernel does not match the ruleset in force: iptables-restore: exited with 1")
    );
    assert_eq!(gauge(), 0);
    s.datapath(None);
    assert_eq!(check(&s, Check::Ready), ok);
    assert_eq!(gauge(), 1);
    // Liveness follows the heartbeats.
    assert_eq!(check(&s, Check::Live), ok);
    let beat = metrics.health().register(100, "queue");
    beat.down("panicked: boom; restarting in 1s".into());
    assert_eq!(
        check(&s, Check::Live),
        not("queue 100: panicked: boom; restarting in 1s")
    );
    beat.up();
    assert_eq!(check(&s, Check::Live), ok);
    // On the wire.
    assert_eq!(
        serde_json::to_string(&Request::Check { probe: Check::Live }).unwrap(),
        r#"{"request":"check","probe":"live"}"#
    );
    assert_eq!(
        serde_json::to_string(&Response::Check(not("x"))).unwrap(),
        r#"{"check":{"ok":false,"reason":"x"}}"#
    );
    assert_eq!(
        serde_json::to_string(&Response::Check(ok)).unwrap(),
        r#"{"check":{"ok":true}}"#
    );
}

#[test]
fn requests_and_responses_are_one_json_line_each() {
    assert_eq!(
        serde_json::to_string(&Request::Status).unwrap(),
        r#"{"request":"status"}"#
    );
    assert_eq!(
        serde_json::from_str::<Request>(r#"{"request":"policies"}"#).unwrap(),
        Request::Policies
    );
    let s = status();
    s.applied(1);
    s.reloaded(Some("bad.yaml: nope".into()));
    let Response::Status(report) = s.answer(&Request::Status) else {
        panic!()
    };
    assert_eq!(report.ruleset_generation, 1);
    assert_eq!(report.queues[0].counters.get("allowed"), Some(2));
    let text = render_status(&report, true);
    assert!(
        text.contains("last reload:        FAILED 0s ago: bad.yaml: nope"),
        "{text}"
    );
    assert!(text.contains("fail mode:          closed"));
    assert!(text.contains("datapath:           in sync"), "{text}");
    // The rows of the agent-level metrics.
    let commit = crate::telemetry::metrics::COMMIT;
    assert!(text.contains(&format!(" (commit {commit})\n")), "{text}");
    assert!(text.contains("enforced endpoints: "), "{text}");
    assert!(
        text.contains("policy source:      waiting for a complete snapshot"),
        "{text}"
    );
    assert!(text.contains("last applied:       0s ago"), "{text}");
    assert!(text.contains("process:            cpu "), "{text}");
    assert!(!text.contains("fds ?/"), "{text}");
    assert_eq!(
        report.enforced_endpoints,
        s.ruleset.load().endpoints().len()
    );
    s.datapath(Some("iptables-restore: exited with 1".into()));
    let Response::Status(behind) = s.answer(&Request::Status) else {
        panic!()
    };
    assert!(render_status(&behind, true)
        .contains("datapath:           BEHIND, retrying: iptables-restore: exited with 1"));
    s.datapath(None);
    assert!(
        !text.contains("bridged traffic:"),
        "no row while seen: {text}"
    );
    s.bridged_traffic(Some("br_netfilter is not loaded".into()));
    let Response::Status(unseen) = s.answer(&Request::Status) else {
        panic!()
    };
    assert!(render_status(&unseen, true)
        .contains("\nbridged traffic:    NOT SEEN: br_netfilter is not loaded\n"));
    s.bridged_traffic(None);
    assert!(
        !text.contains("endpoint traffic:"),
        "no row while seen: {text}"
    );
    s.endpoint_traffic(vec!["lab/mac 10.0.1.3: reached over veth-b".into()]);
    let Response::Status(unseen) = s.answer(&Request::Status) else {
        panic!()
    };
    assert!(render_status(&unseen, false).contains(
        "\nendpoint traffic:   NOT SEEN for 1 endpoint addresses (not enforced):\n  lab/mac 10.0.1.3: reached over veth-b\n"
    ));
    s.endpoint_traffic(Vec::new());
    assert!(text.contains("\n100   2       0       0 "), "{text}");
    let json = serde_json::to_string(&Response::Status(report.clone())).unwrap();
    assert!(json.starts_with(r#"{"status":{"version":"#), "{json}");
    assert_eq!(
        serde_json::from_str::<Response>(&json).unwrap(),
        Response::Status(report)
    );
}

/// The default text fits a terminal: the summary, long values wrapped
/// under themselves, and one health line per queue naming the problem
/// counters above 0; the metrics and counter tables only with `wide`.
#[test]
fn default_status_is_a_summary_and_a_health_line_per_queue_within_120_columns() {
    let metrics = Arc::new(Metrics::new());
    let busy = Arc::new(ConnectionCounters::default());
    busy.allowed.fetch_add(5, Ordering::Relaxed);
    busy.malformed.fetch_add(2, Ordering::Relaxed);
    let queue = Arc::new(crate::workers::QueueCounters::default());
    queue.packets.fetch_add(7, Ordering::Relaxed);
    queue.overflows.fetch_add(1, Ordering::Relaxed);
    metrics.counters().register(100, "queue", vec![busy, queue]);
    metrics.counters().register(
        101,
        "queue",
        vec![
            Arc::new(ConnectionCounters::default()),
            Arc::new(crate::workers::QueueCounters::default()),
        ],
    );
    let s = status_with(metrics);
    let long = "iptables-restore: exited with 1: ".to_string() + &"word ".repeat(40);
    s.datapath(Some(long.trim().into()));
    let Response::Status(report) = s.answer(&Request::Status) else {
        panic!()
    };
    let text = render_status(&report, false);
    for line in text.lines() {
        assert!(line.len() <= 120, "{} columns: {line:?}", line.len());
    }
    assert!(
        text.contains(
            "\ndatapath:           BEHIND, retrying: iptables-restore: exited with 1: word word"
        ),
        "{text}"
    );
    assert!(
        text.contains("\n                    word word"),
        "wrapped: {text}"
    );
    let health: Vec<Vec<&str>> = text
        .split("\n\n")
        .last()
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        health,
        [
            vec!["QUEUE", "WORKER", "HEALTH", "PACKETS", "PROBLEMS"],
            vec![
                "100",
                "queue",
                "CHECK",
                "7",
                "overflows",
                "1,",
                "malformed",
                "2"
            ],
            vec!["101", "queue", "ok", "0", "-"],
        ]
    );
    assert!(!text.contains("METRIC "), "{text}");
    assert!(!text.contains("ALLOWED"), "{text}");
    let wide = render_status(&report, true);
    assert!(
        wide.contains("\nMETRIC ") && wide.contains("\nQUEUE ALLOWED "),
        "{wide}"
    );
    assert!(
        wide.contains(&format!("BEHIND, retrying: {}\n", long.trim())),
        "{wide}"
    );
    let queues = crate::commands::render_queues(&report);
    assert!(queues.starts_with("QUEUE ALLOWED "), "{queues}");
}

/// The DNS worker's sets and set writes are a summary line each, within
/// 120 columns with the figures of an hour at 2,000 fresh names a second.
#[test]
fn fqdn_sets_and_set_writes_are_summary_lines_within_120_columns() {
    let metrics = Arc::new(Metrics::new());
    let dns = Arc::new(crate::workers::DnsCounters::default());
    for (counter, value) in [
        (&dns.addresses, 65_536),
        (&dns.evicted, 1_234_567),
        (&dns.write_entries, 57_600_000),
        (&dns.write_batches, 1_000_000),
        (&dns.write_queue, 0),
        (&dns.write_queue_peak, 4096),
        (&dns.replies_held, 7_200_000),
        (&dns.held_micros, 612_000_000),
        (&dns.replies_delayed, 0),
    ] {
        counter.store(value, Ordering::Relaxed);
    }
    metrics.counters().register(102, "dns", vec![dns]);
    let Response::Status(report) = status_with(metrics).answer(&Request::Status) else {
        panic!()
    };
    let text = render_status(&report, false);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("fqdn set")).collect();
    assert_eq!(
        lines,
        [
            "fqdn sets:          65536 addresses, 1234567 evicted by fqdn.maxAddressesPerName/maxAddresses",
            "fqdn set writes:    57600000 in 1000000 batches, queue 0 (peak 4096), 7200000 replies held 85 µs avg, 0 delayed",
        ],
        "{text}"
    );
    assert!(lines.iter().all(|l| l.chars().count() <= 120));
}

/// Status shows what metrics exports: every counter of every set a
/// worker registers, and the kernel's counters of its queue, as a
/// column of its worker's table with a value for each queue; a queue
/// the kernel does not list shows `-` there.
#[test]
fn status_shows_every_declared_counter_of_every_queue() {
    use crate::counters::{CounterSet, Series};
    use crate::telemetry::kernel::KernelCounters;
    use crate::workers::{DnsCounters, L7Counters, QueueCounters};
    let metrics = Arc::new(Metrics::new());
    let counters = metrics.counters();
    let connection = |kernel: bool| {
        // In the agent's order: the worker's own set, then the queue's.
        let mut sets: Vec<Arc<dyn CounterSet>> = vec![
            Arc::new(ConnectionCounters::default()),
            Arc::new(QueueCounters::default()),
        ];
        if kernel {
            sets.push(Arc::new(KernelCounters::default()));
        }
        sets
    };
    // Two connection queues, only the second bound in the kernel.
    counters.register(100, "queue", connection(false));
    counters.register(101, "queue", connection(true));
    let dns: Vec<Arc<dyn CounterSet>> = vec![
        Arc::new(DnsCounters::default()),
        Arc::new(QueueCounters::default()),
        Arc::new(KernelCounters::default()),
    ];
    counters.register(53, "dns", dns);
    let l7: Vec<Arc<dyn CounterSet>> = vec![
        Arc::new(L7Counters::default()),
        Arc::new(QueueCounters::default()),
        Arc::new(KernelCounters::default()),
    ];
    counters.register(102, "L7 queue", l7);
    let s = AgentStatus::new(
        facts(),
        Arc::new(ArcSwap::from_pointee(Ruleset::default())),
        Arc::clone(&metrics),
    );
    let report = s.report();
    let text = render_status(&report, true);
    let table = |worker: &str| -> Vec<Vec<String>> {
        let header = worker.to_uppercase();
        text.split("\n\n")
            .filter(|block| !block.split_whitespace().take(2).eq(["QUEUE", "WORKER"]))
            .find(|block| block.starts_with(&format!("{header} ")))
            .unwrap_or_else(|| panic!("no {worker} table in\n{text}"))
            .lines()
            .map(|l| {
                l.split(' ')
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect()
            })
            .collect()
    };
    let kernel = KernelCounters::SERIES;
    // Worker, its sets in registration order, its queues.
    type Expected<'a> = (&'a str, Vec<&'a [Series]>, &'a [&'a str]);
    let expected: [Expected; 3] = [
        (
            "queue",
            vec![ConnectionCounters::SERIES, QueueCounters::SERIES, kernel],
            &["100", "101"],
        ),
        (
            "dns",
            vec![DnsCounters::SERIES, QueueCounters::SERIES, kernel],
            &["53"],
        ),
        (
            "L7 queue",
            vec![L7Counters::SERIES, QueueCounters::SERIES, kernel],
            &["102"],
        ),
    ];
    for (worker, sets, queues) in expected {
        let rows = table(worker);
        // `L7 QUEUE` is two words of the header.
        let header: Vec<&str> = rows[0]
            .iter()
            .skip(worker.split(' ').count())
            .map(String::as_str)
            .collect();
        let keys: Vec<String> = sets
            .iter()
            .flat_map(|set| set.iter())
            .map(|series| series.key.to_uppercase().replace('_', "-"))
            .collect();
        assert_eq!(header, keys, "{worker}");
        let shown: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
        assert_eq!(shown, queues, "{worker}");
        for row in &rows[1..] {
            assert_eq!(row.len(), keys.len() + 1, "{worker}: {row:?}");
        }
    }
    // Queue 100 is not in the kernel's list: its kernel cells say so.
    let queue = table("queue");
    assert_eq!(queue[1].iter().filter(|c| *c == "-").count(), kernel.len());
    assert!(!queue[2].contains(&"-".to_string()), "{queue:?}");
    // JSON carries the same keys, per queue.
    let json = serde_json::to_value(&report).unwrap();
    let l7 = &json["queues"][3]["counters"];
    for series in L7Counters::SERIES.iter().chain(kernel) {
        assert_eq!(l7[series.key], 0, "{}", series.key);
    }
}

#[test]
fn anti_spoofing_rows_name_the_unguarded_and_the_drops_the_metrics_count() {
    let metrics = Arc::new(Metrics::new());
    let s = status_with(Arc::clone(&metrics));
    assert!(!render_status(&s.report(), true).contains("anti-spoofing"));
    metrics.antispoof_endpoints(
        &["apps/a".into(), "apps/b".into()],
        1,
        &crate::datapath::antispoof::Reason::LABELS,
    );
    metrics.antispoof_dropped("apps/a", "source", 3);
    let guarded = |endpoint: &str, interface: &str| GuardedReport {
        endpoint: endpoint.into(),
        interface: interface.into(),
        dropped: metrics
            .antispoof_dropped_of(endpoint, &crate::datapath::antispoof::Reason::LABELS)
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect(),
    };
    s.anti_spoofing(Some(AntiSpoofReport {
        enabled: true,
        guarded: vec![
            guarded("apps/a", "veth-a"),
            guarded("apps/b", "br0 port vb"),
        ],
        unguarded: vec![UnguardedReport {
            endpoint: "apps/x".into(),
            reason: "the node has no route to 10.9.9.9".into(),
        }],
    }));
    let text = render_status(&s.report(), true);
    assert!(
        text.contains(
            "\nanti-spoofing:      2 endpoints guarded, 3 dropped packets; 1 UNGUARDED\n  \
             apps/x                         UNGUARDED: the node has no route to 10.9.9.9\n  \
             apps/a                         veth-a: dropped address 0, neighbour 0, source 3\n"
        ),
        "{text}"
    );
    assert!(!text.contains("apps/b "), "no drops, no row: {text}");
    let exposition = metrics.render();
    assert!(exposition.contains(
        "tollgate_antispoof_dropped_packets_total{endpoint=\"apps/a\",reason=\"source\"} 3\n"
    ));
    assert!(exposition.contains(
        "tollgate_antispoof_dropped_packets_total{endpoint=\"apps/b\",reason=\"address\"} 0\n"
    ));
    assert!(exposition.contains("tollgate_antispoof_unguarded_endpoints 1\n"));
    // An endpoint no longer guarded leaves the exposition.
    metrics.antispoof_endpoints(
        &["apps/b".into()],
        0,
        &crate::datapath::antispoof::Reason::LABELS,
    );
    assert!(!metrics.render().contains("endpoint=\"apps/a\""));
    s.anti_spoofing(Some(AntiSpoofReport::default()));
    assert!(render_status(&s.report(), true)
        .contains("\nanti-spoofing:      off (antiSpoofing.enabled)\n"));
}

/// The agent-level rows of `status` are the agent-level series of
/// `/metrics`, by name and value, read from the same counters: what
/// moves one moves the other.
#[test]
fn status_shows_the_agent_series_of_the_metrics() {
    use crate::agent::{ReloadResult, Sets};
    use std::sync::atomic::Ordering::Relaxed;
    let metrics = Arc::new(Metrics::new());
    let sets = Sets::registered(&metrics);
    let s = status_with(Arc::clone(&metrics));
    sets.agent.reload(ReloadResult::Rejected);
    sets.agent.reload(ReloadResult::Applied);
    metrics.datapath_applied(Duration::from_millis(250));
    sets.agent
        .apply_failed(&crate::datapath::ApplyError::Write {
            step: crate::datapath::Step::Table(crate::datapath::Family::V4),
            source: crate::datapath::DatapathError::UnknownBackend {
                version: String::new(),
            },
        });
    sets.agent.drift_repairs.fetch_add(1, Relaxed);
    sets.audit.written.fetch_add(7, Relaxed);
    sets.audit.skipped_queue_full.fetch_add(2, Relaxed);
    sets.kube.watch_errors.fetch_add(1, Relaxed);
    sets.kube.events_created.fetch_add(1, Relaxed);
    sets.kube.events_failed.fetch_add(1, Relaxed);
    let report = s.report();
    let rendered = metrics.render();
    let exposition: std::collections::BTreeMap<&str, f64> = rendered
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key, value.parse().ok()?))
        })
        .collect();
    // Every series of the subsystems' sets, and the last apply's time.
    let declared = crate::agent::AgentCounters::SERIES.len()
        + crate::source::kube::KubeCounters::SERIES.len()
        + crate::source::docker::DockerCounters::SERIES.len()
        + crate::workers::audit::AuditCounters::SERIES.len()
        + crate::workers::observe::ObserveCounters::SERIES.len()
        + ReadinessCounters::SERIES.len();
    assert_eq!(report.agent_series.len(), declared + 1);
    for row in &report.agent_series {
        assert_eq!(
            exposition.get(row.series.as_str()),
            Some(&row.value),
            "{} in status, not so in /metrics",
            row.series
        );
    }
    // Every family the rows come from, each label value included.
    let names: Vec<&str> = report
        .agent_series
        .iter()
        .map(|r| r.series.as_str())
        .collect();
    for expected in [
        "tollgate_reloads_total{result=\"applied\"}",
        "tollgate_reloads_total{result=\"rejected\"}",
        "tollgate_reloads_total{result=\"failed\"}",
        "tollgate_last_reload_success",
        "tollgate_datapath_last_apply_duration_seconds",
        "tollgate_datapath_apply_failures_total{step=\"iptables\"}",
        "tollgate_datapath_drift_repairs_total",
        "tollgate_audit_lines_written_total",
        "tollgate_audit_lines_skipped_total{reason=\"queue_full\"}",
        "tollgate_kubernetes_watch_errors_total",
        "tollgate_kubernetes_events_total{result=\"dropped\"}",
    ] {
        assert!(names.contains(&expected), "{expected} not in status");
    }
    let text = render_status(&report, true);
    for line in [
        "tollgate_reloads_total{result=\"rejected\"}",
        "tollgate_datapath_last_apply_duration_seconds",
        "tollgate_audit_lines_written_total",
        "tollgate_kubernetes_events_total{result=\"created\"}",
    ] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(line))
            .unwrap_or_else(|| panic!("{line} missing in\n{text}"));
        let shown: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(Some(&shown), exposition.get(line), "{row}");
    }
    assert!(text.contains("\nMETRIC "), "{text}");
    // JSON carries the rows too.
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["agentSeries"][0]["series"],
        "tollgate_reloads_total{result=\"applied\"}"
    );
    assert_eq!(json["agentSeries"][0]["value"], 1.0);
}

#[test]
fn trace_answers_with_the_live_ruleset_and_says_when_privileged_accepts() {
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: lock}\nspec:\n  priority: 1\n  tier: securityops\n  appliedTo: [{nodeSelector: {}}]\n  ingress: [{name: drop-all, action: Drop, from: [{ipBlock: {cidr: 0.0.0.0/0}}]}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: locked, namespace: apps, labels: {app: locked}}\nspec: {nodeName: n1}\nstatus: {podIP: 10.9.5.5}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: pod-lock}\nspec:\n  priority: 2\n  tier: securityops\n  appliedTo: [{podSelector: {matchLabels: {app: locked}}}]\n  egress: [{name: no-nodes, action: Drop, to: [{nodeSelector: {}}]}]\n";
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let local = crate::compile::LocalNode {
        name: "n1".into(),
        ..Default::default()
    };
    let ruleset = crate::compile::compile(&crate::model::Snapshot { objects }, &local);
    let s = AgentStatus::new(
        AgentFacts {
            node_name: "n1".into(),
            fail_mode: FailMode::Closed,
            privileged: vec![
                "10.9.0.0/16,tcp/22".parse().unwrap(),
                Privileged {
                    hooks: vec![PrivilegedHook::Forward],
                    .."10.7.0.0/16,tcp/22".parse::<Privileged>().unwrap()
                },
            ],
            ..facts()
        },
        Arc::new(ArcSwap::from_pointee(ruleset)),
        Arc::new(Metrics::new()),
    );
    let trace_to = |src: &str, dst: &str, port: &str| {
        let request = TraceRequest {
            src: src.into(),
            dst: dst.into(),
            protocol: explain::TraceProtocol::Tcp,
            src_port: 40000,
            dst_port: Some(port.into()),
            icmp_type: 8,
            icmp_code: 0,
            igmp_type: 0x11,
            igmp_group: None,
            fqdn: None,
            http_method: None,
            http_host: None,
            http_path: None,
        };
        match s.answer(&Request::Trace(Box::new(request))) {
            Response::Trace(report) => *report,
            other => panic!("{other:?}"),
        }
    };
    let trace = |src: &str, port: &str| trace_to(src, "node:n1", port);
    let ssh = trace("10.9.3.4", "22");
    assert_eq!(ssh.privileged.as_deref(), Some("10.9.0.0/16,tcp/22"));
    assert_eq!(ssh.verdict, "Allow");
    assert_eq!(
        ssh.ingress.rule.as_deref(),
        Some("drop-all"),
        "what policy says"
    );
    for (src, port) in [("10.9.3.4", "23"), ("10.8.3.4", "22")] {
        let denied = trace(src, port);
        assert_eq!((denied.verdict.as_str(), denied.privileged), ("Drop", None));
    }
    // Routed traffic: only the entry that lists `forward` accepts it,
    // and the Node's entry accepts nothing routed (the trace has no
    // policy for these addresses, so their verdict is Allow anyway).
    let routed = trace_to("10.9.3.4", "10.9.3.5", "22");
    assert_eq!(routed.privileged, None);
    let routed = trace_to("10.6.0.1", "10.7.3.5", "22");
    assert_eq!(
        routed.privileged.as_deref(),
        Some("10.7.0.0/16,tcp/22 on forward")
    );
    // The entry does not reach the Node.
    assert_eq!(trace("10.7.3.4", "22").privileged, None);
    // An enforced Pod in an entry's range meets its own policy: the
    // entry matches no enforced endpoint, to the Node or from it.
    let pod = trace("apps/locked", "22");
    assert_eq!((pod.verdict.as_str(), pod.privileged), ("Drop", None));
    assert_eq!(pod.egress.rule.as_deref(), Some("no-nodes"));
    let to_pod = trace_to("node:n1", "apps/locked", "22");
    assert_eq!(
        (to_pod.verdict.as_str(), to_pod.privileged),
        ("Allow", None)
    );
    let unknown = Request::Trace(Box::new(TraceRequest {
        src: "ns/nobody".into(),
        ..match serde_json::from_str::<Request>(
            r#"{"request":"trace","src":"1.1.1.1","dst":"10.0.0.1","protocol":"icmp","srcPort":0}"#,
        )
        .unwrap()
        {
            Request::Trace(request) => *request,
            other => panic!("{other:?}"),
        }
    }));
    assert!(matches!(s.answer(&unknown), Response::Error(e) if e.contains("ns/nobody")));
}

#[test]
fn skipped_is_answered_in_kubernetes_mode_only() {
    let s = status();
    let Response::Error(error) = s.answer(&Request::Skipped) else {
        panic!("a policy directory skips nothing")
    };
    assert!(error.contains("policy directory"), "{error}");
    assert_eq!(s.report().kubernetes, None);
    s.kubernetes_source(SourceState::default());
    assert_eq!(s.answer(&Request::Skipped), Response::Skipped(vec![]));
    let report = s.report();
    assert_eq!(
        report.kubernetes,
        Some(KubernetesReport {
            synced: false,
            skipped: 0,
            partly_enforced: 0,
            peers: None
        })
    );
    assert!(render_status(&report, true).contains(
        "kubernetes:         NOT SYNCED (first list pending, or a watch failed: listing again), 0 skipped, 0 partly enforced"
    ));
    assert_eq!(
        serde_json::to_string(&Request::Skipped).unwrap(),
        r#"{"request":"skipped"}"#
    );
}

#[test]
fn fqdn_sources_come_from_the_table_once_it_is_set() {
    use crate::dns::Resolution;
    use crate::fqdn::{FqdnPattern, LearnerConfig, Source};
    let s = status();
    assert_eq!(s.fqdn_sources(), vec![]);
    let now = Instant::now();
    let selectors = vec![FqdnPattern::new("a.test")];
    let (table, _) = FqdnTable::restore(selectors, LearnerConfig::default(), &[], now);
    let answer = |last| Resolution {
        names: vec!["a.test".into()],
        address: std::net::IpAddr::from([10, 0, 0, last]),
        ttl: 60,
    };
    table.learn_answers(&[answer(1)], Source::Snooped, 0);
    table.learn_answers(&[answer(2)], Source::Resolved, 0);
    s.fqdn_table(Arc::new(table));
    let mut sources = s.fqdn_sources();
    sources.sort_by_key(|s| s.address);
    // The sets are the kernel's, read by the agent in its namespace (the
    // end-to-end tests read them): none here.
    let report = FqdnReport {
        sets: vec![LearnedSetReport {
            name: "tollgate-fqdn-x-v4".into(),
            entries: vec![("10.0.0.1".parse().unwrap(), 30)],
        }],
        sources,
    };
    let json = serde_json::to_string(&Response::Fqdn(report)).unwrap();
    assert_eq!(
        json,
        r#"{"fqdn":{"sets":[{"name":"tollgate-fqdn-x-v4","entries":[["10.0.0.1",30]]}],"sources":[{"selector":"a.test","address":"10.0.0.1","source":"snooped"},{"selector":"a.test","address":"10.0.0.2","source":"resolved"}]}}"#
    );
    assert_eq!(
        serde_json::to_string(&Request::Fqdn).unwrap(),
        r#"{"request":"fqdn"}"#
    );
}

#[test]
fn socket_round_trip_mode_0600_and_stale_socket_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/tollgate.sock");
    let server = serve(&path, status()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert!(matches!(
        request(&path, &Request::Policies).unwrap(),
        Response::Policies(p) if p.is_empty()
    ));
    assert!(matches!(
        serve(&path, status()),
        Err(StatusError::InUse { .. })
    ));
    // A garbage request gets an error answer.
    let stream = UnixStream::connect(&path).unwrap();
    (&stream).write_all(b"nonsense\n").unwrap();
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    assert!(answer.starts_with(r#"{"error":"bad request"#), "{answer}");
    drop(server);
    assert!(!path.exists());
    // A stale socket file (no listener) is replaced.
    let stale = UnixListener::bind(&path).unwrap();
    drop(stale);
    let _server = serve(&path, status()).unwrap();
    assert!(request(&path, &Request::Status).is_ok());
}

/// `n` connections that never send a request.
fn idle_clients(path: &Path, n: usize) -> Vec<UnixStream> {
    (0..n).map(|_| UnixStream::connect(path).unwrap()).collect()
}

#[test]
fn idle_clients_do_not_keep_others_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sock");
    let _server = serve(&path, status()).unwrap();
    let _idle = idle_clients(&path, 3);
    let started = Instant::now();
    assert!(matches!(
        request(&path, &Request::Status),
        Ok(Response::Status(_))
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn clients_over_the_cap_are_refused_at_once_and_served_once_others_leave() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sock");
    let _server = serve(&path, status()).unwrap();
    let idle = idle_clients(&path, MAX_CLIENTS);
    let started = Instant::now();
    let refused = request(&path, &Request::Status).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        refused.to_string(),
        "the agent: busy: 16 status clients are being served; try again"
    );
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    while request(&path, &Request::Status).is_err() {
        assert!(Instant::now() < deadline, "places given back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn slow_and_oversized_requests_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sock");
    let _server = serve(&path, status()).unwrap();
    // Half a request, then nothing: closed after REQUEST_TIMEOUT.
    let slow = UnixStream::connect(&path).unwrap();
    (&slow).write_all(b"{\"request\":").unwrap();
    slow.set_read_timeout(Some(REQUEST_TIMEOUT * 3)).unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = (&slow).read_to_end(&mut answer);
    assert!(answer.is_empty(), "{answer:?}");
    assert!(
        started.elapsed() < REQUEST_TIMEOUT * 2,
        "{:?}",
        started.elapsed()
    );
    // An endless request: answered as a bad one after 4096 bytes.
    let long = UnixStream::connect(&path).unwrap();
    let _ = (&long).write_all(&[b'x'; 3 * MAX_REQUEST]);
    let mut answer = String::new();
    BufReader::new(&long).read_line(&mut answer).unwrap();
    assert!(answer.starts_with(r#"{"error":"bad request"#), "{answer}");
}

#[test]
fn a_silent_or_stopped_agent_is_a_timeout_and_an_empty_answer_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sock");
    // Bound, never accepting: the connection waits in the queue.
    let _listener = UnixListener::bind(&path).unwrap();
    let short = Duration::from_millis(300);
    let error = request_within(&path, &Request::Status, short).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "status socket {}: no answer within 0.3s (the agent is stuck or overloaded)",
            path.display()
        )
    );
    // Accepting and closing without a word.
    let closing = dir.path().join("c.sock");
    let listener = UnixListener::bind(&closing).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            drop(stream);
        }
    });
    let error = request_within(&closing, &Request::Status, short).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "status socket {}: the agent closed the connection without answering",
            closing.display()
        )
    );
}

#[test]
fn binding_leaves_nothing_behind_even_after_a_crashed_bind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sock");
    let leftover = dir.path().join(format!(".t.sock.{}", std::process::id()));
    std::fs::create_dir(&leftover).unwrap();
    std::fs::write(leftover.join("s"), b"").unwrap();
    let _server = serve(&path, status()).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["t.sock"]);
    assert!(request(&path, &Request::Status).is_ok());
}

/// `tollgate diff live` reads the snapshot the latest ruleset was compiled
/// from: none before the first, then its objects (decoded by the CLI back
/// to the same objects) and the Node with its labels and addresses.
#[test]
fn the_snapshot_answer_is_the_compiled_snapshot_and_its_node() {
    let s = status();
    assert!(matches!(s.answer(&Request::Snapshot), Response::Error(_)));
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: apps, labels: {app: web}}\nspec: {nodeName: n1}\nstatus: {podIP: 10.9.5.5}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: apps}\nspec:\n  priority: 1\n  tier: application\n  appliedTo: [{podSelector: {}}]\n  ingress: [{action: Drop, from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]\n";
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let snapshot = Arc::new(Snapshot { objects });
    let node = LocalNode {
        name: "n1".into(),
        labels: crate::model::Labels::from_iter([("zone".to_string(), "a".to_string())]),
        addresses: vec!["10.0.0.1".parse().unwrap()],
    };
    s.compiled(Arc::clone(&snapshot), &node);
    let answer = s.answer(&Request::Snapshot);
    // Through the wire's JSON, as the client reads it.
    let answer: Response = serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
    let Response::Snapshot(report) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(report.node_name, "n1");
    assert!(report.node_labels.iter().eq(node.labels.iter()));
    assert_eq!(report.node_addresses, node.addresses);
    let (read, problems) = crate::commands::live_objects(&report);
    assert!(problems.is_empty(), "{problems:?}");
    let objects = |list: &[crate::model::Sourced]| -> Vec<serde_json::Value> {
        list.iter()
            .map(|o| serde_json::to_value(&o.object).unwrap())
            .collect()
    };
    assert_eq!(objects(&read), objects(&snapshot.objects));
}

#[test]
fn controller_mode_shows_its_groups_and_a_stale_controller() {
    let s = status();
    s.kubernetes_source(SourceState::default());
    let mut report = s.report();
    let peers = |waiting, controller_stale| PeersReport {
        needed: 3,
        waiting,
        slices: 5,
        controller_stale,
    };
    let line = |report: &StatusReport| {
        render_status(report, true)
            .lines()
            .find(|l| l.starts_with("peers:"))
            .map(str::to_string)
    };
    assert_eq!(line(&report), None, "watch mode has no peers line");
    report.kubernetes.as_mut().unwrap().peers = Some(peers(0, false));
    assert_eq!(
        line(&report).unwrap(),
        "peers:              controller, 3 groups in 5 slices"
    );
    report.kubernetes.as_mut().unwrap().peers = Some(peers(2, true));
    let waiting = line(&report).unwrap();
    assert!(
        waiting.starts_with("peers:              waiting for 2 groups of 3 (the ruleset in force stays); controller STALE"),
        "{waiting}"
    );
}
