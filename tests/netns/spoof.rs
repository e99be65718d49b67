//! A Pod sending with another endpoint's source address (issue 27,
//! finding 3), on the wire against `tollgate run`: a spoofer forges its
//! neighbour's address (scapy, or the address added to its own interface
//! and an ARP or neighbour-discovery claim made to the server) to reach a
//! port only the neighbour may reach. Routed veths (IPv4 with `rp_filter` 0
//! and 2, IPv6, which has none) and a Linux bridge (every `rp_filter`
//! setting: bridged frames never meet it). Each test has its positive
//! controls: the real neighbour still connects, the spoofer still connects
//! from its own address, and a prefix listed in
//! `antiSpoofing.allowedSourcePrefixes` passes. Drops are read back per
//! endpoint from `tollgate status` (the same counters as
//! `tollgate_antispoof_dropped_packets_total`).
//!
//! Addresses: the lab's `10.I.0.0/16` and `fd00:I::/48` (`I` the test's
//! index): routed links from the harness (`10.I.k.0/24`), the bridge
//! `10.I.5.0/24` and `fd00:I:5::/64` (node `.1`, victim `.2`, spoofer
//! `.3`, server `.4`), the spoofer's allowed prefix `10.I.9.0/24` and
//! `fd00:I:9::/64`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::status::{AntiSpoofReport, Request, Response};

use crate::harness::{
    poll_until, skip, wait_until, Lab, Netns, Service, TcpOutcome, ALLOW_WAIT, DENY_WAIT,
};

/// The policy: the server takes TCP 8080 and UDP 5353 only from the
/// victim and from the spoofer's allowed prefix, TCP 9090 from the
/// spoofer, nothing else. `{victim4}` etc. are the Pods' addresses.
const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: server-ingress}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: server}}}]
  ingress:
  - name: victim-only
    action: Allow
    from: [{podSelector: {matchLabels: {app: victim}}}, {ipBlock: {cidr: '{allowed4}'}}, {ipBlock: {cidr: '{allowed6}'}}]
    ports: [{protocol: TCP, port: 8080}, {protocol: UDP, port: 5353}]
  - name: spoofer-own
    action: Allow
    from: [{podSelector: {matchLabels: {app: spoofer}}}]
    ports: [{protocol: TCP, port: 9090}]
  - name: drop-rest
    action: Drop
    from: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Pod
metadata: {name: victim, namespace: apps, labels: {app: victim}}
spec: {nodeName: node}
status: {podIPs: [{ip: '{victim4}'}, {ip: '{victim6}'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: spoofer, namespace: apps, labels: {app: spoofer}}
spec: {nodeName: node}
status: {podIPs: [{ip: '{spoofer4}'}, {ip: '{spoofer6}'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: apps, labels: {app: server}}
spec: {nodeName: node}
status: {podIPs: [{ip: '{server4}'}, {ip: '{server6}'}]}
";

/// Sends `count` UDP datagrams from `src` to `dst:port` with `payload`,
/// out of `eth0` to `mac`. Arguments: src, dst, port, payload, mac, count.
const SEND_UDP: &str = r#"
import sys
from scapy.all import Ether, IP, IPv6, UDP, sendp
src, dst, port, payload, mac, count = sys.argv[1:]
ip = IPv6(src=src, dst=dst) if ":" in dst else IP(src=src, dst=dst)
frames = [Ether(dst=mac) / ip / UDP(sport=40000 + i, dport=int(port)) / payload.encode()
          for i in range(int(count))]
sendp(frames, iface="eth0", verbose=False)
"#;

/// Claims `claimed` for this namespace's MAC to `target` (its address and
/// MAC): an ARP request "who has target, tell claimed" (IPv4), or a
/// neighbour solicitation from `claimed` with our MAC as source link-layer
/// option (IPv6): the target records `claimed` at our MAC. With a fifth
/// argument `na`, also an unsolicited override advertisement from our own
/// link-local address whose target is `claimed`. Arguments: claimed,
/// target, target MAC, count[, na].
const CLAIM: &str = r#"
import sys
from scapy.all import (ARP, Ether, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,
                       ICMPv6NDOptSrcLLAddr, IPv6, get_if_hwaddr, sendp)
claimed, target, target_mac, count = sys.argv[1:5]
me = get_if_hwaddr("eth0")
if ":" in claimed:
    frames = [Ether(src=me, dst=target_mac) / IPv6(src=claimed, dst=target, hlim=255)
              / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=me)]
    if sys.argv[5:] == ["na"]:
        own = open("/proc/net/if_inet6").read().split("\n")
        ll = [l.split()[0] for l in own if l.endswith("eth0") and l.startswith("fe80")][0]
        ll = ":".join(ll[i:i + 4] for i in range(0, 32, 4))
        frames.append(Ether(src=me, dst=target_mac) / IPv6(src=ll, dst=target, hlim=255)
                      / ICMPv6ND_NA(tgt=claimed, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=me))
else:
    frames = [Ether(src=me, dst=target_mac)
              / ARP(op=1, hwsrc=me, psrc=claimed, hwdst="00:00:00:00:00:00", pdst=target)]
sendp(frames * int(count), iface="eth0", verbose=False)
"#;

/// A python3 that imports scapy (the Debian package installs it for the
/// system interpreter, which a python3 earlier on PATH may not be).
fn scapy_python(lab: &Lab, test: &str) -> Option<&'static str> {
    let found = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        lab.node()
            .sh(&format!("{p} -c 'import scapy.all'"))
            .success()
    });
    if found.is_none() {
        skip(test, "python3-scapy is missing (scripts/install-deps.sh)");
    }
    found
}

