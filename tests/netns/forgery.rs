//! Forged "trusted" DNS replies (issue 13, item 2), on the wire against
//! `tollgate run`: a Pod that owns a conntrack entry towards a resolver
//! forges a reply "from" resolver:53 to itself out of its own interface.
//! Since issue 27 the Pod's anti-spoofing guard drops it (its source is not
//! the Pod's) and counts it; with `--anti-spoofing off` (or an endpoint the
//! guards leave unguarded) the node routes it back, conntrack calls it a
//! reply, and the DNS worker must judge it to have come the wrong way.
//! Either way it must not teach the FQDN sets anything, whatever
//! `rp_filter` says (IPv4 0 and 2; IPv6 has none). Replies that come the
//! server's way must answer an outstanding
//! query (id, question, addresses and ports) once, and their TTL is bounded
//! by `fqdn.maxTtl`. scapy forges the packets.
//!
//! Addresses: node–server link 10.62.0.0/24 and fd62::/64 (node .1, the
//! harness DNS server .2; .9 is a resolver that never answers: queries to
//! it are forwarded and lost, so their replies can only be forged),
//! node–pod link 10.62.5.0/24 and fd62:5::/64 (pod .2), web addresses
//! 10.62.1.0/24 and fd62:1::/64 in the server namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::harness::metrics::{family_sum, scrape};
use crate::harness::{
    poll_until, skip, worker_counter, Agent, DnsRecord, Lab, Netns, Service, AGENT_WAIT,
};

/// The agent's metrics listener, on the node namespace's loopback.
const METRICS: &str = "127.0.0.1:9481";
/// The DNS queue: the one after the agent's single connection queue (100).
const DNS_QUEUE: u32 = 101;

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: fqdn-egress
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - podSelector:
      matchLabels: {app: client}
  egress:
  - name: dns
    action: Allow
    to: [{ipBlock: {cidr: 10.62.0.0/24}}, {ipBlock: {cidr: 'fd62::/64'}},
         {ipBlock: {cidr: 10.62.5.1/32}}, {ipBlock: {cidr: 'fd62:5::1/128'}}]
    ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]
  - name: allow-example
    action: Allow
    to: [{fqdn: '*.example.test'}]
    ports: [{protocol: TCP, port: 80}]
  - name: drop-all
    action: Drop
    to: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: apps
  labels: {app: client}
spec: {nodeName: fq}
status:
  podIP: 10.62.5.2
  podIPs: [{ip: 10.62.5.2}, {ip: 'fd62:5::2'}]
";

/// The resolver that never answers.
const SILENT_V4: &str = "10.62.0.9";
const SILENT_V6: &str = "fd62::9";

