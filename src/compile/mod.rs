//! The compiler: [`compile`] turns a validated [`Snapshot`] into an
//! immutable [`Ruleset`]. It resolves selectors, groups, ServiceAccounts,
//! `namespaces` (`Self`, `sameLabels`), nodeSelectors and named ports against
//! the inventory, and orders every rule by effective priority (Tier priority,
//! policy priority, rule order; ACNP and ANNP interleaved; Kubernetes
//! NetworkPolicies after every non-baseline Tier; baseline last) into the
//! per-endpoint lists the ruleset indexes. Pure: no I/O, no clock; it never
//! decides a flow.

mod inventory;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::fqdn::FqdnPattern;
use crate::model::{
    AntreaPolicy, AppliedTo, Direction, GroupSpec, K8sNetworkPolicy, K8sPeer, K8sPort,
    LabelSelector, Object, Peer, PolicyPort, PolicyProtocol, PolicyType, PortProtocol, PortValue,
    RuleAction, Snapshot, BASELINE_TIER, DEFAULT_TIER, STATIC_TIERS,
};
use crate::ruleset::{
    Block, CompiledRule, Endpoint, Parts, PeerMatch, PolicyKind, PolicyRef, PolicySummary,
    RuleLists, RuleRef, Ruleset, ServiceMatch,
};

use inventory::{Inventory, PodIdx};

/// The Node tollgate runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Addresses found on the host or configured; added to the Node's own.
    pub addresses: Vec<IpAddr>,
}

/// Compiles a snapshot that passed validation. Objects that validation
/// would reject are skipped rather than guessed at.
pub fn compile(snapshot: &Snapshot, local: &LocalNode) -> Ruleset {
    Compiler::new(snapshot, local).run()
}

/// Tier priority of a static or custom Tier.
fn tier_priorities(snapshot: &Snapshot) -> HashMap<String, i32> {
    let mut tiers: HashMap<String, i32> = STATIC_TIERS
        .iter()
        .map(|(n, p)| (n.to_string(), *p))
        .collect();
    for object in snapshot.iter() {
        if let Object::Tier(tier) = object {
            tiers
                .entry(tier.metadata.name.clone())
                .or_insert(tier.spec.priority);
        }
    }
    tiers
}

/// An appliedTo resolved: a local endpoint, optionally only for node ports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Target {
    LocalNode,
    Pod(PodIdx),
}

struct Compiler<'a> {
    inv: Inventory<'a>,
    snapshot: &'a Snapshot,
    tiers: HashMap<String, i32>,
    rules: Vec<CompiledRule>,
    /// Per endpoint (index into `endpoints`), per direction.
    lists: Vec<[RuleLists; 2]>,
    endpoints: Vec<Endpoint>,
    endpoint_of_target: HashMap<Target, u32>,
    address_sets: HashMap<String, Arc<HashSet<IpAddr>>>,
    fqdn_patterns: BTreeMap<FqdnPattern, u32>,
    policies: Vec<PolicySummary>,
    /// Rules ranked so far (see [`RuleRef::rank`]).
    ranked: u32,
    /// Namespaces annotated [`K8S_LOGGING_ANNOTATION`]` = "true"`.
    logged_namespaces: BTreeSet<String>,
}

/// The Namespace annotation that turns on audit logging for the
/// Kubernetes NetworkPolicies of a Namespace and their default drop.
pub const K8S_LOGGING_ANNOTATION: &str = "networkpolicy.antrea.io/enable-logging";

/// Namespaces whose Kubernetes NetworkPolicies are audited.
fn logged_namespaces(snapshot: &Snapshot) -> BTreeSet<String> {
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

/// A rule instance is shared by endpoints with the same Namespace context
/// (only for `namespaces` peers) and the same NodePort restriction.
type ContextKey = (Option<String>, Option<NodePorts>);

/// The node ports a NodePort-Service appliedTo restricts a rule to.
type NodePorts = Vec<(PortProtocol, u16)>;

fn dir_index(direction: Direction) -> usize {
    match direction {
        Direction::Ingress => 0,
        Direction::Egress => 1,
    }
}

/// Orders policies: Tier priority, then policy priority, then kind and name
/// so that equal priorities still compile deterministically.
struct OrderedPolicy<'a> {
    tier: String,
    tier_priority: i32,
    policy: &'a AntreaPolicy,
    reference: PolicyRef,
}