fn scapy(ns: &Netns, python: &str, script: &str, args: &[&str]) {
    let mut argv = vec![python, "-c", script];
    argv.extend_from_slice(args);
    let out = ns.exec(&argv, Duration::from_secs(30));
    assert!(out.success(), "{argv:?}: {}", out.stderr);
}

/// The MAC address of `device` in `ns`.
fn mac(ns: &Netns, device: &str) -> String {
    ns.ok(&format!("cat /sys/class/net/{device}/address"))
        .trim()
        .to_string()
}

/// UDP datagrams received on a port of one namespace, by payload.
struct Inbox {
    received: Arc<Mutex<Vec<String>>>,
}

impl Inbox {
    /// Binds `[::]:port` (both families) in `ns` and collects what
    /// arrives until the lab stops (the thread ends with the test).
    fn open(ns: &Netns, port: u16) -> Inbox {
        let socket = ns
            .enter(move || UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))))
            .expect("bind the UDP inbox");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&received);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 2048];
            // Bounded: the test process ends long before.
            for _ in 0..100_000 {
                if let Ok((n, _)) = socket.recv_from(&mut buffer) {
                    let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    sink.lock().unwrap().push(text);
                }
                if Arc::strong_count(&sink) == 1 {
                    return;
                }
            }
        });
        Inbox { received }
    }

    fn has(&self, payload: &str) -> bool {
        self.received.lock().unwrap().iter().any(|p| p == payload)
    }

    /// Waits for `payload` (allowed traffic).
    #[track_caller]
    fn expect(&self, payload: &str) {
        wait_until(
            &format!("datagram {payload:?} at the server"),
            ALLOW_WAIT,
            || self.has(payload),
        );
    }

    /// Waits the deny time and checks `payload` never arrived.
    #[track_caller]
    fn expect_none(&self, payload: &str) {
        let arrived = poll_until(DENY_WAIT, || self.has(payload).then_some(()));
        assert!(
            arrived.is_none(),
            "the spoofed datagram {payload:?} reached the server: the spoofer got its neighbour's allowance"
        );
    }
}

/// The agent's anti-spoofing report.
fn report(lab: &Lab) -> AntiSpoofReport {
    match tollgate::status::request(&lab.agent_options().status_socket, &Request::Status) {
        Ok(Response::Status(status)) => status
            .anti_spoofing
            .unwrap_or_else(|| panic!("no anti-spoofing report in the status")),
        other => panic!("status: {other:?}"),
    }
}

/// What the guards dropped for `endpoint` because of `reason`.
fn dropped(report: &AntiSpoofReport, endpoint: &str, reason: &str) -> u64 {
    report
        .guarded
        .iter()
        .find(|g| g.endpoint == endpoint)
        .and_then(|g| g.dropped.get(reason).copied())
        .unwrap_or(0)
}

/// Waits until the status counts at least `n` drops of `reason` for
/// `endpoint` (the counters are read at every drift check: 1 s here).
#[track_caller]
fn expect_dropped(lab: &Lab, endpoint: &str, reason: &str, n: u64) {
    let mut last = AntiSpoofReport::default();
    let counted = poll_until(Duration::from_secs(10), || {
        last = report(lab);
        (dropped(&last, endpoint, reason) >= n).then_some(())
    });
    assert!(
        counted.is_some(),
        "expected {n} {reason} drops for {endpoint}: {last:#?}"
    );
}

/// Waits until every Pod is guarded where it is attached.
#[track_caller]
fn expect_guarded(lab: &Lab, attached: &[(&str, &str)]) {
    let mut last = AntiSpoofReport::default();
    let guarded = poll_until(Duration::from_secs(10), || {
        last = report(lab);
        attached
            .iter()
            .all(|(endpoint, interface)| {
                last.guarded
                    .iter()
                    .any(|g| g.endpoint == *endpoint && g.interface == *interface)
            })
            .then_some(())
    });
    assert!(guarded.is_some(), "not guarded as {attached:?}: {last:#?}");
    assert!(last.unguarded.is_empty(), "{last:#?}");
}

