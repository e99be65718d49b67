//! The network-policy-api conformance suite (`conformance/` of
//! kubernetes-sigs/network-policy-api), translated: its fixed topology
//! (Namespaces gryffindor, slytherin, hufflepuff, ravenclaw with two Pods
//! each, named ports `web` 80/TCP and `dns` 53/UDP, host-network `centaur`
//! Pods in forbidden-forrest on the Nodes), each test's policy manifest
//! (`tests/data/npapi-conformance/`, the upstream YAML as JSON), and each
//! subtest's steps in order: the policy edits the Go code makes (rule
//! swaps, priority, action, named port, a prepended CIDR rule, deleting the
//! NetworkPolicy) and every `PokeServer` with its expected result. Each
//! poke is decided by [`Ruleset::classify`], the function `tollgate trace`
//! calls; the node enforces both ends (every Pod is local). v1alpha1
//! (AdminNetworkPolicy, BaselineAdminNetworkPolicy) from release v0.1.7,
//! v1alpha2 (ClusterNetworkPolicy) from main.

use std::net::IpAddr;

use serde_json::{json, Value};

use crate::fqdn::NoFqdn;
use crate::model::{Object, Snapshot, Sourced};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::Ruleset;

use super::{compile, LocalNode};

const HOUSES: [(&str, &str); 4] = [
    ("gryffindor", "harry-potter"),
    ("slytherin", "draco-malfoy"),
    ("hufflepuff", "cedric-diggory"),
    ("ravenclaw", "luna-lovegood"),
];
const PREFIX: &str = "network-policy-conformance-";

/// Addresses of the two Nodes (where the host-network `centaur` Pods are).
const NODE_IPS: [&str; 2] = ["10.7.100.1", "10.7.100.2"];

fn pod_ip(namespace: &str, pod: &str) -> IpAddr {
    if namespace == "forbidden-forrest" {
        let n: usize = pod
            .trim_start_matches("centaur-")
            .parse()
            .expect("centaur-N");
        return NODE_IPS[n].parse().unwrap();
    }
    let house = HOUSES
        .iter()
        .position(|(h, _)| *h == namespace)
        .unwrap_or_else(|| panic!("unknown Namespace {namespace}"));
    let n: usize = pod.rsplit('-').next().unwrap().parse().unwrap();
    format!("10.7.{house}.{}", n + 1).parse().unwrap()
}

/// The topology; `relabeled` gives Namespaces another `conformance-house`.
fn topology(relabeled: &[(&str, &str)]) -> Vec<Value> {
    let mut objects = Vec::new();
    for house in HOUSES.iter().map(|(h, _)| *h).chain(["forbidden-forrest"]) {
        let label = relabeled
            .iter()
            .rev()
            .find(|(ns, _)| *ns == house)
            .map_or(house, |(_, label)| *label);
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("{PREFIX}{house}"),
                "labels": {"conformance-house": label}}}));
    }
    for (house, statefulset) in HOUSES {
        for n in 0..2 {
            let name = format!("{statefulset}-{n}");
            objects.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": format!("{PREFIX}{house}"),
                    "labels": {"conformance-house": house}},
                "spec": {"containers": [
                    {"name": "web", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "web"}]},
                    {"name": "dns", "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"}]}]},
                "status": {"podIP": pod_ip(house, &name).to_string()}}));
        }
    }
    for (n, ip) in NODE_IPS.iter().enumerate() {
        objects.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node{n}"), "labels": {"kubernetes.io/os": "linux"}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}));
    }
    objects
}

#[derive(Clone, Copy, Debug)]
enum Proto {
    Tcp,
    Udp,
    Sctp,
}
use Proto::{Sctp, Tcp, Udp};

#[derive(Clone, Copy, Debug)]
enum Dir {
    Ingress,
    Egress,
}
use Dir::{Egress, Ingress};

impl Dir {
    fn field(self) -> &'static str {
        match self {
            Ingress => "ingress",
            Egress => "egress",
        }
    }
}

