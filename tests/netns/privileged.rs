//! The no-lock-out entries (`datapath.privileged`) on the wire: they keep
//! the operator able to reach the Node through a Node deny-all, and they
//! never exempt an enforced Pod: a Pod's connection to its own Node meets
//! the Pod's egress policy and the Node's ingress policy, IPv4 and IPv6,
//! with the entries `docker/base/configmap.yaml` ships (TCP 22, 10250 and 6443
//! from `0.0.0.0/0` and `::/0`).
//!
//! Topology (lab links, dual-stack): Pod `apps/locked` (egress: Drop to
//! every Node), Pod `apps/trusted` (egress: Allow to every Node), and an
//! `operator` host that is no Pod, each on its own link to the node, where
//! the agent runs.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::harness::{poll_until, Lab, Service, TcpOutcome};

/// The ports of the shipped no-lock-out entries.
const SHIPPED_PORTS: [u16; 3] = [22, 10250, 6443];

/// The `datapath.privileged` list of `docker/base/configmap.yaml`, as the flow
/// list `--set datapath.privileged=[...]` takes: its `- {cidr: ...}` lines.
fn shipped_privileged() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/base/configmap.yaml");
    let text = std::fs::read_to_string(&path).expect("docker/base/configmap.yaml");
    let entries: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("- {cidr: "))
        .map(|l| l.trim_end_matches('}'))
        .collect();
    assert_eq!(entries.len(), 6, "the shipped entries changed:\n{text}");
    let list: Vec<String> = entries.iter().map(|e| format!("{{cidr: {e}}}")).collect();
    format!("datapath.privileged=[{}]", list.join(", "))
}

fn policies(lab: &Lab) -> String {
    let pod = |name: &str| {
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: apps, labels: {{app: {name}}}}}
spec: {{nodeName: node}}
status:
  podIP: {v4}
  podIPs: [{{ip: {v4}}}, {{ip: '{v6}'}}]
",
            v4 = lab.addr(name),
            v6 = lab.addr6(name)
        )
    };
    [
        pod("locked"),
        pod("trusted"),
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: locked-egress}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: locked}}}]
  egress:
  - {name: no-nodes, action: Drop, to: [{nodeSelector: {}}]}
"
        .to_string(),
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: trusted-egress}
spec:
  priority: 2
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: trusted}}}]
  egress:
  - {name: to-nodes, action: Allow, to: [{nodeSelector: {}}]}
"
        .to_string(),
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: node-lockdown}
spec:
  priority: 3
  tier: securityops
  appliedTo: [{nodeSelector: {}}]
  ingress:
  - name: trusted-pods
    action: Allow
    from: [{podSelector: {matchLabels: {app: trusted}}}]
    ports: [{protocol: TCP, port: 22}, {protocol: TCP, port: 10250}, {protocol: TCP, port: 6443}]
  - {name: drop-all, action: Drop}
"
        .to_string(),
    ]
    .join("---\n")
}

/// A Pod whose egress policy drops every Node cannot reach its own Node's
/// SSH, kubelet or API server port through the shipped `0.0.0.0/0` and
/// `::/0` entries, IPv4 and IPv6; a Pod whose egress allows the Node and
/// whom the Node's ingress policy allows still reaches them (and meets the
/// Node's drop-all on another port: the Node's ingress policy applies to
/// Pods too); the operator, who is no Pod, reaches them through the Node's
/// drop-all, which holds for it on any other port. The Node's own
/// connection to a Pod's port 22 is allowed (Node to its own Pods always
/// is). With `0.0.0.0/0` and `::/0` entries the kernel state stays as
/// planned: no drift is found and repaired (iptables-save prints no
/// `-s 0.0.0.0/0`). Every probed tuple is new to the verdict cache.
///
/// Mutation: drop the `! --match-set` exclusion from the privileged rules
/// in `src/datapath/plan.rs` (`privileged_rule`) and the locked Pod
/// connects to all three ports over both families (as before the fix).
/// Mutation: write `-s 0.0.0.0/0` for a /0 entry again and the drift check
/// repairs the entries every second.
#[test]
fn privileged_entries_never_exempt_a_pod_reaching_its_node() {
    let Some(lab) = Lab::builder("privileged_entries_never_exempt_a_pod_reaching_its_node")
        .peer("locked")
        .peer("trusted")
        .peer("operator")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in SHIPPED_PORTS.into_iter().chain([2222]) {
        lab.serve_tcp("node", port, Service::Echo);
    }
    lab.serve_tcp("locked", 22, Service::Echo);
    lab.write_policy("policies.yaml", &policies(&lab));
    let privileged = shipped_privileged();
    let options = lab
        .agent_options()
        .args(&["--set", &privileged, "--drift-check-seconds", "1"]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    let mut table = Vec::new();
    let mut check = |from: &str, to: IpAddr, port: u16, want: TcpOutcome| {
        let wait = if want == TcpOutcome::TimedOut {
            crate::harness::DENY_WAIT
        } else {
            crate::harness::ALLOW_WAIT
        };
        let got = lab.tcp(from, SocketAddr::new(to, port), wait);
        table.push(format!("{from} -> {to}:{port}: {got:?} (want {want:?})"));
        got == want
    };
    let mut failed = Vec::new();
    for six in [false, true] {
        let node = |role: &str| -> IpAddr {
            if six {
                lab.node_addr6(role).into()
            } else {
                lab.node_addr(role).into()
            }
        };
        let locked: IpAddr = if six {
            lab.addr6("locked").into()
        } else {
            lab.addr("locked").into()
        };
        let mut expect = |from: &str, to: IpAddr, port: u16, want: TcpOutcome| {
            if !check(from, to, port, want) {
                failed.push(format!("{from} -> {to}:{port}"));
            }
        };
        for port in SHIPPED_PORTS {
            expect("locked", node("locked"), port, TcpOutcome::TimedOut);
            expect("trusted", node("trusted"), port, TcpOutcome::Connected);
            expect("operator", node("operator"), port, TcpOutcome::Connected);
        }
        expect("trusted", node("trusted"), 2222, TcpOutcome::TimedOut);
        expect("operator", node("operator"), 2222, TcpOutcome::TimedOut);
        expect("node", locked, 22, TcpOutcome::Connected);
    }
    let report = table.join("\n");
    eprintln!("{report}");
    assert!(failed.is_empty(), "unexpected: {failed:?}\n{report}");

    // Drift checks run every second; a state that differs from the plan
    // (as `-s 0.0.0.0/0`, which iptables-save omits, did) is "repaired"
    // at each one.
    let drift = poll_until(Duration::from_secs(3), || {
        (agent.count_log("datapath drift") > 0).then_some(())
    });
    assert!(drift.is_none(), "drift repaired:\n{}", agent.log());
    agent.stop();
}
