//! The kernel verdict cache on the wire (issue 17 item 1): a decided tuple
//! is answered by the kernel without a worker (the connection queues'
//! packet counter stays still), a policy or inventory change invalidates
//! it (IPv4 and IPv6: the wire checks run once the new generation is
//! applied; that the change removes the lookups before the new ruleset's
//! first verdict is shown at plan level:
//! `a_bridge_answers_nothing_from_the_cache_and_writes_no_cache_set`, and
//! on the wire by `faults::kill_during_reload_fails_closed_and_restart_converges`,
//! where a half-written bridge answers not even a cached tuple), cached allows
//! keep working while the agent is down and not past a restart with a
//! changed policy, a new generation changes what the lookup sets hold and
//! no rule, rules an earlier version left naming a generation's sets are
//! moved to the lookup sets at an upgrade, `--verdict-cache off` caches
//! nothing, and a SYN flood at a denied port stays out of userspace after
//! its first packets (the counts are printed as `VERDICT-CACHE-FLOOD`).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpListener};

use hickory_proto::rr::RecordType;
use serde_json::{json, Value};
use tollgate::datapath::state::counted_rule;
use tollgate_fake_api::FakeApi;

use crate::harness::probe::total_queued;
use crate::harness::{
    metrics, poll_until, DnsRecord, Lab, PingOutcome, Resolution, Service, TcpOutcome, UdpOutcome,
    AGENT_WAIT, ALLOW_WAIT, DENY_WAIT,
};

const PORT: u16 = 8080;
/// A port no rule names: allowed, but never connected to before the
/// restart test needs a tuple the cache cannot know.
const UNCACHED: u16 = 8081;

/// The node's ingress: `action` for TCP `PORT` from everywhere, and a
/// Reject on port 9 so that the node's ingress is enforced either way.
fn node_policy(action: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: node-ingress}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}}}]
  ingress:
    - action: {action}
      ports: [{{protocol: TCP, port: {PORT}}}]
    - action: Reject
      ports: [{{protocol: TCP, port: 9}}]
"
    )
}

fn lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test).peer("client").ipv6().build()?;
    for port in [PORT, UNCACHED] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    Some(lab)
}

fn targets(lab: &Lab, port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(IpAddr::from(lab.node_addr("client")), port),
        SocketAddr::new(IpAddr::from(lab.node_addr6("client")), port),
    ]
}

/// Packets ever queued to the connection queues (100 and 101) of the node.
fn queued(lab: &Lab) -> u64 {
    let counters = lab.queue_counters();
    total_queued(
        &counters
            .into_iter()
            .filter(|c| c.queue == 100 || c.queue == 101)
            .collect::<Vec<_>>(),
    )
}

/// The entries of the verdict cache sets, as `ipset save` lists them
/// (`add <set> <src>,tcp:<port>,<dst> timeout N`).
fn entries(lab: &Lab) -> Vec<String> {
    lab.node()
        .run(&["ipset", "save"])
        .stdout
        .lines()
        .filter(|l| l.starts_with("add tollgate-vc-"))
        .map(str::to_string)
        .collect()
}