/// One step of an upstream test.
enum Step {
    /// `t.Run`: a subtest starts.
    Run(&'static str),
    /// `PokeServer(client, protocol, server, port, expected)`.
    Poke(
        (&'static str, &'static str),
        Proto,
        (&'static str, &'static str),
        u16,
        bool,
    ),
    /// Two rules of a policy swap places.
    Swap(&'static str, Dir, usize, usize),
    Priority(&'static str, i64),
    Action(&'static str, Dir, usize, &'static str),
    /// A rule's ports become one named port.
    NamedPort(&'static str, Dir, usize, &'static str),
    /// An egress rule to these Pods' addresses (`/32`) goes first.
    PrependNetworks(
        &'static str,
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ),
    /// The NetworkPolicy of the manifest is deleted.
    DeleteNetworkPolicies,
    /// A Namespace's `conformance-house` label changes.
    HouseLabel(&'static str, &'static str),
}
use Step::*;

fn policy_mut<'a>(docs: &'a mut [Value], name: &str) -> &'a mut Value {
    docs.iter_mut()
        .find(|d| d["metadata"]["name"] == name && d["kind"] != "NetworkPolicy")
        .unwrap_or_else(|| panic!("no policy {name}"))
}

fn ruleset(relabeled: &[(&str, &str)], docs: &[Value]) -> Ruleset {
    let objects = topology(relabeled)
        .into_iter()
        .chain(docs.iter().cloned())
        .map(|value| {
            Sourced::new(
                std::path::Path::new("conformance.json"),
                Object::from_value(value).expect("decodes"),
            )
        })
        .collect();
    let snapshot = Snapshot { objects };
    let problems = crate::validate::validate(&snapshot);
    assert!(problems.is_empty(), "{problems:#?}");
    compile(
        &snapshot,
        &LocalNode {
            name: "node0".into(),
            ..Default::default()
        },
    )
}

/// Runs the steps of one upstream test; panics listing every poke whose
/// verdict differs from the upstream expectation.
fn run(manifest: &str, steps: &[Step]) {
    let mut docs: Vec<Value> = serde_json::from_str(manifest).expect("manifest");
    let mut relabeled = Vec::new();
    let mut rs = ruleset(&relabeled, &docs);
    let mut subtest = "";
    let mut wrong = Vec::new();
    let mut pokes = 0;
    for step in steps {
        let edited = match step {
            Run(name) => {
                subtest = name;
                false
            }
            Poke(client, proto, server, port, expected) => {
                pokes += 1;
                let (src, dst) = (pod_ip(client.0, client.1), pod_ip(server.0, server.1));
                let transport = match proto {
                    Tcp => Transport::Tcp {
                        src_port: 40000,
                        dst_port: *port,
                    },
                    Udp => Transport::Udp {
                        src_port: 40000,
                        dst_port: *port,
                    },
                    Sctp => Transport::Sctp {
                        src_port: 40000,
                        dst_port: *port,
                    },
                };
                let flow = Flow {
                    src,
                    dst,
                    transport,
                    local: None,
                };
                let allowed = rs.classify(&flow, &NoFqdn).verdict == Verdict::Allow;
                if allowed != *expected {
                    wrong.push(format!(
                        "{subtest}: {}/{} -> {}/{} {proto:?} {port}: got allowed={allowed}",
                        client.0, client.1, server.0, server.1
                    ));
                }
                false
            }
            Swap(policy, dir, i, j) => {
                let rules = policy_mut(&mut docs, policy)["spec"][dir.field()]
                    .as_array_mut()
                    .expect("rules");
                rules.swap(*i, *j);
                true
            }
            Priority(policy, value) => {
                policy_mut(&mut docs, policy)["spec"]["priority"] = json!(value);
                true
            }
            Action(policy, dir, i, action) => {
                policy_mut(&mut docs, policy)["spec"][dir.field()][*i]["action"] = json!(action);
                true
            }
            NamedPort(policy, dir, i, port) => {
                let doc = policy_mut(&mut docs, policy);
                let v1alpha1 = doc["apiVersion"].as_str().unwrap().ends_with("v1alpha1");
                let rule = &mut doc["spec"][dir.field()][*i];
                if v1alpha1 {
                    rule["ports"] = json!([{ "namedPort": port }]);
                } else {
                    rule["protocols"] = json!([{ "destinationNamedPort": port }]);
                }
                true
            }
            PrependNetworks(policy, name, action, pods) => {
                let networks: Vec<String> = pods
                    .iter()
                    .map(|(ns, pod)| format!("{}/32", pod_ip(ns, pod)))
                    .collect();
                policy_mut(&mut docs, policy)["spec"]["egress"]
                    .as_array_mut()
                    .expect("egress")
                    .insert(
                        0,
                        json!({"name": name, "action": action, "to": [{"networks": networks}]}),
                    );
                true
            }
            DeleteNetworkPolicies => {
                docs.retain(|d| d["kind"] != "NetworkPolicy");
                true
            }
            HouseLabel(namespace, label) => {
                relabeled.push((*namespace, *label));
                true
            }
        };
        if edited {
            rs = ruleset(&relabeled, &docs);
        }
    }
    assert!(pokes > 0, "no expectations");
    assert!(
        wrong.is_empty(),
        "{} of {pokes} pokes differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// `conformance/base/admin_network_policy/standard-egress-tcp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_TCP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-egress-tcp-rules.json");

/// `conformance/base/admin_network_policy/experimental-egress-selector-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_EXPERIMENTAL_EGRESS_SELECTOR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-experimental-egress-selector-rules.json");

/// `conformance/base/admin_network_policy/standard-ingress-udp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_UDP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-ingress-udp-rules.json");

/// `conformance/base/admin_network_policy/standard-egress-inline-cidr-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_INLINE_CIDR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-egress-inline-cidr-rules.json");

/// `conformance/base/admin_network_policy/standard-egress-sctp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_SCTP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-egress-sctp-rules.json");

/// `conformance/base/admin_network_policy/standard-egress-udp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_UDP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-egress-udp-rules.json");

/// `conformance/base/admin_network_policy/standard-gress-rules-combined.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_GRESS_RULES_COMBINED: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-gress-rules-combined.json");

/// `conformance/base/admin_network_policy/standard-ingress-sctp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_SCTP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-ingress-sctp-rules.json");

/// `conformance/base/admin_network_policy/standard-ingress-tcp-rules.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_TCP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-ingress-tcp-rules.json");

/// `conformance/base/api_integration/standard-anp-np-banp.yaml` at v0.1.7.
const M_V1A1_API_INTEGRATION_STANDARD_ANP_NP_BANP: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a1-api-integration-standard-anp-np-banp.json"
);

/// `conformance/base/admin_network_policy/standard-priority-field.yaml` at v0.1.7.
const M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_PRIORITY_FIELD: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a1-admin-network-policy-standard-priority-field.json"
);

/// `conformance/base/baseline_admin_network_policy/standard-egress-udp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_UDP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-egress-udp-rules.json");

/// `conformance/base/baseline_admin_network_policy/experimental-egress-selector-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_EXPERIMENTAL_EGRESS_SELECTOR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-experimental-egress-selector-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-ingress-tcp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_TCP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-ingress-tcp-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-egress-inline-cidr-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_INLINE_CIDR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-egress-inline-cidr-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-egress-sctp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_SCTP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-egress-sctp-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-egress-tcp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_TCP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-egress-tcp-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-gress-rules-combined.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_GRESS_RULES_COMBINED: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-gress-rules-combined.json");