/// The packet counter of the IPv4 raw chain's rule that returns packets
/// from the outside peer's interface (guarded by no endpoint) with a
/// source bound to no endpoint.
#[track_caller]
fn uplink_returns(lab: &Lab) -> u64 {
    let save = lab.node().dump("iptables-save -c -t raw");
    let line = save
        .lines()
        .find(|l| l.contains("-A TOLLGATE-ANTISPOOF -i n-outside ") && l.ends_with("-j RETURN"))
        .unwrap_or_else(|| panic!("no uplink return rule:\n{save}"));
    let packets = line.strip_prefix('[').and_then(|l| l.split(':').next());
    packets
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {line}"))
}

/// The guards parse back as planned: no drift check found them changed.
#[track_caller]
fn no_drift(agent: &crate::harness::Agent) {
    let log = agent.log();
    assert!(!log.contains("datapath drift"), "{log}");
}

/// The policy with the lab's addresses.
fn policy(lab: &Lab, addresses: &[(&str, IpAddr)]) -> String {
    let i = lab.index();
    let mut text = POLICY
        .replace("{allowed4}", &format!("10.{i}.9.0/24"))
        .replace("{allowed6}", &format!("fd00:{i}:9::/64"));
    for (key, address) in addresses {
        text = text.replace(&format!("{{{key}}}"), &address.to_string());
    }
    text
}