/// Sends a query from a UDP socket of the Pod, forges the reply "from" the
/// resolver to that socket out of the Pod's own interface (to the node's
/// MAC), and prints `received` if the forged reply came back through the
/// node. Arguments: resolver, Pod address, port, id, name, record type,
/// claimed address, TTL, node MAC, and a file whose existence releases the
/// forged reply.
const FORGE_FROM_POD: &str = r#"
import os, socket, sys, time
from scapy.all import DNS, DNSQR, DNSRR, Ether, IP, IPv6, UDP, sendp
server, me, port, qid, name, rtype, claim, ttl, mac, go = sys.argv[1:]
port, qid, ttl = int(port), int(qid), int(ttl)
six = ":" in server
s = socket.socket(socket.AF_INET6 if six else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((me, port))
s.settimeout(3)
s.sendto(bytes(DNS(id=qid, rd=1, qd=DNSQR(qname=name, qtype=rtype))), (server, 53))
# Wait (at most 10 s) for the test to see the query's conntrack entry
# confirmed on the node: a reply sent earlier would be a new flow there.
for _ in range(1000):
    if os.path.exists(go):
        break
    time.sleep(0.01)
ip = IPv6(src=server, dst=me) if six else IP(src=server, dst=me)
reply = DNS(id=qid, qr=1, aa=1, rd=1, ra=1, qd=DNSQR(qname=name, qtype=rtype),
            an=DNSRR(rrname=name, type=rtype, ttl=ttl, rdata=claim))
sendp(Ether(dst=mac) / ip / UDP(sport=53, dport=port) / reply, iface="vn", verbose=False)
try:
    data, _ = s.recvfrom(2048)
    print("received" if DNS(data).id == qid else "other")
except socket.timeout:
    print("nothing")
"#;

/// Sends a query from a UDP socket of the Pod and exits. Arguments:
/// resolver, Pod address, port, id, name, record type.
const QUERY_FROM_POD: &str = r#"
import socket, sys
from scapy.all import DNS, DNSQR
server, me, port, qid, name, rtype = sys.argv[1:]
s = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((me, int(port)))
s.sendto(bytes(DNS(id=int(qid), rd=1, qd=DNSQR(qname=name, qtype=rtype))), (server, 53))
"#;

/// Sends replies "from" the resolver to the Pod from the server's side
/// (the resolver's real path), one per `id,question,address,ttl` argument
/// after: resolver, Pod address, port, record type, node MAC.
const REPLY_FROM_SERVER: &str = r#"
import sys
from scapy.all import DNS, DNSQR, DNSRR, Ether, IP, IPv6, UDP, sendp
server, me, port, rtype, mac = sys.argv[1:6]
ip = IPv6(src=server, dst=me) if ":" in server else IP(src=server, dst=me)
for spec in sys.argv[6:]:
    qid, name, claim, ttl = spec.split(",")
    reply = DNS(id=int(qid), qr=1, aa=1, rd=1, ra=1, qd=DNSQR(qname=name, qtype=rtype),
                an=DNSRR(rrname=name, type=rtype, ttl=int(ttl), rdata=claim))
    sendp(Ether(dst=mac) / ip / UDP(sport=53, dport=int(port)) / reply, iface="vn", verbose=False)
"#;

/// Sends replies "from" the resolver to the Pod from a raw IP socket of
/// the node itself (what a hostNetwork process with CAP_NET_RAW can do),
/// through the node's OUTPUT hook, one per `id,question,address,ttl`
/// argument after: resolver, Pod address, port, record type.
const REPLY_FROM_NODE: &str = r#"
import sys
from scapy.all import DNS, DNSQR, DNSRR, IP, IPv6, UDP, L3RawSocket, L3RawSocket6, send
server, me, port, rtype = sys.argv[1:5]
six = ":" in server
ip = IPv6(src=server, dst=me) if six else IP(src=server, dst=me)
sock = L3RawSocket6() if six else L3RawSocket()
for spec in sys.argv[5:]:
    qid, name, claim, ttl = spec.split(",")
    reply = DNS(id=int(qid), qr=1, aa=1, rd=1, ra=1, qd=DNSQR(qname=name, qtype=rtype),
                an=DNSRR(rrname=name, type=rtype, ttl=int(ttl), rdata=claim))
    sock.send(ip / UDP(sport=53, dport=int(port)) / reply)
"#;

/// A python3 that imports scapy, or `None` after printing the skip line.
/// The Debian package installs scapy for the system interpreter, which a
/// python3 earlier on PATH (pyenv) may not be.
pub(crate) fn scapy_python(lab: &Lab, test: &str) -> Option<&'static str> {
    let python = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        lab.node()
            .sh(&format!("{p} -c 'import scapy.all'"))
            .success()
    });
    if python.is_none() {
        skip(test, "python3-scapy is missing (scripts/install-deps.sh)");
    }
    python
}

struct ForgeryLab {
    lab: Lab,
    /// A python3 that imports scapy.
    python: &'static str,
    node: Netns,
    server: Netns,
    pod: Netns,
}

impl ForgeryLab {
    fn start(test: &'static str) -> Option<ForgeryLab> {
        let lab = Lab::builder(test)
            .unlinked("server")
            .unlinked("pod")
            .require(&["curl", "python3", "dig"])
            .build()?;
        let python = scapy_python(&lab, test)?;
        let (node, server, pod) = (
            lab.node().clone(),
            lab.ns("server").clone(),
            lab.ns("pod").clone(),
        );
        node.ok(&format!(
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 && \
             ip link add vs type veth peer name vn netns {s} && \
             ip link add vp type veth peer name vn netns {p} && \
             ip addr add 10.62.0.1/24 dev vs && ip addr add fd62::1/64 dev vs nodad && \
             ip link set vs up && \
             ip route add 10.62.1.0/24 via 10.62.0.2 && ip -6 route add fd62:1::/64 via fd62::2 && \
             ip addr add 10.62.5.1/24 dev vp && ip addr add fd62:5::1/64 dev vp nodad && \
             ip link set vp up",
            s = server.name(),
            p = pod.name()
        ));
        server.ok("ip link set vn up && ip addr add 10.62.0.2/24 dev vn && \
             ip addr add fd62::2/64 dev vn nodad && \
             ip route add local 10.62.1.0/24 dev lo && ip -6 route add local fd62:1::/64 dev lo && \
             ip route add 10.62.5.0/24 via 10.62.0.1 && ip -6 route add fd62:5::/64 via fd62::1");
        pod.ok(
            "ip addr add 10.62.5.2/24 dev vn && ip addr add fd62:5::2/64 dev vn nodad && \
             ip link set vn up && ip route add default via 10.62.5.1 && \
             ip -6 route add default via fd62:5::1",
        );
        // glibc resends a query unanswered after `timeout`; a genuine
        // reply held longer than that by a loaded worker would then be
        // answered twice, the second answer `unasked` (audit 3, L5).
        lab.resolv_conf(
            "pod",
            "nameserver 10.62.0.2\noptions timeout:3 attempts:3\n",
        );
        lab.write_policy("fqdn.yaml", POLICY);
        lab.serve_tcp("server", 80, Service::Http);
        lab.serve_dns(
            "server",
            53,
            vec![
                DnsRecord::address("www.example.test", Ipv4Addr::new(10, 62, 1, 10), 300),
                DnsRecord::address(
                    "www.example.test",
                    "fd62:1::10".parse::<Ipv6Addr>().unwrap(),
                    300,
                ),
            ],
        );
        Some(ForgeryLab {
            lab,
            python,
            node,
            server,
            pod,
        })
    }