impl<'a> Compiler<'a> {
    fn new(snapshot: &'a Snapshot, local: &LocalNode) -> Compiler<'a> {
        let inv = Inventory::build(snapshot, local);
        let mut endpoints = vec![Endpoint::Node {
            name: local.name.clone(),
        }];
        let mut endpoint_of_target = HashMap::from([(Target::LocalNode, 0u32)]);
        for idx in 0..inv.pods.len() as PodIdx {
            if inv.pod_is_local(idx) && !inv.pods[idx as usize].ips.is_empty() {
                let pod = &inv.pods[idx as usize];
                endpoint_of_target.insert(Target::Pod(idx), endpoints.len() as u32);
                endpoints.push(Endpoint::Pod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                });
            }
        }
        let lists = vec![Default::default(); endpoints.len()];
        Compiler {
            inv,
            snapshot,
            tiers: tier_priorities(snapshot),
            rules: Vec::new(),
            lists,
            endpoints,
            endpoint_of_target,
            address_sets: HashMap::new(),
            fqdn_patterns: BTreeMap::new(),
            policies: Vec::new(),
            ranked: 0,
            logged_namespaces: logged_namespaces(snapshot),
        }
    }

    /// The next rank in evaluation order: policies are compiled in that
    /// order, rules in their order within the policy.
    fn next_rank(&mut self) -> u32 {
        self.ranked += 1;
        self.ranked
    }