/// `conformance/base/baseline_admin_network_policy/standard-ingress-sctp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_SCTP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-ingress-sctp-rules.json");

/// `conformance/base/baseline_admin_network_policy/standard-ingress-udp-rules.yaml` at v0.1.7.
const M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_UDP_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a1-baseline-admin-network-policy-standard-ingress-udp-rules.json");

/// `conformance/base/admin_tier/standard-egress-tcp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_EGRESS_TCP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-egress-tcp-rules.json"
);

/// `conformance/base/admin_tier/experimental-egress-selector-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_EXPERIMENTAL_EGRESS_SELECTOR_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-experimental-egress-selector-rules.json"
);

/// `conformance/base/admin_tier/standard-ingress-udp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_INGRESS_UDP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-ingress-udp-rules.json"
);

/// `conformance/base/admin_tier/standard-egress-inline-cidr-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_EGRESS_INLINE_CIDR_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-egress-inline-cidr-rules.json"
);

/// `conformance/base/admin_tier/standard-egress-sctp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_EGRESS_SCTP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-egress-sctp-rules.json"
);

/// `conformance/base/admin_tier/standard-egress-udp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_EGRESS_UDP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-egress-udp-rules.json"
);

/// `conformance/base/admin_tier/standard-gress-rules-combined.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_GRESS_RULES_COMBINED: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-gress-rules-combined.json"
);

/// `conformance/base/admin_tier/standard-ingress-sctp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_INGRESS_SCTP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-ingress-sctp-rules.json"
);

/// `conformance/base/admin_tier/standard-ingress-tcp-rules.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_INGRESS_TCP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-ingress-tcp-rules.json"
);

/// `conformance/base/api_integration/standard-anp-np-banp.yaml` at main.
const M_V1A2_API_INTEGRATION_STANDARD_ANP_NP_BANP: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-api-integration-standard-anp-np-banp.json"
);

/// `conformance/base/admin_tier/standard-priority-field.yaml` at main.
const M_V1A2_ADMIN_TIER_STANDARD_PRIORITY_FIELD: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-admin-tier-standard-priority-field.json"
);

/// `conformance/base/baseline_tier/standard-egress-udp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_EGRESS_UDP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-egress-udp-rules.json"
);

/// `conformance/base/baseline_tier/experimental-egress-selector-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_EXPERIMENTAL_EGRESS_SELECTOR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a2-baseline-tier-experimental-egress-selector-rules.json");

/// `conformance/base/baseline_tier/standard-ingress-tcp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_INGRESS_TCP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-ingress-tcp-rules.json"
);

/// `conformance/base/baseline_tier/standard-egress-inline-cidr-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_EGRESS_INLINE_CIDR_RULES: &str = include_str!("../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-egress-inline-cidr-rules.json");

/// `conformance/base/baseline_tier/standard-egress-sctp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_EGRESS_SCTP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-egress-sctp-rules.json"
);

/// `conformance/base/baseline_tier/standard-egress-tcp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_EGRESS_TCP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-egress-tcp-rules.json"
);

/// `conformance/base/baseline_tier/standard-gress-rules-combined.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_GRESS_RULES_COMBINED: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-gress-rules-combined.json"
);

/// `conformance/base/baseline_tier/standard-ingress-sctp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_INGRESS_SCTP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-ingress-sctp-rules.json"
);

/// `conformance/base/baseline_tier/standard-ingress-udp-rules.yaml` at main.
const M_V1A2_BASELINE_TIER_STANDARD_INGRESS_UDP_RULES: &str = include_str!(
    "../../../tests/data/npapi-conformance/v1a2-baseline-tier-standard-ingress-udp-rules.json"
);

/// Upstream `AdminNetworkPolicyEgressNamedPort` (v0.1.7: `conformance/tests/admin-network-policy-experimental-egress-rules.go`).
#[test]
fn admin_network_policy_egress_named_port() {
    run(
        M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_TCP_RULES,
        &[
            Run("Should support an 'allow-egress' policy for named port"),
            NamedPort("egress-tcp", Egress, 5, "web"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                8080,
                false,
            ),
        ],
    );
}

