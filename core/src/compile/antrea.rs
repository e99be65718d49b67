//! Antrea-native policies (ACNP and ANNP): appliedTo resolved to local
//! endpoints (NodePort Services to the local Node and their node ports;
//! Nodes of node ClusterGroups and ExternalEntities of this ExternalNode
//! to the local Node),
//! one rule instance per Namespace context where peers depend on it, and
//! each instance appended to the lists of the endpoints it applies to.
//! Never orders policies itself: it is handed them in priority order, a
//! group sharing Tier and priority at a time, and adds their rules in the
//! order [`interleave`] gives.
//!
//! Most policies of a cluster apply on other Nodes. An assembly kept
//! across changes ([`Placements`]) remembers the policies it placed on no
//! local endpoint, by object, and adds only their ranks and their summary
//! until the policy object or what placement reads changes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::memo::Memo;
use crate::model::{AntreaPolicy, AppliedTo, Direction, PortProtocol};
use crate::ruleset::{CompiledRule, PolicySummary, RuleRef};

use super::priority::{interleave, OrderedPolicy};
use super::{services_of, Compiler, List, Target};

/// A rule instance is shared by endpoints with the same Namespace context
/// (only for `namespaces` peers) and the same NodePort restriction.
type ContextKey = (Option<String>, Option<NodePorts>);

/// The node ports a NodePort-Service appliedTo restricts a rule to.
type NodePorts = Vec<(PortProtocol, u16)>;

/// The Antrea policies an [`super::Incremental`] assembly placed on no
/// local endpoint, by policy object: their summaries, valid while the
/// context placement reads (the local endpoints and their labels, the
/// Namespaces of local endpoints, the local Node, groups, Services, Tiers)
/// is the one they were found in. The holder says when that context
/// changed ([`Placements::context_changed`]); a policy edited is another
/// object, found again. Holds nothing the ruleset does not: the objects
/// and the summaries are the snapshot's and the ruleset's.
#[derive(Debug, Default)]
pub(super) struct Placements {
    memo: Memo<Placed>,
    /// Bumped at every change of context: entries of an earlier one are
    /// stale.
    context: u64,
}

#[derive(Debug)]
struct Placed {
    context: u64,
    /// Placed nowhere here, with its summary; `None`: placed somewhere,
    /// or not known in this context.
    nowhere: Option<Arc<PolicySummary>>,
}

impl Placements {
    /// What placement reads changed: every policy is placed again at the
    /// next assembly.
    pub(super) fn context_changed(&mut self) {
        self.context += 1;
    }

    /// The summary of `object` if it was placed nowhere in this context;
    /// marks it seen in this assembly either way.
    fn nowhere(&mut self, object: &Arc<crate::model::Object>) -> Option<Arc<PolicySummary>> {
        let context = self.context;
        self.memo
            .visit(
                object,
                |p| p.context != context,
                || Placed {
                    context,
                    nowhere: None,
                },
            )
            .nowhere
            .clone()
    }

    /// Remembers that `object` was placed nowhere, with its summary.
    fn placed_nowhere(&mut self, object: &Arc<crate::model::Object>, summary: &Arc<PolicySummary>) {
        let context = self.context;
        self.memo.visit(
            object,
            |_| true,
            || Placed {
                context,
                nowhere: Some(Arc::clone(summary)),
            },
        );
    }

    /// Ends an assembly: forgets the policies it did not see.
    pub(super) fn sweep(&mut self) {
        self.memo.sweep();
    }
}

/// What every rule of one policy shares while the rules of its group are
/// added.
struct PolicyState {
    /// Placed on no local endpoint, as the [`Placements`] knew: its rules
    /// are only ranked, and this is its summary.
    nowhere: Option<Arc<PolicySummary>>,
    /// The policy's appliedTo, resolved.
    targets: Vec<(Target, Option<NodePorts>)>,
    /// The keys of its `sameLabels`, read once a rule of it applies here
    /// (most policies of a cluster apply on other Nodes).
    same_label_keys: Option<BTreeSet<String>>,
    /// Endpoints some rule was applied to.
    applied: BTreeSet<u32>,
}

