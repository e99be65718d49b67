//! Endpoints whose traffic never crosses the node's netfilter are reported
//! (`datapath::visibility`): a "Pod" on a macvlan of the node's link to the
//! client talks to the client at layer 2, past the node's IP stack, so a
//! policy for it is not enforced — and the agent says so in its log, in
//! `status` and in the `endpoints_unseen` gauge, while the routed Pod
//! beside it is not listed and what the node sees stays enforced.

use std::net::SocketAddr;

use crate::harness::{metrics, Lab, Service, TcpOutcome, AGENT_WAIT};

/// In the node namespace's loopback.
const METRICS: &str = "127.0.0.1:9471";

/// Mutation: `visibility::unseen` takes every veth as seen, whatever its
/// far end holds (src/datapath/visibility.rs) — nothing is reported and
/// the test fails.
#[test]
fn a_macvlan_endpoint_is_reported_as_bypassing_and_a_routed_one_is_not() {
    let Some(lab) =
        Lab::builder("a_macvlan_endpoint_is_reported_as_bypassing_and_a_routed_one_is_not")
            .peer("client")
            .unlinked("mac")
            .build()
    else {
        return;
    };
    // A macvlan child of the node's end of the client's link, in its own
    // namespace, with an address of the client's subnet.
    let client = lab.addr("client");
    let octets = client.octets();
    let mac_addr = std::net::Ipv4Addr::new(octets[0], octets[1], octets[2], 3);
    let node = lab.node();
    node.run(&[
        "ip", "link", "add", "tgmv", "link", "n-client", "type", "macvlan", "mode", "bridge",
    ]);
    node.run(&["ip", "link", "set", "tgmv", "netns", lab.ns("mac").name()]);
    let mac = lab.ns("mac");
    mac.run(&[
        "ip",
        "addr",
        "add",
        &format!("{mac_addr}/24"),
        "dev",
        "tgmv",
    ]);
    mac.run(&["ip", "link", "set", "tgmv", "up"]);
    lab.serve_tcp("mac", 8001, Service::Echo);
    lab.serve_tcp("node", 8002, Service::Echo);

    lab.write_policy(
        "policy.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: lab, labels: {{app: client}}}}
status: {{podIP: {client}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: mac, namespace: lab, labels: {{app: mac}}}}
status: {{podIP: {mac_addr}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: closed}}
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - podSelector: {{matchLabels: {{app: mac}}}}
  ingress:
    - action: Drop
      ports: [{{protocol: TCP, port: 8001}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: node}}
spec:
  priority: 6
  tier: securityops
  appliedTo:
    - nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}
  ingress:
    - action: Reject
      ports: [{{protocol: TCP, port: 8002}}]
"
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options().args(&["--metrics-address", METRICS]));
    agent.wait_generation(1);

    // What the node sees is enforced (positive control; the client's own
    // address, a tuple no worker decided yet: the anti-spoofing guard of
    // the client's Pod refuses the harness's fresh sources) ...
    lab.assert_tcp(
        "client",
        SocketAddr::new(lab.node_addr("client").into(), 8002),
        TcpOutcome::Refused,
    );
    // ... the macvlan Pod's traffic is not: its Drop never applies.
    lab.assert_tcp(
        "client",
        SocketAddr::new(mac_addr.into(), 8001),
        TcpOutcome::Connected,
    );
    // And the agent says so: log, status, gauge; the routed Pod is not listed.
    let expected =
        format!("lab/mac {mac_addr}: reached over n-client, whose far end does not hold it");
    agent.wait_for_log(&expected, AGENT_WAIT);
    let socket = lab.dir().join("tollgate.sock");
    let report = match tollgate::status::request(&socket, &tollgate::status::Request::Status) {
        Ok(tollgate::status::Response::Status(report)) => report,
        other => panic!("status: {other:?}"),
    };
    assert_eq!(
        report.endpoint_traffic_unseen.len(),
        1,
        "{:?}",
        report.endpoint_traffic_unseen
    );
    assert!(report.endpoint_traffic_unseen[0].starts_with(&expected));
    let samples = metrics::scrape(lab.node(), METRICS);
    assert_eq!(
        samples.get("tollgate_endpoints_unseen"),
        Some(&1.0),
        "{samples:?}"
    );
    agent.stop();
}
