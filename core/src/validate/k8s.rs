//! Kubernetes NetworkPolicies, as the API server validates them: each peer
//! is selectors or an ipBlock, never both and never neither; ipBlock
//! `except` entries, ports and label selectors follow the same rules as
//! Antrea's. None of the Antrea-only rules apply here.

use crate::model::{K8sNetworkPolicy, K8sPeer, K8sPort};

use super::labels::check_selector;
use super::rule::{check_cidr_except, check_port};
use super::Report;

pub(super) fn check_k8s_policy(report: &mut Report<'_>, policy: &K8sNetworkPolicy) {
    check_selector(report, "spec.podSelector", &policy.spec.pod_selector);
    for (i, rule) in policy.spec.ingress.iter().enumerate() {
        let path = format!("spec.ingress[{i}]");
        for (j, peer) in rule.from.iter().enumerate() {
            check_k8s_peer(report, &format!("{path}.from[{j}]"), peer);
        }
        for (j, port) in rule.ports.iter().enumerate() {
            check_k8s_port(report, &format!("{path}.ports[{j}]"), port);
        }
    }
    for (i, rule) in policy.spec.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        for (j, peer) in rule.to.iter().enumerate() {
            check_k8s_peer(report, &format!("{path}.to[{j}]"), peer);
        }
        for (j, port) in rule.ports.iter().enumerate() {
            check_k8s_port(report, &format!("{path}.ports[{j}]"), port);
        }
    }
}

fn check_k8s_peer(report: &mut Report<'_>, path: &str, peer: &K8sPeer) {
    for (field, selector) in [
        ("podSelector", &peer.pod_selector),
        ("namespaceSelector", &peer.namespace_selector),
    ] {
        if let Some(selector) = selector {
            check_selector(report, &format!("{path}.{field}"), selector);
        }
    }
    let selectors = peer.pod_selector.is_some() || peer.namespace_selector.is_some();
    match &peer.ip_block {
        None if !selectors => report.add(
            path,
            "empty peer: set podSelector, namespaceSelector or ipBlock",
        ),
        Some(_) if selectors => report.add(
            format!("{path}.ipBlock"),
            "cannot be set with podSelector or namespaceSelector in the same peer",
        ),
        _ => {}
    }
    if let Some(block) = &peer.ip_block {
        check_cidr_except(
            report,
            &format!("{path}.ipBlock"),
            &block.cidr,
            &block.except,
        );
    }
}

fn check_k8s_port(report: &mut Report<'_>, path: &str, port: &K8sPort) {
    check_port(report, path, port.port.as_ref(), port.end_port);
}
