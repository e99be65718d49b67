//! Antrea fields on the wire (issue 15): `sourcePort`/`sourceEndPort` match
//! the client's port, and a node ClusterGroup (`nodeSelector`) works as the
//! appliedTo and as the peer of a node policy. IPv4 and IPv6.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::harness::probe::classify_connect;
use crate::harness::{Lab, Netns, Service, TcpOutcome, ALLOW_WAIT, DENY_WAIT};

/// Connects from `ns`, bound to the client port `src_port`, to `to`.
fn connect_from(ns: &Netns, src_port: u16, to: SocketAddr, timeout: Duration) -> TcpOutcome {
    ns.enter(move || {
        let domain = if to.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP)).expect("socket");
        socket.set_reuse_address(true).expect("SO_REUSEADDR");
        let local = match to.ip() {
            IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], src_port)),
            IpAddr::V6(_) => SocketAddr::from(([0u16; 8], src_port)),
        };
        socket.bind(&local.into()).expect("bind the client port");
        match socket.connect_timeout(&to.into(), timeout) {
            Ok(()) => TcpOutcome::Connected,
            Err(e) => classify_connect(&e),
        }
    })
}

#[test]
fn source_port_range_is_matched_on_the_wire() {
    let Some(lab) = Lab::builder("source_port_range_is_matched_on_the_wire")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in [8080, 8081] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    // Antrea's e2e testACNPSourcePort shape: drop a client port range, on
    // every port, and on 8080 only for a second range.
    lab.write_policy(
        "source-port.yaml",
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: drop-by-source-port
spec:
  priority: 1
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - action: Drop
      ports:
        - protocol: TCP
          sourcePort: 41000
          sourceEndPort: 41099
    - action: Drop
      ports:
        - protocol: TCP
          port: 8080
          sourcePort: 42000
          sourceEndPort: 42000
",
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let client = lab.ns("client");
    let node_ips: [IpAddr; 2] = [
        lab.node_addr("client").into(),
        lab.node_addr6("client").into(),
    ];
    // No two probes share a 4-tuple, so no TIME_WAIT is in the way.
    for node in node_ips {
        for (src_port, dst_port, expected) in [
            (41000, 8080, TcpOutcome::TimedOut),
            (41099, 8081, TcpOutcome::TimedOut),
            (41100, 8080, TcpOutcome::Connected),
            (40999, 8081, TcpOutcome::Connected),
            (42000, 8080, TcpOutcome::TimedOut),
            (42000, 8081, TcpOutcome::Connected),
        ] {
            let wait = match expected {
                TcpOutcome::Connected => ALLOW_WAIT,
                _ => DENY_WAIT,
            };
            let got = connect_from(client, src_port, SocketAddr::new(node, dst_port), wait);
            assert_eq!(
                got, expected,
                "client port {src_port} -> [{node}]:{dst_port}"
            );
        }
    }
}

#[test]
fn node_cluster_groups_in_a_node_policy_on_the_wire() {
    let Some(lab) = Lab::builder("node_cluster_groups_in_a_node_policy_on_the_wire")
        .peer("worker")
        .peer("outsider")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in [6443, 8080] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    // Another Node of the cluster lives at "worker"; both families.
    lab.write_policy(
        "nodes.yaml",
        &format!(
            "apiVersion: v1
kind: Node
metadata:
  name: worker-1
  labels:
    role: worker
status:
  addresses:
    - type: InternalIP
      address: {}
    - type: InternalIP
      address: \"{}\"
",
            lab.addr("worker"),
            lab.addr6("worker")
        ),
    );
    // Only the group of worker Nodes reaches 6443 of the group of Linux
    // Nodes (this one); the group is the appliedTo and the peer.
    lab.write_policy(
        "groups.yaml",
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata:
  name: linux-nodes
spec:
  nodeSelector:
    matchLabels:
      kubernetes.io/os: linux
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata:
  name: workers
spec:
  nodeSelector:
    matchLabels:
      role: worker
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: api-from-workers
spec:
  priority: 1
  tier: securityops
  appliedTo:
    - group: linux-nodes
  ingress:
    - action: Allow
      from:
        - group: workers
      ports:
        - protocol: TCP
          port: 6443
    - action: Drop
      ports:
        - protocol: TCP
          port: 6443
",
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for (who, api, other) in [
        ("worker", TcpOutcome::Connected, TcpOutcome::Connected),
        ("outsider", TcpOutcome::TimedOut, TcpOutcome::Connected),
    ] {
        let v4: IpAddr = lab.node_addr(who).into();
        let v6: IpAddr = lab.node_addr6(who).into();
        for node in [v4, v6] {
            lab.assert_tcp(who, SocketAddr::new(node, 6443), api);
            lab.assert_tcp(who, SocketAddr::new(node, 8080), other);
        }
    }
}

/// Antrea's `testACNPRulePriority` on the wire: two ClusterNetworkPolicies
/// of one Tier and priority have their rules evaluated by index, so rule 0
/// of `acnp-deny` (Drop 8080) beats rule 1 of `acnp-allow` (Allow 8080),
/// and rule 0 of `acnp-allow` (Allow 8081) beats rule 1 of `acnp-deny`
/// (Drop 8081, the positive control). By name alone `acnp-allow` would
/// come first and allow both. IPv4 and IPv6; every probe is a new
/// connection from a fresh client port.
///
/// Mutation: order the rules of policies that share Tier and priority
/// policy by policy (in `compile::priority::interleave`, swap the loops
/// over rule index and policy): 8080 connects and the test fails.
#[test]
fn equal_priority_policies_interleave_rules_by_index_on_the_wire() {
    let Some(lab) = Lab::builder("equal_priority_policies_interleave_rules_by_index_on_the_wire")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in [8080, 8081, 8082] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    let policy = |name: &str, rules: &str| {
        format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: {name}
spec:
  priority: 5
  tier: application
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
{rules}"
        )
    };
    let rule = |action: &str, port: u16| {
        format!("    - action: {action}\n      ports: [{{protocol: TCP, port: {port}}}]\n")
    };
    lab.write_policy(
        "rule-priority.yaml",
        &format!(
            "{}---\n{}",
            policy("acnp-deny", &(rule("Drop", 8080) + &rule("Drop", 8081))),
            policy("acnp-allow", &(rule("Allow", 8081) + &rule("Allow", 8080))),
        ),
    );
    let v4: IpAddr = lab.node_addr("client").into();
    let v6: IpAddr = lab.node_addr6("client").into();
    for node in [v4, v6] {
        lab.assert_tcp("client", SocketAddr::new(node, 8080), TcpOutcome::Connected);
    }
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for node in [v4, v6] {
        lab.assert_tcp("client", SocketAddr::new(node, 8081), TcpOutcome::Connected);
        lab.assert_tcp("client", SocketAddr::new(node, 8082), TcpOutcome::Connected);
        lab.assert_tcp("client", SocketAddr::new(node, 8080), TcpOutcome::TimedOut);
    }
}
