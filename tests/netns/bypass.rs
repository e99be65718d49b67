//! No IPv6 bypass, on the wire: every policy shape that applies to IPv4
//! gives the same outcome over IPv6 in a dual-stack lab, neighbour discovery
//! survives a drop-everything policy, and extension headers, IPv4 options or
//! a fragmented first packet cannot hide the transport from the rules.
//!
//! The shapes: Node ingress Drop/Reject by TCP and UDP port, ipBlock allow
//! with `except` (IPv4 and IPv6 CIDRs in one policy), ICMP/ICMPv6 by type
//! and code, a rule with no peers and no ports, Pod-to-Pod through the Node
//! (FORWARD) by Pod and Namespace selectors, Node egress, an L7 rule and an
//! FQDN selector; after each, the IPv6 owned chains and sets mirror the IPv4
//! ones. Also: ARP/ND with flushed neighbour caches and MLD under a
//! drop-everything-but-one-port policy; Destination Options, Hop-by-Hop and
//! IPv4 header options on a real TCP connection; a 3000-byte UDP datagram
//! over a 1500-byte MTU to a denied port; addresses the Node gains later;
//! stray FIN/NULL/XMAS segments to a closed port.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::harness::probe::{classify_connect, echo_roundtrip};
use crate::harness::{
    FirewallState, Lab, PingOutcome, Service, TcpOutcome, UdpOutcome, ALLOW_WAIT, DENY_WAIT,
};

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// An address family of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

/// Where a probe goes.
#[derive(Clone, Copy, Debug)]
enum Host {
    /// The Node's address on the link to this peer.
    NodeVia(&'static str),
    /// A peer.
    Peer(&'static str),
}

/// What a probe does and what it must see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Tcp(u16, TcpOutcome),
    Udp(u16, UdpOutcome),
    Ping(PingOutcome),
    /// `curl http://<to>:<port><path>`: the status, or curl's exit code.
    Http(u16, &'static str, Result<u16, i32>),
}

/// One line of a case's table: from `from` to `to`, over both families.
#[derive(Clone, Copy, Debug)]
struct Probe {
    from: &'static str,
    to: Host,
    check: Check,
}

fn probe(from: &'static str, to: Host, check: Check) -> Probe {
    Probe { from, to, check }
}

/// One policy shape: the YAML documents in force and the expected outcomes.
struct Case {
    name: &'static str,
    yaml: String,
    probes: Vec<Probe>,
}

fn address(lab: &Lab, host: Host, family: Family) -> IpAddr {
    match (host, family) {
        (Host::NodeVia(role), Family::V4) => lab.node_addr(role).into(),
        (Host::NodeVia(role), Family::V6) => lab.node_addr6(role).into(),
        (Host::Peer(role), Family::V4) => lab.addr(role).into(),
        (Host::Peer(role), Family::V6) => lab.addr6(role).into(),
    }
}

/// Runs `probe` over `family` and returns what it saw, in the probe's own
/// terms.
fn run(lab: &Lab, probe: &Probe, family: Family) -> Check {
    let to = address(lab, probe.to, family);
    let wait = |denied: bool| if denied { DENY_WAIT } else { ALLOW_WAIT };
    match probe.check {
        Check::Tcp(port, want) => Check::Tcp(
            port,
            lab.tcp(
                probe.from,
                sock(to, port),
                wait(want == TcpOutcome::TimedOut),
            ),
        ),
        Check::Udp(port, want) => Check::Udp(
            port,
            lab.udp(
                probe.from,
                sock(to, port),
                wait(want == UdpOutcome::TimedOut),
            ),
        ),
        Check::Ping(want) => {
            Check::Ping(lab.ping(probe.from, to, wait(want == PingOutcome::NoReply)))
        }
        Check::Http(port, path, _) => {
            let url = format!("http://{}{path}", sock(to, port));
            Check::Http(port, path, lab.curl(probe.from, &url, ALLOW_WAIT))
        }
    }
}

/// The `/prefix` network of `addr` (IPv6), as a CIDR string.
fn net6(addr: Ipv6Addr, prefix: u32) -> String {
    let bits = u128::from(addr) & (u128::MAX << (128 - prefix));
    format!("{}/{prefix}", Ipv6Addr::from(bits))
}

fn node_policy(name: &str, rules: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: {name}}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}}}]
{rules}"
    )
}

fn pod_doc(name: &str, ns: &str, app: &str, ips: [IpAddr; 2]) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {app}}}}}
spec:
  nodeName: node
  containers: [{{name: main, ports: [{{name: http, containerPort: 8080, protocol: TCP}}]}}]
