//! The compiler: turns a validated [`Snapshot`] into an immutable
//! [`Ruleset`]. It resolves selectors, groups, ServiceAccounts, `namespaces`
//! (`Self`, `sameLabels`), nodeSelectors and named ports against the
//! inventory; orders every rule by effective priority (Tier priority, policy
//! priority, rule order; ACNP and ANNP interleaved; Kubernetes
//! NetworkPolicies after every non-baseline Tier; baseline last); and builds,
//! per enforced endpoint, a table indexed by destination port so that a flow
//! is checked against the few rules that can match it, not all of them.
//! Pure: no I/O, no clock.

mod inventory;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use crate::fqdn::FqdnPattern;
use crate::model::{
    AntreaPolicy, AppliedTo, Direction, GroupSpec, K8sNetworkPolicy, K8sPeer, K8sPort,
    LabelSelector, Object, Peer, PolicyPort, PolicyProtocol, PolicyType, PortProtocol, PortValue,
    RuleAction, Snapshot, BASELINE_TIER, DEFAULT_TIER, STATIC_TIERS,
};
use crate::ruleset::{
    Block, CompiledRule, PeerMatch, PolicyKind, PolicyRef, RuleRef, ServiceMatch,
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

/// What the datapath must send to userspace: new connections from or to
/// these addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Enforced {
    /// Some rule applies to the local Node's inbound traffic.
    pub node_ingress: bool,
    /// Some rule applies to the local Node's outbound traffic.
    pub node_egress: bool,
    /// Addresses of local Pods that some rule applies to (either direction).
    pub endpoints: Vec<IpAddr>,
}

/// An endpoint this node enforces policy for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Endpoint {
    /// The local Node.
    Node {
        name: String,
    },
    Pod {
        namespace: String,
        name: String,
    },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Node { name } => write!(f, "{name}"),
            Endpoint::Pod { namespace, name } => write!(f, "{namespace}/{name}"),
        }
    }
}

/// Rules of one direction of one endpoint, in evaluation order.
#[derive(Debug, Default, PartialEq, Eq, Hash, Clone)]
struct RuleLists {
    /// Antrea rules of every Tier but baseline.
    antrea: Vec<u32>,
    /// Kubernetes NetworkPolicy rules; `Some` when the endpoint is isolated.
    k8s: Option<Vec<u32>>,
    baseline: Vec<u32>,
}

/// Rule positions of one list, indexed so that a flow meets only the rules
/// that can match it: by peer network for rules whose peers are CIDR
/// blocks and modest address sets (one hash table per prefix length, as in
/// tuple-space search; a Pod address is a host prefix), else by (protocol,
/// destination port) for rules pinned to a few ports, and a short list of
/// the rest, checked for every flow. Candidates are always re-checked in
/// full, so the index only has to never miss a rule.
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    pub(crate) rules: Vec<u32>,
    by_port: HashMap<(PortProtocol, u16), Vec<u32>>,
    by_peer: Vec<PeerBucket>,
    /// Positions of rules that are not indexed.
    generic: Vec<u32>,
}

/// Rules indexed by peer networks of one prefix length and family.
#[derive(Debug)]
struct PeerBucket {
    prefix_len: u8,
    v6: bool,
    networks: HashMap<IpAddr, Vec<u32>>,
}

/// The keys a rule could be indexed under, by peer and by port.
struct IndexKeys {
    networks: Option<Vec<IpNet>>,
    ports: Option<Vec<(PortProtocol, u16)>>,
}

/// Rules whose peers hold more addresses than this are not indexed by peer
/// (the index would cost more memory than the scan costs time).
const MAX_INDEXED_PEER_ADDRESSES: usize = 256;

/// Ports of a range up to this size are indexed one by one.
const MAX_INDEXED_RANGE: u32 = 64;