    /// Starts the agent (node `fq`, one queue, metrics on [`METRICS`]) and
    /// waits for its first ruleset.
    fn agent(&self) -> Agent {
        self.agent_with(&[])
    }

    /// [`ForgeryLab::agent`] with extra arguments.
    fn agent_with(&self, args: &[&str]) -> Agent {
        let options = self
            .lab
            .agent_options()
            .node_name("fq")
            .queues(1)
            .args(&["--metrics-address", METRICS])
            .args(args);
        let mut agent = self.lab.start_agent(options);
        agent.wait_generation(1);
        agent
    }

    /// The anti-spoofing guards' drops of packets with a source not their
    /// sender's (`reason="source"`), all endpoints: read from the guards'
    /// counters at each drift check.
    fn spoofed_sources(&self) -> f64 {
        let samples = scrape(&self.node, METRICS);
        family_sum(&samples, "tollgate_antispoof_dropped_packets_total");
        samples
            .iter()
            .filter(|(k, _)| {
                k.starts_with("tollgate_antispoof_dropped_packets_total{")
                    && k.contains("reason=\"source\"")
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// The agent's `tollgate_dns_wrong_interface_total` now (panics when
    /// the series is not exported).
    fn wrong_interface(&self) -> f64 {
        family_sum(
            &scrape(&self.node, METRICS),
            "tollgate_dns_wrong_interface_total",
        )
    }

    /// What the node's conntrack table and the DNS queue hold: printed
    /// when a forgery round fails, to tell a reply that was not queued
    /// (no confirmed entry yet, or another flow's) from one judged twice.
    fn diagnosis(&self) -> String {
        let conntrack = self.node.sh("conntrack -L 2>&1").stdout;
        let queue: Vec<String> = self
            .lab
            .queue_counters()
            .into_iter()
            .filter(|c| c.queue == DNS_QUEUE)
            .map(|c| format!("{c:?}"))
            .collect();
        format!("conntrack -L:\n{conntrack}nfnetlink_queue (DNS queue {DNS_QUEUE}): {queue:?}")
    }

    /// The MAC address of `device` in the node namespace.
    fn node_mac(&self, device: &str) -> String {
        self.node
            .ok(&format!("cat /sys/class/net/{device}/address"))
            .trim()
            .to_string()
    }

    /// Runs a python `script` with `args` in `ns`; its stdout.
    fn python(&self, ns: &Netns, script: &str, args: &[&str]) -> String {
        let mut argv = vec![self.python, "-c", script];
        argv.extend_from_slice(args);
        let out = ns.exec(&argv, Duration::from_secs(30));
        assert!(out.success(), "{argv:?}: {}", out.stderr);
        out.stdout.trim().to_string()
    }

    /// HTTP status curl got from `url` in the Pod, `000` when it failed.
    fn curl(&self, url: &str) -> String {
        self.pod
            .sh(&format!(
                "curl -s -o /dev/null -w '%{{http_code}}' --connect-timeout 2 --max-time 4 {url}"
            ))
            .stdout
            .clone()
    }

    /// The entries of the kernel's FQDN sets: `address timeout`.
    fn learned(&self) -> Vec<(IpAddr, u32)> {
        self.node
            .ok("ipset save")
            .lines()
            .filter(|l| l.starts_with("add tollgate-fqdn-"))
            .filter_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let address = words.get(2)?.parse().ok()?;
                let timeout = words.get(4)?.parse().ok()?;
                Some((address, timeout))
            })
            .collect()
    }

    fn has_learned(&self, address: &str) -> bool {
        let address: IpAddr = address.parse().unwrap();
        self.learned().iter().any(|(a, _)| *a == address)
    }

    /// A genuine lookup through the real resolver teaches: the Pod reaches
    /// the name. The DNS queue is first in, first out, so every reply
    /// queued before this one has been judged when it passes. Polled with
    /// a deadline: one curl has 4 s for the lookup and the connection,
    /// which a loaded machine has exceeded once. A genuine reply judged to
    /// come the wrong way would still show: every test checks the final
    /// `wrong_interface` count.
    fn genuine_lookup_teaches(&self, family: &str) {
        let url = format!("{family} http://www.example.test/");
        let mut last = String::new();
        poll_until(Duration::from_secs(20), || {
            last = self.curl(&url);
            (last == "200").then_some(())
        })
        .unwrap_or_else(|| panic!("curl {url}: {last}, learned {:?}", self.learned()));
    }
}

/// The value of `key=` in the log line containing `line`.
fn log_value(log: &str, line: &str, key: &str) -> u64 {
    let text = log
        .lines()
        .find(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no {line:?} in\n{log}"));
    // The line names the counters above 0 only, and says so.
    let zero = text.ends_with(" counters 0)") || text.ends_with(" counter 0)");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .or(zero.then_some(0))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

/// What stops a reply forged out of the Pod's own interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The anti-spoofing guard of the Pod's veth (the default since issue
    /// 27): the reply's source is not the Pod's, it is dropped before
    /// conntrack, and the Pod never receives it.
    Guard,
    /// With `--anti-spoofing off` (or an endpoint left unguarded), the DNS
    /// worker: the reply passes conntrack as a reply, is judged to have
    /// come the wrong way and released unlearned.
    DnsWorker,
}

/// The attack of the issue from the Pod over `family`: a query to the
/// silent resolver, the forged reply claiming `claim` for a name the policy
/// allows, with a TTL of ~25 days. With [`Stop::DnsWorker`] the reply must
/// come back through the node and have been judged as having come the
/// wrong way exactly once (`tollgate_dns_wrong_interface_total` moves by
/// one across the round); with [`Stop::Guard`] it must not come back, the
/// guard must count it, and the DNS worker never see it. `round` names
/// the round when it fails, with the node's conntrack table and the DNS
/// queue's counters.
fn forge_from_pod(
    lab: &ForgeryLab,
    (round, stop): (&str, Stop),
    (server, me, port): (&str, &str, u16),
    rtype: &str,
    claim: &str,
) {
    let before = lab.wrong_interface();
    // Exported only while a guard holds an endpoint.
    let spoofed = match stop {
        Stop::Guard => lab.spoofed_sources(),
        Stop::DnsWorker => 0.0,
    };
    let mac = lab.node_mac("vp");
    let go = std::env::temp_dir().join(format!("{}-forge-{port}", lab.node.name()));
    let _ = std::fs::remove_file(&go);
    let out = std::thread::scope(|scope| {
        let forger = scope.spawn(|| {
            lab.python(
                &lab.pod,
                FORGE_FROM_POD,
                &[
                    server,
                    me,
                    &port.to_string(),
                    "4660",
                    "evil.example.test",
                    rtype,
                    claim,
                    "2147483",
                    &mac,
                    go.to_str().unwrap(),
                ],
            )
        });
        // The forged reply must meet the query's confirmed conntrack
        // entry, as a real attacker's would after the query left: only
        // then is it a reply the DNS worker judges (and counts).
        // Its own entry: the Pod's address and port to the silent
        // resolver (an older entry of the same source port to another
        // server would not do).
        let family = if server.contains(':') { "ipv6" } else { "ipv4" };
        let confirmed = poll_until(Duration::from_secs(10), || {
            lab.node
                .sh(&format!(
                    "conntrack -L -f {family} -p udp --src {me} --dst {server} --sport {port} --dport 53 2>/dev/null"
                ))
                .stdout
                .contains(&format!("sport={port}"))
                .then_some(())
        });
        if confirmed.is_none() {
            std::fs::write(&go, b"").unwrap();
            let _ = forger.join();
            panic!(
                "{round}: the query's conntrack entry was not confirmed on the node\n{}",
                lab.diagnosis()
            );
        }
        std::fs::write(&go, b"").unwrap();
        forger.join().unwrap()
    });
    let _ = std::fs::remove_file(&go);
    if stop == Stop::Guard {
        assert_eq!(out, "nothing", "{round}: the forged reply came back");
        let counted = poll_until(AGENT_WAIT, || {
            (lab.spoofed_sources() > spoofed).then_some(())
        });
        assert!(
            counted.is_some(),
            "{round}: the guard did not count the forged reply\n{}",
            lab.diagnosis()
        );
        assert_eq!(lab.spoofed_sources() - spoofed, 1.0, "{round}");
        assert_eq!(
            lab.wrong_interface(),
            before,
            "{round}: the DNS worker saw it"
        );
        return;
    }
    // The forged reply went through the node (conntrack passed it as a
    // reply and the DNS worker released it): the attack was real.
    assert_eq!(
        out,
        "received",
        "{round}: the forged reply never came back\n{}",
        lab.diagnosis()
    );
    // The worker judged it, once, before releasing it.
    let judged = lab.wrong_interface() - before;
    assert_eq!(
        judged,
        1.0,
        "{round}: tollgate_dns_wrong_interface_total moved by {judged}\n{}",
        lab.diagnosis()
    );
}

/// The issue's attack over IPv4, stopped twice over: by the DNS worker
/// with anti-spoofing off (node `rp_filter` 0, then 2: it does not
/// matter), then by the Pod's anti-spoofing guard (the default).
#[test]
fn forged_reply_from_the_pods_own_interface_is_not_learned_ipv4() {
    let Some(lab) =
        ForgeryLab::start("forged_reply_from_the_pods_own_interface_is_not_learned_ipv4")
    else {
        return;
    };
    let mut agent = lab.agent_with(&["--anti-spoofing", "off"]);
    for (rp_filter, port, claim) in [(0, 33301, "10.62.1.66"), (2, 33302, "10.62.1.67")] {
        lab.node.ok(&format!(
            "sysctl -qw net.ipv4.conf.all.rp_filter={rp_filter} net.ipv4.conf.vp.rp_filter={rp_filter}"
        ));
        forge_from_pod(
            &lab,
            (&format!("IPv4 rp_filter={rp_filter}"), Stop::DnsWorker),
            (SILENT_V4, "10.62.5.2", port),
            "A",
            claim,
        );
        lab.genuine_lookup_teaches("-4");
        assert!(
            !lab.has_learned(claim),
            "rp_filter={rp_filter}: {:?}",
            lab.learned()
        );
        assert_eq!(
            lab.curl(&format!("http://{claim}/")),
            "000",
            "rp_filter={rp_filter}"
        );
    }
    let log = agent.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 2, "{log}");
    // Every genuine reply answered a query the worker had seen.
    assert_eq!(log_value(&log, "dns stats", "unasked"), 0, "{log}");

    let mut guarded = lab.agent_with(&["--drift-check-seconds", "1"]);
    forge_from_pod(
        &lab,
        ("IPv4 guarded", Stop::Guard),
        (SILENT_V4, "10.62.5.2", 33304),
        "A",
        "10.62.1.69",
    );
    lab.genuine_lookup_teaches("-4");
    assert!(!lab.has_learned("10.62.1.69"), "{:?}", lab.learned());
    let log = guarded.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 0, "{log}");
}