/// The verdict cache's lookup rules of the node, both families, every
/// table, without counters.
fn lookup_rules(lab: &Lab) -> Vec<String> {
    ["iptables-save", "ip6tables-save"]
        .iter()
        .flat_map(|save| {
            lab.node()
                .dump(save)
                .lines()
                .filter(|l| l.contains("--match-set tollgate-vc"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The sets the verdict cache's lookup sets hold (`ipset save`'s `add
/// tollgate-vcl-ia-v4 tollgate-vc-…-ia-v4`).
fn held(lab: &Lab) -> BTreeSet<String> {
    lab.node()
        .dump("ipset save")
        .lines()
        .filter(|l| l.starts_with("add tollgate-vcl-"))
        .filter_map(|l| l.split(' ').nth(2))
        .map(str::to_string)
        .collect()
}

/// Decides `target` a second time (a tuple is cached at its second
/// decision) and waits until the cache holds its entry in a set of
/// `verdict` (`a`, `d` or `r`) of the INPUT hook.
#[track_caller]
fn wait_cached(lab: &Lab, target: SocketAddr, verdict: char) {
    // A tuple is written on its second decision: make it.
    let outcome = match verdict {
        'a' => TcpOutcome::Connected,
        'd' => TcpOutcome::TimedOut,
        _ => TcpOutcome::Refused,
    };
    lab.assert_tcp("client", target, outcome);
    lab.wait_cached("client", &[(target, verdict)]);
}

/// The connection to `target` ends as `expected` and no packet reached a
/// connection queue meanwhile.
#[track_caller]
fn assert_from_cache(lab: &Lab, target: SocketAddr, expected: TcpOutcome) {
    let before = queued(lab);
    lab.assert_tcp("client", target, expected);
    assert_eq!(queued(lab), before, "{target}: queued to a worker");
}

#[test]
fn a_cached_verdict_is_answered_by_the_kernel_and_a_policy_change_replaces_it() {
    let Some(lab) =
        lab("a_cached_verdict_is_answered_by_the_kernel_and_a_policy_change_replaces_it")
    else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    let mut agent = lab.start_agent(lab.agent_options().args(&["--drift-check-seconds", "2"]));
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        let before = queued(&lab);
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        assert!(
            queued(&lab) > before,
            "the first connection is decided by a worker"
        );
        wait_cached(&lab, target, 'a');
        // Every later connection (a new source port each) is answered by
        // the kernel, and is a working connection (mark, connmark, accept).
        for _ in 0..3 {
            assert_from_cache(&lab, target, TcpOutcome::Connected);
        }
    }

    // The hits are the counters of the chain that carries out a cached
    // Allow: three a family.
    let allows = |lab: &Lab| hits(lab, "filter", "TOLLGATE-CACHED-ALLOW", "-j MARK");
    assert_eq!(allows(&lab), [3, 3]);

    // Allow → Drop: the next new connection is dropped, the cache held
    // nothing of the old ruleset.
    let (rules, first) = (lookup_rules(&lab), held(&lab));
    assert_eq!(rules.len(), 2 * 3 * 3, "{rules:#?}");
    assert!(
        rules.iter().all(|r| r.contains(" tollgate-vcl-")),
        "{rules:#?}"
    );
    assert_eq!(first.len(), 18, "{first:?}");
    lab.write_policy("node.yaml", &node_policy("Drop"));
    agent.wait_generation(2);
    // The lookup sets hold the new generation's sets instead, and no rule
    // changed: not the lookup rules, not the chains they jump to, nor the
    // hits those counted (no reading is needed before a switch).
    let second = held(&lab);
    assert_eq!(second.len(), 18, "{second:?}");
    assert!(second.is_disjoint(&first), "{first:?} {second:?}");
    assert_eq!(
        lookup_rules(&lab),
        rules,
        "a new generation rewrote the rules"
    );
    assert_eq!(allows(&lab), [3, 3], "a new generation reset the hits");
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
        wait_cached(&lab, target, 'd');
        assert_from_cache(&lab, target, TcpOutcome::TimedOut);
    }
    // (A dropped SYN's retransmissions may be answered too: at least one.)
    assert!(hits(&lab, "filter", "TOLLGATE-CACHED-DROP", "-j DROP")
        .iter()
        .all(|&n| n >= 1));
    assert!(
        entries(&lab)
            .iter()
            .all(|e| !e.split(' ').nth(1).is_some_and(|set| set.contains("-ia-v"))),
        "an allow outlived the change: {:?}",
        entries(&lab)
    );

    // Drop → Reject → Allow: the reverse way too.
    lab.write_policy("node.yaml", &node_policy("Reject"));
    agent.wait_generation(3);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Refused);
        wait_cached(&lab, target, 'r');
        assert_from_cache(&lab, target, TcpOutcome::Refused);
    }
    assert_eq!(
        hits(&lab, "filter", "TOLLGATE-CACHED-REJECT", "-p tcp"),
        [1, 1]
    );
    assert_eq!(allows(&lab), [3, 3]);
    lab.write_policy("node.yaml", &node_policy("Allow"));
    agent.wait_generation(4);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
    }
    // The agent counted every hit of the four generations: what the
    // kernel's counters hold (read every drift check, every 2 s here).
    let kernel: u64 = [
        ("TOLLGATE-CACHED-ALLOW", "-j MARK"),
        ("TOLLGATE-CACHED-DROP", "-j DROP"),
        ("TOLLGATE-CACHED-REJECT", "-j REJECT"),
    ]
    .iter()
    .flat_map(|(chain, rule)| hits(&lab, "filter", chain, rule))
    .sum();
    let socket = lab.agent_options().status_socket;
    let counted = poll_until(AGENT_WAIT, || cache_hits(&socket).filter(|&n| n == kernel));
    assert_eq!(
        counted,
        Some(kernel),
        "status {:?}, kernel {kernel}",
        cache_hits(&socket)
    );
    agent.stop();
    // `tollgate cleanup` leaves none of the cache behind (stop keeps it).
    assert!(lab.tollgate_cleanup().success());
    assert!(
        lab.firewall_state("node")
            .set_names()
            .iter()
            .all(|s| !s.starts_with("tollgate-")),
        "{:?}",
        lab.firewall_state("node").set_names()
    );
}