    fn run(mut self) -> Ruleset {
        let snapshot = self.snapshot;
        let mut antrea: Vec<OrderedPolicy> = Vec::new();
        for object in snapshot.iter() {
            let (policy, kind) = match object {
                Object::ClusterNetworkPolicy(p) => (p, PolicyKind::AntreaClusterNetworkPolicy),
                Object::AntreaNetworkPolicy(p) => (p, PolicyKind::AntreaNetworkPolicy),
                _ => continue,
            };
            let tier = policy
                .spec
                .tier
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| DEFAULT_TIER.to_string());
            let Some(&tier_priority) = self.tiers.get(&tier) else {
                continue; // unknown Tier: rejected by validation
            };
            let namespace = (kind == PolicyKind::AntreaNetworkPolicy).then(|| {
                policy
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into())
            });
            antrea.push(OrderedPolicy {
                tier,
                tier_priority,
                policy,
                reference: PolicyRef {
                    kind,
                    namespace,
                    name: policy.metadata.name.clone(),
                },
            });
        }
        antrea.sort_by(|a, b| {
            a.tier_priority
                .cmp(&b.tier_priority)
                .then(a.policy.spec.priority.total_cmp(&b.policy.spec.priority))
                .then_with(|| a.reference.cmp(&b.reference))
        });
        let (regular, baseline): (Vec<_>, Vec<_>) =
            antrea.into_iter().partition(|p| p.tier != BASELINE_TIER);
        for ordered in &regular {
            self.add_antrea_policy(ordered, false);
        }
        let mut k8s: Vec<&K8sNetworkPolicy> = snapshot
            .iter()
            .filter_map(|o| match o {
                Object::K8sNetworkPolicy(p) => Some(p),
                _ => None,
            })
            .collect();
        k8s.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        for policy in k8s {
            self.add_k8s_policy(policy);
        }
        for ordered in &baseline {
            self.add_antrea_policy(ordered, true);
        }
        self.finish()
    }

    fn finish(self) -> Ruleset {
        let addresses = self
            .endpoint_of_target
            .iter()
            .map(|(target, &endpoint)| {
                let ips = match target {
                    Target::LocalNode => &self.inv.nodes[self.inv.local_node].ips,
                    Target::Pod(idx) => &self.inv.pods[*idx as usize].ips,
                };
                (endpoint, ips.as_slice())
            })
            .collect();
        let mut named_ports: HashMap<IpAddr, Vec<(String, PortProtocol, u16)>> = HashMap::new();
        for pod in &self.inv.pods {
            if !pod.named_ports.is_empty() {
                for ip in &pod.ips {
                    named_ports.insert(*ip, pod.named_ports.clone());
                }
            }
        }
        let mut fqdn_patterns: Vec<(u32, FqdnPattern)> = self
            .fqdn_patterns
            .into_iter()
            .map(|(p, i)| (i, p))
            .collect();
        fqdn_patterns.sort_by_key(|(i, _)| *i);

        Ruleset::new(Parts {
            rules: self.rules,
            endpoints: self.endpoints,
            lists: self.lists,
            addresses,
            named_ports,
            fqdn_patterns: fqdn_patterns.into_iter().map(|(_, p)| p).collect(),
            policies: self.policies,
            logged_namespaces: self.logged_namespaces,
        })
    }

    // ------------------------------------------------------------ Antrea

    fn add_antrea_policy(&mut self, ordered: &OrderedPolicy, baseline: bool) {
        let policy = ordered.policy;
        let policy_ns = ordered.reference.namespace.as_deref();
        let policy_targets = self.resolve_applied_to(&policy.spec.applied_to, policy_ns);
        let same_label_keys = same_label_keys(policy);
        let mut applied: BTreeSet<u32> = BTreeSet::new();
        for (direction, rules) in [
            (Direction::Ingress, &policy.spec.ingress),
            (Direction::Egress, &policy.spec.egress),
        ] {
            for (index, rule) in rules.iter().enumerate() {
                let targets = if rule.applied_to.is_empty() {
                    policy_targets.clone()
                } else {
                    self.resolve_applied_to(&rule.applied_to, policy_ns)
                };
                let reference = Arc::new(RuleRef {
                    policy: ordered.reference.clone(),
                    tier: Some(ordered.tier.clone()),
                    tier_priority: Some(ordered.tier_priority),
                    policy_priority: Some(policy.spec.priority),
                    name: Some(rule.effective_name(direction)),
                    index,
                    direction,
                    action: rule.action.normalized(),
                    enable_logging: rule.enable_logging,
                    log_label: rule.log_label.clone().filter(|l| !l.is_empty()),
                    rank: self.next_rank(),
                    l7: rule.l7_protocols.clone().into(),
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
                    if !same_label_keys.is_empty()
                        && !endpoint_ns
                            .as_deref()
                            .and_then(|ns| self.inv.namespace_labels(ns))
                            .is_some_and(|l| same_label_keys.iter().all(|k| l.contains_key(k)))
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
                            self.rules.push(CompiledRule {
                                reference: reference.clone(),
                                peers,
                                services: services.clone(),
                                node_ports: node_ports.clone(),
                            });
                            let id = (self.rules.len() - 1) as u32;
                            instance_by_context.insert(key, id);
                            id
                        }
                    };
                    let lists = &mut self.lists[endpoint as usize][dir_index(direction)];
                    let list = if baseline {
                        &mut lists.baseline
                    } else {
                        &mut lists.antrea
                    };
                    if list.last() != Some(&instance) {
                        list.push(instance);
                    }
                    applied.insert(endpoint);
                }
            }
        }
        self.policies.push(PolicySummary {
            policy: ordered.reference.clone(),
            tier: Some(ordered.tier.clone()),
            tier_priority: Some(ordered.tier_priority),
            priority: Some(policy.spec.priority),
            rules: policy.spec.ingress.len() + policy.spec.egress.len(),
            applied_to: applied
                .into_iter()
                .map(|e| self.endpoints[e as usize].to_string())
                .collect(),
        });
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
                let (pods, _) = self.group_members(group, policy_ns, 0);
                targets.extend(pods.into_iter().map(Target::Pod));
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

    /// Pods selected by a podSelector / namespaceSelector pair. In a
    /// namespaced policy a lone podSelector selects in the policy's Namespace.
    fn select_pods(
        &self,
        pod_selector: Option<&LabelSelector>,
        namespace_selector: Option<&LabelSelector>,
        policy_ns: Option<&str>,
    ) -> Vec<PodIdx> {
        match (namespace_selector, policy_ns) {
            (Some(ns_sel), _) => {
                let namespaces = self.inv.namespaces_matching(ns_sel);
                self.inv.pods_matching(pod_selector, Some(&namespaces))
            }
            (None, Some(ns)) => self.inv.pods_matching(pod_selector, Some(&[ns])),
            (None, None) if pod_selector.is_some() => self.inv.pods_matching(pod_selector, None),
            (None, None) => Vec::new(),
        }
    }

    /// Members of a ClusterGroup (cluster-scoped policy) or Group (in
    /// `policy_ns`): Pods and IP blocks. Child groups are followed one level
    /// deep, as the spec allows.
    fn group_members(
        &self,
        name: &str,
        policy_ns: Option<&str>,
        depth: u8,
    ) -> (Vec<PodIdx>, Vec<Block>) {
        let group = match policy_ns {
            None => self.inv.cluster_groups.get(name).copied(),
            Some(ns) => self.inv.groups.get(&(ns, name)).copied(),
        };
        let Some(group) = group else {
            return (Vec::new(), Vec::new());
        };
        let spec: &GroupSpec = &group.spec;
        let mut blocks = Vec::new();
        let selects_pods = spec.pod_selector.is_some() || spec.namespace_selector.is_some();
        let mut pods = if selects_pods {
            self.select_pods(
                spec.pod_selector.as_ref(),
                spec.namespace_selector.as_ref(),
                policy_ns,
            )
        } else {
            Vec::new()
        };
        if let Some(reference) = &spec.service_reference {
            pods.extend(self.inv.service_backends(reference));
        }
        for block in spec.ip_block.iter().chain(&spec.ip_blocks) {
            blocks.push(Block::new(block.cidr, &block.except));
        }
        if depth == 0 {
            for child in &spec.child_groups {
                let (p, b) = self.group_members(child, policy_ns, 1);
                pods.extend(p);
                blocks.extend(b);
            }
        }
        pods.sort_unstable();
        pods.dedup();
        (pods, blocks)
    }

    /// A shared address set for a cache key, computed once.
    fn address_set(
        &mut self,
        key: String,
        make: impl FnOnce(&Self) -> Vec<IpAddr>,
    ) -> Arc<HashSet<IpAddr>> {
        if let Some(set) = self.address_sets.get(&key) {
            return set.clone();
        }
        let set = Arc::new(make(self).into_iter().collect::<HashSet<IpAddr>>());
        self.address_sets.insert(key, set.clone());
        set
    }

    fn pod_ips(&self, pods: &[PodIdx]) -> Vec<IpAddr> {
        pods.iter()
            .flat_map(|&i| self.inv.pods[i as usize].ips.iter().copied())
            .collect()
    }

    /// Resolves `from`/`to` peers (and `toServices`) to a [`PeerMatch`].
    /// `context_ns` is the applied-to endpoint's Namespace, for
    /// `namespaces: {match: Self}` and `sameLabels`.
    fn resolve_peers(
        &mut self,
        peers: &[Peer],
        to_services: &[crate::model::NamespacedName],
        policy_ns: Option<&str>,
        context_ns: Option<&str>,
    ) -> PeerMatch {
        let mut result = PeerMatch {
            any: peers.is_empty() && to_services.is_empty(),
            ..Default::default()
        };
        for service in to_services {
            if let Some(svc) = self
                .inv
                .services
                .get(&(service.namespace.clone(), service.name.clone()))
            {
                for ip in svc.cluster_ips() {
                    for port in &svc.spec.ports {
                        if let Ok(p) = u16::try_from(port.port) {
                            result.services.push((ip, port.protocol, p));
                        }
                    }
                }
            }
        }
        for peer in peers {
            if let Some(block) = &peer.ip_block {
                result.blocks.push(Block::new(block.cidr, &block.except));
                continue;
            }
            if let Some(fqdn) = &peer.fqdn {
                let pattern = FqdnPattern::new(fqdn);
                let next = self.fqdn_patterns.len() as u32;
                let id = *self.fqdn_patterns.entry(pattern).or_insert(next);
                result.fqdns.push(id);
                continue;
            }
            let key = format!(
                "{}|{}|{}",
                serde_json::to_string(peer).unwrap_or_default(),
                policy_ns.unwrap_or(""),
                if peer.namespaces.is_some() {
                    context_ns.unwrap_or("")
                } else {
                    ""
                }
            );
            if let Some(group) = &peer.group {
                let (pods, blocks) = self.group_members(group, policy_ns, 0);
                result.blocks.extend(blocks);
                let set = self.address_set(key, |c| c.pod_ips(&pods));
                result.addresses.push(set);
                continue;
            }
            let set = self.address_set(key, |c| c.peer_addresses(peer, policy_ns, context_ns));
            result.addresses.push(set);
        }
        result
    }

    /// Addresses of the Pods or Nodes a selector peer picks.
    fn peer_addresses(
        &self,
        peer: &Peer,
        policy_ns: Option<&str>,
        context_ns: Option<&str>,
    ) -> Vec<IpAddr> {
        if let Some(selector) = &peer.node_selector {
            return self
                .inv
                .nodes_matching(selector)
                .into_iter()
                .flat_map(|n| self.inv.nodes[n].ips.iter().copied())
                .collect();
        }
        if let Some(sa) = &peer.service_account {
            return self.pod_ips(&self.inv.pods_with_service_account(sa));
        }
        if let Some(namespaces) = &peer.namespaces {
            let Some(context) = context_ns else {
                return Vec::new(); // Self/sameLabels for a Node: nothing
            };
            let selected: Vec<&str> = if namespaces.match_.is_some() {
                vec![context]
            } else {
                let Some(own) = self.inv.namespace_labels(context) else {
                    return Vec::new();
                };
                let keys = &namespaces.same_labels;
                if !keys.iter().all(|k| own.contains_key(k)) {
                    return Vec::new();
                }
                let wanted = LabelSelector {
                    match_labels: keys.iter().map(|k| (k.clone(), own[k].clone())).collect(),
                    match_expressions: Vec::new(),
                };
                self.inv.namespaces_matching(&wanted)
            };
            let pods = self
                .inv
                .pods_matching(peer.pod_selector.as_ref(), Some(&selected));
            return self.pod_ips(&pods);
        }
        let pods = self.select_pods(
            peer.pod_selector.as_ref(),
            peer.namespace_selector.as_ref(),
            policy_ns,
        );
        self.pod_ips(&pods)
    }

    // ------------------------------------------------------------ K8s NP

    fn add_k8s_policy(&mut self, policy: &K8sNetworkPolicy) {
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
                        protocol: p.protocol,
                        port: p.port.clone(),
                        end_port: p.end_port,
                    })
                    .collect();
                let rank = self.next_rank();
                self.rules.push(CompiledRule {
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
                    }),
                    peers,
                    services: services_of(&ports, &[]),
                    node_ports: None,
                });
                ids.push((self.rules.len() - 1) as u32);
            }
            for &endpoint in &selected {
                let lists = &mut self.lists[endpoint as usize][dir_index(direction)];
                lists.k8s.get_or_insert_with(Vec::new).extend(&ids);
            }
        }
        self.policies.push(PolicySummary {
            policy: reference,
            tier: None,
            tier_priority: None,
            priority: None,
            rules: rule_count,
            applied_to: selected
                .into_iter()
                .map(|e| self.endpoints[e as usize].to_string())
                .collect(),
        });
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
            let key = format!(
                "k8s|{}|{}|{}",
                serde_json::to_string(&peer.pod_selector).unwrap_or_default(),
                serde_json::to_string(&peer.namespace_selector).unwrap_or_default(),
                ns
            );
            let pod_selector = peer.pod_selector.clone();
            let namespace_selector = peer.namespace_selector.clone();
            let set = self.address_set(key, |c| {
                let pods = match &namespace_selector {
                    Some(sel) => {
                        let namespaces = c.inv.namespaces_matching(sel);
                        c.inv
                            .pods_matching(pod_selector.as_ref(), Some(&namespaces))
                    }
                    None => c.inv.pods_matching(pod_selector.as_ref(), Some(&[ns])),
                };
                c.pod_ips(&pods)
            });
            result.addresses.push(set);
        }
        result
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