impl RuleIndex {
    /// Each rule goes into the one index where it shares its keys with
    /// the fewest other rules (both keys must match for the rule to, so
    /// either index alone is enough): 1,000 rules on port 80 from
    /// different hosts are indexed by host; 1,000 rules from the same
    /// Namespace on different ports by port.
    fn build(rules: Vec<u32>, all: &[CompiledRule]) -> RuleIndex {
        let keys: Vec<IndexKeys> = rules
            .iter()
            .map(|&id| {
                let rule = &all[id as usize];
                IndexKeys {
                    networks: peer_networks(rule),
                    ports: indexed_ports(rule),
                }
            })
            .collect();
        let mut peer_load: HashMap<IpNet, u32> = HashMap::new();
        let mut port_load: HashMap<(PortProtocol, u16), u32> = HashMap::new();
        for IndexKeys { networks, ports } in &keys {
            for network in networks.iter().flatten() {
                *peer_load.entry(*network).or_default() += 1;
            }
            for port in ports.iter().flatten() {
                *port_load.entry(*port).or_default() += 1;
            }
        }
        let mut index = RuleIndex::default();
        for (pos, IndexKeys { networks, ports }) in keys.into_iter().enumerate() {
            let pos = pos as u32;
            let peer_cost = networks
                .as_ref()
                .map(|n| n.iter().map(|k| peer_load[k]).max().unwrap_or(0));
            let port_cost = ports
                .as_ref()
                .map(|p| p.iter().map(|k| port_load[k]).max().unwrap_or(0));
            match (networks, ports) {
                (Some(networks), _) if port_cost.is_none_or(|c| peer_cost < Some(c)) => {
                    for network in networks {
                        index.add_peer(network, pos);
                    }
                }
                (_, Some(ports)) => {
                    for key in ports {
                        push_once(index.by_port.entry(key).or_default(), pos);
                    }
                }
                _ => index.generic.push(pos),
            }
        }
        index.rules = rules;
        index
    }

    fn add_peer(&mut self, network: IpNet, pos: u32) {
        let (prefix_len, v6) = (network.prefix_len(), network.addr().is_ipv6());
        let slot = match self
            .by_peer
            .iter()
            .position(|b| b.prefix_len == prefix_len && b.v6 == v6)
        {
            Some(slot) => slot,
            None => {
                self.by_peer.push(PeerBucket {
                    prefix_len,
                    v6,
                    networks: HashMap::new(),
                });
                self.by_peer.len() - 1
            }
        };
        let list = self.by_peer[slot]
            .networks
            .entry(network.network())
            .or_default();
        push_once(list, pos);
    }

    /// Rule ids that may match a flow to `port` from/to `peer`, in
    /// evaluation order.
    pub(crate) fn candidates(
        &self,
        port: Option<(PortProtocol, u16)>,
        peer: IpAddr,
    ) -> impl Iterator<Item = u32> + '_ {
        let pinned = port
            .and_then(|key| self.by_port.get(&key))
            .map_or(&[][..], |v| v.as_slice());
        let mut by_peer: Vec<u32> = Vec::new();
        for bucket in self.by_peer.iter().filter(|b| b.v6 == peer.is_ipv6()) {
            let Ok(net) = IpNet::new(peer, bucket.prefix_len) else {
                continue;
            };
            if let Some(list) = bucket.networks.get(&net.network()) {
                by_peer.extend_from_slice(list);
            }
        }
        by_peer.sort_unstable();
        by_peer.dedup();
        MergeSorted {
            pinned,
            by_peer,
            generic: &self.generic,
            next: [0; 3],
        }
        .map(|pos| self.rules[pos as usize])
    }
}

fn push_once(list: &mut Vec<u32>, pos: u32) {
    if list.last() != Some(&pos) {
        list.push(pos);
    }
}