/// The same over IPv6 (`rp_filter` is IPv4's only).
#[test]
fn forged_reply_from_the_pods_own_interface_is_not_learned_ipv6() {
    let Some(lab) =
        ForgeryLab::start("forged_reply_from_the_pods_own_interface_is_not_learned_ipv6")
    else {
        return;
    };
    let mut agent = lab.agent_with(&["--anti-spoofing", "off"]);
    forge_from_pod(
        &lab,
        ("IPv6", Stop::DnsWorker),
        (SILENT_V6, "fd62:5::2", 33303),
        "AAAA",
        "fd62:1::66",
    );
    lab.genuine_lookup_teaches("-6");
    assert!(!lab.has_learned("fd62:1::66"), "{:?}", lab.learned());
    assert_eq!(lab.curl("-6 http://[fd62:1::66]/"), "000");
    let log = agent.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 1, "{log}");
    // Every genuine reply answered a query the worker had seen.
    assert_eq!(log_value(&log, "dns stats", "unasked"), 0, "{log}");

    let mut guarded = lab.agent_with(&["--drift-check-seconds", "1"]);
    forge_from_pod(
        &lab,
        ("IPv6 guarded", Stop::Guard),
        (SILENT_V6, "fd62:5::2", 33305),
        "AAAA",
        "fd62:1::69",
    );
    lab.genuine_lookup_teaches("-6");
    assert!(!lab.has_learned("fd62:1::69"), "{:?}", lab.learned());
    let log = guarded.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 0, "{log}");
}

