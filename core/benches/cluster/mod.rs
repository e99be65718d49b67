//! The cluster of the `incremental` and `controller` benches: 150,000 Pods
//! in 1,500 Namespaces on 5,000 Nodes, 500 ClusterNetworkPolicies
//! (policy k applies to `app-<k % 100>`, allows from `app-<(k+1) % 100>`
//! in the Namespaces of team `t<k % 10>`, egress to `app-<(k+2) % 100>` of
//! its own Namespace (`Self`); every 50th also allows from every Pod), and
//! 1/100 of it for CI's smoke run. Included by each bench with `#[path]`.
#![allow(dead_code)] // each bench uses its part.

use std::net::{IpAddr, Ipv4Addr};

use tollgate_core::model::Sourced;
use tollgate_core::selection::PodEntry;

pub struct Cluster {
    pub pods: usize,
    pub namespaces: usize,
    pub nodes: usize,
    pub policies: usize,
}

pub const FULL: Cluster = Cluster {
    pods: 150_000,
    namespaces: 1_500,
    nodes: 5_000,
    policies: 500,
};

pub const SMOKE: Cluster = Cluster {
    pods: 1_500,
    namespaces: 15,
    nodes: 50,
    policies: 50,
};

pub fn pod_ip(i: usize, generation: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10 + generation,
        (i / 65536) as u8,
        ((i / 256) % 256) as u8,
        (i % 256) as u8,
    ))
}

pub fn pod(cluster: &Cluster, i: usize, app: usize, generation: u8) -> PodEntry {
    PodEntry {
        namespace: format!("ns-{}", i % cluster.namespaces),
        name: format!("pod-{i}"),
        labels: tollgate_core::model::Labels::from_iter([
            ("app".to_string(), format!("app-{app}")),
            ("tier".to_string(), ["fe", "be"][i % 2].to_string()),
        ]),
        ips: vec![pod_ip(i, generation)],
        service_account: "default".into(),
        node_name: Some(format!("node-{}", i % cluster.nodes)),
        named_ports: Vec::new(),
        host_ports: Vec::new(),
    }
}

pub fn parse(yaml: &str) -> Vec<Sourced> {
    let (objects, problems) = tollgate_core::decode::parse_documents("bench.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    objects
}

pub fn namespace(n: usize, team: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-{n}\n  labels: {{team: t{team}}}\n---\n"
    )
}

/// Namespaces, Nodes (with `nodes`) and policies (the Pods come as
/// deltas); `renamed_team`: that Namespace labelled `t99`; `edited`:
/// policy 7 applied to `app-42`.
pub fn policy_side_yaml(
    cluster: &Cluster,
    nodes: bool,
    renamed_team: Option<usize>,
    edited: bool,
) -> String {
    let mut yaml = String::new();
    for n in 0..cluster.namespaces {
        let team = if Some(n) == renamed_team { 99 } else { n % 10 };
        yaml.push_str(&namespace(n, team));
    }
    for k in 0..if nodes { cluster.nodes } else { 0 } {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-{k}\nstatus:\n  addresses: [{{type: InternalIP, address: 172.16.{}.{}}}]\n---\n",
            k / 256,
            k % 256
        ));
    }
    for k in 0..cluster.policies {
        let everyone = if k % 50 == 0 {
            "\n  - action: Allow\n    from: [{namespaceSelector: {}}]"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: p-{k}}}
spec:
  priority: {}
  appliedTo: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]
  ingress:
  - action: Allow
    from: [{{podSelector: {{matchLabels: {{app: app-{}}}}}, namespaceSelector: {{matchLabels: {{team: t{}}}}}}}]{everyone}
  egress:
  - action: Allow
    to: [{{namespaces: {{match: Self}}, podSelector: {{matchLabels: {{app: app-{}}}}}}}]
---
",
            1 + k,
            if edited && k == 7 { 42 } else { k % 100 },
            (k + 1) % 100,
            k % 10,
            (k + 2) % 100
        ));
    }
    yaml
}

/// Pod `i`'s `app` label: every app on every Node, and the local Node's
/// 30 Pods (`i` a multiple of the Node count) `app-0` to `app-29`, so that
/// the policies of 30 apps apply here.
pub fn app_of(cluster: &Cluster, i: usize) -> usize {
    (i + i / cluster.nodes) % 100
}

/// Whether this is `cargo test --bench …` (CI's smoke run: no `--bench`
/// argument) rather than `cargo bench`.
pub fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// The cluster of this run: [`FULL`], or [`SMOKE`] in CI's smoke run.
pub fn of_this_run() -> &'static Cluster {
    if smoke() {
        &SMOKE
    } else {
        &FULL
    }
}