/// Starts the agent with a 1 s drift check (the counters' reading) and
/// the spoofer's allowed prefixes.
fn start_agent(lab: &Lab) -> crate::harness::Agent {
    let i = lab.index();
    let options = lab.agent_options().queues(1).args(&[
        "--drift-check-seconds",
        "1",
        "--allowed-source-prefix",
        &format!("apps/spoofer=10.{i}.9.0/24"),
        "--allowed-source-prefix",
        &format!("apps/spoofer=fd00:{i}:9::/64"),
    ]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    agent
}

/// The routed lab: victim, spoofer, server and a host outside the
/// inventory, each on its own veth of the node.
fn routed_lab(test: &'static str) -> Option<(Lab, &'static str)> {
    let lab = Lab::builder(test)
        .peer("victim")
        .peer("spoofer")
        .peer("server")
        .peer("outside")
        .ipv6()
        .require(&["python3"])
        .build()?;
    let python = scapy_python(&lab, test)?;
    let addresses: Vec<(&str, IpAddr)> = ["victim", "spoofer", "server"]
        .iter()
        .flat_map(|role| {
            [
                (*role, IpAddr::from(lab.addr(role))),
                (*role, IpAddr::from(lab.addr6(role))),
            ]
        })
        .collect();
    let keyed: Vec<(String, IpAddr)> = addresses
        .iter()
        .map(|(role, a)| {
            let family = if a.is_ipv4() { "4" } else { "6" };
            (format!("{role}{family}"), *a)
        })
        .collect();
    let keyed: Vec<(&str, IpAddr)> = keyed.iter().map(|(k, a)| (k.as_str(), *a)).collect();
    lab.write_policy("spoof.yaml", &policy(&lab, &keyed));
    // The spoofer's allowed prefix is routed to it (a router or a VM
    // behind it), so that even loose rp_filter passes it.
    let i = lab.index();
    lab.node().ok(&format!(
        "ip route add 10.{i}.9.0/24 via {} && ip -6 route add fd00:{i}:9::/64 via {}",
        lab.addr("spoofer"),
        lab.addr6("spoofer")
    ));
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("server", 9090, Service::Echo);
    Some((lab, python))
}

/// Routed veths, IPv4: a Pod forging its neighbour's source address to
/// reach a UDP port only the neighbour may reach, with the node's
/// `rp_filter` 0 and then 2 (loose: the neighbour's address has a route,
/// so the kernel passes it), and a host outside the inventory forging it
/// too. Dropped and counted: for the spoofer (`source`) and for the
/// victim (`address`). The victim still reaches the port, the spoofer
/// still reaches its own port, and a datagram from the spoofer's allowed
/// prefix passes.
///
/// The guards outlive the agent like its other chains (a stopped agent
/// leaves them enforcing) and `tollgate cleanup` removes them.
///
/// An unbound source from the uplink passes, returned by the rule that
/// spares it the drop rules (its counter read back).
///
/// Mutation: in `raw_table` (src/datapath/antispoof/rules.rs) plan the
/// IPv4 chain with only its `-i lo -j RETURN` rule — the spoofed datagram
/// reaches the server. Mutation: the other interfaces' return rules
/// without the bound-set lookup — the victim's address forged from
/// outside reaches the server. Mutation: no such return rules — none to
/// count. Mutation: `Iptables::installed` (src/datapath/kernel.rs) does
/// not read the raw tables — the drift check finds the guards missing and
/// rewrites them every second (and cleanup would leave them).
#[test]
fn routed_pod_cannot_send_as_its_neighbour_ipv4() {
    let Some((lab, python)) = routed_lab("routed_pod_cannot_send_as_its_neighbour_ipv4") else {
        return;
    };
    let inbox = Inbox::open(lab.ns("server"), 5353);
    let mut agent = start_agent(&lab);
    let (victim, server) = (
        lab.addr("victim").to_string(),
        lab.addr("server").to_string(),
    );
    let node_mac = mac(lab.node(), "n-spoofer");
    for (rp_filter, payload) in [(0, "spoof-rp0"), (2, "spoof-rp2")] {
        lab.node().ok(&format!(
            "sysctl -qw net.ipv4.conf.all.rp_filter={rp_filter} net.ipv4.conf.n-spoofer.rp_filter={rp_filter}"
        ));
        scapy(
            lab.ns("spoofer"),
            python,
            SEND_UDP,
            &[&victim, &server, "5353", payload, &node_mac, "3"],
        );
        inbox.expect_none(payload);
    }
    expect_guarded(
        &lab,
        &[
            ("apps/victim", "n-victim"),
            ("apps/spoofer", "n-spoofer"),
            ("apps/server", "n-server"),
        ],
    );
    expect_dropped(&lab, "apps/spoofer", "source", 6);
    // From an interface of no endpoint: the victim's address is its own.
    let outside_mac = mac(lab.node(), "n-outside");
    scapy(
        lab.ns("outside"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "spoof-outside", &outside_mac, "2"],
    );
    inbox.expect_none("spoof-outside");
    expect_dropped(&lab, "apps/victim", "address", 2);
    // Positive controls.
    let victim_mac = mac(lab.node(), "n-victim");
    scapy(
        lab.ns("victim"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "real-victim", &victim_mac, "1"],
    );
    inbox.expect("real-victim");
    lab.assert_tcp("victim", (lab.addr("server"), 8080), TcpOutcome::Connected);
    lab.assert_tcp("spoofer", (lab.addr("server"), 9090), TcpOutcome::Connected);
    lab.assert_tcp("spoofer", (lab.addr("server"), 8080), TcpOutcome::TimedOut);
    let allowed = format!("10.{}.9.7", lab.index());
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[&allowed, &server, "5353", "allowed-prefix", &node_mac, "1"],
    );
    inbox.expect("allowed-prefix");
    // From the uplink's side, a source bound to nobody (in the spoofer's
    // allowed prefix, routed to it: loose rp_filter passes it) is no one's
    // forgery: it passes, returned ahead of the per-veth and per-address
    // drop rules by the outside interface's rule, which counts it.
    let returned = uplink_returns(&lab);
    let unbound = format!("10.{}.9.8", lab.index());
    scapy(
        lab.ns("outside"),
        python,
        SEND_UDP,
        &[
            &unbound,
            &server,
            "5353",
            "uplink-unbound",
            &outside_mac,
            "2",
        ],
    );
    inbox.expect("uplink-unbound");
    let after = uplink_returns(&lab);
    assert!(
        after >= returned + 2,
        "uplink packets returned: {returned} then {after}"
    );
    let report = report(&lab);
    assert_eq!(dropped(&report, "apps/victim", "source"), 0, "{report:#?}");
    assert_eq!(dropped(&report, "apps/server", "source"), 0, "{report:#?}");
    no_drift(&agent);
    // Stopped, the agent leaves the guards enforcing.
    agent.stop();
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "spoof-stopped", &node_mac, "3"],
    );
    inbox.expect_none("spoof-stopped");
    let cleanup = lab.tollgate_cleanup();
    assert!(cleanup.success(), "{}", cleanup.stderr);
    for save in ["iptables-save -t raw", "ip6tables-save -t raw"] {
        let raw = lab.node().ok(save);
        assert!(!raw.contains("TOLLGATE"), "{save} after cleanup:\n{raw}");
    }
}