/// The DNS worker keeps the node's route to a resolver between replies
/// (`workers::route::Routes`): the reply after a route change is judged by
/// the new route, with no wait, whether the change was announced as a
/// route's (a host route to the resolver by another link) or only as a
/// link's (that link set down takes its IPv4 route with it, announced by
/// no route message). The Pod's queries keep the resolver's path through
/// a rule for their source, so only the node's own route changes.
/// Mutations: answers never forgotten → the first reply after the change
/// is not judged the wrong way; links not subscribed → the reply after the
/// link went down is judged by the route it took with it.
#[test]
fn the_resolvers_route_is_asked_again_after_a_route_or_link_change() {
    let Some(lab) =
        ForgeryLab::start("the_resolvers_route_is_asked_again_after_a_route_or_link_change")
    else {
        return;
    };
    // IPv6 off on the other link: its own routes' announcements would
    // otherwise tell of the link's changes too.
    lab.node.ok("ip link add tgr0 type veth peer name tgr1 && \
         sysctl -qw net.ipv6.conf.tgr0.disable_ipv6=1 net.ipv6.conf.tgr1.disable_ipv6=1 && \
         ip link set tgr1 up && ip link set tgr0 up && \
         ip rule add from 10.62.5.2 lookup 162 pref 162 && \
         ip route add 10.62.0.0/24 dev vs table 162");
    let mut agent = lab.agent();
    // The worker has asked for the route to the resolver: `vs`.
    lab.genuine_lookup_teaches("-4");
    let lookup = |round: &str| {
        let answer = lab
            .pod
            .sh("dig +short +time=2 +tries=1 @10.62.0.2 www.example.test A")
            .stdout;
        assert_eq!(
            answer.trim(),
            "10.62.1.10",
            "{round}: the reply was not released"
        );
        lab.wrong_interface()
    };
    let before = lookup("before any change");
    lab.node.ok("ip route add 10.62.0.2/32 dev tgr0");
    assert_eq!(
        lookup("host route by tgr0") - before,
        1.0,
        "the reply after the route change was judged by the route kept before it"
    );
    lab.node.ok("ip link set tgr0 down");
    assert_eq!(
        lookup("tgr0 down") - before,
        1.0,
        "the reply after the link went down was judged by the route it took with it"
    );
    let log = agent.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 1, "{log}");
}

