//! The rule index: the rules of one direction of one endpoint, arranged so
//! that a flow is checked against the few that can match it instead of all
//! of them. It may return rules that do not match (the caller re-checks
//! every candidate in full) but must never leave out one that does. Built
//! once per ruleset; lookups allocate at most one short list and never lock.

use std::collections::HashMap;
use std::net::IpAddr;

use std::sync::Arc;

use ipnet::IpNet;

use super::rule::{CompiledRule, ServiceMatch};
use crate::model::PortProtocol;

/// Rules of one direction of one endpoint, in evaluation order.
#[derive(Debug, Default, PartialEq, Eq, Hash, Clone)]
pub(crate) struct RuleLists {
    /// Antrea rules of every Tier but baseline with the Admin-tier
    /// ClusterNetworkPolicies among them (Tier priority 220), then the
    /// AdminNetworkPolicies: a `Pass` in any hands the flow to `k8s`.
    pub(crate) antrea: Vec<u32>,
    /// Kubernetes NetworkPolicy rules; `Some` when the endpoint is isolated
    /// (by an enforced or a dry-run policy, see `isolated`).
    pub(crate) k8s: Option<Vec<u32>>,
    /// An enforced Kubernetes NetworkPolicy isolates the endpoint. `k8s`
    /// is `Some` without it when only dry-run policies do: then only the
    /// dry-run outcome sees the isolation.
    pub(crate) isolated: bool,
    /// Antrea's baseline Tier, then the network-policy-api Baseline tier
    /// (a `Pass` there allows).
    pub(crate) baseline: Vec<u32>,
}

/// Rule positions of one list, indexed so that a flow meets only the rules
/// that can match it: by peer network for rules whose peers are CIDR
/// blocks and modest address sets (one hash table per prefix length, as in
/// tuple-space search; a Pod address is a host prefix), else by (protocol,
/// destination port) for rules pinned to a few ports, and a short list of
/// the rest, checked for every flow. Candidates are always re-checked in
/// full, so the index only has to never miss a rule.
#[derive(Clone, Debug, Default)]
pub(super) struct RuleIndex {
    rules: Vec<u32>,
    by_port: HashMap<(PortProtocol, u16), Vec<u32>>,
    by_peer: Vec<PeerBucket>,
    /// Positions of rules that are not indexed.
    generic: Vec<u32>,
}

/// Rules indexed by peer networks of one prefix length and family.
#[derive(Clone, Debug)]
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

    /// Every rule id of the list, in evaluation order.
    pub(super) fn rules(&self) -> &[u32] {
        &self.rules
    }

    /// Rule ids that may match a flow to `port` from/to `peer`, in
    /// evaluation order.
    pub(super) fn candidates(
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
        .map(IpNet::from);
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
                ..
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
#[derive(Clone, Debug, Default)]
pub(super) struct DirectionTable {
    pub(super) antrea: RuleIndex,
    pub(super) k8s: Option<RuleIndex>,
    pub(super) baseline: RuleIndex,
    /// An enforced Kubernetes NetworkPolicy isolates the endpoint.
    pub(super) isolated: bool,
    /// Holds an enforced rule or is isolated by an enforced policy: the
    /// enforced outcome evaluates it.
    pub(super) enforced: bool,
    /// Holds a dry-run rule or is isolated by dry-run policies only: the
    /// dry-run outcome may differ from the enforced one.
    pub(super) dry_run: bool,
}

impl DirectionTable {
    /// No rule and no isolation of either kind: the datapath need not send
    /// this direction's connections to a worker.
    pub(super) fn is_empty(&self) -> bool {
        self.antrea.rules.is_empty() && self.k8s.is_none() && self.baseline.rules.is_empty()
    }

    fn build(lists: &RuleLists, rules: &[CompiledRule]) -> DirectionTable {
        let ids = || {
            [
                Some(&lists.antrea),
                lists.k8s.as_ref(),
                Some(&lists.baseline),
            ]
            .into_iter()
            .flatten()
            .flatten()
        };
        let dry_run = |id: &u32| rules[*id as usize].reference.dry_run;
        DirectionTable {
            antrea: RuleIndex::build(lists.antrea.clone(), rules),
            k8s: lists.k8s.clone().map(|k| RuleIndex::build(k, rules)),
            baseline: RuleIndex::build(lists.baseline.clone(), rules),
            isolated: lists.isolated,
            enforced: lists.isolated || ids().any(|id| !dry_run(id)),
            dry_run: (lists.k8s.is_some() && !lists.isolated) || ids().any(dry_run),
        }
    }
}

/// Both directions of an endpoint; shared by endpoints with equal lists.
#[derive(Clone, Debug, Default)]
pub(super) struct EndpointTable {
    pub(super) ingress: DirectionTable,
    pub(super) egress: DirectionTable,
}

/// Indexes the rule lists of every endpoint: one table per distinct pair
/// of lists (endpoints with equal lists share it), and for each endpoint
/// the position of its table.
pub(super) fn build_tables(
    lists: &[[RuleLists; 2]],
    rules: &[CompiledRule],
) -> (Vec<Arc<EndpointTable>>, Vec<u32>) {
    let mut tables: Vec<Arc<EndpointTable>> = Vec::new();
    let mut table_of: HashMap<[RuleLists; 2], u32> = HashMap::new();
    let mut endpoint_tables = Vec::with_capacity(lists.len());
    for lists in lists {
        let id = *table_of.entry(lists.clone()).or_insert_with(|| {
            tables.push(Arc::new(EndpointTable::build(lists, rules)));
            (tables.len() - 1) as u32
        });
        endpoint_tables.push(id);
    }
    (tables, endpoint_tables)
}

impl EndpointTable {
    /// The table of one endpoint's ingress and egress lists.
    pub(super) fn build(lists: &[RuleLists; 2], rules: &[CompiledRule]) -> EndpointTable {
        EndpointTable {
            ingress: DirectionTable::build(&lists[0], rules),
            egress: DirectionTable::build(&lists[1], rules),
        }
    }
}

impl RuleLists {
    /// Every rule of the lists.
    pub(super) fn rule_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.antrea
            .iter()
            .chain(self.k8s.iter().flatten())
            .chain(&self.baseline)
            .copied()
    }
}

#[cfg(test)]
impl EndpointTable {
    /// The index in a stable text form (see `Ruleset::fingerprint`).
    pub(super) fn fingerprint(&self) -> String {
        let direction = |table: &DirectionTable| {
            [&table.antrea, &table.baseline]
                .into_iter()
                .chain(table.k8s.as_ref())
                .map(|index| {
                    let ports: std::collections::BTreeMap<_, _> = index.by_port.iter().collect();
                    let mut peers: Vec<_> = index
                        .by_peer
                        .iter()
                        .map(|b| {
                            let networks: std::collections::BTreeMap<_, _> =
                                b.networks.iter().collect();
                            format!("{}/{} {networks:?}", b.prefix_len, b.v6)
                        })
                        .collect();
                    peers.sort();
                    format!("{:?} {ports:?} {peers:?} {:?}", index.rules, index.generic)
                })
                .collect::<Vec<_>>()
        };
        format!(
            "{:?} {:?}",
            direction(&self.ingress),
            direction(&self.egress)
        )
    }
}