/// A Node with more routed Pods than one `hash:net,iface` hash bucket
/// holds for one prefix (64: the set hashes the address, not the
/// interface): 100 more Pods, each on a veth of its own (their far ends in
/// the outside peer's namespace) with an IPv4 and an IPv6 address, and a
/// prefix allowed to every endpoint (`*=CIDR`), and an IPv6 prefix
/// allowed by name to the victim and each of the 100. The agent applies
/// its ruleset and every Pod is guarded; the spoofer's forgery of the
/// victim's IPv6 address is still dropped, the victim's own datagram
/// still arrives; the victim may send from the named prefix, the spoofer
/// may not. (Until this test, each veth put IPv6's `fe80::/10` and `::`
/// in the source set, and a shared prefix too, and the kernel refused the
/// 65th veth's: no ruleset at all past 64 Pods with IPv6 or a shared
/// prefix; a prefix named for more than 64 endpoints did the same.)
///
/// Mutations: in `raw_table` (src/datapath/antispoof/rules.rs) keep the
/// link-scoped prefixes, or the shared one, in every veth's pairs, or set
/// `INTERFACES_PER_SOURCE` to `usize::MAX` — the agent never applies its
/// first ruleset ("Hash is full").
#[test]
fn a_hundred_routed_pods_are_guarded() {
    let Some((lab, python)) = routed_lab("a_hundred_routed_pods_are_guarded") else {
        return;
    };
    const PODS: usize = 100;
    let i = lab.index();
    let far = lab.ns("outside").name().to_string();
    let (mut node, mut pods, mut inventory) = (String::new(), String::new(), String::new());
    for k in 0..PODS {
        let (v4, v6) = (
            format!("10.{i}.200.{}", k + 1),
            format!("fd00:{i}:200::{:x}", k + 1),
        );
        node.push_str(&format!(
            "ip link add p{k} type veth peer name e{k} netns {far} && ip link set p{k} up && \
             ip route add {v4}/32 dev p{k} && ip -6 route add {v6}/128 dev p{k}\n"
        ));
        pods.push_str(&format!(
            "ip addr add {v4}/32 dev e{k} && ip -6 addr add {v6}/128 dev e{k} nodad && \
             ip link set e{k} up\n"
        ));
        inventory.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: idle-{k}, namespace: apps, labels: {{app: idle}}}}\n\
             spec: {{nodeName: node}}\nstatus: {{podIPs: [{{ip: '{v4}'}}, {{ip: '{v6}'}}]}}\n"
        ));
    }
    lab.node().ok(&format!("set -e\n{node}"));
    lab.ns("outside").ok(&format!("set -e\n{pods}"));
    lab.write_policy("idle.yaml", &inventory);
    let inbox = Inbox::open(lab.ns("server"), 5353);
    // A prefix every endpoint may send from, as a router's node would list,
    // and the prefix the server's policy admits allowed by name to the
    // victim and every idle Pod (101 veths: a RETURN rule each, the
    // kernel's set would refuse the 65th pair).
    let named = format!("fd00:{i}:9::/64");
    let mut args = vec![
        "--drift-check-seconds".to_string(),
        "1".into(),
        "--allowed-source-prefix".into(),
        format!("*=10.{i}.250.0/24"),
        "--allowed-source-prefix".into(),
        format!("apps/victim={named}"),
    ];
    for k in 0..PODS {
        args.push("--allowed-source-prefix".into());
        args.push(format!("apps/idle-{k}={named}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let options = lab.agent_options().queues(1).args(&args);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    expect_guarded(
        &lab,
        &[
            ("apps/victim", "n-victim"),
            ("apps/spoofer", "n-spoofer"),
            ("apps/idle-0", "p0"),
            ("apps/idle-99", "p99"),
        ],
    );
    assert_eq!(report(&lab).guarded.len(), PODS + 3);
    let (victim, server) = (
        lab.addr6("victim").to_string(),
        lab.addr6("server").to_string(),
    );
    let node_mac = mac(lab.node(), "n-spoofer");
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "spoof-many", &node_mac, "2"],
    );
    inbox.expect_none("spoof-many");
    expect_dropped(&lab, "apps/spoofer", "source", 2);
    let victim_mac = mac(lab.node(), "n-victim");
    scapy(
        lab.ns("victim"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "real-many", &victim_mac, "1"],
    );
    inbox.expect("real-many");
    // The prefix named for 101 veths: the victim may send from it, the
    // spoofer (not named) may not.
    let in_named = format!("fd00:{i}:9::7");
    scapy(
        lab.ns("victim"),
        python,
        SEND_UDP,
        &[&in_named, &server, "5353", "named-victim", &victim_mac, "1"],
    );
    inbox.expect("named-victim");
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[&in_named, &server, "5353", "named-spoofer", &node_mac, "2"],
    );
    inbox.expect_none("named-spoofer");
    expect_dropped(&lab, "apps/spoofer", "source", 4);
    // The rules parse back as written (a drift check ran meanwhile).
    no_drift(&agent);
}