status:
  podIP: \"{}\"
  podIPs: [{{ip: \"{}\"}}, {{ip: \"{}\"}}]
",
        ips[0], ips[0], ips[1]
    )
}

fn dual(lab: &Lab, role: &str) -> [IpAddr; 2] {
    [lab.addr(role).into(), lab.addr6(role).into()]
}

/// The policy shapes and their expected outcomes, identical for both
/// families. Peers: client1..client4 on links 1..4, server on link 5.
fn cases(lab: &Lab) -> Vec<Case> {
    use Check::{Http, Ping, Tcp, Udp};
    use Host::{NodeVia, Peer};
    let i = lab.index();
    let v6_base = lab.addr6("client1");
    let node = NodeVia("client1");
    vec![
        Case {
            name: "node ingress Drop/Reject by TCP and UDP port",
            yaml: node_policy(
                "ports",
                "  ingress:
  - {name: drop-tcp, action: Drop, ports: [{protocol: TCP, port: 8081}]}
  - {name: reject-tcp, action: Reject, ports: [{protocol: TCP, port: 8082}]}
  - {name: drop-udp, action: Drop, ports: [{protocol: UDP, port: 5301}]}
  - {name: reject-udp, action: Reject, ports: [{protocol: UDP, port: 5302}]}
",
            ),
            probes: vec![
                probe("client1", node, Tcp(8080, TcpOutcome::Connected)),
                probe("client1", node, Tcp(8081, TcpOutcome::TimedOut)),
                probe("client1", node, Tcp(8082, TcpOutcome::Refused)),
                probe("client1", node, Udp(5301, UdpOutcome::TimedOut)),
                probe("client1", node, Udp(5302, UdpOutcome::Unreachable)),
                probe("client1", node, Udp(5303, UdpOutcome::Answered)),
            ],
        },
        Case {
            // 10.I.0.0/22 and fd00:I::/46 both hold links 0..3; link 2
            // (client2) is carved out of each; client4 (link 4) lies
            // outside both.
            name: "ipBlock allow with except, IPv4 and IPv6 CIDRs in one policy",
            yaml: node_policy(
                "cidrs",
                &format!(
                    "  ingress:
  - name: allow-range
    action: Allow
    from:
    - ipBlock: {{cidr: 10.{i}.0.0/22, except: [10.{i}.2.0/24]}}
    - ipBlock: {{cidr: '{}', except: ['{}']}}
    ports: [{{protocol: TCP, port: 8080}}]
  - {{name: drop-rest, action: Drop, ports: [{{protocol: TCP, port: 8080}}]}}
",
                    net6(v6_base, 46),
                    net6(lab.addr6("client2"), 64)
                ),
            ),
            probes: vec![
                probe("client1", NodeVia("client1"), Tcp(8080, TcpOutcome::Connected)),
                probe("client2", NodeVia("client2"), Tcp(8080, TcpOutcome::TimedOut)),
                probe("client3", NodeVia("client3"), Tcp(8080, TcpOutcome::Connected)),
                probe("client4", NodeVia("client4"), Tcp(8080, TcpOutcome::TimedOut)),
                // Links 2 and 4 work: a port under no rule answers.
                probe("client2", NodeVia("client2"), Tcp(8081, TcpOutcome::Connected)),
                probe("client4", NodeVia("client4"), Tcp(8081, TcpOutcome::Connected)),
            ],
        },
        Case {
            // Types are the protocol's own numbers (as in Antrea): 8 is the
            // ICMP echo request, 128 the ICMPv6 one.
            name: "ICMP and ICMPv6 echo request by type/code",
            yaml: node_policy(
                "no-ping",
                "  ingress:
  - name: drop-echo-request
    action: Drop
    protocols: [{icmp: {icmpType: 8, icmpCode: 0}}, {icmp: {icmpType: 128, icmpCode: 0}}]
",
            ),
            probes: vec![
                probe("client1", node, Ping(PingOutcome::NoReply)),
                probe("client1", node, Tcp(8080, TcpOutcome::Connected)),
                // The Node's own pings: the replies (0 / 129) come back.
                probe("node", Peer("client1"), Ping(PingOutcome::Reply)),
            ],
        },
        Case {
            name: "a rule with no peers and no ports",
            yaml: node_policy(
                "drop-all",
                "  ingress:\n  - {name: drop-everything, action: Drop}\n",
            ),
            probes: vec![
                probe("client1", node, Tcp(8080, TcpOutcome::TimedOut)),
                probe("client1", node, Udp(5303, UdpOutcome::TimedOut)),
                probe("client1", node, Ping(PingOutcome::NoReply)),
                // Egress is not restricted; replies are accepted.
                probe("node", Peer("client1"), Tcp(8080, TcpOutcome::Connected)),
                probe("node", Peer("client1"), Ping(PingOutcome::Reply)),
            ],
        },
        Case {
            name: "Pod to Pod through the Node (FORWARD) by Pod and Namespace selectors",
            yaml: [
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: dev, labels: {env: dev}}\n"
                    .to_string(),
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod, labels: {env: prod}}\n"
                    .to_string(),
                pod_doc("client1", "dev", "client", dual(lab, "client1")),
                pod_doc("client2", "prod", "client", dual(lab, "client2")),
                pod_doc("web", "prod", "web", dual(lab, "server")),
                "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-ingress}
spec:
  priority: 5
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: allow-prod-clients
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}, namespaceSelector: {matchLabels: {env: prod}}}]
    ports: [{protocol: TCP, port: http}]
  - {name: drop-rest, action: Drop}