/// Packets counted by the rules of `chain` in `table` of the node that
/// contain `rule`, IPv4 and IPv6 (`*-save -c` counters).
fn hits(lab: &Lab, table: &str, chain: &str, rule: &str) -> [u64; 2] {
    ["iptables-save", "ip6tables-save"].map(|save| {
        let out = lab.node().dump(&format!("{save} -c -t {table}"));
        let head = format!("-A {chain} ");
        out.lines()
            .filter_map(counted_rule)
            .filter(|(_, text)| text.starts_with(&head) && text.contains(rule))
            .map(|(packets, _)| packets)
            .sum()
    })
}

/// Namespace `x` and in it Pod `role` labelled `app: <app>`, on `node`,
/// with `addresses` (the first is `podIP`), then a ClusterNetworkPolicy
/// named `<role>-policy` of priority 5 in securityops, whose `spec` goes on
/// with `rest` (appliedTo and rules, indented by two spaces).
fn pod_and_policy(role: &str, app: &str, node: &str, addresses: &[IpAddr], rest: &str) -> String {
    let ips: Vec<String> = addresses.iter().map(|a| format!("{{ip: '{a}'}}")).collect();
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: x, labels: {{ns: x}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {role}, namespace: x, labels: {{app: {app}}}}}
spec: {{nodeName: {node}}}
status: {{podIP: '{}', podIPs: [{}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: {role}-policy}}
spec:
  priority: 5
  tier: securityops
{rest}",
        addresses[0],
        ips.join(", ")
    )
}

/// The node's ingress on `PORT`: allowed from Pods labelled `app: a`,
/// dropped from everyone else; the client is a Pod of another node
/// labelled `app: <app>`.
fn pod_policy(lab: &Lab, app: &str) -> String {
    let addresses = [lab.addr("client").into(), lab.addr6("client").into()];
    pod_and_policy(
        "client",
        app,
        "other",
        &addresses,
        &format!(
            "  appliedTo: [{{nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}}}]
  ingress:
    - action: Allow
      from: [{{podSelector: {{matchLabels: {{app: a}}}}}}]
      ports: [{{protocol: TCP, port: {PORT}}}]
    - action: Drop
      ports: [{{protocol: TCP, port: {PORT}}}]
"
        ),
    )
}

#[test]
fn a_pod_label_change_invalidates_cached_verdicts() {
    let Some(lab) = lab("a_pod_label_change_invalidates_cached_verdicts") else {
        return;
    };
    lab.write_policy("node.yaml", &pod_policy(&lab, "a"));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        wait_cached(&lab, target, 'a');
        assert_from_cache(&lab, target, TcpOutcome::Connected);
    }
    // Only the inventory changes: the client's Pod loses its label.
    lab.write_policy("node.yaml", &pod_policy(&lab, "b"));
    agent.wait_generation(2);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
        wait_cached(&lab, target, 'd');
    }
    lab.write_policy("node.yaml", &pod_policy(&lab, "a"));
    agent.wait_generation(3);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
    }
    agent.stop();
}