/// The networks to index a rule under: its blocks and its peer addresses
/// as host prefixes, when the peers are nothing else (no "any", FQDN or
/// Service peers) and the address sets are small. A rule whose peers
/// resolve to nothing gets no network: it can never match.
fn peer_networks(rule: &CompiledRule) -> Option<Vec<IpNet>> {
    let peers = &rule.peers;
    let addresses: usize = peers.addresses.iter().map(|set| set.len()).sum();
    if peers.any
        || !peers.fqdns.is_empty()
        || !peers.services.is_empty()
        || addresses > MAX_INDEXED_PEER_ADDRESSES
    {
        return None;
    }
    let hosts = peers
        .addresses
        .iter()
        .flat_map(|set| set.iter())
        .map(|&ip| IpNet::from(ip));
    Some(peers.blocks.iter().map(|b| b.cidr).chain(hosts).collect())
}

/// `(protocol, port)` keys when every service of the rule is a small port
/// range, else `None` (the rule must be checked for every flow).
fn indexed_ports(rule: &CompiledRule) -> Option<Vec<(PortProtocol, u16)>> {
    if rule.services.is_empty() {
        return None;
    }
    let mut keys = Vec::new();
    for service in &rule.services {
        match service {
            ServiceMatch::Ports {
                protocol,
                first,
                last,
            } if u32::from(*last) - u32::from(*first) < MAX_INDEXED_RANGE => {
                keys.extend((*first..=*last).map(|p| (*protocol, p)));
            }
            _ => return None,
        }
    }
    Some(keys)
}

/// Merges the three ascending position lists of a lookup.
struct MergeSorted<'a> {
    pinned: &'a [u32],
    by_peer: Vec<u32>,
    generic: &'a [u32],
    next: [usize; 3],
}

impl Iterator for MergeSorted<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let heads = [
            self.pinned.get(self.next[0]).copied(),
            self.by_peer.get(self.next[1]).copied(),
            self.generic.get(self.next[2]).copied(),
        ];
        let (which, value) = heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.map(|v| (i, v)))
            .min_by_key(|&(_, v)| v)?;
        self.next[which] += 1;
        Some(value)
    }
}

/// Compiled rule lists of one direction of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct DirectionTable {
    pub(crate) antrea: RuleIndex,
    pub(crate) k8s: Option<RuleIndex>,
    pub(crate) baseline: RuleIndex,
}

impl DirectionTable {
    fn is_empty(&self) -> bool {
        self.antrea.rules.is_empty() && self.k8s.is_none() && self.baseline.rules.is_empty()
    }
}

/// Both directions of an endpoint; shared by endpoints with equal lists.
#[derive(Debug, Default)]
pub(crate) struct EndpointTable {
    pub(crate) ingress: DirectionTable,
    pub(crate) egress: DirectionTable,
}

/// One line of `tollgate get policies`.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct PolicySummary {
    pub policy: PolicyRef,
    pub tier: Option<String>,
    pub tier_priority: Option<i32>,
    pub priority: Option<f64>,
    pub rules: usize,
    /// Endpoints on this node the policy applies to.
    pub applied_to: Vec<String>,
}

/// The compiled, immutable policy of a node. Cheap to share (`Arc`) and
/// swap; classification never blocks.
#[derive(Debug, Default)]
pub struct Ruleset {
    pub(crate) rules: Vec<CompiledRule>,
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) endpoint_by_ip: HashMap<IpAddr, u32>,
    pub(crate) endpoint_tables: Vec<u32>,
    pub(crate) tables: Vec<EndpointTable>,
    pub(crate) local_node_endpoint: u32,
    /// Named container ports of every Pod in the inventory, by address.
    pub(crate) named_ports: HashMap<IpAddr, Vec<(String, PortProtocol, u16)>>,
    pub(crate) fqdn_patterns: Vec<FqdnPattern>,
    enforced: Enforced,
    policies: Vec<PolicySummary>,
    /// Namespaces whose Kubernetes NetworkPolicies are audited.
    logged_namespaces: BTreeSet<String>,
}