"
                .to_string(),
            ]
            .join("---\n"),
            probes: vec![
                probe("client2", Peer("server"), Tcp(8080, TcpOutcome::Connected)),
                probe("client1", Peer("server"), Tcp(8080, TcpOutcome::TimedOut)),
                probe("client2", Peer("server"), Tcp(9090, TcpOutcome::TimedOut)),
                probe("client2", Peer("server"), Udp(5303, UdpOutcome::TimedOut)),
                probe("server", Peer("client1"), Tcp(8080, TcpOutcome::Connected)),
            ],
        },
        Case {
            name: "Node egress to ipBlocks, Drop and Reject",
            yaml: node_policy(
                "egress",
                &format!(
                    "  egress:
  - name: drop-server-http
    action: Drop
    to: [{{ipBlock: {{cidr: {v4}}}}}, {{ipBlock: {{cidr: '{v6}'}}}}]
    ports: [{{protocol: TCP, port: 8080}}]
  - name: reject-server-9090
    action: Reject
    to: [{{ipBlock: {{cidr: {v4}}}}}, {{ipBlock: {{cidr: '{v6}'}}}}]
    ports: [{{protocol: TCP, port: 9090}}, {{protocol: UDP, port: 5303}}]
",
                    v4 = lab.subnet("server"),
                    v6 = net6(lab.addr6("server"), 64),
                ),
            ),
            probes: vec![
                probe("node", Peer("server"), Tcp(8080, TcpOutcome::TimedOut)),
                probe("node", Peer("server"), Tcp(9090, TcpOutcome::Refused)),
                probe("node", Peer("server"), Udp(5303, UdpOutcome::Unreachable)),
                probe("node", Peer("client1"), Tcp(8080, TcpOutcome::Connected)),
                probe("node", Peer("client1"), Tcp(9090, TcpOutcome::Connected)),
            ],
        },
        Case {
            // An L7 rule and an FQDN selector: the L7 chain, the DNS reply
            // rules and the learned sets must exist for IPv6 as for IPv4.
            name: "L7 HTTP rule on the Node, FQDN egress selector",
            yaml: node_policy(
                "l7-fqdn",
                "  ingress:
  - name: api-only
    action: Allow
    ports: [{protocol: TCP, port: 8083}]
    l7Protocols: [{http: {method: GET, path: /api/*}}]
  egress:
  - {name: no-example, action: Drop, to: [{fqdn: '*.example.test'}]}
",
            ),
            probes: vec![
                probe("client1", node, Http(8083, "/api/x", Ok(200))),
                probe("client1", node, Http(8083, "/admin", Ok(403))),
                probe("client1", node, Tcp(8080, TcpOutcome::Connected)),
            ],
        },
    ]
}

/// The IPv6 half of tollgate's kernel state mirrors the IPv4 half: the
/// same owned chains with the same jumps from the built-in chains, the
/// same rules once family spellings are aligned (ICMPv6 neighbour and
/// listener discovery and the family-specific `u32` payload tests aside), a `-v6`
/// set for every `-v4` set, and as many enforced IPv6 endpoints as IPv4
/// ones (every endpoint in this lab is dual-stack). The filter table: the
/// raw table's anti-spoofing chains differ by design (IPv6 neighbour
/// discovery and link-local sources; `tests/netns/spoof.rs` covers both).
fn assert_families_mirror(state: &FirewallState, case: &str) {
    let filter = |dump: &str| -> String {
        dump.lines()
            .skip_while(|l| *l != "*filter")
            .take_while(|l| *l != "COMMIT")
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let owned = |dump: &str| -> Vec<String> {
        filter(dump)
            .lines()
            .filter(|l| l.starts_with(":TOLLGATE-") || l.contains("-j TOLLGATE-"))
            .map(|l| {
                l.replace("-v6 src,dst,dst", "-v4 src,dst,dst")
                    // The L7 chain's "has payload" length: IPv6's header is 20 bytes longer.
                    .replace("--length 101:65535", "--length 81:65535")
            })
            .collect()
    };
    assert!(
        !owned(&state.iptables).is_empty(),
        "{case}: no owned chains\n{state}"
    );
    assert_eq!(
        owned(&state.iptables),
        owned(&state.ip6tables),
        "{case}: owned chains or jumps differ\n{state}"
    );
    let comparable = |dump: &str, v6: bool| -> Vec<String> {
        filter(dump)
            .lines()
            .filter(|l| l.starts_with("-A TOLLGATE-") && !l.starts_with("-A TOLLGATE-L7"))
            .filter(|l| {
                !(v6 && (l.contains("-p ipv6-icmp -m icmp6 --icmpv6-type 13")
                    || l.contains("-p ipv6-icmp -m icmp6 --icmpv6-type 143")))
            })
            .map(|l| {
                l.replace("tollgate-endpoints-v6", "tollgate-endpoints-v4")
                    .replace("-v6 src,dst,dst", "-v4 src,dst,dst")
                    .replace("icmp6-adm-prohibited", "icmp-admin-prohibited")
                    .replace("-p ipv6-icmp ", "-p icmp ")
            })
            .collect()
    };
    assert_eq!(
        comparable(&state.iptables, false),
        comparable(&state.ip6tables, true),
        "{case}: IPv6 rules do not mirror IPv4\n{state}"
    );
    let l7_rules = |dump: &str| {
        dump.lines()
            .filter(|l| l.starts_with("-A TOLLGATE-L7 "))
            .count()
    };
    assert_eq!(
        l7_rules(&state.iptables),
        l7_rules(&state.ip6tables),
        "{case}: L7 chains differ in length\n{state}"
    );
    let sets = state.set_names();
    for v4 in sets.iter().filter_map(|s| s.strip_suffix("-v4")) {
        assert!(
            sets.contains(&format!("{v4}-v6").as_str()),
            "{case}: {v4}-v4 has no IPv6 twin\n{state}"
        );
    }
    let members = |set: &str| {
        let prefix = format!("add {set} ");
        state
            .ipsets
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .count()
    };
    assert_eq!(
        members("tollgate-endpoints-v4"),
        members("tollgate-endpoints-v6"),
        "{case}: enforced endpoints differ per family\n{state}"
    );
}

#[test]
fn ipv6_outcomes_equal_ipv4() {
    let Some(lab) = Lab::builder("ipv6_outcomes_equal_ipv4")
        .peer("client1")
        .peer("client2")
        .peer("client3")
        .peer("client4")
        .peer("server")
        .ipv6()
        .require(&["ping", "curl"])
        .build()
    else {
        return;
    };
    for port in [8080, 8081, 8082] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    lab.serve_tcp("node", 8083, Service::Http);
    for port in [5301, 5302, 5303] {
        lab.serve_udp_echo("node", port);
    }
    for port in [8080, 9090] {
        lab.serve_tcp("server", port, Service::Echo);
        lab.serve_tcp("client1", port, Service::Echo);
    }
    lab.serve_udp_echo("server", 5303);
    let cases = cases(&lab);
    let mut agent = None;
    for (n, case) in cases.iter().enumerate() {
        lab.write_policy("case.yaml", &case.yaml);
        let generation = u64::try_from(n + 1).expect("few cases");
        agent
            .get_or_insert_with(|| lab.start_agent(lab.agent_options()))
            .wait_generation(generation);
        assert_families_mirror(&lab.firewall_state("node"), case.name);
        let mut table = Vec::new();
        for p in &case.probes {
            let got: Vec<Check> = FAMILIES.iter().map(|f| run(&lab, p, *f)).collect();
            table.push((p, got));
        }
        let report: String = table
            .iter()
            .map(|(p, got)| {
                format!(
                    "  {} -> {:?} want {:?}: v4 {:?}, v6 {:?}\n",
                    p.from, p.to, p.check, got[0], got[1]
                )
            })
            .collect();
        eprintln!("case {:?}:\n{report}", case.name);
        for (p, got) in &table {
            assert_eq!(
                got[0], got[1],
                "{}: IPv6 differs from IPv4\n{report}",
                case.name
            );
            assert_eq!(
                got[0], p.check,
                "{}: unexpected outcome\n{report}",
                case.name
            );
        }
    }
}

/// Neighbour entries of `role` for `addr` that are usable (not FAILED or
/// INCOMPLETE).
fn neighbour_state(lab: &Lab, role: &str, addr: IpAddr) -> String {
    let family = if addr.is_ipv4() { "-4" } else { "-6" };
    let out = lab
        .ns(role)
        .run(&["ip", family, "neigh", "show", &addr.to_string()]);
    out.stdout.trim().to_string()
}

fn flush_neighbours(lab: &Lab) {
    for role in ["node", "client"] {
        for family in ["-4", "-6"] {
            lab.ns(role).run(&["ip", family, "neigh", "flush", "all"]);
        }
    }
}

/// Node policies that drop everything but one port each way: ARP and
/// neighbour discovery from empty caches, both directions, and MLD (a
/// general query from the link answered with the Node's own reports) keep
/// working.
///
/// Mutation: leave out the listener-discovery exception (link-local MLD)
/// of the ICMP drops in `src/datapath/plan.rs` and the Node's reports
/// never arrive (its query is dropped as untracked ICMPv6). Before this
/// test counted only the Node's reports, it passed on the client's
/// answers to its own (looped-back) query.
#[test]
fn neighbour_discovery_survives_drop_all() {
    let Some(lab) = Lab::builder("neighbour_discovery_survives_drop_all")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.serve_tcp("node", 8081, Service::Echo);
    lab.serve_tcp("client", 9090, Service::Echo);
    lab.serve_tcp("client", 9091, Service::Echo);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "only-one-port",
            "  ingress:
  - {name: allow-8080, action: Allow, ports: [{protocol: TCP, port: 8080}]}
  - {name: drop-everything-else, action: Drop}
  egress:
  - {name: allow-9090, action: Allow, ports: [{protocol: TCP, port: 9090}]}
  - {name: drop-every-egress, action: Drop}
",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let pairs: [(IpAddr, IpAddr); 2] = [
        (lab.node_addr("client").into(), lab.addr("client").into()),
        (lab.node_addr6("client").into(), lab.addr6("client").into()),
    ];
    for (node, client) in pairs {
        // Inbound: the client resolves the Node (NS/NA, ARP) afresh.
        flush_neighbours(&lab);
        assert_eq!(neighbour_state(&lab, "client", node), "", "not flushed");
        lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);
        lab.assert_tcp("client", sock(node, 8081), TcpOutcome::TimedOut);
        // Outbound: the Node resolves the client afresh.
        flush_neighbours(&lab);
        assert_eq!(neighbour_state(&lab, "node", client), "", "not flushed");
        lab.assert_tcp("node", sock(client, 9090), TcpOutcome::Connected);
        lab.assert_tcp("node", sock(client, 9091), TcpOutcome::TimedOut);
        let learned = neighbour_state(&lab, "node", client);
        assert!(
            learned.contains("lladdr") && !learned.contains("FAILED"),
            "{client}: {learned}"
        );
    }
    // Multicast Listener Discovery keeps the Node's solicited-node groups
    // (where neighbour solicitations are sent) known to snooping switches:
    // a general query from the link is answered with reports. Only the
    // Node's reports count (from its link-local address: the client must
    // not count its own), as they arrive (raw PREROUTING: the client's
    // stack delivers reports only for groups it joined itself).
    let node_link_local = lab
        .node()
        .ok("ip -6 -o addr show dev n-client scope link | awk '{print $4}' | cut -d/ -f1");
    let node_link_local = node_link_local.trim();
    assert!(node_link_local.starts_with("fe80:"), "{node_link_local:?}");
    for t in MLD_REPORTS {
        lab.ns("client").run(&[
            "ip6tables",
            "-w",
            "-t",
            "raw",
            "-A",
            "PREROUTING",
            "-s",
            node_link_local,
            "-p",
            "ipv6-icmp",
            "-m",
            "icmp6",
            "--icmpv6-type",
            t,
        ]);
    }
    let reports = |lab: &Lab| -> u64 {
        let out = lab
            .ns("client")
            .run(&["ip6tables", "-w", "-t", "raw", "-S", "PREROUTING", "-v"]);
        out.stdout
            .lines()
            .filter(|l| l.contains("--icmpv6-type"))
            .filter_map(|l| l.split_once(" -c "))
            .filter_map(|(_, c)| c.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    };
    let before = reports(&lab);
    lab.ns("client").run(&["python3", "-c", MLD_QUERY]);
    let answered =
        crate::harness::poll_until(ALLOW_WAIT, || (reports(&lab) > before).then_some(()));
    assert!(answered.is_some(), "the Node did not answer an MLD query");
}

/// ICMPv6 MLDv1 and MLDv2 listener reports.
const MLD_REPORTS: [&str; 2] = ["131", "143"];

/// Sends one MLDv1 general query (maximum response delay 500 ms) to
/// ff02::1 on eth0, hop limit 1, with a Router Alert option, and not to
/// the sender itself (multicast loop off: it would answer its own query).
const MLD_QUERY: &str = "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_HOPOPTS, bytes([0, 0, 5, 2, 0, 0, 1, 0]))
query = bytes([130, 0, 0, 0, 0x01, 0xf4, 0, 0]) + bytes(16)
s.sendto(query, ('ff02::1', 0, 0, socket.if_nametoindex('eth0')))
";

/// The `IPV6_HOPOPTS` / `IPV6_DSTOPTS` option values: an 8-byte header
/// holding one PadN option (the kernel fills in the next-header byte).
const PADN_OPTIONS: &[u8] = &[0, 0, 1, 4, 0, 0, 0, 0];
/// `IP_OPTIONS`: three No-Operation options and End of Options (IHL 6).
const IPV4_NOP_OPTIONS: &[u8] = &[1, 1, 1, 0];

/// A socket option: level, name, value.
type SockOpt = (libc::c_int, libc::c_int, &'static [u8]);

/// Connects from inside `lab`'s `role` namespace with the given sticky
/// options (extension headers, IPv4 options) on every segment.
fn connect_with_options(
    lab: &Lab,
    role: &str,
    to: SocketAddr,
    options: &'static [SockOpt],
    timeout: Duration,
) -> Result<TcpStream, std::io::Error> {
    lab.ns(role).enter(move || {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(to),
            socket2::Type::STREAM,
            None,
        )?;
        for (level, name, value) in options {
            // SAFETY: a valid socket and a buffer that outlives the call.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    *level,
                    *name,
                    value.as_ptr().cast(),
                    value.len() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        socket.connect_timeout(&to.into(), timeout)?;
        Ok(socket.into())
    })
}

fn classify(result: &Result<TcpStream, std::io::Error>) -> TcpOutcome {
    match result {
        Ok(_) => TcpOutcome::Connected,
        Err(e) => classify_connect(e),
    }
}

/// Accounting rules in the client's own namespace (no target: they only
/// count) proving the segments really left with the headers: IPv6
/// Destination Options, IPv6 Hop-by-Hop, IPv4 header with options. Tool,
/// match, and how `-S` prints the match.
const ACCOUNTING: [(&str, &str, &str); 3] = [
    (
        "ip6tables",
        "-m ipv6header --soft --header ipv6-opts",
        "--header ipv6-opts",
    ),
    (
        "ip6tables",
        "-m ipv6header --soft --header hop-by-hop",
        "--header hop-by-hop",
    ),
    ("iptables", "-m u32 --u32 0>>24&0xf=6", "0x0>>0x18&0xf=0x6"),
];

/// Packets counted by each [`ACCOUNTING`] rule so far.
fn sent_with_options(lab: &Lab) -> [u64; 3] {
    ACCOUNTING.map(|(tool, _, shown)| {
        let out = lab.ns("client").run(&[tool, "-w", "-S", "OUTPUT", "-v"]);
        out.stdout
            .lines()
            .find(|l| l.contains(shown))
            .and_then(|l| l.split_once(" -c "))
            .and_then(|(_, counters)| counters.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no accounting rule {shown}: {}", out.stdout))
    })
}

#[test]
fn extension_headers_cannot_hide_the_transport() {
    let Some(lab) = Lab::builder("extension_headers_cannot_hide_the_transport")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in [8080, 8081, 8082] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    for (tool, matcher, _) in ACCOUNTING {
        let mut argv = vec![tool, "-w", "-A", "OUTPUT", "-p", "tcp"];
        argv.extend(matcher.split_whitespace());
        lab.ns("client").run(&argv);
    }
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "ports",
            "  ingress:
  - {name: allow-8080, action: Allow, ports: [{protocol: TCP, port: 8080}]}
  - {name: reject-8082, action: Reject, ports: [{protocol: TCP, port: 8082}]}
  - {name: drop-everything-else, action: Drop}
",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let (v4, v6) = (
        IpAddr::from(lab.node_addr("client")),
        IpAddr::from(lab.node_addr6("client")),
    );
    const DST: SockOpt = (libc::IPPROTO_IPV6, libc::IPV6_DSTOPTS, PADN_OPTIONS);
    const HOP: SockOpt = (libc::IPPROTO_IPV6, libc::IPV6_HOPOPTS, PADN_OPTIONS);
    const IPV4: SockOpt = (libc::IPPROTO_IP, libc::IP_OPTIONS, IPV4_NOP_OPTIONS);
    // Name, destination, options, which accounting rules must count.
    let chains: [(&str, IpAddr, &'static [SockOpt], [bool; 3]); 4] = [
        ("Destination Options", v6, &[DST], [true, false, false]),
        ("Hop-by-Hop Options", v6, &[HOP], [false, true, false]),
        (
            "Hop-by-Hop + Destination Options",
            v6,
            &[HOP, DST],
            [true, true, false],
        ),
        ("IPv4 header options", v4, &[IPV4], [false, false, true]),
    ];
    for (name, node, options, counted) in chains {
        let before = sent_with_options(&lab);
        let mut allowed =
            connect_with_options(&lab, "client", sock(node, 8080), options, ALLOW_WAIT);
        assert_eq!(classify(&allowed), TcpOutcome::Connected, "{name} to 8080");
        let stream = allowed.as_mut().expect("connected");
        assert!(
            echo_roundtrip(stream, b"payload behind extension headers", ALLOW_WAIT).expect("echo"),
            "{name}: echo"
        );
        let denied = connect_with_options(&lab, "client", sock(node, 8081), options, DENY_WAIT);
        assert_eq!(classify(&denied), TcpOutcome::TimedOut, "{name} to 8081");
        let rejected = connect_with_options(&lab, "client", sock(node, 8082), options, ALLOW_WAIT);
        assert_eq!(classify(&rejected), TcpOutcome::Refused, "{name} to 8082");
        let after = sent_with_options(&lab);
        let grew = [0, 1, 2].map(|i| after[i] > before[i]);
        assert_eq!(
            grew, counted,
            "{name}: segments did not carry the headers ({before:?} -> {after:?})"
        );
    }
}

/// Fragments the client created so far (`/proc/net/snmp` FragCreates,
/// `/proc/net/snmp6` Ip6FragCreates).
fn fragments_created(lab: &Lab) -> (u64, u64) {
    let ns = lab.ns("client");
    let snmp = ns.run(&["cat", "/proc/net/snmp"]).stdout;
    let mut ip = snmp.lines().filter(|l| l.starts_with("Ip: "));
    let names: Vec<&str> = ip.next().expect("Ip header").split_whitespace().collect();
    let values: Vec<&str> = ip.next().expect("Ip values").split_whitespace().collect();
    let v4 = names
        .iter()
        .position(|n| *n == "FragCreates")
        .and_then(|i| values[i].parse().ok())
        .expect("FragCreates");
    let snmp6 = ns.run(&["cat", "/proc/net/snmp6"]).stdout;
    let v6 = snmp6
        .lines()
        .find_map(|l| l.strip_prefix("Ip6FragCreates"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Ip6FragCreates");
    (v4, v6)
}

#[test]
fn fragmented_first_packet_cannot_bypass() {
    let Some(lab) = Lab::builder("fragmented_first_packet_cannot_bypass")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    let mtu = lab.ns("client").run(&["cat", "/sys/class/net/eth0/mtu"]);
    assert_eq!(mtu.stdout.trim(), "1500");
    // Receivers in the Node that report exactly what arrived.
    let receivers: Vec<(u16, UdpSocket)> = [5301u16, 5303]
        .into_iter()
        .map(|port| {
            let socket = lab
                .node()
                .enter(move || UdpSocket::bind(sock(Ipv6Addr::UNSPECIFIED, port)))
                .expect("bind receiver");
            (port, socket)
        })
        .collect();
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "udp",
            "  ingress:\n  - {name: drop-5301, action: Drop, ports: [{protocol: UDP, port: 5301}]}\n",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let datagram: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    for (family, node) in [
        (Family::V4, IpAddr::from(lab.node_addr("client"))),
        (Family::V6, IpAddr::from(lab.node_addr6("client"))),
    ] {
        for (port, receiver) in &receivers {
            let before = fragments_created(&lab);
            let to = sock(node, *port);
            let payload = datagram.clone();
            let sent = lab.ns("client").enter(move || {
                let local = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                let socket = UdpSocket::bind(local).expect("bind sender");
                socket.send_to(&payload, to)
            });
            assert_eq!(sent.expect("send"), 3000);
            let after = fragments_created(&lab);
            let created = match family {
                Family::V4 => after.0 - before.0,
                Family::V6 => after.1 - before.1,
            };
            assert!(
                created >= 3,
                "{family:?}: datagram not fragmented ({created})"
            );
            let denied = *port == 5301;
            receiver
                .set_read_timeout(Some(if denied { DENY_WAIT } else { ALLOW_WAIT }))
                .expect("timeout");
            let mut buf = vec![0u8; 4096];
            let got = receiver.recv_from(&mut buf).map(|(n, _)| buf[..n].to_vec());
            match got {
                Ok(bytes) => {
                    assert!(
                        !denied,
                        "{family:?}: fragmented datagram reached denied port {port}"
                    );
                    assert_eq!(bytes, datagram, "{family:?}: reassembled datagram");
                }
                Err(e) => assert!(denied, "{family:?}: allowed datagram to {port} lost: {e}"),
            }
        }
    }
}

#[test]
fn address_added_after_start_is_enforced() {
    let Some(lab) = Lab::builder("address_added_after_start_is_enforced")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.serve_tcp("node", 8081, Service::Echo);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "drop-8081",
            "  ingress:\n  - {name: drop-8081, action: Drop, ports: [{protocol: TCP, port: 8081}]}\n",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    // Addresses the Node gains while the agent runs (a SLAAC or privacy
    // address, a secondary address): policy applied to the Node covers
    // them at once, without a reload.
    let i = lab.index();
    let v4 = format!("10.{i}.1.99");
    let v6 = Ipv6Addr::from(u128::from(lab.node_addr6("client")) | 0x99);
    lab.node()
        .run(&["ip", "addr", "add", &format!("{v4}/24"), "dev", "n-client"]);
    lab.node().run(&[
        "ip",
        "addr",
        "add",
        &format!("{v6}/64"),
        "dev",
        "n-client",
        "nodad",
    ]);
    let v4: IpAddr = v4.parse().expect("address");
    for ip in [v4, IpAddr::from(v6)] {
        // The new address is reachable (8080 is under no rule)...
        lab.assert_tcp("client", sock(ip, 8080), TcpOutcome::Connected);
        // ...and the Node's policy applies to it.
        lab.assert_tcp("client", sock(ip, 8081), TcpOutcome::TimedOut);
    }
}

/// Sends one TCP segment with `flags` (no connection) from a raw socket and
/// prints `reset` if the destination port answers with a RST within 2 s,
/// else `silent`. Arguments: family (4|6), address, port, flags.
const STRAY_SEGMENT: &str = r#"import socket, struct, sys, time, select
family, dst, port, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 0)
v6 = family == "6"
af = socket.AF_INET6 if v6 else socket.AF_INET
s = socket.socket(af, socket.SOCK_RAW, socket.IPPROTO_TCP)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 7, 16)  # IPV6_CHECKSUM: kernel fills the TCP checksum
s.connect((dst, 0))
src = s.getsockname()[0]
sport = 40000 + int(time.time() * 1000) % 20000
hdr = struct.pack("!HHIIBBHHH", sport, port, 12345, 0, 5 << 4, flags, 1024, 0, 0)
if not v6:
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(hdr))
    data = pseudo + hdr
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    hdr = hdr[:16] + struct.pack("!H", ~total & 0xFFFF) + hdr[18:]
s.send(hdr)
deadline = time.time() + 2
while time.time() < deadline:
    r, _, _ = select.select([s], [], [], deadline - time.time())
    if not r:
        break
    pkt = s.recv(2048)
    tcp = pkt if v6 else pkt[(pkt[0] & 15) * 4:]
    sp, dp = struct.unpack("!HH", tcp[:4])
    if sp == port and dp == sport and tcp[13] & 4:
        print("reset"); sys.exit(0)
print("silent")
"#;

/// A stray TCP segment (FIN, NULL, XMAS: no connection, so conntrack calls
/// it INVALID) to a closed port; what came back.
fn stray_segment(lab: &Lab, to: IpAddr, port: u16, flags: u8) -> String {
    let family = if to.is_ipv4() { "4" } else { "6" };
    let out = lab.ns("client").run(&[
        "python3",
        "-c",
        STRAY_SEGMENT,
        family,
        &to.to_string(),
        &port.to_string(),
        &format!("{flags:#x}"),
    ]);
    out.stdout.trim().to_string()
}

#[test]
fn stray_segments_cannot_probe_a_closed_node() {
    let Some(lab) = Lab::builder("stray_segments_cannot_probe_a_closed_node")
        .peer("client")
        .ipv6()
        .require(&["python3"])
        .build()
    else {
        return;
    };
    let targets = [
        IpAddr::from(lab.node_addr("client")),
        IpAddr::from(lab.node_addr6("client")),
    ];
    // FIN, NULL, FIN+PSH+URG (XMAS).
    let probes: [u8; 3] = [0x01, 0x00, 0x29];
    // Without tollgate a closed port answers each with a reset: the probe
    // tells open from closed ports.
    for to in targets {
        for flags in probes {
            assert_eq!(
                stray_segment(&lab, to, 9999, flags),
                "reset",
                "{to} {flags:#x}"
            );
        }
    }
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "drop-all",
            "  ingress:\n  - {name: drop-everything, action: Drop}\n",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for to in targets {
        for flags in probes {
            assert_eq!(
                stray_segment(&lab, to, 9999, flags),
                "silent",
                "{to} {flags:#x}"
            );
        }
    }
}