/// The objects of [`pod_policy`] for the fake API server: the client's
/// Namespace (`extra` labels beside `ns: x`), its Pod on another Node
/// labelled `app: <app>`, and the Node's policy.
fn pod_policy_objects(lab: &Lab, app: &str, extra: Value) -> Vec<Value> {
    let mut labels = json!({"ns": "x"});
    labels
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let ips = [
        lab.addr("client").to_string(),
        lab.addr6("client").to_string(),
    ];
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "x", "labels": labels}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "client", "namespace": "x", "labels": {"app": app}},
               "spec": {"nodeName": "other"},
               "status": {"podIP": ips[0], "podIPs": [{"ip": ips[0]}, {"ip": ips[1]}]}}),
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "client-policy"},
               "spec": {"priority": 5, "tier": "application",
                        "appliedTo": [{"nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}}}],
                        "ingress": [
                            {"action": "Allow", "from": [{"podSelector": {"matchLabels": {"app": "a"}}}],
                             "ports": [{"protocol": "TCP", "port": PORT}]},
                            {"action": "Drop", "ports": [{"protocol": "TCP", "port": PORT}]}]}}),
    ]
}

/// Kubernetes mode, where reloads follow the cluster's changes: one no
/// decision reads — the labels of the client's Namespace, which no
/// selector here reads and which holds no local endpoint — reloads
/// without a new ruleset: the generation and its cached verdicts stay
/// (the tuples are still answered by the kernel). A change a rule reads
/// (the client's label) then replaces them. Mutation: the agent offering
/// a new ruleset at every reload (`Compiled::new` ignored) → generation 2
/// follows the Namespace label, the reload's line never comes → fails
/// (tried).
#[test]
fn a_change_no_decision_reads_keeps_the_cached_verdicts() {
    let Some(lab) = lab("a_change_no_decision_reads_keeps_the_cached_verdicts") else {
        return;
    };
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    for object in pod_policy_objects(&lab, "a", json!({})) {
        api.apply(object);
    }
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = lab.agent_options();
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        wait_cached(&lab, target, 'a');
    }
    let [namespace, ..] = &pod_policy_objects(&lab, "a", json!({"team": "t"}))[..] else {
        unreachable!()
    };
    api.apply(namespace.clone());
    agent.wait_for_log("reload changed nothing enforced", AGENT_WAIT);
    assert_eq!(agent.count_log("ruleset applied generation=2"), 0);
    for target in targets(&lab, PORT) {
        assert_from_cache(&lab, target, TcpOutcome::Connected);
    }
    // Positive control: the client loses its label.
    api.apply(pod_policy_objects(&lab, "b", json!({"team": "t"}))[1].clone());
    agent.wait_generation(2);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
    }
    agent.stop();
}

#[test]
fn verdict_cache_off_caches_nothing() {
    let Some(lab) = lab("verdict_cache_off_caches_nothing") else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    let mut agent = lab.start_agent(lab.agent_options().args(&["--verdict-cache", "off"]));
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        for _ in 0..3 {
            let before = queued(&lab);
            lab.assert_tcp("client", target, TcpOutcome::Connected);
            assert!(
                queued(&lab) > before,
                "{target}: every connection is queued"
            );
        }
    }
    let state = lab.firewall_state("node");
    assert!(
        state
            .set_names()
            .iter()
            .all(|s| !s.starts_with("tollgate-vc")),
        "{:?}",
        state.set_names()
    );
    assert!(state.rules().all(|r| !r.contains("CACHED")));
    agent.stop();
}

/// SYNs to `target` from the client, one every 2 ms with a new source
/// port each (hping3 counts the port up); returns how many packets the
/// node queued to its workers meanwhile.
fn flood(lab: &Lab, target: SocketAddr, count: u32) -> u64 {
    let before = queued(lab);
    let count = count.to_string();
    let port = target.port().to_string();
    let host = target.ip().to_string();
    let out = lab.ns("client").exec(
        &[
            "hping3", "-q", "-S", "-p", &port, "-c", &count, "-i", "u2000", &host,
        ],
        AGENT_WAIT,
    );
    assert!(out.status.is_some(), "hping3 timed out: {}", out.stderr);
    // Every queued SYN has had its verdict before the count is read.
    let drained = poll_until(AGENT_WAIT, || {
        lab.queue_counters()
            .iter()
            .all(|c| c.queue_total == 0)
            .then_some(())
    });
    assert!(drained.is_some(), "the queues never drained");
    queued(lab) - before
}

