//! Dry-run policies on the wire (issue 31 part 3), in files and
//! Kubernetes mode: a policy annotated `tollgate.io/dry-run: "true"` never
//! changes a verdict — in the kernel verdict cache included — while every
//! new connection it would decide otherwise is written to the audit log as
//! `DryRun<Verdict>` and counted in `tollgate_dry_run_verdicts_total`;
//! `trace` and `get policies` show it; removing the annotation (a hot
//! reload, or a watch event) enforces it. IPv4 and IPv6.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;
use tollgate_fake_api::FakeApi;

use crate::harness::agent::FailMode;
use crate::harness::metrics::scrape;
use crate::harness::{poll_until, Lab, Service, TcpOutcome, AGENT_WAIT};

/// Dropped by the dry-run policy `dry-web` (allowed while it is dry-run).
const WEB: u16 = 8080;
/// Dropped by the enforced `deny-admin`, allowed by the dry-run
/// `allow-admin` that precedes it.
const ADMIN: u16 = 8081;
/// No rule names it: the positive control, allowed throughout.
const OPEN: u16 = 8082;
const METRICS: &str = "127.0.0.1:9431";

/// The node's ingress policies; `dry_run` puts `dry-web` and `allow-admin`
/// in dry-run (else they are enforced).
fn policies(dry_run: bool) -> String {
    let annotation = if dry_run {
        "\n  annotations: {tollgate.io/dry-run: \"true\"}"
    } else {
        ""
    };
    let node = "[{nodeSelector: {matchLabels: {kubernetes.io/os: linux}}}]";
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: dry-web{annotation}
spec:
  priority: 1
  tier: securityops
  appliedTo: {node}
  ingress:
    - {{action: Drop, name: drop-web, ports: [{{protocol: TCP, port: {WEB}}}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: allow-admin{annotation}
spec:
  priority: 2
  tier: securityops
  appliedTo: {node}
  ingress:
    - {{action: Allow, name: let-admin, ports: [{{protocol: TCP, port: {ADMIN}}}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: deny-admin
spec:
  priority: 10
  tier: securityops
  appliedTo: {node}
  ingress:
    - {{action: Drop, name: drop-admin, ports: [{{protocol: TCP, port: {ADMIN}}}]}}
"
    )
}

fn targets(lab: &Lab, port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(IpAddr::from(lab.node_addr("client")), port),
        SocketAddr::new(IpAddr::from(lab.node_addr6("client")), port),
    ]
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run tollgate")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The audit log's lines holding every one of `needles`.
fn audit_lines(log: &Path, needles: &[&str]) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

fn dry_run_count(m: &BTreeMap<String, f64>, policy: &str, rule: &str, action: &str) -> f64 {
    let key = format!(
        "tollgate_dry_run_verdicts_total{{policy=\"AntreaClusterNetworkPolicy:{policy}\",rule=\"{rule}\",action=\"{action}\"}}"
    );
    m.get(&key).copied().unwrap_or(0.0)
}

/// A dry-run Drop leaves its connections working, and each of them — from
/// one source address, so that an enforced verdict of that tuple would be
/// in the kernel cache from the third on — is logged `DryRunDrop` and
/// counted; a dry-run Allow in front of an enforced Drop logs
/// `DryRunAllow` while the connection stays dropped; `trace` and
/// `get policies` say the same; removing the annotation enforces both.
///
/// Mutations tried, each failing the test: counting dry-run rules in the
/// enforced outcome (`Mode::Enforced => (false, table.isolated)` in
/// core/src/ruleset/classify.rs) drops the first WEB connection; caching a
/// tuple the dry-run outcome decides otherwise (`dry_run_agrees` always
/// true in core/src/decide.rs) leaves the count at 8 of 10 (the later
/// connections of each tuple answered by the kernel unseen); not handing
/// the dry-run record to the audit log (src/workers/connection.rs) leaves
/// the log empty.
#[test]
fn a_dry_run_drop_lets_traffic_flow_logs_and_counts_it_until_promoted() {
    const TEST: &str = "a_dry_run_drop_lets_traffic_flow_logs_and_counts_it_until_promoted";
    let Some(lab) = Lab::builder(TEST)
        .peer("client")
        .ipv6()
        .fresh_sources()
        .require(&["curl"])
        .build()
    else {
        return;
    };
    for port in [WEB, ADMIN, OPEN] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    lab.write_policy("node.yaml", &policies(true));
    let log = lab.dir().join("np.log");
    let options = lab.agent_options().queues(1).args(&[
        "--audit-log",
        log.to_str().unwrap(),
        "--metrics-address",
        METRICS,
    ]);
    let socket = options.status_socket.display().to_string();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    // Each connection to WEB flows; four from the client's own address
    // (the verdict cache writes a tuple at its second decision), one from
    // a fresh source, per family.
    const REPEATS: usize = 4;
    for target in targets(&lab, WEB) {
        for _ in 0..REPEATS {
            lab.assert_tcp("client", target, TcpOutcome::Connected);
        }
        lab.assert_tcp_fresh("client", target, TcpOutcome::Connected);
    }
    // The positive control and the enforced Drop under a dry-run Allow.
    for target in targets(&lab, OPEN) {
        lab.assert_tcp_both("client", target, TcpOutcome::Connected);
    }
    for target in targets(&lab, ADMIN) {
        lab.assert_tcp_fresh("client", target, TcpOutcome::TimedOut);
    }

    // Every WEB connection was seen, logged and counted once: none
    // answered by the kernel cache. (A dropped SYN's retransmission is a
    // new connection to the kernel: ADMIN counts at least one per family.)
    let web = 2.0 * (REPEATS as f64 + 1.0);
    let count = || {
        let m = scrape(lab.node(), METRICS);
        (
            dry_run_count(&m, "dry-web", "drop-web", "Drop"),
            dry_run_count(&m, "allow-admin", "let-admin", "Allow"),
        )
    };
    let counted = poll_until(AGENT_WAIT, || {
        let (n, admin) = count();
        (n >= web && admin >= 2.0).then_some(n)
    });
    assert_eq!(
        counted,
        Some(web),
        "dry-run verdicts counted: {:?}",
        count()
    );
    let web_lines = &[
        "AntreaClusterNetworkPolicy:dry-web drop-web Ingress DryRunDrop",
        &format!(" {WEB} TCP "),
    ];
    let admin_lines = &[
        "AntreaClusterNetworkPolicy:allow-admin let-admin Ingress DryRunAllow",
        &format!(" {ADMIN} TCP "),
    ];
    let logged = poll_until(AGENT_WAIT, || {
        let n = (audit_lines(&log, web_lines), audit_lines(&log, admin_lines));
        (n.0 >= web as usize && n.1 >= 2).then_some(n)
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let Some((web_logged, admin_logged)) = logged else {
        panic!("audit log:\n{text}");
    };
    assert_eq!(web_logged, web as usize, "audit log:\n{text}");
    for family in [
        lab.addr("client").to_string(),
        lab.addr6("client").to_string(),
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains("DryRunDrop") && l.contains(&format!(" {family} "))),
            "no DryRunDrop from {family}:\n{text}"
        );
    }
    // Nothing else in the log: no enforced rule here has enableLogging.
    let dry_run_lines = web_logged + admin_logged;
    assert_eq!(text.lines().count(), dry_run_lines, "audit log:\n{text}");
    let m = scrape(lab.node(), METRICS);
    // No enforced verdict was counted for the dry-run rules.
    assert!(
        !m.keys()
            .any(|k| k.starts_with("tollgate_rule_hits_total{") && k.contains("dry-web")),
        "{m:#?}"
    );

    // trace: the enforced verdict, and beside it the dry-run one.
    let client = lab.addr("client").to_string();
    let node = lab.node_addr("client").to_string();
    let trace = |port: u16| {
        let port = port.to_string();
        json(&tollgate(&[
            "trace",
            "--socket",
            &socket,
            "--src",
            &client,
            "--dst",
            &node,
            "--protocol",
            "tcp",
            "--dst-port",
            &port,
            "-o",
            "json",
        ]))
    };
    let web_trace = trace(WEB);
    assert_eq!(web_trace["verdict"], "Allow", "{web_trace}");
    assert_eq!(web_trace["dryRun"]["verdict"], "Drop", "{web_trace}");
    assert_eq!(web_trace["dryRun"]["changed"], true, "{web_trace}");
    assert_eq!(web_trace["dryRun"]["rule"], "drop-web", "{web_trace}");
    let admin_trace = trace(ADMIN);
    assert_eq!(admin_trace["verdict"], "Drop", "{admin_trace}");
    assert_eq!(admin_trace["dryRun"]["verdict"], "Allow", "{admin_trace}");
    // A port no dry-run rule names: the dry-run verdict is the enforced
    // one, and says so.
    let open_trace = trace(OPEN);
    assert_eq!(open_trace["verdict"], "Allow", "{open_trace}");
    assert_eq!(open_trace["dryRun"]["verdict"], "Allow", "{open_trace}");
    assert_eq!(open_trace["dryRun"]["changed"], false, "{open_trace}");
    let text = tollgate(&[
        "trace",
        "--socket",
        &socket,
        "--src",
        &client,
        "--dst",
        &node,
        "--protocol",
        "tcp",
        "--dst-port",
        &WEB.to_string(),
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("verdict: Allow\n"), "{text}");
    assert!(
        text.contains("\n  dry-run: would Drop by Ingress AntreaClusterNetworkPolicy:dry-web rule drop-web (tier securityops) (not enforced)\n"),
        "{text}"
    );
    // get policies marks them.
    let listed = json(&tollgate(&[
        "get", "policies", "--socket", &socket, "-o", "json",
    ]));
    let dry: Vec<&str> = listed
        .as_array()
        .expect("a list of policies")
        .iter()
        .filter(|p| p["dryRun"] == true)
        .map(|p| p["policy"]["name"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(dry, ["dry-web", "allow-admin"], "{listed}");

    // Promotion: the annotation removed, a hot reload. WEB is dropped,
    // ADMIN allowed, from the client's own address (cached before as an
    // allow? never: the dry-run kept it out of the cache) and a fresh one.
    lab.write_policy("node.yaml", &policies(false));
    agent.wait_generation(2);
    for target in targets(&lab, WEB) {
        lab.assert_tcp_both("client", target, TcpOutcome::TimedOut);
    }
    for target in targets(&lab, ADMIN) {
        lab.assert_tcp_both("client", target, TcpOutcome::Connected);
    }
    for target in targets(&lab, OPEN) {
        lab.assert_tcp_both("client", target, TcpOutcome::Connected);
    }
    let m = scrape(lab.node(), METRICS);
    assert_eq!(dry_run_count(&m, "dry-web", "drop-web", "Drop"), web);
    assert_eq!(
        audit_lines(&log, &["DryRun"]),
        dry_run_lines,
        "no dry-run line once enforced"
    );
    agent.stop();
}

/// Kubernetes mode: a Kubernetes NetworkPolicy isolating the `web` Pod,
/// in dry-run, isolates nothing — the connection works and each one is
/// logged as its default drop (`IngressDefaultRule … DryRunDrop`) and
/// counted under `rule="default-drop"`; the annotation removed by a watch
/// event enforces the isolation, added back it lifts it again. IPv4 and
/// IPv6 (the Pods are dual-stack).
///
/// Mutation tried: counting a dry-run policy's isolation as enforced
/// (`lists.isolated |= true` in core/src/compile/k8s.rs) drops the first
/// connection: the test fails.
#[test]
fn a_dry_run_kubernetes_isolation_follows_the_annotation_through_watch_events() {
    const TEST: &str = "a_dry_run_kubernetes_isolation_follows_the_annotation_through_watch_events";
    let Some(lab) = Lab::builder(TEST)
        .peer("client")
        .peer("server")
        .ipv6()
        .require(&["curl"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", WEB, Service::Echo);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    for (name, role) in [("web", "server"), ("client", "client")] {
        let (ip, ip6) = (lab.addr(role).to_string(), lab.addr6(role).to_string());
        api.apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "prod", "labels": {"app": name}},
            "spec": {"nodeName": "node", "containers": [{"name": "main"}]},
            "status": {"podIP": ip, "podIPs": [{"ip": ip}, {"ip": ip6}]}}));
    }
    let isolate = |dry_run: bool| {
        let annotations = if dry_run {
            json!({"tollgate.io/dry-run": "true"})
        } else {
            json!({})
        };
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-web", "namespace": "prod", "annotations": annotations},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}})
    };
    api.apply(isolate(true));
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let log = lab.dir().join("np.log");
    let metrics = "127.0.0.1:9432";
    let mut options = lab.agent_options().queues(1).args(&[
        "--audit-log",
        log.to_str().unwrap(),
        "--metrics-address",
        metrics,
    ]);
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    let webs = [
        SocketAddr::new(lab.addr("server").into(), WEB),
        SocketAddr::new(lab.addr6("server").into(), WEB),
    ];
    let isolation =
        "{policy=\"K8sNetworkPolicy:prod/deny-web\",rule=\"default-drop\",action=\"Drop\"}";
    let key = format!("tollgate_dry_run_verdicts_total{isolation}");
    let counted = |n: usize| {
        poll_until(AGENT_WAIT, || {
            let got = scrape(lab.node(), metrics)
                .get(&key)
                .copied()
                .unwrap_or(0.0);
            (got >= n as f64).then_some(got as usize)
        })
    };
    const REPEATS: usize = 3;
    for web in webs {
        for _ in 0..REPEATS {
            lab.assert_tcp("client", web, TcpOutcome::Connected);
        }
    }
    assert_eq!(counted(2 * REPEATS), Some(2 * REPEATS));
    let logged = |web: SocketAddr| {
        let line = &[
            " IngressDefaultRule K8sNetworkPolicy:prod/deny-web <nil> Ingress DryRunDrop <nil> prod/web ",
            &format!(" {} {WEB} TCP ", web.ip()),
        ];
        poll_until(AGENT_WAIT, || {
            let n = audit_lines(&log, line);
            (n >= REPEATS).then_some(n)
        })
    };
    for web in webs {
        assert_eq!(
            logged(web),
            Some(REPEATS),
            "{web}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    // The annotation removed (a MODIFIED event): enforced.
    api.apply(isolate(false));
    agent.wait_generation(2);
    for web in webs {
        lab.assert_tcp("client", web, TcpOutcome::TimedOut);
    }
    // Added back: dry-run again, the connection works and is counted.
    api.apply(isolate(true));
    agent.wait_generation(3);
    for web in webs {
        lab.assert_tcp("client", web, TcpOutcome::Connected);
    }
    assert_eq!(counted(2 * REPEATS + 2), Some(2 * REPEATS + 2));
    agent.stop();
}

/// A Pod that only a dry-run policy applies to is queued without being
/// enforced: under `failMode: closed`, with the agent killed (`kill -9`,
/// its rules left in the kernel, no worker reading the queue), a fresh
/// connection to it connects, as it would without the policy, while one
/// to a Pod an enforced policy applies to is dropped (fail-closed). The
/// restarted agent adopts the rules; removing the annotation (a watch
/// event) then moves the first Pod to the enforced set and drops its new
/// connections. IPv4 and IPv6.
///
/// Mutation tried: no `--queue-bypass` on the dry-run set's queue rules
/// (`bypassed` replaced by `target` in `queue_rules`,
/// src/datapath/plan.rs) times out the fresh connection to the dry-run
/// Pod once the agent is killed: the test fails.
#[test]
fn a_dry_run_only_pod_stays_open_without_an_agent_under_fail_closed() {
    const TEST: &str = "a_dry_run_only_pod_stays_open_without_an_agent_under_fail_closed";
    let Some(lab) = Lab::builder(TEST)
        .peer("client")
        .peer("web")
        .peer("admin")
        .ipv6()
        .fresh_sources()
        .build()
    else {
        return;
    };
    lab.serve_tcp("web", WEB, Service::Echo);
    lab.serve_tcp("admin", WEB, Service::Echo);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    // The client is no Pod: its fresh source addresses are not spoofing.
    for name in ["web", "admin"] {
        let (ip, ip6) = (lab.addr(name).to_string(), lab.addr6(name).to_string());
        api.apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "prod", "labels": {"app": name}},
            "spec": {"nodeName": "node", "containers": [{"name": "main"}]},
            "status": {"podIP": ip, "podIPs": [{"ip": ip}, {"ip": ip6}]}}));
    }
    // `web`: isolated (every connection to it dropped) by a policy in
    // dry-run. `admin`: isolated by an enforced policy that allows every
    // source (the fresh ones included).
    let deny_web = |dry_run: bool| {
        let annotations = if dry_run {
            json!({"tollgate.io/dry-run": "true"})
        } else {
            json!({})
        };
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-web", "namespace": "prod", "annotations": annotations},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}})
    };
    api.apply(deny_web(true));
    api.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "admin-from-all", "namespace": "prod"},
        "spec": {"podSelector": {"matchLabels": {"app": "admin"}}, "policyTypes": ["Ingress"],
            "ingress": [{}]}}),
    );
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = lab.agent_options().queues(1).fail_mode(FailMode::Closed);
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options.clone());
    agent.wait_generation(1);

    let at = |role: &str| {
        [
            SocketAddr::new(lab.addr(role).into(), WEB),
            SocketAddr::new(lab.addr6(role).into(), WEB),
        ]
    };
    // The agent up: both Pods reachable from the client.
    for to in at("web").into_iter().chain(at("admin")) {
        lab.assert_tcp_fresh("client", to, TcpOutcome::Connected);
    }

    // No agent: the kernel accepts what it queues to the dry-run Pod and
    // drops what it queues to the enforced one.
    agent.kill9();
    for to in at("web") {
        lab.assert_tcp_fresh("client", to, TcpOutcome::Connected);
    }
    for to in at("admin") {
        lab.assert_tcp_fresh("client", to, TcpOutcome::TimedOut);
    }

    // Restarted, it adopts the rules; promotion drops `web`'s new
    // connections, `admin` stays allowed.
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    for to in at("web").into_iter().chain(at("admin")) {
        lab.assert_tcp_fresh("client", to, TcpOutcome::Connected);
    }
    api.apply(deny_web(false));
    agent.wait_generation(2);
    for to in at("web") {
        lab.assert_tcp_fresh("client", to, TcpOutcome::TimedOut);
    }
    for to in at("admin") {
        lab.assert_tcp_fresh("client", to, TcpOutcome::Connected);
    }
    agent.stop();
}