/// `ports` and `protocols` of a rule as match entries.
fn services_of(ports: &[PolicyPort], protocols: &[PolicyProtocol]) -> Vec<ServiceMatch> {
    let mut services = Vec::new();
    for port in ports {
        services.push(match &port.port {
            None => ServiceMatch::Protocol(port.protocol),
            Some(PortValue::Number(n)) => {
                let first = u16::try_from(*n).unwrap_or(0);
                let last = port
                    .end_port
                    .and_then(|e| u16::try_from(e).ok())
                    .unwrap_or(first);
                ServiceMatch::Ports {
                    protocol: port.protocol,
                    first,
                    last,
                }
            }
            Some(PortValue::Name(name)) => ServiceMatch::Named {
                protocol: port.protocol,
                name: name.clone(),
            },
        });
    }
    for protocol in protocols {
        if let Some(icmp) = &protocol.icmp {
            services.push(ServiceMatch::Icmp {
                icmp_type: icmp.icmp_type.and_then(|t| u8::try_from(t).ok()),
                icmp_code: icmp.icmp_code.and_then(|c| u8::try_from(c).ok()),
            });
        }
        if let Some(igmp) = &protocol.igmp {
            services.push(ServiceMatch::Igmp {
                igmp_type: igmp.igmp_type.and_then(|t| u8::try_from(t).ok()),
                group: igmp.group_address.and_then(|a| match a {
                    IpAddr::V4(v4) => Some(v4),
                    IpAddr::V6(_) => None,
                }),
            });
        }
    }
    services
}

#[cfg(test)]
mod tests;