#[test]
fn a_syn_flood_at_a_denied_port_stays_in_the_kernel() {
    let Some(lab) = Lab::builder("a_syn_flood_at_a_denied_port_stays_in_the_kernel")
        .peer("client")
        .require(&["hping3"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", PORT, Service::Echo);
    lab.write_policy("node.yaml", &node_policy("Drop"));
    let target = SocketAddr::new(IpAddr::from(lab.node_addr("client")), PORT);
    const SYNS: u32 = 500;
    let queued_with = |args: &[&str]| {
        let options = lab.agent_options().args(args);
        let socket = options.status_socket.clone();
        let mut agent = lab.start_agent(options);
        agent.wait_generation(1);
        let n = flood(&lab, target, SYNS);
        // What the kernel answered is counted as hits (read at the drift
        // check, every second here), in status and metrics alike.
        let hits = poll_until(AGENT_WAIT, || {
            cache_hits(&socket).filter(|&hits| hits + n >= u64::from(SYNS) * 9 / 10)
        });
        agent.stop();
        assert!(lab.tollgate_cleanup().success());
        (n, hits)
    };
    let (on, hits) = queued_with(&["--drift-check-seconds", "1"]);
    let (off, _) = queued_with(&["--verdict-cache", "off"]);
    println!("VERDICT-CACHE-FLOOD {SYNS} SYNs at a dropped port: {on} queued to userspace with the cache ({hits:?} cache hits), {off} without");
    assert!(off >= u64::from(SYNS) * 9 / 10, "without the cache: {off}");
    assert!(on <= 20, "with the cache: {on} of {SYNS} queued");
    assert!(hits.is_some(), "the cache's hits were not counted");
}

/// `verdictCacheHits` of the agent's `tollgate status --output json`.
fn cache_hits(socket: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["status", "--output", "json", "--socket"])
        .arg(socket)
        .output()
        .ok()?;
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    status["verdictCacheHits"].as_u64()
}

#[test]
fn cached_allows_outlive_the_agent_but_not_a_changed_policy() {
    let Some(lab) = lab("cached_allows_outlive_the_agent_but_not_a_changed_policy") else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    let mut agent = lab.start_agent(lab.agent_options().args(&["--drift-check-seconds", "2"]));
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        wait_cached(&lab, target, 'a');
    }
    let sets = lab.firewall_state("node").set_names().join(" ");
    agent.kill9();
    // No worker reads the queues (fail-closed): a tuple the cache does not
    // know waits, the cached one connects.
    for (cached, unknown) in targets(&lab, PORT).into_iter().zip(targets(&lab, UNCACHED)) {
        lab.assert_tcp("client", unknown, TcpOutcome::TimedOut);
        lab.assert_tcp("client", cached, TcpOutcome::Connected);
    }
    // The same policy and inventory: the same generation, whose entries
    // still answer for the new agent.
    let mut same = lab.start_agent(lab.agent_options());
    same.wait_generation(1);
    assert_eq!(lab.firewall_state("node").set_names().join(" "), sets);
    for target in targets(&lab, PORT) {
        assert_from_cache(&lab, target, TcpOutcome::Connected);
    }
    same.kill9();
    // The policy changed meanwhile: the new agent's first ruleset does not
    // answer from the old sets.
    lab.write_policy("node.yaml", &node_policy("Drop"));
    let mut again = lab.start_agent(lab.agent_options());
    again.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
    }
    for target in targets(&lab, UNCACHED) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
    }
    assert!(
        entries(&lab)
            .iter()
            .all(|e| !e.contains(&format!("tcp:{PORT},")) || e.contains("-id-v")),
        "{:?}",
        entries(&lab)
    );
    again.stop();
}