/// Routed veths, IPv6 (no `rp_filter` at all): the same forgery, and a
/// neighbour advertisement from the spoofer claiming the victim's address
/// (dropped, counted `neighbour`). Positive controls as for IPv4.
///
/// Mutation: in `sources` (src/datapath/antispoof.rs) add `::/0` to every
/// IPv6 source list — the spoofed datagram reaches the server.
#[test]
fn routed_pod_cannot_send_as_its_neighbour_ipv6() {
    let Some((lab, python)) = routed_lab("routed_pod_cannot_send_as_its_neighbour_ipv6") else {
        return;
    };
    let inbox = Inbox::open(lab.ns("server"), 5353);
    let agent = start_agent(&lab);
    let (victim, server) = (
        lab.addr6("victim").to_string(),
        lab.addr6("server").to_string(),
    );
    let node_mac = mac(lab.node(), "n-spoofer");
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "spoof-v6", &node_mac, "3"],
    );
    inbox.expect_none("spoof-v6");
    expect_guarded(
        &lab,
        &[
            ("apps/victim", "n-victim"),
            ("apps/spoofer", "n-spoofer"),
            ("apps/server", "n-server"),
        ],
    );
    expect_dropped(&lab, "apps/spoofer", "source", 3);
    scapy(
        lab.ns("spoofer"),
        python,
        CLAIM,
        &[
            &victim,
            &lab.node_addr6("spoofer").to_string(),
            &node_mac,
            "2",
            "na",
        ],
    );
    expect_dropped(&lab, "apps/spoofer", "neighbour", 2);
    // Positive controls.
    let victim_mac = mac(lab.node(), "n-victim");
    scapy(
        lab.ns("victim"),
        python,
        SEND_UDP,
        &[&victim, &server, "5353", "real-victim-v6", &victim_mac, "1"],
    );
    inbox.expect("real-victim-v6");
    lab.assert_tcp("victim", (lab.addr6("server"), 8080), TcpOutcome::Connected);
    lab.assert_tcp(
        "spoofer",
        (lab.addr6("server"), 9090),
        TcpOutcome::Connected,
    );
    let allowed = format!("fd00:{}:9::7", lab.index());
    scapy(
        lab.ns("spoofer"),
        python,
        SEND_UDP,
        &[
            &allowed,
            &server,
            "5353",
            "allowed-prefix-v6",
            &node_mac,
            "1",
        ],
    );
    inbox.expect("allowed-prefix-v6");
    no_drift(&agent);
}

/// The bridge lab: victim, spoofer and server on ports of the node's
/// bridge `br0`, `br_netfilter` on, as on a Docker or podman network.
fn bridge_lab(test: &'static str) -> Option<(Lab, &'static str)> {
    let lab = Lab::builder(test)
        .unlinked("victim")
        .unlinked("spoofer")
        .unlinked("server")
        .require(&["python3", "curl"])
        .build()?;
    let python = scapy_python(&lab, test)?;
    let i = lab.index();
    let node = lab.node();
    if !std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
        skip(test, "br_netfilter is not loaded (modprobe br_netfilter)");
        return None;
    }
    node.ok(&format!(
        "sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 && \
         ip link add br0 type bridge && ip link set br0 up && \
         ip addr add 10.{i}.5.1/24 dev br0 && ip addr add fd00:{i}:5::1/64 dev br0 nodad"
    ));
    for (host, role, port) in [
        (2, "victim", "bvic"),
        (3, "spoofer", "bspo"),
        (4, "server", "bsrv"),
    ] {
        let ns = lab.ns(role);
        node.ok(&format!(
            "ip link add {port} type veth peer name eth0 netns {ns} && \
             ip link set {port} master br0 && ip link set {port} up",
            ns = ns.name()
        ));
        ns.ok(&format!(
            "ip addr add 10.{i}.5.{host}/24 dev eth0 && \
             ip addr add fd00:{i}:5::{host}/64 dev eth0 nodad && ip link set eth0 up && \
             ip route add default via 10.{i}.5.1 && ip -6 route add default via fd00:{i}:5::1"
        ));
    }
    // The server answers the allowed prefix by way of the spoofer.
    lab.ns("server").ok(&format!(
        "ip route add 10.{i}.9.0/24 via 10.{i}.5.3 && ip -6 route add fd00:{i}:9::/64 via fd00:{i}:5::3"
    ));
    let address = |host: u8, six: bool| -> IpAddr {
        match six {
            false => format!("10.{i}.5.{host}").parse().unwrap(),
            true => format!("fd00:{i}:5::{host}").parse().unwrap(),
        }
    };
    let keyed = [
        ("victim4", address(2, false)),
        ("victim6", address(2, true)),
        ("spoofer4", address(3, false)),
        ("spoofer6", address(3, true)),
        ("server4", address(4, false)),
        ("server6", address(4, true)),
    ];
    lab.write_policy("spoof.yaml", &policy(&lab, &keyed));
    lab.serve_tcp("server", 8080, Service::Http);
    lab.serve_tcp("server", 9090, Service::Http);
    Some((lab, python))
}

/// `curl` in `role` from `source`: the HTTP status, `000` when it failed.
fn curl_from(lab: &Lab, role: &str, source: &str, url: &str) -> String {
    lab.ns(role)
        .sh(&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' --interface {source} \
             --connect-timeout 2 --max-time 4 '{url}'"
        ))
        .stdout
        .trim()
        .to_string()
}