/// Upstream `AdminNetworkPolicyEgressNodePeers` (v0.1.7: `conformance/tests/admin-network-policy-experimental-egress-rules.go`).
#[test]
fn admin_network_policy_egress_node_peers() {
    run(
        M_V1A1_ADMIN_NETWORK_POLICY_EXPERIMENTAL_EGRESS_SELECTOR_RULES,
        &[
            Run("Should support an 'allow-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                36363,
                true,
            ),
            Run("Should support a 'pass-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34345,
                true,
            ),
            Run("Should support a 'deny-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                36364,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34346,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("forbidden-forrest", "centaur-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `AdminNetworkPolicyIngressNamedPort` (v0.1.7: `conformance/tests/admin-network-policy-experimental-ingress-rules.go`).
#[test]
fn admin_network_policy_ingress_named_port() {
    run(
        M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_UDP_RULES,
        &[
            Run("Should support an 'allow-ingress' policy for named port"),
            NamedPort("ingress-udp", Ingress, 5, "dns"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                5353,
                false,
            ),
        ],
    );
}

/// Upstream `AdminNetworkPolicyEgressInlineCIDRPeers` (v0.1.7: `conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go`).
#[test]
fn admin_network_policy_egress_inline_cidr_peers() {
    run(
        M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_INLINE_CIDR_RULES,
        &[
            Run("Should support a 'deny-egress' rule policy for egress-cidr-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            Run("Should support an 'allow-egress' rule policy for egress-cidr-peer"),
            PrependNetworks(
                "inline-cidr-as-peers-example",
                "allow-egress-to-specific-podIPs",
                "Allow",
                &[
                    ("ravenclaw", "luna-lovegood-0"),
                    ("hufflepuff", "cedric-diggory-0"),
                ],
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-1"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `AdminNetworkPolicyEgressSCTP` (v0.1.7: `conformance/tests/admin-network-policy-standard-egress-sctp-rules.go`).
#[test]
fn admin_network_policy_egress_sctp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'allow-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Run("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("egress-sctp", Egress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support a 'deny-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Run("Should support an 'pass-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("egress-sctp", Egress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, true),
        Run("Should support a 'pass-egress' policy for SCTP protocol at the specified port"),
        Swap("egress-sctp", Egress, 3, 4),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
    ]);
}

/// Upstream `AdminNetworkPolicyEgressTCP` (v0.1.7: `conformance/tests/admin-network-policy-standard-egress-tcp-rules.go`).
#[test]
fn admin_network_policy_egress_tcp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_TCP_RULES, &[
        Run("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support an 'allow-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Run("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("egress-tcp", Egress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-1"), 8080, false),
        Run("Should support a 'deny-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Run("Should support an 'pass-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("egress-tcp", Egress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support a 'pass-egress' policy for TCP protocol at the specified port"),
        Swap("egress-tcp", Egress, 3, 4),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `AdminNetworkPolicyEgressUDP` (v0.1.7: `conformance/tests/admin-network-policy-standard-egress-udp-rules.go`).
#[test]
fn admin_network_policy_egress_udp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_UDP_RULES, &[
        Run("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Run("Should support an 'allow-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 5353, false),
        Run("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("egress-udp", Egress, 0, 1),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, false),
        Run("Should support a 'deny-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
        Run("Should support an 'pass-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("egress-udp", Egress, 0, 2),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, true),
        Run("Should support a 'pass-egress' policy for UDP protocol at the specified port"),
        Swap("egress-udp", Egress, 3, 4),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
    ]);
}

/// Upstream `AdminNetworkPolicyGress` (v0.1.7: `conformance/tests/admin-network-policy-standard-gress-rules.go`).
#[test]
fn admin_network_policy_gress() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_GRESS_RULES_COMBINED, &[
        Run("Should support an 'allow-gress' policy across different protocols"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support an 'allow-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support an 'deny-gress' policy across different protocols"),
        Swap("gress-rules", Egress, 0, 1),
        Swap("gress-rules", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Run("Should support a 'deny-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'pass-gress' policy across different protocols"),
        Swap("gress-rules", Egress, 0, 2),
        Swap("gress-rules", Ingress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support a 'pass-gress' policy across different protocols at the specified ports"),
        Swap("gress-rules", Egress, 3, 4),
        Swap("gress-rules", Ingress, 3, 4),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
    ]);
}

/// Upstream `AdminNetworkPolicyIngressSCTP` (v0.1.7: `conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go`).
#[test]
fn admin_network_policy_ingress_sctp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'allow-ingress' policy for SCTP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("ingress-sctp", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support a 'deny-ingress' policy for SCTP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'pass-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("ingress-sctp", Ingress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, true),
        Run("Should support a 'pass-ingress' policy for SCTP protocol at the specified port"),
        Swap("ingress-sctp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
    ]);
}

/// Upstream `AdminNetworkPolicyIngressTCP` (v0.1.7: `conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go`).
#[test]
fn admin_network_policy_ingress_tcp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_TCP_RULES, &[
        Run("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'allow-ingress' policy for TCP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("ingress-tcp", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support a 'deny-ingress' policy for TCP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("ingress-tcp", Ingress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support a 'pass-ingress' policy for TCP protocol at the specified port"),
        Swap("ingress-tcp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
    ]);
}

/// Upstream `AdminNetworkPolicyIngressUDP` (v0.1.7: `conformance/tests/admin-network-policy-standard-ingress-udp-rules.go`).
#[test]
fn admin_network_policy_ingress_udp() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_UDP_RULES, &[
        Run("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Run("Should support an 'allow-ingress' policy for UDP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("ingress-udp", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support a 'deny-ingress' policy for UDP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Run("Should support an 'pass-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("ingress-udp", Ingress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Run("Should support a 'pass-ingress' policy for UDP protocol at the specified port"),
        Swap("ingress-udp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
    ]);
}

/// Upstream `AdminNetworkPolicyIntegration` (v0.1.7: `conformance/tests/admin-network-policy-standard-integration.go`).
#[test]
fn admin_network_policy_integration() {
    run(M_V1A1_API_INTEGRATION_STANDARD_ANP_NP_BANP, &[
        Run("Should Deny traffic from slytherin to gryffindor respecting ANP"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should Deny traffic to slytherin from gryffindor respecting ANP"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
        Run("Should support a 'pass-ingress' policy for ANP and respect the match for network policy"),
        Action("pass-example", Ingress, 0, "Pass"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support a 'pass-egress' policy for ANP and respect the match for network policy"),
        Action("pass-example", Egress, 0, "Pass"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Run("Should support a 'pass-ingress' policy for ANP and respect the match for baseline admin network policy"),
        DeleteNetworkPolicies,
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should support a 'pass-egress' policy for ANP and respect the match for baseline admin network policy"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
    ]);
}

/// Upstream `AdminNetworkPolicyPriorityField` (v0.1.7: `conformance/tests/admin-network-policy-standard-priority.go`).
#[test]
fn admin_network_policy_priority_field() {
    run(M_V1A1_ADMIN_NETWORK_POLICY_STANDARD_PRIORITY_FIELD, &[
        Run("Should Deny traffic from slytherin to gryffindor respecting ANP"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should Deny traffic to slytherin from gryffindor respecting ANP"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
        Run("Should respect ANP priority field; thus passing both ingress and egress traffic over to BANP"),
        Priority("old-priority-60-new-priority-40-example", 40),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyEgressNamedPort` (v0.1.7: `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_named_port() {
    run(
        M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_UDP_RULES,
        &[
            Run("Should support an 'allow-egress' policy for named port"),
            NamedPort("default", Egress, 3, "dns"),
            Poke(
                ("hufflepuff", "cedric-diggory-0"),
                Udp,
                ("gryffindor", "harry-potter-1"),
                53,
                true,
            ),
            Poke(
                ("hufflepuff", "cedric-diggory-1"),
                Udp,
                ("gryffindor", "harry-potter-1"),
                5353,
                false,
            ),
        ],
    );
}

/// Upstream `BaselineAdminNetworkPolicyEgressNodePeers` (v0.1.7: `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_node_peers() {
    run(
        M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_EXPERIMENTAL_EGRESS_SELECTOR_RULES,
        &[
            Run("Should support an 'allow-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                36363,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                36364,
                true,
            ),
            Run("Should support a 'deny-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34346,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("forbidden-forrest", "centaur-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `BaselineAdminNetworkPolicyIngressNamedPort` (v0.1.7: `conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go`).
#[test]
fn baseline_admin_network_policy_ingress_named_port() {
    run(
        M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_TCP_RULES,
        &[
            Run("Should support an 'allow-ingress' policy for named port"),
            NamedPort("default", Ingress, 3, "web"),
            Poke(
                ("hufflepuff", "cedric-diggory-0"),
                Tcp,
                ("gryffindor", "harry-potter-1"),
                80,
                true,
            ),
            Poke(
                ("hufflepuff", "cedric-diggory-1"),
                Tcp,
                ("gryffindor", "harry-potter-1"),
                8080,
                false,
            ),
        ],
    );
}

/// Upstream `BaselineAdminNetworkPolicyEgressInlineCIDRPeers` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_inline_cidr_peers() {
    run(
        M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_INLINE_CIDR_RULES,
        &[
            Run("Should support a 'deny-egress' rule policy for egress-cidr-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            Run("Should support an 'allow-egress' rule policy for egress-cidr-peer"),
            PrependNetworks(
                "default",
                "allow-egress-to-specific-podIPs",
                "Allow",
                &[
                    ("ravenclaw", "luna-lovegood-0"),
                    ("hufflepuff", "cedric-diggory-0"),
                ],
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-1"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `BaselineAdminNetworkPolicyEgressSCTP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_sctp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'allow-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Run("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support a 'deny-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyEgressTCP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_tcp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_TCP_RULES, &[
        Run("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support an 'allow-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Run("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-1"), 8080, false),
        Run("Should support a 'deny-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyEgressUDP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go`).
#[test]
fn baseline_admin_network_policy_egress_udp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_EGRESS_UDP_RULES, &[
        Run("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Run("Should support an 'allow-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 5353, false),
        Run("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, false),
        Run("Should support a 'deny-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyGress` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-gress-rules.go`).
#[test]
fn baseline_admin_network_policy_gress() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_GRESS_RULES_COMBINED, &[
        Run("Should support an 'allow-gress' policy across different protocols"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support an 'allow-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support an 'deny-gress' policy across different protocols"),
        Swap("default", Egress, 0, 1),
        Swap("default", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Run("Should support a 'deny-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyIngressSCTP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go`).
#[test]
fn baseline_admin_network_policy_ingress_sctp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'allow-ingress' policy for SCTP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support a 'deny-ingress' policy for SCTP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyIngressTCP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go`).
#[test]
fn baseline_admin_network_policy_ingress_tcp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_TCP_RULES, &[
        Run("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'allow-ingress' policy for TCP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support a 'deny-ingress' policy for TCP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
    ]);
}

/// Upstream `BaselineAdminNetworkPolicyIngressUDP` (v0.1.7: `conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go`).
#[test]
fn baseline_admin_network_policy_ingress_udp() {
    run(M_V1A1_BASELINE_ADMIN_NETWORK_POLICY_STANDARD_INGRESS_UDP_RULES, &[
        Run("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Run("Should support an 'allow-ingress' policy for UDP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support a 'deny-ingress' policy for UDP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
    ]);
}

/// Upstream `CNPAdminTierEgressNamedPort` (main: `conformance/tests/admin-network-policy-experimental-egress-rules.go`).
#[test]
fn cnp_admin_tier_egress_named_port() {
    run(
        M_V1A2_ADMIN_TIER_STANDARD_EGRESS_TCP_RULES,
        &[
            Run("Should support an 'allow-egress' policy for named port"),
            NamedPort("egress-tcp", Egress, 5, "web"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                8080,
                false,
            ),
        ],
    );
}

/// Upstream `CNPAdminTierEgressNodePeers` (main: `conformance/tests/admin-network-policy-experimental-egress-rules.go`).
#[test]
fn cnp_admin_tier_egress_node_peers() {
    run(
        M_V1A2_ADMIN_TIER_EXPERIMENTAL_EGRESS_SELECTOR_RULES,
        &[
            Run("Should support an 'allow-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                34340,
                true,
            ),
            Run("Should support a 'pass-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34342,
                true,
            ),
            Run("Should support a 'deny-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                34341,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34344,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("forbidden-forrest", "centaur-1"),
                34346,
                false,
            ),
        ],
    );
}

/// Upstream `CNPAdminTierIngressNamedPort` (main: `conformance/tests/admin-network-policy-experimental-ingress-rules.go`).
#[test]
fn cnp_admin_tier_ingress_named_port() {
    run(
        M_V1A2_ADMIN_TIER_STANDARD_INGRESS_UDP_RULES,
        &[
            Run("Should support an 'allow-ingress' policy for named port"),
            NamedPort("ingress-udp", Ingress, 5, "dns"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                5353,
                false,
            ),
        ],
    );
}

/// Upstream `CNPAdminTierEgressInlineCIDRPeers` (main: `conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go`).
#[test]
fn cnp_admin_tier_egress_inline_cidr_peers() {
    run(
        M_V1A2_ADMIN_TIER_STANDARD_EGRESS_INLINE_CIDR_RULES,
        &[
            Run("Should support a 'deny-egress' rule policy for egress-cidr-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            HouseLabel("slytherin", "denied-namespace-label"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                false,
            ),
            HouseLabel("slytherin", "slytherin"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            Run("Should support an 'allow-egress' rule policy for egress-cidr-peer"),
            PrependNetworks(
                "inline-cidr-as-peers-example",
                "allow-egress-to-specific-podIPs",
                "Accept",
                &[
                    ("ravenclaw", "luna-lovegood-0"),
                    ("hufflepuff", "cedric-diggory-0"),
                ],
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-1"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `CNPAdminTierEgressSCTP` (main: `conformance/tests/admin-network-policy-standard-egress-sctp-rules.go`).
#[test]
fn cnp_admin_tier_egress_sctp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_EGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'allow-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Run("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("egress-sctp", Egress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support a 'deny-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Run("Should support an 'pass-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("egress-sctp", Egress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, true),
        Run("Should support a 'pass-egress' policy for SCTP protocol at the specified port"),
        Swap("egress-sctp", Egress, 3, 4),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
    ]);
}

/// Upstream `CNPAdminTierEgressTCP` (main: `conformance/tests/admin-network-policy-standard-egress-tcp-rules.go`).
#[test]
fn cnp_admin_tier_egress_tcp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_EGRESS_TCP_RULES, &[
        Run("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support an 'allow-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Run("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("egress-tcp", Egress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-1"), 8080, false),
        Run("Should support a 'deny-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Run("Should support an 'pass-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("egress-tcp", Egress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support a 'pass-egress' policy for TCP protocol at the specified port"),
        Swap("egress-tcp", Egress, 3, 4),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `CNPAdminTierEgressUDP` (main: `conformance/tests/admin-network-policy-standard-egress-udp-rules.go`).
#[test]
fn cnp_admin_tier_egress_udp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_EGRESS_UDP_RULES, &[
        Run("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Run("Should support an 'allow-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 5353, false),
        Run("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("egress-udp", Egress, 0, 1),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, false),
        Run("Should support a 'deny-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
        Run("Should support an 'pass-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("egress-udp", Egress, 0, 2),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, true),
        Run("Should support a 'pass-egress' policy for UDP protocol at the specified port"),
        Swap("egress-udp", Egress, 3, 4),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
    ]);
}

/// Upstream `CNPAdminTierGress` (main: `conformance/tests/admin-network-policy-standard-gress-rules.go`).
#[test]
fn cnp_admin_tier_gress() {
    run(M_V1A2_ADMIN_TIER_STANDARD_GRESS_RULES_COMBINED, &[
        Run("Should support an 'allow-gress' policy across different protocols"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support an 'allow-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support an 'deny-gress' policy across different protocols"),
        Swap("gress-rules", Egress, 0, 1),
        Swap("gress-rules", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Run("Should support a 'deny-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'pass-gress' policy across different protocols"),
        Swap("gress-rules", Egress, 0, 2),
        Swap("gress-rules", Ingress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support a 'pass-gress' policy across different protocols at the specified ports"),
        Swap("gress-rules", Egress, 3, 4),
        Swap("gress-rules", Ingress, 3, 4),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
    ]);
}

/// Upstream `CNPAdminTierIngressSCTP` (main: `conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go`).
#[test]
fn cnp_admin_tier_ingress_sctp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_INGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'allow-ingress' policy for SCTP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("ingress-sctp", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support a 'deny-ingress' policy for SCTP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'pass-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("ingress-sctp", Ingress, 0, 2),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, true),
        Run("Should support a 'pass-ingress' policy for SCTP protocol at the specified port"),
        Swap("ingress-sctp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
    ]);
}

/// Upstream `CNPAdminTierIngressTCP` (main: `conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go`).
#[test]
fn cnp_admin_tier_ingress_tcp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_INGRESS_TCP_RULES, &[
        Run("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'allow-ingress' policy for TCP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("ingress-tcp", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support a 'deny-ingress' policy for TCP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("ingress-tcp", Ingress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support a 'pass-ingress' policy for TCP protocol at the specified port"),
        Swap("ingress-tcp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
    ]);
}

/// Upstream `CNPAdminTierIngressUDP` (main: `conformance/tests/admin-network-policy-standard-ingress-udp-rules.go`).
#[test]
fn cnp_admin_tier_ingress_udp() {
    run(M_V1A2_ADMIN_TIER_STANDARD_INGRESS_UDP_RULES, &[
        Run("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Run("Should support an 'allow-ingress' policy for UDP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("ingress-udp", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support a 'deny-ingress' policy for UDP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Run("Should support an 'pass-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("ingress-udp", Ingress, 0, 2),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Run("Should support a 'pass-ingress' policy for UDP protocol at the specified port"),
        Swap("ingress-udp", Ingress, 3, 4),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
    ]);
}

/// Upstream `CNPAdminTierIntegration` (main: `conformance/tests/admin-network-policy-standard-integration.go`).
#[test]
fn cnp_admin_tier_integration() {
    run(M_V1A2_API_INTEGRATION_STANDARD_ANP_NP_BANP, &[
        Run("Should Deny traffic from slytherin to gryffindor respecting admin CNP"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should Deny traffic to slytherin from gryffindor respecting admin CNP"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
        Run("Should support a 'pass-ingress' policy for admin CNP and respect the match for network policy"),
        Action("pass-example", Ingress, 0, "Pass"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support a 'pass-egress' policy for admin CNP and respect the match for network policy"),
        Action("pass-example", Egress, 0, "Pass"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Run("Should support a 'pass-ingress' policy for admin CNP and respect the match for baseline cluster network policy"),
        DeleteNetworkPolicies,
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should support a 'pass-egress' policy for admin CNP and respect the match for baseline cluster network policy"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
    ]);
}

/// Upstream `CNPAdminTierPriorityField` (main: `conformance/tests/admin-network-policy-standard-priority.go`).
#[test]
fn cnp_admin_tier_priority_field() {
    run(M_V1A2_ADMIN_TIER_STANDARD_PRIORITY_FIELD, &[
        Run("Should Deny traffic from slytherin to gryffindor respecting admin CNP"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, false),
        Run("Should Deny traffic to slytherin from gryffindor respecting admin CNP"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, false),
        Run("Should respect admin CNP priority field; thus passing both ingress and egress traffic over to baseline CNP"),
        Priority("old-priority-60-new-priority-40-example", 40),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `CNPBaselineTierEgressNamedPort` (main: `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`).
#[test]
fn cnp_baseline_tier_egress_named_port() {
    run(
        M_V1A2_BASELINE_TIER_STANDARD_EGRESS_UDP_RULES,
        &[
            Run("Should support an 'allow-egress' policy for named port"),
            NamedPort("default", Egress, 3, "dns"),
            Poke(
                ("hufflepuff", "cedric-diggory-0"),
                Udp,
                ("gryffindor", "harry-potter-1"),
                53,
                true,
            ),
            Poke(
                ("hufflepuff", "cedric-diggory-1"),
                Udp,
                ("gryffindor", "harry-potter-1"),
                5353,
                false,
            ),
        ],
    );
}

/// Upstream `CNPBaselineTierEgressNodePeers` (main: `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`).
#[test]
fn cnp_baseline_tier_egress_node_peers() {
    run(
        M_V1A2_BASELINE_TIER_EXPERIMENTAL_EGRESS_SELECTOR_RULES,
        &[
            Run("Should support an 'allow-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-0"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                34340,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("forbidden-forrest", "centaur-1"),
                34341,
                true,
            ),
            Run("Should support a 'deny-egress' rule policy for egress-node-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("forbidden-forrest", "centaur-1"),
                34344,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("forbidden-forrest", "centaur-1"),
                34346,
                false,
            ),
        ],
    );
}

/// Upstream `CNPBaselineTierIngressNamedPort` (main: `conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go`).
#[test]
fn cnp_baseline_tier_ingress_named_port() {
    run(
        M_V1A2_BASELINE_TIER_STANDARD_INGRESS_TCP_RULES,
        &[
            Run("Should support an 'allow-ingress' policy for named port"),
            NamedPort("default", Ingress, 3, "web"),
            Poke(
                ("hufflepuff", "cedric-diggory-0"),
                Tcp,
                ("gryffindor", "harry-potter-1"),
                80,
                true,
            ),
            Poke(
                ("hufflepuff", "cedric-diggory-1"),
                Tcp,
                ("gryffindor", "harry-potter-1"),
                8080,
                false,
            ),
        ],
    );
}

/// Upstream `CNPBaselineTierEgressInlineCIDRPeers` (main: `conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go`).
#[test]
fn cnp_baseline_tier_egress_inline_cidr_peers() {
    run(
        M_V1A2_BASELINE_TIER_STANDARD_EGRESS_INLINE_CIDR_RULES,
        &[
            Run("Should support a 'deny-egress' rule policy for egress-cidr-peer"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            HouseLabel("slytherin", "denied-namespace-label"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                false,
            ),
            HouseLabel("slytherin", "slytherin"),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("slytherin", "draco-malfoy-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("slytherin", "draco-malfoy-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("slytherin", "draco-malfoy-0"),
                9003,
                true,
            ),
            Run("Should support an 'allow-egress' rule policy for egress-cidr-peer"),
            PrependNetworks(
                "default",
                "allow-egress-to-specific-podIPs",
                "Accept",
                &[
                    ("ravenclaw", "luna-lovegood-0"),
                    ("hufflepuff", "cedric-diggory-0"),
                ],
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-0"),
                80,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-0"),
                53,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-0"),
                9003,
                true,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("ravenclaw", "luna-lovegood-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("ravenclaw", "luna-lovegood-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("ravenclaw", "luna-lovegood-1"),
                9003,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Tcp,
                ("hufflepuff", "cedric-diggory-1"),
                80,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Udp,
                ("hufflepuff", "cedric-diggory-1"),
                53,
                false,
            ),
            Poke(
                ("gryffindor", "harry-potter-1"),
                Sctp,
                ("hufflepuff", "cedric-diggory-1"),
                9003,
                false,
            ),
        ],
    );
}

/// Upstream `CNPBaselineTierEgressSCTP` (main: `conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go`).
#[test]
fn cnp_baseline_tier_egress_sctp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_EGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
        Run("Should support an 'allow-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Run("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support a 'deny-egress' policy for SCTP protocol at the specified port"),
        Poke(("ravenclaw", "luna-lovegood-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
    ]);
}

/// Upstream `CNPBaselineTierEgressTCP` (main: `conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go`).
#[test]
fn cnp_baseline_tier_egress_tcp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_EGRESS_TCP_RULES, &[
        Run("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-0"), 8080, true),
        Run("Should support an 'allow-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Run("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("ravenclaw", "luna-lovegood-1"), 8080, false),
        Run("Should support a 'deny-egress' policy for TCP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
    ]);
}

/// Upstream `CNPBaselineTierEgressUDP` (main: `conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go`).
#[test]
fn cnp_baseline_tier_egress_udp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_EGRESS_UDP_RULES, &[
        Run("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 5353, true),
        Run("Should support an 'allow-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 53, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 5353, false),
        Run("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("default", Egress, 0, 1),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 5353, false),
        Run("Should support a 'deny-egress' policy for UDP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("slytherin", "draco-malfoy-0"), 5353, false),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("slytherin", "draco-malfoy-0"), 53, true),
    ]);
}

/// Upstream `CNPBaselineTierGress` (main: `conformance/tests/baseline-admin-network-policy-standard-gress-rules.go`).
#[test]
fn cnp_baseline_tier_gress() {
    run(M_V1A2_BASELINE_TIER_STANDARD_GRESS_RULES_COMBINED, &[
        Run("Should support an 'allow-gress' policy across different protocols"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-0"), 80, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-0"), 53, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-0"), 9003, true),
        Run("Should support an 'allow-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("hufflepuff", "cedric-diggory-1"), 8080, true),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("hufflepuff", "cedric-diggory-1"), 80, false),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("hufflepuff", "cedric-diggory-1"), 9005, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Udp, ("gryffindor", "harry-potter-1"), 5353, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("gryffindor", "harry-potter-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("gryffindor", "harry-potter-1"), 9005, false),
        Run("Should support an 'deny-gress' policy across different protocols"),
        Swap("default", Egress, 0, 1),
        Swap("default", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("ravenclaw", "luna-lovegood-1"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("ravenclaw", "luna-lovegood-1"), 53, false),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("gryffindor", "harry-potter-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Sctp, ("gryffindor", "harry-potter-1"), 9003, false),
        Run("Should support a 'deny-gress' policy across different protocols at the specified ports"),
        Poke(("gryffindor", "harry-potter-0"), Tcp, ("slytherin", "draco-malfoy-0"), 80, false),
        Poke(("gryffindor", "harry-potter-1"), Tcp, ("slytherin", "draco-malfoy-0"), 8080, true),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("slytherin", "draco-malfoy-0"), 53, false),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("slytherin", "draco-malfoy-0"), 5353, true),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("slytherin", "draco-malfoy-0"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("slytherin", "draco-malfoy-0"), 9005, true),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("gryffindor", "harry-potter-0"), 53, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("gryffindor", "harry-potter-0"), 5353, true),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("gryffindor", "harry-potter-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("gryffindor", "harry-potter-0"), 9005, true),
    ]);
}

/// Upstream `CNPBaselineTierIngressSCTP` (main: `conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go`).
#[test]
fn cnp_baseline_tier_ingress_sctp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_INGRESS_SCTP_RULES, &[
        Run("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, true),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
        Run("Should support an 'allow-ingress' policy for SCTP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("gryffindor", "harry-potter-0"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9003, false),
        Poke(("gryffindor", "harry-potter-1"), Sctp, ("ravenclaw", "luna-lovegood-1"), 9005, false),
        Run("Should support a 'deny-ingress' policy for SCTP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9003, false),
        Poke(("slytherin", "draco-malfoy-1"), Sctp, ("ravenclaw", "luna-lovegood-0"), 9005, true),
    ]);
}

/// Upstream `CNPBaselineTierIngressTCP` (main: `conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go`).
#[test]
fn cnp_baseline_tier_ingress_tcp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_INGRESS_TCP_RULES, &[
        Run("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
        Run("Should support an 'allow-ingress' policy for TCP protocol at the specified port"),
        Poke(("hufflepuff", "cedric-diggory-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, true),
        Poke(("hufflepuff", "cedric-diggory-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Tcp, ("gryffindor", "harry-potter-1"), 80, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Tcp, ("gryffindor", "harry-potter-1"), 8080, false),
        Run("Should support a 'deny-ingress' policy for TCP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Tcp, ("gryffindor", "harry-potter-0"), 80, false),
        Poke(("slytherin", "draco-malfoy-1"), Tcp, ("gryffindor", "harry-potter-0"), 8080, true),
    ]);
}

/// Upstream `CNPBaselineTierIngressUDP` (main: `conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go`).
#[test]
fn cnp_baseline_tier_ingress_udp() {
    run(M_V1A2_BASELINE_TIER_STANDARD_INGRESS_UDP_RULES, &[
        Run("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, true),
        Run("Should support an 'allow-ingress' policy for UDP protocol at the specified port"),
        Poke(("gryffindor", "harry-potter-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, true),
        Poke(("gryffindor", "harry-potter-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected"),
        Swap("default", Ingress, 0, 1),
        Poke(("ravenclaw", "luna-lovegood-0"), Udp, ("hufflepuff", "cedric-diggory-1"), 53, false),
        Poke(("ravenclaw", "luna-lovegood-1"), Udp, ("hufflepuff", "cedric-diggory-1"), 5353, false),
        Run("Should support a 'deny-ingress' policy for UDP protocol at the specified port"),
        Poke(("slytherin", "draco-malfoy-0"), Udp, ("hufflepuff", "cedric-diggory-0"), 5353, false),
        Poke(("slytherin", "draco-malfoy-1"), Udp, ("hufflepuff", "cedric-diggory-0"), 53, true),
    ]);
}