/// An agent of a version before the lookup sets left rules that name its
/// generation's sets; the policy changed while no agent ran. The next
/// agent (an upgrade) answers no cached verdict of the old policy once its
/// ruleset is in force, rewrites the rules to name the lookup sets, and
/// destroys the old generation's sets. The hand-made old layout is live
/// first: a cached tuple connects from the kernel while no agent runs.
///
/// Mutation (tried): `Changes::between` not destroying the old
/// generation's sets → they outlive the upgrade → fails.
#[test]
fn an_upgrade_moves_the_rules_naming_a_generations_sets_to_the_lookup_sets() {
    let Some(lab) = lab("an_upgrade_moves_the_rules_naming_a_generations_sets_to_the_lookup_sets")
    else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        wait_cached(&lab, target, 'a');
    }
    agent.kill9();
    let old = held(&lab);
    let generation = old
        .iter()
        .next()
        .and_then(|set| set.strip_prefix("tollgate-vc-"))
        .map(|rest| rest[..10].to_string())
        .expect("a generation held");
    // The earlier layout: the rules name the sets, no lookup set exists.
    for (save, restore) in [
        ("iptables-save", "iptables-restore"),
        ("ip6tables-save", "ip6tables-restore"),
    ] {
        lab.node().ok(&format!(
            "{save} | sed -E 's/ tollgate-vcl-([ifo][adr]-v[46]) / tollgate-vc-{generation}-\\1 /g' | {restore}"
        ));
    }
    for line in lab.node().dump("ipset save").lines() {
        if let Some(list) = line
            .strip_prefix("create ")
            .and_then(|rest| rest.split(' ').next())
            .filter(|name| name.starts_with("tollgate-vcl-"))
        {
            lab.node().ok(&format!("ipset destroy {list}"));
        }
    }
    let rules = lookup_rules(&lab);
    assert_eq!(rules.len(), 2 * 3 * 3, "{rules:#?}");
    assert!(
        rules
            .iter()
            .all(|r| r.contains(&format!(" tollgate-vc-{generation}-"))),
        "{rules:#?}"
    );
    assert!(held(&lab).is_empty());
    for target in targets(&lab, PORT) {
        assert_from_cache(&lab, target, TcpOutcome::Connected);
    }

    lab.write_policy("node.yaml", &node_policy("Drop"));
    let mut upgraded = lab.start_agent(lab.agent_options());
    upgraded.wait_generation(1);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
    }
    let rules = lookup_rules(&lab);
    assert_eq!(rules.len(), 2 * 3 * 3, "{rules:#?}");
    assert!(
        rules.iter().all(|r| r.contains(" tollgate-vcl-")),
        "{rules:#?}"
    );
    let new = held(&lab);
    assert_eq!(new.len(), 18, "{new:?}");
    let state = lab.firewall_state("node");
    let sets = state.set_names();
    assert!(
        sets.iter().all(|s| !s.contains(&generation)),
        "the old generation's sets outlived the upgrade: {sets:?}"
    );
    // The new generation answers from the kernel.
    for target in targets(&lab, PORT) {
        wait_cached(&lab, target, 'd');
        assert_from_cache(&lab, target, TcpOutcome::TimedOut);
    }
    upgraded.stop();
}

/// The cache counters of the agent whose metrics listen on `METRICS`.
fn cache_counters(lab: &Lab) -> [f64; 6] {
    let samples = metrics::scrape(lab.node(), METRICS);
    ["misses", "inserts", "hits", "full", "failed", "dropped"]
        .map(|what| metrics::family_sum(&samples, &format!("tollgate_verdict_cache_{what}_total")))
}

const METRICS: &str = "127.0.0.1:9466";

/// Whether a set of the FORWARD hook for `verdict` holds an entry whose
/// text contains `tuple` (`,udp:7,`, `,icmp:`…).
fn forward_entry(lab: &Lab, verdict: char, family: &str, tuple: &str) -> bool {
    let set = format!("-f{verdict}-{family} ");
    entries(lab)
        .iter()
        .any(|e| e.contains(&set) && e.contains(tuple))
}

/// Makes a new flow of one tuple twice with `probe` (a worker decides
/// both), waits until a FORWARD set of `verdict` and `family` holds an
/// entry containing `tuple`, then checks that a third flow is answered by
/// the kernel (no packet queued to a worker).
#[track_caller]
fn cached_after_two_decisions(
    lab: &Lab,
    verdict: char,
    family: &str,
    tuple: &str,
    probe: impl Fn(),
) {
    probe();
    probe();
    let cached = poll_until(AGENT_WAIT, || {
        forward_entry(lab, verdict, family, tuple).then_some(())
    });
    assert!(
        cached.is_some(),
        "{family}: no {tuple} entry: {:?}",
        entries(lab)
    );
    let before = queued(lab);
    probe();
    assert_eq!(queued(lab), before, "{family} {tuple}: queued to a worker");
}