/// A Linux bridge, IPv4: the spoofer puts the victim's address on its own
/// interface and claims it to the server in ARP, then opens a TCP
/// connection from it to the port only the victim may reach — without
/// guards it gets HTTP 200 as the victim, whatever `rp_filter` says. With
/// them the claim and the connection are dropped at the spoofer's bridge
/// port (counted `neighbour` and `source`), the victim and the spoofer's
/// own connections still get 200, and so does the spoofer from its
/// allowed prefix.
///
/// `tollgate cleanup` removes the ebtables chain.
///
/// Mutation: in `plan` (src/datapath/antispoof.rs) leave the bridge table
/// out — the spoofer gets HTTP 200 as the victim.
#[test]
fn bridged_container_cannot_claim_its_neighbours_address_ipv4() {
    let Some((lab, python)) =
        bridge_lab("bridged_container_cannot_claim_its_neighbours_address_ipv4")
    else {
        return;
    };
    let i = lab.index();
    let mut agent = start_agent(&lab);
    let (victim, server) = (format!("10.{i}.5.2"), format!("10.{i}.5.4"));
    let url = format!("http://{server}:8080/");
    // Positive control: the spoofer's own address reaches its own port.
    let own = format!("10.{i}.5.3");
    assert_eq!(
        curl_from(&lab, "spoofer", &own, &format!("http://{server}:9090/")),
        "200"
    );
    let spoofer = lab.ns("spoofer");
    spoofer.ok(&format!("ip addr add {victim}/32 dev eth0"));
    let server_mac = mac(lab.ns("server"), "eth0");
    // The spoofer knows the server's MAC: its connection's segments leave.
    spoofer.ok(&format!(
        "ip neigh replace {server} lladdr {server_mac} dev eth0 nud permanent"
    ));
    scapy(
        spoofer,
        python,
        CLAIM,
        &[&victim, &server, &server_mac, "3"],
    );
    assert_eq!(
        curl_from(&lab, "spoofer", &victim, &url),
        "000",
        "the spoofer reached the victim's port as the victim"
    );
    expect_guarded(
        &lab,
        &[
            ("apps/victim", "br0 port bvic"),
            ("apps/spoofer", "br0 port bspo"),
            ("apps/server", "br0 port bsrv"),
        ],
    );
    expect_dropped(&lab, "apps/spoofer", "neighbour", 3);
    expect_dropped(&lab, "apps/spoofer", "source", 1);
    // The spoofer holding the victim's address does not move the
    // victim's binding.
    expect_guarded(&lab, &[("apps/victim", "br0 port bvic")]);
    // Positive controls: the victim, and the spoofer's allowed prefix.
    assert_eq!(curl_from(&lab, "victim", &victim, &url), "200");
    let allowed = format!("10.{i}.9.7");
    spoofer.ok(&format!("ip addr add {allowed}/32 dev eth0"));
    assert_eq!(curl_from(&lab, "spoofer", &allowed, &url), "200");
    no_drift(&agent);
    agent.stop();
    let cleanup = lab.tollgate_cleanup();
    assert!(cleanup.success(), "{}", cleanup.stderr);
    let bridge = lab.node().ok("ebtables-nft-save -t nat");
    assert!(!bridge.contains("TOLLGATE"), "after cleanup:\n{bridge}");
}

/// A Linux bridge, IPv6: the spoofer puts the victim's address on its own
/// interface and claims it to the server in a neighbour solicitation
/// (source address and link-layer option) and an override advertisement
/// (from its own link-local address, target the victim's), then connects
/// from it — without guards HTTP 200 as the victim. With them: dropped and
/// counted at the spoofer's port; the victim, the spoofer's own address
/// and its allowed prefix still get 200.
///
/// Mutation: in `nd_rules` (src/datapath/antispoof.rs) return no rules —
/// the advertisement claiming the victim's address is not dropped (no
/// `neighbour` drop is counted).
#[test]
fn bridged_container_cannot_claim_its_neighbours_address_ipv6() {
    let Some((lab, python)) =
        bridge_lab("bridged_container_cannot_claim_its_neighbours_address_ipv6")
    else {
        return;
    };
    let i = lab.index();
    let agent = start_agent(&lab);
    let (victim, server) = (format!("fd00:{i}:5::2"), format!("fd00:{i}:5::4"));
    let url = format!("http://[{server}]:8080/");
    // Positive control: the spoofer's own address reaches its own port.
    let own = format!("fd00:{i}:5::3");
    assert_eq!(
        curl_from(&lab, "spoofer", &own, &format!("http://[{server}]:9090/")),
        "200"
    );
    let spoofer = lab.ns("spoofer");
    spoofer.ok(&format!("ip -6 addr add {victim}/128 dev eth0 nodad"));
    let server_mac = mac(lab.ns("server"), "eth0");
    scapy(
        spoofer,
        python,
        CLAIM,
        &[&victim, &server, &server_mac, "2", "na"],
    );
    assert_eq!(
        curl_from(&lab, "spoofer", &victim, &url),
        "000",
        "the spoofer reached the victim's port as the victim"
    );
    expect_guarded(
        &lab,
        &[
            ("apps/victim", "br0 port bvic"),
            ("apps/spoofer", "br0 port bspo"),
        ],
    );
    // The solicitation from the victim's address: source; the
    // advertisement with the victim's address as target: neighbour.
    expect_dropped(&lab, "apps/spoofer", "source", 2);
    expect_dropped(&lab, "apps/spoofer", "neighbour", 2);
    // Positive controls: the victim, and the spoofer's allowed prefix.
    assert_eq!(curl_from(&lab, "victim", &victim, &url), "200");
    let allowed = format!("fd00:{i}:9::7");
    spoofer.ok(&format!("ip -6 addr add {allowed}/128 dev eth0 nodad"));
    assert_eq!(curl_from(&lab, "spoofer", &allowed, &url), "200");
    no_drift(&agent);
}

