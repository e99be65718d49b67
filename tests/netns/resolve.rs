//! Resolving exact FQDN selectors ahead, on the wire: a Pod that looked a
//! name up before an FQDN rule existed holds the answer; the rule must
//! still apply to its next connection, which it opens by address without
//! asking again. The agent asks the lab's DNS server itself (the in-process
//! [`DnsServer`], which records who asked what) when the rule appears and
//! before the answer's TTL runs out; `fqdn.resolve: off` and a dead
//! resolver leave snooping exactly as before.
//!
//! Topology (lab links): pod 10.I.1.2 and server 10.I.2.2 (DNS on 53, HTTP
//! on 80 for every address of 10.62.9.0/24 and fd62:9::/64), both routed
//! through the node, where the agent runs.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use crate::harness::dns::{DnsServer, LiveZone};
use crate::harness::{wait_until, Agent, DnsRecord, Lab, Resolution, Service, TcpOutcome};
use tollgate::status::{Request, Response};

/// The web addresses the server answers on.
const WEB4: &str = "10.62.9";
const WEB6: &str = "fd62:9:";

struct ResolveLab {
    lab: Lab,
    dns: DnsServer,
}

impl ResolveLab {
    fn start(test: &'static str, records: Vec<DnsRecord>) -> Option<ResolveLab> {
        let lab = Lab::builder(test)
            .peer("pod")
            .peer("server")
            .ipv6()
            .build()?;
        let server = lab.ns("server");
        server.ok(&format!(
            "ip route add local {WEB4}.0/24 dev lo && ip -6 route add local {WEB6}:/64 dev lo"
        ));
        lab.node().ok(&format!(
            "ip route add {WEB4}.0/24 via {s4} && ip -6 route add {WEB6}:/64 via {s6}",
            s4 = lab.addr("server"),
            s6 = lab.addr6("server"),
        ));
        lab.serve_tcp("server", 80, Service::Http);
        let dns = DnsServer::start(server, 53, LiveZone::new(records));
        // The node's resolver: the default of fqdn.resolvers.
        lab.resolv_conf("node", &format!("nameserver {}\n", lab.addr("server")));
        Some(ResolveLab { lab, dns })
    }

    /// The agent (node `rs`) with `extra` arguments, after its first
    /// ruleset.
    fn agent(&self, extra: &[&str]) -> Agent {
        let options = self
            .lab
            .agent_options()
            .node_name("rs")
            .queues(1)
            .args(extra);
        let mut agent = self.lab.start_agent(options);
        agent.wait_generation(1);
        agent
    }

    fn dns_server(&self) -> SocketAddr {
        (self.lab.addr("server"), 53).into()
    }

    /// The pod looks `name` up (A or AAAA) and gets addresses.
    fn pod_resolves(&self, name: &str, record_type: RecordType) {
        let answer = self.lab.resolve(
            "pod",
            self.dns_server(),
            name,
            record_type,
            Duration::from_secs(3),
        );
        assert!(
            matches!(&answer, Resolution::Addresses(a) if !a.is_empty()),
            "{name}: {answer:?}"
        );
    }

    /// Asserts how a new connection from the pod to port 80 of `ip` ends
    /// (waiting longer for a success than for a timeout).
    #[track_caller]
    fn expect(&self, ip: &str, outcome: TcpOutcome) {
        let ip: IpAddr = ip.parse().expect("address");
        self.lab.assert_tcp("pod", (ip, 80), outcome);
    }

    /// What the agent's FQDN sets hold (`ipset list` in the node).
    fn sets(&self) -> String {
        self.lab.node().ok("ipset list")
    }