#[test]
fn forwarded_udp_and_icmp_verdicts_are_cached_and_counted() {
    let Some(lab) = Lab::builder("forwarded_udp_and_icmp_verdicts_are_cached_and_counted")
        .peer("client")
        .peer("server")
        .ipv6()
        .build()
    else {
        return;
    };
    lab.serve_udp_echo("server", 7);
    let (client, client6) = (lab.addr("client"), lab.addr6("client"));
    let (server, server6) = (lab.addr("server"), lab.addr6("server"));
    // The server is a Pod of this node: routed client → server traffic is
    // decided in FORWARD. UDP is allowed, ICMP rejected.
    lab.write_policy(
        "server.yaml",
        &pod_and_policy(
            "server",
            "server",
            "node",
            &[server.into(), server6.into()],
            &format!(
                "  appliedTo: [{{podSelector: {{matchLabels: {{app: server}}}}}}]
  ingress:
    - action: Allow
      from: [{{ipBlock: {{cidr: {client}/32}}}}, {{ipBlock: {{cidr: '{client6}/128'}}}}]
      ports: [{{protocol: UDP, port: 7}}]
    - action: Reject
      from: [{{ipBlock: {{cidr: {client}/32}}}}, {{ipBlock: {{cidr: '{client6}/128'}}}}]
      protocols: [{{icmp: {{}}}}]
"
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--metrics-address",
        METRICS,
        "--drift-check-seconds",
        "1",
    ]));
    agent.wait_generation(1);
    for (to, family) in [(IpAddr::from(server), "v4"), (IpAddr::from(server6), "v6")] {
        // UDP: a worker allows the first two flows (each from a new source
        // port), the kernel the rest.
        let echo = SocketAddr::new(to, 7);
        cached_after_two_decisions(&lab, 'a', family, ",udp:7,", || {
            assert_eq!(lab.udp("client", echo, ALLOW_WAIT), UdpOutcome::Answered);
        });
        // ICMP echo requests (a new identifier each): rejected, the
        // rejection cached with the ICMP type and code as the port.
        cached_after_two_decisions(&lab, 'r', family, "icmp", || {
            assert_eq!(lab.ping("client", to, DENY_WAIT), PingOutcome::NoReply);
        });
    }
    // Every worker decision was a miss; each tuple was written once, at its
    // second decision; the kernel answered the third connection of each of
    // the four tuples (hits are read at the periodic check, every second).
    let counted = poll_until(AGENT_WAIT, || {
        let counters = cache_counters(&lab);
        (counters[2] >= 4.0).then_some(counters)
    });
    let [misses, inserts, hits, full, failed, dropped] =
        counted.unwrap_or_else(|| panic!("hits not counted: {:?}", cache_counters(&lab)));
    println!("VERDICT-CACHE-COUNTERS misses={misses} inserts={inserts} hits={hits}");
    assert_eq!(misses, 8.0);
    assert_eq!(inserts, 4.0);
    assert_eq!(hits, 4.0);
    assert_eq!([full, failed, dropped], [0.0; 3]);
    let status = cache_hits(&lab.agent_options().status_socket);
    assert_eq!(status, Some(4), "status and metrics count the same hits");
    agent.stop();
}