/// Podman's bridge network (netavark), the containers as the inventory
/// (`--docker`): a container puts its neighbour's address on its own
/// interface, claims it to the web server in ARP and connects from it to
/// the port only the neighbour may reach — without guards HTTP 200 as the
/// neighbour. With them: the connection fails, the claim is counted for
/// the spoofing container, the neighbour still gets 200 and the spoofer
/// still reaches the neighbour's own server from its own address.
///
/// Mutation: in `attach` (src/datapath/antispoof.rs) report every bridged
/// address unguarded ("no port") — the spoofer gets HTTP 200 as its
/// neighbour.
#[test]
fn podman_container_cannot_claim_its_neighbours_address() {
    use crate::harness::podman::{Container, Podman, PODMAN_TOOLS};
    const TEST: &str = "podman_container_cannot_claim_its_neighbours_address";
    let Some(lab) = Lab::builder(TEST)
        .require(PODMAN_TOOLS)
        .require(&["python3"])
        .build()
    else {
        return;
    };
    let Some(python) = scapy_python(&lab, TEST) else {
        return;
    };
    let podman = Podman::start(&lab);
    let project = podman.name("spoof");
    let nginx = ["nginx", "-g", "daemon off;"];
    for (name, app) in [("web", "web"), ("victim", "victim"), ("spoofer", "spoofer")] {
        let container = Container::new(name)
            .label("com.docker.compose.project", &project)
            .label("app", app);
        podman.run(&if name == "spoofer" {
            container
        } else {
            container.command(&nginx)
        });
    }
    lab.write_policy(
        "web.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: web-ingress}}
spec:
  priority: 5
  tier: application
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}, namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {project}}}}}}}]
  ingress:
  - {{name: victim-only, action: Allow, from: [{{podSelector: {{matchLabels: {{app: victim}}}}, namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {project}}}}}}}], ports: [{{protocol: TCP, port: 80}}]}}
  - {{name: drop-rest, action: Drop}}
"
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--docker",
        "--docker-host",
        &podman.docker_host(),
        "--drift-check-seconds",
        "1",
    ]));
    agent.wait_generation(1);
    let (web, victim) = (podman.addr("web"), podman.addr("victim"));
    let url = format!("http://{web}/");
    // The inventory holds the containers once the victim is let in.
    wait_until("the victim reaches the web server", ALLOW_WAIT, || {
        podman.curl("victim", &url, Duration::from_secs(2)) == Ok(200)
    });
    let spoofer = podman.netns("spoofer");
    // Positive control: the spoofer reaches the victim's own server.
    let own = podman.addr("spoofer").to_string();
    let curl = |source: &str, url: &str| {
        spoofer
            .sh(&format!(
                "curl -s -o /dev/null -w '%{{http_code}}' --interface {source} \
                 --connect-timeout 2 --max-time 4 '{url}'"
            ))
            .stdout
            .trim()
            .to_string()
    };
    assert_eq!(curl(&own, &format!("http://{victim}/")), "200");
    spoofer.ok(&format!("ip addr add {victim}/32 dev eth0"));
    let web_mac = podman
        .exec("web", &["cat", "/sys/class/net/eth0/address"], ALLOW_WAIT)
        .stdout
        .trim()
        .to_string();
    scapy(
        &spoofer,
        python,
        CLAIM,
        &[&victim.to_string(), &web.to_string(), &web_mac, "3"],
    );
    assert_eq!(
        curl(&victim.to_string(), &url),
        "000",
        "the spoofer reached the victim's port as the victim"
    );
    let spoofer_id = format!("{project}/{}", podman.name("spoofer"));
    expect_dropped(&lab, &spoofer_id, "neighbour", 3);
    let report = report(&lab);
    for name in ["web", "victim", "spoofer"] {
        let id = format!("{project}/{}", podman.name(name));
        assert!(
            report
                .guarded
                .iter()
                .any(|g| g.endpoint == id && g.interface.contains(" port ")),
            "{id} not guarded on a bridge port: {report:#?}"
        );
    }
    // Positive control: the victim still gets in.
    assert_eq!(podman.curl("victim", &url, ALLOW_WAIT), Ok(200));
    no_drift(&agent);
}