    /// `tollgate get fqdn` for the lab's policies, asking the agent for
    /// the sources: `(selector, address, source)` rows.
    fn table(&self) -> Vec<(String, String, String)> {
        let text = self.lab.node().ok(&format!(
            "{} get fqdn --policies {} --node-name rs --socket {}",
            env!("CARGO_BIN_EXE_tollgate"),
            self.lab.policy_dir().display(),
            self.lab.agent_options().status_socket.display()
        ));
        text.lines()
            .skip(1)
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words[..] {
                    [selector, _, address, _, source] => {
                        Some((selector.into(), address.into(), source.into()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// The DNS worker's counter `key` in `tollgate status` (0 while the
    /// agent does not answer).
    fn counter(&self, key: &str) -> u64 {
        let socket = self.lab.agent_options().status_socket;
        match tollgate::status::request(&socket, &Request::Status) {
            Ok(Response::Status(report)) => report
                .queues
                .iter()
                .find(|q| q.worker == "dns")
                .and_then(|q| q.counters.get(key))
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// Queries that got no usable answer so far.
    fn resolve_failures(&self) -> u64 {
        ["resolve_timeout", "resolve_failed", "resolve_refused"]
            .iter()
            .map(|key| self.counter(key))
            .sum()
    }

    /// The names the pod asked the server for so far.
    fn pod_asked(&self) -> Vec<String> {
        self.dns.zone.asked_by(self.lab.addr("pod").into())
    }

    /// The names the node (the agent) asked the server for so far.
    fn node_asked(&self) -> Vec<String> {
        self.dns.zone.asked_by(self.lab.node_addr("server").into())
    }
}

/// A policy file: the Pod `client` on node `rs` and one ACNP for it whose
/// egress allows DNS to the server, then `rules` (YAML list items).
fn policy(lab: &Lab, rules: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: apps}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: apps, labels: {{app: client}}}}
spec: {{nodeName: rs}}
status:
  podIP: {pod4}
  podIPs: [{{ip: {pod4}}}, {{ip: '{pod6}'}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: resolve-ahead}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
  egress:
  - name: dns
    action: Allow
    to: [{{ipBlock: {{cidr: {server}/32}}}}]
    ports: [{{protocol: UDP, port: 53}}]
{rules}",
        pod4 = lab.addr("pod"),
        pod6 = lab.addr6("pod"),
        server = lab.addr("server"),
    )
}

fn held_zone() -> Vec<DnsRecord> {
    vec![
        DnsRecord::address(
            "drop.resolve.test",
            "10.62.9.10".parse::<IpAddr>().unwrap(),
            300,
        ),
        DnsRecord::address(
            "drop.resolve.test",
            "fd62:9::10".parse::<IpAddr>().unwrap(),
            300,
        ),
        DnsRecord::address(
            "reject.resolve.test",
            "10.62.9.20".parse::<IpAddr>().unwrap(),
            300,
        ),
        DnsRecord::cname("allow.resolve.test", "edge.cdn.test", 300),
        DnsRecord::address(
            "edge.cdn.test",
            "10.62.9.30".parse::<IpAddr>().unwrap(),
            300,
        ),
        DnsRecord::address(
            "edge.cdn.test",
            "fd62:9::30".parse::<IpAddr>().unwrap(),
            300,
        ),
    ]
}

/// Before: the allowed name's addresses are denied by address.
const DENY_ALLOW_NAME: &str = "  - name: deny-by-address
    action: Drop
    to: [{ipBlock: {cidr: 10.62.9.30/32}}, {ipBlock: {cidr: 'fd62:9::30/128'}}]
";

/// After: FQDN rules for the three names, ahead of the address rule.
const FQDN_RULES: &str = "  - name: drop-name
    action: Drop
    to: [{fqdn: drop.resolve.test}]
  - name: reject-name
    action: Reject
    to: [{fqdn: reject.resolve.test}]
  - name: allow-name
    action: Allow
    to: [{fqdn: allow.resolve.test}]
    ports: [{protocol: TCP, port: 80}]
  - name: wildcard-stays-snooped
    action: Drop
    to: [{fqdn: '*.wild.resolve.test'}]
";

/// The pod resolves three names and connects; then the Drop, Reject and
/// Allow FQDN rules for them are added. Returns how many questions the pod
/// had asked.
fn pod_holds_answers_then_rules_appear(lab: &ResolveLab, agent: &mut Agent) -> usize {
    for name in [
        "drop.resolve.test",
        "reject.resolve.test",
        "allow.resolve.test",
    ] {
        lab.pod_resolves(name, RecordType::A);
    }
    lab.pod_resolves("drop.resolve.test", RecordType::AAAA);
    lab.pod_resolves("allow.resolve.test", RecordType::AAAA);
    lab.expect("10.62.9.10", TcpOutcome::Connected);
    lab.expect("fd62:9::10", TcpOutcome::Connected);
    lab.expect("10.62.9.20", TcpOutcome::Connected);
    lab.expect("10.62.9.30", TcpOutcome::TimedOut);
    lab.expect("fd62:9::30", TcpOutcome::TimedOut);
    let asked = lab.pod_asked().len();
    let rules = format!("{FQDN_RULES}{DENY_ALLOW_NAME}");
    lab.lab
        .write_policy("resolve.yaml", &policy(&lab.lab, &rules));
    agent.wait_generation(2);
    asked
}

#[test]
fn rules_added_after_a_lookup_apply_to_the_answers_clients_hold() {
    let Some(lab) = ResolveLab::start(
        "rules_added_after_a_lookup_apply_to_the_answers_clients_hold",
        held_zone(),
    ) else {
        return;
    };
    lab.lab
        .write_policy("resolve.yaml", &policy(&lab.lab, DENY_ALLOW_NAME));
    let mut agent = lab.agent(&[]);
    let asked_before = pod_holds_answers_then_rules_appear(&lab, &mut agent);
    let applied = Instant::now();
    wait_until(
        "the agent resolves the exact names itself",
        Duration::from_secs(10),
        || {
            let sets = lab.sets();
            [
                "10.62.9.10",
                "fd62:9::10",
                "10.62.9.20",
                "10.62.9.30",
                "fd62:9::30",
            ]
            .iter()
            .all(|a| sets.contains(a))
        },
    );
    eprintln!(
        "resolved addresses installed {:?} after the ruleset was applied",
        applied.elapsed()
    );
    // Drop: the held address (both families) is dropped.
    lab.expect("10.62.9.10", TcpOutcome::TimedOut);
    lab.expect("fd62:9::10", TcpOutcome::TimedOut);
    // Reject: answered with a reset.
    lab.expect("10.62.9.20", TcpOutcome::Refused);
    // Allow (through a CNAME): let through without a new lookup.
    lab.expect("10.62.9.30", TcpOutcome::Connected);
    lab.expect("fd62:9::30", TcpOutcome::Connected);
    assert_eq!(lab.pod_asked().len(), asked_before, "the pod asked again");
    // The agent asked for the exact names, A and AAAA, never the wildcard.
    let node = lab.node_asked();
    for name in [
        "drop.resolve.test",
        "reject.resolve.test",
        "allow.resolve.test",
    ] {
        assert!(node.iter().filter(|n| *n == name).count() >= 2, "{node:?}");
    }
    assert!(!node.iter().any(|n| n.contains("wild")), "{node:?}");
    let row = |selector: &str, address: &str, source: &str| {
        (
            selector.to_string(),
            address.to_string(),
            source.to_string(),
        )
    };
    // Resolved ahead; the held answers were never snooped under a rule.
    let table = lab.table();
    for expected in [
        row("drop.resolve.test", "10.62.9.10", "resolved"),
        row("drop.resolve.test", "fd62:9::10", "resolved"),
        row("reject.resolve.test", "10.62.9.20", "resolved"),
        row("allow.resolve.test", "10.62.9.30", "resolved"),
        row("allow.resolve.test", "fd62:9::30", "resolved"),
        row("*.wild.resolve.test", "-", "-"),
    ] {
        assert!(table.contains(&expected), "{expected:?} in {table:?}");
    }
    let log = agent.stop();
    let stats = log
        .lines()
        .find(|l| l.contains("dns stats"))
        .unwrap_or_else(|| panic!("no dns stats in\n{log}"));
    assert!(stats.contains(" resolve_failed=0"), "{stats}");
    assert!(!stats.contains(" resolved=0 "), "{stats}");
    assert!(stats.contains(" ipset_errors=0"), "{stats}");
}

#[test]
fn resolved_addresses_follow_the_ttl_to_a_changed_address() {
    let moving = |ip: &str| {
        vec![DnsRecord::address(
            "moving.resolve.test",
            ip.parse::<IpAddr>().unwrap(),
            2,
        )]
    };
    let Some(lab) = ResolveLab::start(
        "resolved_addresses_follow_the_ttl_to_a_changed_address",
        moving("10.62.9.40"),
    ) else {
        return;
    };
    lab.lab.write_policy(
        "resolve.yaml",
        &policy(
            &lab.lab,
            "  - name: allow-moving
    action: Allow
    to: [{fqdn: moving.resolve.test}]
  - name: deny-the-rest
    action: Drop
    to: [{ipBlock: {cidr: 10.62.9.0/24}}]
",
        ),
    );
    // A dead resolver first: it costs its timeout once, then the live one
    // is asked first, in time to refresh a 2 s TTL.
    let server = lab.lab.addr("server").octets();
    let dead = format!("{}.{}.{}.99", server[0], server[1], server[2]);
    let live = lab.lab.addr("server").to_string();
    let _agent = lab.agent(&[
        "--fqdn-min-ttl",
        "1",
        "--fqdn-resolver",
        &dead,
        "--fqdn-resolver",
        &live,
    ]);
    // Resolved at start: reachable although the pod never asked.
    wait_until(
        "the name is resolved at start",
        Duration::from_secs(10),
        || lab.sets().contains("10.62.9.40"),
    );
    lab.expect("10.62.9.40", TcpOutcome::Connected);
    // Refreshed before it times out: present at every look over three
    // refreshes (A and AAAA each).
    let asked = lab.node_asked().len();
    wait_until("three refreshes", Duration::from_secs(10), || {
        let sets = lab.sets();
        assert!(
            sets.contains("10.62.9.40 "),
            "expired between refreshes: {sets}"
        );
        lab.node_asked().len() >= asked + 6
    });
    lab.dns.zone.set(moving("10.62.9.41"));
    let changed = Instant::now();
    wait_until(
        "a refresh learns the new address",
        Duration::from_secs(10),
        || lab.sets().contains("10.62.9.41"),
    );
    eprintln!(
        "new address learned {:?} after the change",
        changed.elapsed()
    );
    lab.expect("10.62.9.41", TcpOutcome::Connected);
    // The old one is no longer refreshed: it times out with its TTL.
    wait_until("the old address expires", Duration::from_secs(10), || {
        !lab.sets().contains("10.62.9.40 ")
    });
    lab.expect("10.62.9.40", TcpOutcome::TimedOut);
    assert!(lab.pod_asked().is_empty(), "{:?}", lab.pod_asked());
    assert!(lab.node_asked().len() >= 4, "{:?}", lab.node_asked());
}

#[test]
fn resolve_off_leaves_held_answers_to_snooping() {
    let Some(lab) = ResolveLab::start("resolve_off_leaves_held_answers_to_snooping", held_zone())
    else {
        return;
    };
    lab.lab
        .write_policy("resolve.yaml", &policy(&lab.lab, DENY_ALLOW_NAME));
    let mut agent = lab.agent(&["--fqdn-resolve", "off"]);
    pod_holds_answers_then_rules_appear(&lab, &mut agent);
    // Today's behaviour: the held answers are not covered.
    lab.expect("10.62.9.10", TcpOutcome::Connected);
    lab.expect("10.62.9.20", TcpOutcome::Connected);
    lab.expect("10.62.9.30", TcpOutcome::TimedOut);
    // A new lookup is snooped as before.
    lab.pod_resolves("allow.resolve.test", RecordType::A);
    lab.expect("10.62.9.30", TcpOutcome::Connected);
    let table = lab.table();
    let snooped = (
        "allow.resolve.test".to_string(),
        "10.62.9.30".to_string(),
        "snooped".to_string(),
    );
    assert!(table.contains(&snooped), "{table:?}");
    assert!(lab.node_asked().is_empty(), "{:?}", lab.node_asked());
    let log = agent.stop();
    assert!(!log.contains("fqdn resolver started"), "{log}");
}

#[test]
fn a_dead_resolver_delays_neither_policy_nor_snooping() {
    let Some(lab) = ResolveLab::start(
        "a_dead_resolver_delays_neither_policy_nor_snooping",
        held_zone(),
    ) else {
        return;
    };
    lab.lab
        .write_policy("resolve.yaml", &policy(&lab.lab, DENY_ALLOW_NAME));
    // Nothing answers at .99 of the server link (no neighbour).
    let server = lab.lab.addr("server").octets();
    let dead = format!("{}.{}.{}.99", server[0], server[1], server[2]);
    let started = Instant::now();
    let mut agent = lab.agent(&["--fqdn-resolver", &dead]);
    eprintln!("first ruleset applied after {:?}", started.elapsed());
    let reload = Instant::now();
    lab.lab.write_policy(
        "resolve.yaml",
        &policy(&lab.lab, &format!("{FQDN_RULES}{DENY_ALLOW_NAME}")),
    );
    agent.wait_generation(2);
    let reloaded = reload.elapsed();
    eprintln!("fqdn rules applied {reloaded:?} after the write");
    // Snooping works at once: a lookup allows, then a lookup drops.
    let lookup = Instant::now();
    lab.pod_resolves("allow.resolve.test", RecordType::A);
    lab.pod_resolves("drop.resolve.test", RecordType::A);
    eprintln!("two snooped lookups took {:?}", lookup.elapsed());
    lab.expect("10.62.9.30", TcpOutcome::Connected);
    lab.expect("10.62.9.10", TcpOutcome::TimedOut);
    // Each query (name and type) fails, is retried with backoff, and is
    // logged once.
    wait_until("every query failed twice", Duration::from_secs(30), || {
        lab.resolve_failures() >= 12
    });
    let log = agent.stop();
    for name in [
        "drop.resolve.test",
        "reject.resolve.test",
        "allow.resolve.test",
    ] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("resolving an fqdn selector failed") && l.contains(name))
            .collect();
        assert_eq!(lines.len(), 2, "{name}:\n{log}");
        assert_eq!(
            lines.iter().filter(|l| l.contains("AAAA")).count(),
            1,
            "{name}:\n{log}"
        );
    }
    assert!(lab.node_asked().is_empty());
}