#[test]
fn replies_on_the_servers_path_teach_only_as_answers_with_bounded_ttl() {
    let Some(lab) =
        ForgeryLab::start("replies_on_the_servers_path_teach_only_as_answers_with_bounded_ttl")
    else {
        return;
    };
    let mut agent = lab.agent();
    let mac = lab.node_mac("vs");
    for (server, me, rtype, family, addresses) in [
        (
            SILENT_V4,
            "10.62.5.2",
            "A",
            "-4",
            ["10.62.1.71", "10.62.1.72", "10.62.1.73", "10.62.1.74"],
        ),
        (
            SILENT_V6,
            "fd62:5::2",
            "AAAA",
            "-6",
            ["fd62:1::71", "fd62:1::72", "fd62:1::73", "fd62:1::74"],
        ),
    ] {
        let [wrong_id, wrong_question, answer, second] = addresses;
        lab.python(
            &lab.pod,
            QUERY_FROM_POD,
            &[server, me, "33310", "4096", "late.example.test", rtype],
        );
        lab.python(
            &lab.server,
            REPLY_FROM_SERVER,
            &[
                server,
                me,
                "33310",
                rtype,
                &mac,
                &format!("4097,late.example.test,{wrong_id},600"),
                &format!("4096,other.example.test,{wrong_question},600"),
                &format!("4096,late.example.test,{answer},1000000"),
                &format!("4096,late.example.test,{second},600"),
            ],
        );
        // The answer teaches, with its TTL cut to fqdn.maxTtl (one day).
        let learned = poll_until(AGENT_WAIT, || lab.has_learned(answer).then_some(()));
        assert!(
            learned.is_some(),
            "{answer} not learned\n{}",
            lab.diagnosis()
        );
        lab.genuine_lookup_teaches(family);
        let learned = lab.learned();
        let timeout = |address: &str| {
            let address: IpAddr = address.parse().unwrap();
            learned.iter().find(|(a, _)| *a == address).map(|(_, t)| *t)
        };
        // Cut to one day, not to another bound (fqdn.minTtl is 5 s),
        // minus the seconds since it was written.
        assert!(
            timeout(answer).is_some_and(|t| (86_300..=86_400).contains(&t)),
            "{learned:?}"
        );
        for forged in [wrong_id, wrong_question, second] {
            assert_eq!(timeout(forged), None, "{forged}: {learned:?}");
        }
        let url = match family {
            "-4" => format!("http://{wrong_id}/"),
            _ => format!("-6 http://[{wrong_id}]/"),
        };
        assert_eq!(lab.curl(&url), "000");
    }
    let log = agent.stop();
    // Per family: the wrong id and the second answer; the other question.
    // Exactly: the genuine lookups' replies each answered their query.
    assert_eq!(log_value(&log, "dns stats", "unasked"), 4, "{log}");
    assert_eq!(log_value(&log, "dns stats", "other_question"), 2, "{log}");
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 0, "{log}");
}

#[test]
fn replies_made_on_the_node_teach_only_from_the_nodes_own_addresses() {
    let Some(lab) =
        ForgeryLab::start("replies_made_on_the_node_teach_only_from_the_nodes_own_addresses")
    else {
        return;
    };
    // A resolver on the node itself (as NodeLocal DNSCache runs).
    lab.lab.serve_dns(
        "node",
        53,
        vec![DnsRecord::address(
            "local.example.test",
            Ipv4Addr::new(10, 62, 1, 20),
            300,
        )],
    );
    let mut agent = lab.agent();
    assert_eq!(
        lab.python(
            &lab.pod,
            r#"
import socket
from scapy.all import DNS, DNSQR
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(bytes(DNS(id=7, rd=1, qd=DNSQR(qname="local.example.test"))), ("10.62.5.1", 53))
print(DNS(s.recvfrom(2048)[0]).an.rdata)
"#,
            &[],
        ),
        "10.62.1.20"
    );
    // The node's own resolver teaches through OUTPUT.
    assert_eq!(lab.curl("http://10.62.1.20/"), "200");
    // A node process forging a remote resolver's reply does not.
    for (server, me, rtype, claim) in [
        (SILENT_V4, "10.62.5.2", "A", "10.62.1.68"),
        (SILENT_V6, "fd62:5::2", "AAAA", "fd62:1::68"),
    ] {
        lab.python(
            &lab.pod,
            QUERY_FROM_POD,
            &[server, me, "33320", "4100", "node.example.test", rtype],
        );
        lab.python(
            &lab.node,
            REPLY_FROM_NODE,
            &[
                server,
                me,
                "33320",
                rtype,
                &format!("4100,node.example.test,{claim},600"),
            ],
        );
    }
    lab.genuine_lookup_teaches("-4");
    lab.genuine_lookup_teaches("-6");
    for claim in ["10.62.1.68", "fd62:1::68"] {
        assert!(!lab.has_learned(claim), "{claim}: {:?}", lab.learned());
    }
    let log = agent.stop();
    assert_eq!(log_value(&log, "dns stats", "wrong_interface"), 2, "{log}");
}