#[test]
fn dns_queries_answered_from_the_cache_are_still_snooped() {
    let Some(lab) = Lab::builder("dns_queries_answered_from_the_cache_are_still_snooped")
        .peer("client")
        .peer("server")
        .ipv6()
        .build()
    else {
        return;
    };
    let (client, client6) = (lab.addr("client"), lab.addr6("client"));
    let (server, server6) = (lab.addr("server"), lab.addr6("server"));
    // A second address of the server, named only by the last answer.
    let mut octets = server6.octets();
    octets[15] = 3;
    let later = std::net::Ipv6Addr::from(octets);
    lab.ns("server")
        .ok(&format!("ip -6 addr add {later}/64 dev eth0 nodad"));
    let zone = vec![
        DnsRecord::address("n0.cache.test", server6, 300),
        DnsRecord::address("n1.cache.test", server6, 300),
        DnsRecord::address("n2.cache.test", later, 300),
    ];
    lab.serve_dns("server", 53, zone);
    lab.serve_tcp("server", PORT, Service::Echo);
    // The client Pod may ask the server for names and reach what the
    // answers name; nothing else.
    lab.write_policy(
        "client.yaml",
        &pod_and_policy(
            "client",
            "client",
            "node",
            &[client.into(), client6.into()],
            &format!(
                "  appliedTo: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
  egress:
    - action: Allow
      to: [{{ipBlock: {{cidr: {server}/32}}}}]
      ports: [{{protocol: UDP, port: 53}}]
    - action: Allow
      to: [{{fqdn: '*.cache.test'}}]
      ports: [{{protocol: TCP, port: {PORT}}}]
    - action: Drop
      to: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}, {{ipBlock: {{cidr: '::/0'}}}}]
"
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--metrics-address",
        METRICS,
        "--fqdn-resolve",
        "off",
    ]));
    agent.wait_generation(1);
    let dns = SocketAddr::new(IpAddr::from(server), 53);
    let lookup = |name: &str, answer: std::net::Ipv6Addr| {
        let got = lab.resolve("client", dns, name, RecordType::AAAA, ALLOW_WAIT);
        assert_eq!(
            got,
            Resolution::Addresses(vec![(IpAddr::from(answer), 300)]),
            "{name}"
        );
    };
    let queries = |lab: &Lab| {
        metrics::family_sum(
            &metrics::scrape(lab.node(), METRICS),
            "tollgate_dns_queries_total",
        )
    };
    // Two lookups: a worker allows both queries, the second one's tuple
    // (client, udp:53, server) goes into the cache.
    lookup("n0.cache.test", server6);
    lookup("n1.cache.test", server6);
    let cached = poll_until(AGENT_WAIT, || {
        forward_entry(&lab, 'a', "v4", ",udp:53,").then_some(())
    });
    assert!(
        cached.is_some(),
        "the DNS tuple was not cached: {:?}",
        entries(&lab)
    );
    let web = SocketAddr::new(IpAddr::from(later), PORT);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);

    // The third query is allowed by the kernel, and still reaches the DNS
    // worker, which remembers it and learns its answer before the client
    // has it: the address it names is reachable at once.
    let (queued_before, queries_before) = (queued(&lab), queries(&lab));
    lookup("n2.cache.test", later);
    assert_eq!(
        queued(&lab),
        queued_before,
        "the query was decided by a worker"
    );
    assert_eq!(
        queries(&lab),
        queries_before + 1.0,
        "the DNS worker did not see the query the cache allowed"
    );
    lab.assert_tcp("client", web, TcpOutcome::Connected);
    agent.stop();
}

#[test]
fn a_full_cache_set_refuses_and_counts() {
    let Some(lab) = lab("a_full_cache_set_refuses_and_counts") else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    // The node allows TCP PORT only; every other port of the node is
    // open too (no rule names it), so each port is its own tuple.
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--metrics-address",
        METRICS,
        "--set",
        "verdictCache.maxEntries=64",
    ]));
    agent.wait_generation(1);
    // 80 tuples, each decided twice (nothing listens: a reset answers).
    let node = IpAddr::from(lab.node_addr("client"));
    for port in 20_000..20_080u16 {
        for _ in 0..2 {
            lab.assert_tcp("client", SocketAddr::new(node, port), TcpOutcome::Refused);
        }
    }
    let counted = poll_until(AGENT_WAIT, || {
        let counters = cache_counters(&lab);
        (counters[1] + counters[3] >= 80.0).then_some(counters)
    });
    let [_, inserts, _, full, failed, dropped] =
        counted.unwrap_or_else(|| panic!("writes not counted: {:?}", cache_counters(&lab)));
    println!("VERDICT-CACHE-FULL inserts={inserts} full={full}");
    assert_eq!(inserts, 64.0, "the set holds maxEntries");
    assert_eq!(full, 16.0, "the rest is refused and counted");
    assert_eq!([failed, dropped], [0.0; 2]);
    let held = entries(&lab)
        .iter()
        .filter(|e| e.contains("-ia-v4 "))
        .count();
    assert_eq!(held, 64);
    // A refused tuple is decided by a worker again, and still allowed.
    let before = queued(&lab);
    lab.assert_tcp("client", SocketAddr::new(node, 20_079), TcpOutcome::Refused);
    assert!(queued(&lab) > before);
    agent.stop();
}
