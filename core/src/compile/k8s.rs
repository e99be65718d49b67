//! Kubernetes NetworkPolicies: a policy isolates the endpoints it selects
//! in the directions of its policyTypes, and its rules only allow. Their
//! decisions, the default drop included, are audited where the Namespace
//! carries [`K8S_LOGGING_ANNOTATION`]. Where they sit in the evaluation
//! order is `priority.rs`'s business, not this file's.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::{
    Direction, K8sNetworkPolicy, K8sPeer, K8sPort, Object, PolicyPort, PolicyType, RuleAction,
    Snapshot,
};
use crate::ruleset::{
    Block, CompiledRule, PeerMatch, PolicyKind, PolicyRef, PolicySummary, RuleRef,
};
use crate::selection::{NamespaceScope, Selection};

use super::{dir_index, services_of, Compiler, List, Target};

/// The Namespace annotation that turns on audit logging for the
/// Kubernetes NetworkPolicies of a Namespace and their default drop.
pub(super) const K8S_LOGGING_ANNOTATION: &str = "networkpolicy.antrea.io/enable-logging";

/// Namespaces whose Kubernetes NetworkPolicies are audited.
pub(super) fn logged_namespaces(snapshot: &Snapshot) -> BTreeSet<String> {
    snapshot
        .iter()
        .filter_map(|o| match o {
            Object::Namespace(ns)
                if ns
                    .metadata
                    .annotations
                    .get(K8S_LOGGING_ANNOTATION)
                    .is_some_and(|v| v == "true") =>
            {
                Some(ns.metadata.name.clone())
            }
            _ => None,
        })
        .collect()
}

impl Compiler<'_> {
    pub(super) fn add_k8s_policy(&mut self, policy: &K8sNetworkPolicy) {
        let ns = policy
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let reference = PolicyRef {
            kind: PolicyKind::K8sNetworkPolicy,
            namespace: Some(ns.clone()),
            name: policy.metadata.name.clone(),
        };
        let selected: Vec<u32> = self
            .inv
            .pods_matching(Some(&policy.spec.pod_selector), Some(&[ns.as_str()]))
            .into_iter()
            .filter_map(|p| self.endpoint_of_target.get(&Target::Pod(p)).copied())
            .collect();
        let logged = self.logged_namespaces.contains(&ns);
        let dry_run = policy.metadata.dry_run();
        let shared = Arc::new(reference.clone());
        let types = policy.spec.effective_policy_types();
        let mut rule_count = 0;
        for (direction, policy_type) in [
            (Direction::Ingress, PolicyType::Ingress),
            (Direction::Egress, PolicyType::Egress),
        ] {
            if !types.contains(&policy_type) {
                continue;
            }
            let rules: Vec<(&[K8sPeer], &[K8sPort])> = match direction {
                Direction::Ingress => policy
                    .spec
                    .ingress
                    .iter()
                    .map(|r| (r.from.as_slice(), r.ports.as_slice()))
                    .collect(),
                Direction::Egress => policy
                    .spec
                    .egress
                    .iter()
                    .map(|r| (r.to.as_slice(), r.ports.as_slice()))
                    .collect(),
            };
            rule_count += rules.len();
            let mut ids = Vec::new();
            for (index, (peers, ports)) in rules.into_iter().enumerate() {
                let peers = self.resolve_k8s_peers(peers, &ns);
                let ports: Vec<PolicyPort> = ports
                    .iter()
                    .map(|p| PolicyPort {
                        protocol: Some(p.protocol),
                        port: p.port.clone(),
                        end_port: p.end_port,
                        ..Default::default()
                    })
                    .collect();
                let rank = self.next_rank();
                let id = self.append(CompiledRule {
                    reference: Arc::new(RuleRef {
                        policy: reference.clone(),
                        tier: None,
                        tier_priority: None,
                        policy_priority: None,
                        name: None,
                        index,
                        direction,
                        action: RuleAction::Allow,
                        enable_logging: logged,
                        log_label: None,
                        rank,
                        l7: Arc::new([]),
                        dry_run,
                    }),
                    peers,
                    services: services_of(&ports, &[]),
                    node_ports: None,
                });
                ids.push(id);
            }
            for &endpoint in &selected {
                let (e, d) = (endpoint as usize, dir_index(direction));
                // Isolated even by a policy of no rule in this direction.
                let lists = &mut self.lists[e][d];
                lists.k8s.get_or_insert_with(Vec::new);
                lists.isolated |= !dry_run;
                for &id in &ids {
                    self.enlist(id, endpoint, direction, List::K8s);
                }
                if dry_run {
                    self.dry_run_isolated_by[e][d].push(Arc::clone(&shared));
                } else {
                    self.isolated_by[e][d].push(reference.clone());
                }
            }
        }
        self.policies.push(Arc::new(PolicySummary {
            policy: reference,
            tier: None,
            tier_priority: None,
            priority: None,
            rules: rule_count,
            rule_names: Vec::new(),
            applied_to: selected
                .into_iter()
                .map(|e| self.endpoints[e as usize].to_string())
                .collect(),
            dry_run,
        }));
    }

    fn resolve_k8s_peers(&mut self, peers: &[K8sPeer], ns: &str) -> PeerMatch {
        let mut result = PeerMatch {
            any: peers.is_empty(),
            ..Default::default()
        };
        for peer in peers {
            if let Some(block) = &peer.ip_block {
                result.blocks.push(Block::new(block.cidr, &block.except));
                continue;
            }
            let namespaces = match &peer.namespace_selector {
                Some(selector) => NamespaceScope::Selector(selector.clone()),
                None => NamespaceScope::named(ns),
            };
            let selection = Selection::Pods {
                namespaces,
                pods: peer.pod_selector.clone(),
            };
            self.add_selection(&mut result, selection);
        }
        result
    }
}