/// Sends one query per name from its own UDP socket of the Pod (ports
/// from `first_port` on, ids from 4000 on), all at once, then waits up
/// to 15 s for each socket's answer and prints how many answers came.
/// Arguments: resolver, Pod address, first port, record type, names.
const BURST_FROM_POD: &str = r#"
import socket, sys, time
from scapy.all import DNS, DNSQR
server, me, first, rtype = sys.argv[1:5]
six = ":" in server
asked = []
for i, name in enumerate(sys.argv[5:]):
    s = socket.socket(socket.AF_INET6 if six else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((me, int(first) + i))
    asked.append((s, 4000 + i, bytes(DNS(id=4000 + i, rd=1, qd=DNSQR(qname=name, qtype=rtype)))))
for s, _, query in asked:
    s.sendto(query, (server, 53))
deadline = time.time() + 15
got = 0
for s, qid, _ in asked:
    s.settimeout(max(0.01, deadline - time.time()))
    try:
        data, _ = s.recvfrom(2048)
        got += DNS(data).id == qid
    except socket.timeout:
        pass
print(got)
"#;

/// Sends a reply "from" the resolver to each of the Pod's sockets from the
/// server's side (the resolver's real path), one per
/// `port,id,question,address` argument after: resolver, Pod address,
/// record type, node MAC.
const REPLIES_FROM_SERVER: &str = r#"
import sys
from scapy.all import DNS, DNSQR, DNSRR, Ether, IP, IPv6, UDP, sendp
server, me, rtype, mac = sys.argv[1:5]
ip = IPv6(src=server, dst=me) if ":" in server else IP(src=server, dst=me)
for spec in sys.argv[5:]:
    port, qid, name, claim = spec.split(",")
    reply = DNS(id=int(qid), qr=1, aa=1, rd=1, ra=1, qd=DNSQR(qname=name, qtype=rtype),
                an=DNSRR(rrname=name, type=rtype, ttl=300, rdata=claim))
    sendp(Ether(dst=mac) / ip / UDP(sport=53, dport=int(port)) / reply, iface="vn", verbose=False)
"#;

/// Queries over UDP are not held (issue 34): the DNS queue gets only the
/// replies, the worker reads the queries' NFLOG copies, and genuine
/// lookups still teach, over IPv4 and IPv6, every reply answering a query
/// the worker saw.
///
/// Mutation: `dns_query_target` (src/datapath/plan/dns.rs) queueing UDP
/// queries again (`NFQUEUE --queue-num` for "udp"): the queue gets the
/// queries too (packets > parsed replies) and no copy is read; this test
/// fails.
#[test]
fn queries_pass_unheld_and_their_copies_still_teach() {
    let Some(lab) = ForgeryLab::start("queries_pass_unheld_and_their_copies_still_teach") else {
        return;
    };
    let mut agent = lab.agent();
    lab.genuine_lookup_teaches("-4");
    lab.genuine_lookup_teaches("-6");
    let log = agent.stop();
    let replies = log_value(&log, "dns stats", "parsed");
    assert!(replies >= 2, "{log}");
    // The queue held the replies only.
    assert_eq!(log_value(&log, "dns stats", "packets"), replies, "{log}");
    // Every query remembered came as a copy, and every reply answered one.
    let copies = log_value(&log, "dns stats", "query_copies");
    assert!(copies >= replies, "{log}");
    assert_eq!(log_value(&log, "dns stats", "queries"), copies, "{log}");
    assert_eq!(log_value(&log, "dns stats", "unasked"), 0, "{log}");
    assert_eq!(
        log_value(&log, "dns stats", "query_copies_lost"),
        0,
        "{log}"
    );
}

/// The race of a reply with its query's copy, forced: with the NFLOG
/// socket's buffer at the kernel's floor (`fqdn.queryLogBuffer`, an
/// operator's setting) a burst of queries to the resolver that never
/// answers loses all copies but about the first one (the worker reads
/// them only when a reply or its tick comes). Genuine-looking replies
/// then come on the server's path, each answering its query, with an
/// address of its own. What it proves, per family: every reply reaches
/// the Pod (none dropped); the replies whose copies were read teach (at
/// least one); the others are judged before any copy of their query is
/// read (it never will be) and are released unlearned: the addresses
/// learned are exactly the replies not counted `unasked_after_loss`, and
/// every `unasked` reply is one of those; `tollgate status` shows the
/// loss and those replies.
///
/// Mutation: releasing an unasked reply with `Action::Drop` while a loss
/// is recent (src/workers/dns.rs, `Replies::packet`) makes the Pod miss
/// answers; not recording the loss (`lost_at` left `None`) makes
/// `unasked_after_loss` 0; either fails this test.
#[test]
fn a_reply_judged_before_its_querys_copy_is_read_is_released_unlearned() {
    let Some(lab) =
        ForgeryLab::start("a_reply_judged_before_its_querys_copy_is_read_is_released_unlearned")
    else {
        return;
    };
    let mut agent = lab.agent_with(&["--set", "fqdn.queryLogBuffer=1"]);
    let mac = lab.node_mac("vs");
    const BURST: usize = 12;
    let mut unlearned = 0;
    for (family, server, me, first, rtype, claim) in [
        ("ipv4", SILENT_V4, "10.62.5.2", 34100u16, "A", "10.62.1."),
        ("ipv6", SILENT_V6, "fd62:5::2", 34200, "AAAA", "fd62:1::"),
    ] {
        let names: Vec<String> = (0..BURST)
            .map(|i| format!("race{i}.example.test"))
            .collect();
        let claims: Vec<String> = (0..BURST).map(|i| format!("{claim}{}", 100 + i)).collect();
        let received = std::thread::scope(|scope| {
            let asker = scope.spawn(|| {
                let mut args = vec![
                    server.to_string(),
                    me.into(),
                    first.to_string(),
                    rtype.into(),
                ];
                args.extend(names.iter().cloned());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                lab.python(&lab.pod, BURST_FROM_POD, &args)
            });
            // Every query's conntrack entry confirmed on the node: only
            // then is a reply a reply the DNS worker judges.
            let last = first + BURST as u16 - 1;
            let confirmed = poll_until(Duration::from_secs(10), || {
                lab.node
                    .sh(&format!(
                        "conntrack -L -f {family} -p udp --src {me} --dst {server} --sport {last} --dport 53 2>/dev/null"
                    ))
                    .stdout
                    .contains(&format!("sport={last}"))
                    .then_some(())
            });
            assert!(confirmed.is_some(), "{family}: {}", lab.diagnosis());
            let specs: Vec<String> = (0..BURST)
                .map(|i| {
                    format!(
                        "{},{},{},{}",
                        first + i as u16,
                        4000 + i,
                        names[i],
                        claims[i]
                    )
                })
                .collect();
            let mut argv = vec![server, me, rtype, mac.as_str()];
            argv.extend(specs.iter().map(String::as_str));
            lab.python(&lab.server, REPLIES_FROM_SERVER, &argv);
            asker.join().unwrap()
        });
        assert_eq!(received, BURST.to_string(), "{family}: a reply was dropped");
        let learned = claims.iter().filter(|c| lab.has_learned(c)).count();
        assert!(
            learned >= 1,
            "{family}: nothing learned: {:?}",
            lab.learned()
        );
        assert!(
            learned < BURST,
            "{family}: no copy was lost, the race was not forced"
        );
        unlearned += BURST - learned;
    }
    // `tollgate status` shows the loss and the replies it left unlearned.
    let socket = lab.lab.agent_options().status_socket;
    let status = |key| worker_counter(&socket, "dns", key).expect("the agent answers status");
    assert!(status("query_copies_lost") >= 1);
    assert_eq!(status("unasked_after_loss"), unlearned as u64);
    let log = agent.stop();
    assert!(
        log_value(&log, "dns stats", "query_copies_lost") >= 1,
        "{log}"
    );
    assert_eq!(
        log_value(&log, "dns stats", "unasked_after_loss"),
        unlearned as u64,
        "{log}"
    );
    assert_eq!(
        log_value(&log, "dns stats", "unasked"),
        unlearned as u64,
        "{log}"
    );
}

/// A DNS worker restarted in-process binds its NFLOG group again: it
/// panics at its first queued reply (`TOLLGATE_FAULT_PANIC`, debug
/// builds), the restarted incarnation reads the copies of the queries
/// sent after (the stub resolver's retry), and lookups teach again, IPv4
/// and IPv6, every reply answering a query it saw through a copy.
///
/// Mutation: the worker's `QueryLog` outliving its incarnation (the
/// handler's field a `std::mem::ManuallyDrop<QueryLog>` in
/// src/workers/dns.rs): the old socket keeps the group, every new
/// incarnation fails to bind it (EPERM), and nothing is learned; this
/// test fails.
#[test]
fn a_restarted_dns_worker_binds_its_query_copies_again() {
    let Some(lab) = ForgeryLab::start("a_restarted_dns_worker_binds_its_query_copies_again") else {
        return;
    };
    let mut options = lab
        .lab
        .agent_options()
        .node_name("fq")
        .queues(1)
        .args(&["--metrics-address", METRICS]);
    options
        .env
        .push(("TOLLGATE_FAULT_PANIC".into(), format!("{DNS_QUEUE}:1")));
    let mut agent = lab.lab.start_agent(options);
    agent.wait_generation(1);
    lab.genuine_lookup_teaches("-4");
    lab.genuine_lookup_teaches("-6");
    let log = agent.stop();
    assert!(
        log.contains("dns worker panicked: TOLLGATE_FAULT_PANIC"),
        "{log}"
    );
    assert!(log.contains("dns worker restarted"), "{log}");
    assert!(log_value(&log, "dns stats", "learned") >= 2, "{log}");
    assert!(log_value(&log, "dns stats", "query_copies") >= 2, "{log}");
}