impl Ruleset {
    /// Whether the implicit default drop of a Kubernetes NetworkPolicy for
    /// `endpoint` is audited (its Namespace carries
    /// [`K8S_LOGGING_ANNOTATION`]` = "true"`).
    pub fn logs_k8s_default_drop(&self, endpoint: &Endpoint) -> bool {
        match endpoint {
            Endpoint::Pod { namespace, .. } => self.logged_namespaces.contains(namespace),
            Endpoint::Node { .. } => false,
        }
    }

    /// Compiles a snapshot that passed validation. Objects that validation
    /// would reject are skipped rather than guessed at.
    pub fn compile(snapshot: &Snapshot, local: &LocalNode) -> Ruleset {
        Compiler::new(snapshot, local).run()
    }

    pub fn enforced(&self) -> &Enforced {
        &self.enforced
    }

    /// Every distinct FQDN selector of every rule, in a stable order.
    pub fn fqdn_patterns(&self) -> &[FqdnPattern] {
        &self.fqdn_patterns
    }

    /// Policies sorted by effective priority (as `antctl get netpol
    /// --sort-by=effectivePriority`): Tier priority, policy priority, then
    /// Kubernetes NetworkPolicies before the baseline Tier.
    pub fn policies(&self) -> &[PolicySummary] {
        &self.policies
    }

    /// Number of compiled rule instances (a rule applied to Namespaces with
    /// different `Self` contexts counts once per context).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Endpoints this node enforces for.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The endpoint an address belongs to, if this node enforces for it.
    pub fn endpoint_of(&self, ip: IpAddr) -> Option<&Endpoint> {
        self.endpoint_by_ip
            .get(&ip)
            .map(|&e| &self.endpoints[e as usize])
    }
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
        let mut tables: Vec<EndpointTable> = Vec::new();
        let mut table_of: HashMap<[RuleLists; 2], u32> = HashMap::new();
        let mut endpoint_tables = Vec::with_capacity(self.lists.len());
        for lists in &self.lists {
            let id = *table_of.entry(lists.clone()).or_insert_with(|| {
                let build = |l: &RuleLists| DirectionTable {
                    antrea: RuleIndex::build(l.antrea.clone(), &self.rules),
                    k8s: l.k8s.clone().map(|k| RuleIndex::build(k, &self.rules)),
                    baseline: RuleIndex::build(l.baseline.clone(), &self.rules),
                };
                tables.push(EndpointTable {
                    ingress: build(&lists[0]),
                    egress: build(&lists[1]),
                });
                (tables.len() - 1) as u32
            });
            endpoint_tables.push(id);
        }

        let mut endpoint_by_ip = HashMap::new();
        let mut enforced = Enforced::default();
        let mut pod_addresses = BTreeSet::new();
        for (target, &endpoint) in &self.endpoint_of_target {
            let table = &tables[endpoint_tables[endpoint as usize] as usize];
            let ips = match target {
                Target::LocalNode => {
                    enforced.node_ingress = !table.ingress.is_empty();
                    enforced.node_egress = !table.egress.is_empty();
                    &self.inv.nodes[self.inv.local_node].ips
                }
                Target::Pod(idx) => {
                    let ips = &self.inv.pods[*idx as usize].ips;
                    if !table.ingress.is_empty() || !table.egress.is_empty() {
                        pod_addresses.extend(ips.iter().copied());
                    }
                    ips
                }
            };
            for ip in ips {
                endpoint_by_ip.insert(*ip, endpoint);
            }
        }
        enforced.endpoints = pod_addresses.into_iter().collect();

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

        Ruleset {
            rules: self.rules,
            endpoints: self.endpoints,
            endpoint_by_ip,
            endpoint_tables,
            tables,
            local_node_endpoint: 0,
            named_ports,
            fqdn_patterns: fqdn_patterns.into_iter().map(|(_, p)| p).collect(),
            enforced,
            policies: self.policies,
            logged_namespaces: self.logged_namespaces,
        }
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