impl Compiler<'_> {
    /// Adds `group`, policies that share Tier and priority in tie-break
    /// order, their rules interleaved by index ([`interleave`]).
    pub(super) fn add_antrea_policies(&mut self, group: &[&OrderedPolicy], baseline: bool) {
        let mut states: Vec<PolicyState> = group
            .iter()
            .map(|ordered| {
                let nowhere = self
                    .placements
                    .as_deref_mut()
                    .and_then(|p| p.nowhere(ordered.object));
                let targets = match nowhere {
                    Some(_) => Vec::new(),
                    None => {
                        self.resolve_applied_to(&ordered.policy.spec.applied_to, ordered.namespace)
                    }
                };
                PolicyState {
                    nowhere,
                    targets,
                    same_label_keys: None,
                    applied: BTreeSet::new(),
                }
            })
            .collect();
        let counts: Vec<[usize; 2]> = group
            .iter()
            .map(|o| [o.policy.spec.ingress.len(), o.policy.spec.egress.len()])
            .collect();
        for (at, direction, index) in interleave(&counts) {
            self.add_antrea_rule(group[at], &mut states[at], direction, index, baseline);
        }
        for (ordered, state) in group.iter().zip(states) {
            if let Some(summary) = state.nowhere {
                self.policies.push(summary);
                continue;
            }
            let policy = ordered.policy;
            let summary = Arc::new(PolicySummary {
                policy: ordered.reference(),
                tier: Some(ordered.tier.to_string()),
                tier_priority: Some(ordered.tier_priority),
                priority: Some(policy.spec.priority),
                rules: policy.spec.ingress.len() + policy.spec.egress.len(),
                rule_names: (policy.spec.ingress.iter().map(|r| (Direction::Ingress, r)))
                    .chain(policy.spec.egress.iter().map(|r| (Direction::Egress, r)))
                    .map(|(direction, rule)| rule.effective_name(direction))
                    .collect(),
                applied_to: state
                    .applied
                    .iter()
                    .map(|&e| self.endpoints[e as usize].to_string())
                    .collect(),
                dry_run: policy.metadata.dry_run(),
            });
            if state.applied.is_empty() {
                // No rule instance was added: the policy adds only its
                // ranks while nothing placement reads changes.
                if let Some(placements) = self.placements.as_deref_mut() {
                    placements.placed_nowhere(ordered.object, &summary);
                }
            }
            self.policies.push(summary);
        }
    }

    /// Adds rule `index` of `direction` of `ordered` to the lists of the
    /// endpoints it applies to.
    fn add_antrea_rule(
        &mut self,
        ordered: &OrderedPolicy,
        state: &mut PolicyState,
        direction: Direction,
        index: usize,
        baseline: bool,
    ) {
        let policy = ordered.policy;
        let policy_ns = ordered.namespace;
        let rules = match direction {
            Direction::Ingress => &policy.spec.ingress,
            Direction::Egress => &policy.spec.egress,
        };
        let Some(rule) = rules.get(index) else {
            return;
        };
        if state.nowhere.is_some() {
            self.next_rank();
            return;
        }
        let targets = if rule.applied_to.is_empty() {
            state.targets.clone()
        } else {
            self.resolve_applied_to(&rule.applied_to, policy_ns)
        };
        // Ranked whether or not it applies here, so that a rule's rank
        // depends on the policies alone.
        let rank = self.next_rank();
        if targets.is_empty() {
            // Most policies of a cluster apply on other Nodes.
            return;
        }
        let reference = Arc::new(RuleRef {
            policy: ordered.reference(),
            tier: Some(ordered.tier.to_string()),
            tier_priority: Some(ordered.tier_priority),
            policy_priority: Some(policy.spec.priority),
            name: Some(rule.effective_name(direction)),
            index,
            direction,
            action: rule.action,
            enable_logging: rule.enable_logging,
            log_label: rule.log_label.clone().filter(|l| !l.is_empty()),
            rank,
            l7: rule.l7_protocols.clone().into(),
            dry_run: policy.metadata.dry_run(),
        });
        let services = services_of(&rule.ports, &rule.protocols);
        let peers_list = match direction {
            Direction::Ingress => &rule.from,
            Direction::Egress => &rule.to,
        };
        // One instance per Namespace context when peers depend on it.
        let context_dependent = peers_list.iter().any(|p| p.namespaces.is_some());
        let mut instance_by_context: HashMap<ContextKey, u32> = HashMap::new();
        for (target, node_ports) in &targets {
            let Some(&endpoint) = self.endpoint_of_target.get(target) else {
                continue;
            };
            let endpoint_ns = match target {
                Target::Pod(idx) => Some(self.inv.pods[*idx as usize].namespace.clone()),
                Target::LocalNode => None,
            };
            let keys = state
                .same_label_keys
                .get_or_insert_with(|| same_label_keys(policy));
            if !keys.is_empty()
                && !endpoint_ns
                    .as_deref()
                    .and_then(|ns| self.inv.namespace_labels(ns))
                    .is_some_and(|l| keys.iter().all(|k| l.contains_key(k)))
            {
                // The spec: a policy with sameLabels is a no-op on
                // Namespaces lacking any of those label keys.
                continue;
            }
            let context = if context_dependent {
                endpoint_ns.clone()
            } else {
                None
            };
            let key = (context, node_ports.clone());
            let instance = match instance_by_context.get(&key) {
                Some(&id) => id,
                None => {
                    let peers = self.resolve_peers(
                        peers_list,
                        &rule.to_services,
                        policy_ns,
                        key.0.as_deref(),
                    );
                    let id = self.append(CompiledRule {
                        reference: reference.clone(),
                        peers,
                        services: services.clone(),
                        node_ports: node_ports.clone(),
                    });
                    instance_by_context.insert(key, id);
                    id
                }
            };
            let list = if baseline {
                List::Baseline
            } else {
                List::Tiered
            };
            self.enlist(instance, endpoint, direction, list);
            state.applied.insert(endpoint);
        }
    }

    /// Resolves appliedTo entries to local endpoints; NodePort Services
    /// become the local Node restricted to their node ports.
    fn resolve_applied_to(
        &self,
        entries: &[AppliedTo],
        policy_ns: Option<&str>,
    ) -> Vec<(Target, Option<NodePorts>)> {
        let mut targets: BTreeSet<Target> = BTreeSet::new();
        let mut node_port_targets = Vec::new();
        for entry in entries {
            if let Some(service) = &entry.service {
                let ports: Vec<(PortProtocol, u16)> = self
                    .inv
                    .services
                    .get(&(service.namespace.clone(), service.name.clone()))
                    .map(|svc| {
                        svc.spec
                            .ports
                            .iter()
                            .filter_map(|p| Some((p.protocol, u16::try_from(p.node_port?).ok()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                if !ports.is_empty() {
                    node_port_targets.push((Target::LocalNode, Some(ports)));
                }
                continue;
            }
            if let Some(selector) = &entry.node_selector {
                if self
                    .inv
                    .nodes_matching(selector)
                    .contains(&self.inv.local_node)
                {
                    targets.insert(Target::LocalNode);
                }
                continue;
            }
            if let Some(group) = &entry.group {
                // ipBlocks of a group in appliedTo are ignored, as the spec says.
                let members = self.group_members(group, policy_ns, 0);
                targets.extend(members.pods.into_iter().map(Target::Pod));
                if members.nodes.contains(&self.inv.local_node)
                    || members
                        .external
                        .iter()
                        .any(|&e| self.external_entity_is_local(e))
                {
                    targets.insert(Target::LocalNode);
                }
                continue;
            }
            if let Some(selector) = &entry.external_entity_selector {
                let entities = self.select_external_entities(
                    selector,
                    entry.namespace_selector.as_ref(),
                    policy_ns,
                );
                if entities.iter().any(|&e| self.external_entity_is_local(e)) {
                    targets.insert(Target::LocalNode);
                }
                continue;
            }
            if let Some(sa) = &entry.service_account {
                targets.extend(
                    self.inv
                        .pods_with_service_account(sa)
                        .into_iter()
                        .map(Target::Pod),
                );
                continue;
            }
            let pods = self.select_pods(
                entry.pod_selector.as_ref(),
                entry.namespace_selector.as_ref(),
                policy_ns,
            );
            targets.extend(pods.into_iter().map(Target::Pod));
        }
        targets
            .into_iter()
            .map(|t| (t, None))
            .chain(node_port_targets)
            .collect()
    }
}

/// Keys of every `sameLabels` in a policy.
fn same_label_keys(policy: &AntreaPolicy) -> BTreeSet<String> {
    policy
        .spec
        .ingress
        .iter()
        .flat_map(|r| r.from.iter())
        .chain(policy.spec.egress.iter().flat_map(|r| r.to.iter()))
        .filter_map(|p| p.namespaces.as_ref())
        .flat_map(|n| n.same_labels.iter().cloned())
        .collect()
}
