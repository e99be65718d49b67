//! The compiler: [`compile`] turns a validated [`Snapshot`] into an
//! immutable [`Ruleset`]. It is two parts: the peer sets, one per
//! [`crate::selection::Selection`] a rule uses, kept by the inventory's [`Selections`], and
//! the rule assembly ([`assemble`]), which
//! resolves appliedTo, groups, ServiceAccounts, `namespaces` (`Self`,
//! `sameLabels`), nodeSelectors, externalEntitySelectors and named ports
//! against the *local* endpoints and normalises peers to selections, and
//! orders every rule by effective priority (Tier priority,
//! policy priority, then rule index across the policies that share both,
//! ACNP and ANNP alike; Admin-tier
//! ClusterNetworkPolicies as a Tier of priority 220, AdminNetworkPolicies
//! after every non-baseline Antrea Tier; Kubernetes NetworkPolicies next;
//! Antrea's baseline Tier, then the network-policy-api Baseline tier, last)
//! into the per-endpoint lists the ruleset indexes. A policy annotated
//! [`crate::model::DRY_RUN_ANNOTATION`]` = "true"` is compiled in its place
//! like any other, its rules marked [`crate::ruleset::RuleRef::dry_run`]
//! (and its isolation, for a Kubernetes NetworkPolicy, kept apart from the
//! enforced one): the classifier decides whether they count. [`Incremental`]
//! keeps both parts across changes. Pure: no I/O, no clock; it never
//! decides a flow.

mod antrea;
mod groups;
mod incremental;
mod inventory;
mod k8s;
mod npapi;
mod peers;
mod priority;
mod span;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::fqdn::FqdnPattern;
use crate::model::{Direction, PolicyPort, PolicyProtocol, PortValue, Snapshot};
use crate::ruleset::{
    CompiledRule, Endpoint, Parts, PolicyRef, PolicySummary, Published, RuleLists, Ruleset,
    ServiceMatch,
};
use crate::selection::Selections;

use antrea::Placements;
pub use incremental::{policy_side, Incremental, Update};
pub use inventory::LocalView;
use inventory::{Inventory, PodIdx};
use k8s::logged_namespaces;
use priority::tier_priorities;
pub use span::{applied_namespaces, published_selections, PodShape};

/// The Node tollgate runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalNode {
    pub name: String,
    pub labels: crate::model::Labels,
    /// Addresses found on the host or configured; added to the Node's own.
    pub addresses: Vec<IpAddr>,
}

/// Compiles a snapshot that passed validation. Objects that validation
/// would reject are skipped rather than guessed at.
pub fn compile(snapshot: &Snapshot, local: &LocalNode) -> Ruleset {
    let mut selections = Selections::new(snapshot, local);
    let view = LocalView::of(&selections);
    assemble(snapshot, view, &mut selections)
}

/// The rule assembly: the policies of `snapshot` applied to the local
/// endpoints of `view`, their peers' addresses asked of `peers`.
pub fn assemble(snapshot: &Snapshot, view: LocalView, peers: &mut Selections) -> Ruleset {
    Compiler::new(snapshot, view, peers, None).run()
}

/// [`assemble`] kept across changes: the Antrea policies `placements`
/// knows to be placed on no local endpoint are only ranked and
/// summarised.
fn assemble_placed(
    snapshot: &Snapshot,
    view: LocalView,
    peers: &mut Selections,
    placements: &mut Placements,
) -> Ruleset {
    let ruleset = Compiler::new(snapshot, view, peers, Some(placements)).run();
    placements.sweep();
    ruleset
}

/// An appliedTo resolved: a local endpoint, optionally only for node ports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Target {
    LocalNode,
    Pod(PodIdx),
}

struct Compiler<'a> {
    inv: Inventory<'a>,
    peers: &'a mut Selections,
    snapshot: &'a Snapshot,
    tiers: priority::TierPriorities,
    rules: Vec<CompiledRule>,
    /// Per endpoint (index into `endpoints`), per direction.
    lists: Vec<[RuleLists; 2]>,
    /// Per endpoint, per direction: the enforced Kubernetes
    /// NetworkPolicies that isolate it (`tollgate trace` names them; a
    /// deny-all has no rule).
    isolated_by: Vec<[Vec<PolicyRef>; 2]>,
    /// The same for dry-run Kubernetes NetworkPolicies.
    dry_run_isolated_by: Vec<[Vec<Arc<PolicyRef>>; 2]>,
    endpoints: Vec<Endpoint>,
    endpoint_of_target: HashMap<Target, u32>,
    fqdn_patterns: BTreeMap<FqdnPattern, u32>,
    policies: Vec<Arc<PolicySummary>>,
    /// Rules ranked so far (see [`crate::ruleset::RuleRef::rank`]).
    ranked: u32,
    /// Kept across assemblies by [`Incremental`]; none for a whole
    /// compile.
    placements: Option<&'a mut Placements>,
    /// Namespaces annotated [`k8s::K8S_LOGGING_ANNOTATION`]` = "true"`.
    logged_namespaces: BTreeSet<String>,
}

fn dir_index(direction: Direction) -> usize {
    match direction {
        Direction::Ingress => 0,
        Direction::Egress => 1,
    }
}

/// Which of an endpoint's rule lists (see [`RuleLists`]) a rule joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    /// Antrea's Tiers but baseline, the Admin-tier network-policy-api kinds.
    Tiered,
    /// Kubernetes NetworkPolicy (joining it isolates the endpoint).
    K8s,
    /// Antrea's baseline Tier, the network-policy-api Baseline tier.
    Baseline,
}

impl Compiler<'_> {
    /// The one door by which a pass adds a compiled rule instance: stored
    /// once, its id returned for [`Compiler::enlist`].
    fn append(&mut self, rule: CompiledRule) -> u32 {
        self.rules.push(rule);
        (self.rules.len() - 1) as u32
    }

    /// Puts rule `id` at the end of `endpoint`'s `list` in `direction`
    /// (once: an instance shared by several targets of one endpoint is
    /// listed once).
    fn enlist(&mut self, id: u32, endpoint: u32, direction: Direction, list: List) {
        let lists = &mut self.lists[endpoint as usize][dir_index(direction)];
        let list = match list {
            List::Tiered => &mut lists.antrea,
            List::K8s => lists.k8s.get_or_insert_with(Vec::new),
            List::Baseline => &mut lists.baseline,
        };
        if list.last() != Some(&id) {
            list.push(id);
        }
    }
}

impl<'a> Compiler<'a> {
    fn new(
        snapshot: &'a Snapshot,
        view: LocalView,
        peers: &'a mut Selections,
        placements: Option<&'a mut Placements>,
    ) -> Compiler<'a> {
        let inv = Inventory::build(snapshot, view);
        let mut endpoints = vec![Endpoint::Node {
            name: inv.nodes[inv.local_node].name.clone(),
        }];
        let mut endpoint_of_target = HashMap::from([(Target::LocalNode, 0u32)]);
        for idx in 0..inv.pods.len() as PodIdx {
            if !inv.pods[idx as usize].ips.is_empty() {
                let pod = &inv.pods[idx as usize];
                endpoint_of_target.insert(Target::Pod(idx), endpoints.len() as u32);
                endpoints.push(Endpoint::Pod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                });
            }
        }
        let lists = vec![Default::default(); endpoints.len()];
        let isolated_by = vec![Default::default(); endpoints.len()];
        let dry_run_isolated_by = vec![Default::default(); endpoints.len()];
        Compiler {
            inv,
            peers,
            snapshot,
            tiers: tier_priorities(snapshot),
            rules: Vec::new(),
            lists,
            isolated_by,
            dry_run_isolated_by,
            endpoints,
            endpoint_of_target,
            fqdn_patterns: BTreeMap::new(),
            policies: Vec::new(),
            ranked: 0,
            placements,
            logged_namespaces: logged_namespaces(snapshot),
        }
    }

    /// Adds every policy in effective-priority order (see [`priority`]),
    /// then indexes the result.
    fn run(mut self) -> Ruleset {
        let (regular, baseline) = priority::antrea_policies(self.snapshot, &self.tiers);
        let np = priority::np_policies(self.snapshot);
        let (before_cnp, after_cnp): (Vec<_>, Vec<_>) = regular
            .iter()
            .partition(|p| p.tier_priority <= crate::model::CNP_ADMIN_TIER_PRIORITY);
        let baseline: Vec<_> = baseline.iter().collect();
        for group in priority::same_priority(&before_cnp) {
            self.add_antrea_policies(group, false);
        }
        for group in priority::same_np_priority(&np.cnp_admin) {
            self.add_np_policies(group);
        }
        for group in priority::same_priority(&after_cnp) {
            self.add_antrea_policies(group, false);
        }
        for group in priority::same_np_priority(&np.anp) {
            self.add_np_policies(group);
        }
        for policy in priority::k8s_policies(self.snapshot) {
            self.add_k8s_policy(policy);
        }
        for group in priority::same_priority(&baseline) {
            self.add_antrea_policies(group, true);
        }
        for group in priority::same_np_priority(&np.baseline) {
            self.add_np_policies(group);
        }
        self.finish()
    }

    fn finish(self) -> Ruleset {
        // In endpoint order: an address two endpoints share is the later's.
        let mut addresses: Vec<(u32, &[IpAddr])> = self
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
        addresses.sort_by_key(|(endpoint, _)| *endpoint);
        let named_ports = self.peers.named_ports().clone();
        let names = self.peers.names().clone();
        let mut fqdn_patterns: Vec<(u32, FqdnPattern)> = self
            .fqdn_patterns
            .into_iter()
            .map(|(p, i)| (i, p))
            .collect();
        fqdn_patterns.sort_by_key(|(i, _)| *i);
        // The local Node's Pod ranges, and what in them the inventory
        // knows: the local Pods' addresses and the Node's own.
        let local = &self.inv.nodes[self.inv.local_node];
        let ranges = local.pod_cidrs.clone();
        let mut known: Vec<IpAddr> = local
            .ips
            .iter()
            .chain(self.inv.pods.iter().flat_map(|p| p.ips.iter()))
            .filter(|ip| ranges.iter().any(|r| r.contains(*ip)))
            .copied()
            .collect();
        known.sort();
        known.dedup();
        let published = self
            .endpoint_of_target
            .iter()
            .filter_map(|(target, &endpoint)| match target {
                Target::Pod(idx) => Some((&self.inv.pods[*idx as usize], endpoint)),
                Target::LocalNode => None,
            })
            .flat_map(|(pod, endpoint)| {
                pod.host_ports.iter().map(move |p| Published {
                    protocol: p.protocol,
                    host: p.host,
                    address: p.address,
                    endpoint,
                    container: p.container,
                })
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();

        Ruleset::new(Parts {
            rules: self.rules,
            endpoints: self.endpoints,
            lists: self.lists,
            isolated_by: self.isolated_by,
            dry_run_isolated_by: self.dry_run_isolated_by,
            addresses,
            named_ports,
            names,
            fqdn_patterns: fqdn_patterns.into_iter().map(|(_, p)| p).collect(),
            policies: self.policies,
            logged_namespaces: self.logged_namespaces,
            ranges,
            known,
            published,
        })
    }
}

/// `ports` and `protocols` of a rule as match entries.
fn services_of(ports: &[PolicyPort], protocols: &[PolicyProtocol]) -> Vec<ServiceMatch> {
    let mut services = Vec::new();
    for port in ports {
        let protocol = port.protocol();
        let source = port
            .source_port
            .and_then(|s| u16::try_from(s).ok())
            .map(|first| {
                let last = port
                    .source_end_port
                    .and_then(|e| u16::try_from(e).ok())
                    .unwrap_or(first);
                (first, last)
            });
        services.push(match &port.port {
            None => ServiceMatch::Protocol { protocol, source },
            Some(PortValue::Number(n)) => {
                let first = u16::try_from(*n).unwrap_or(0);
                let last = port
                    .end_port
                    .and_then(|e| u16::try_from(e).ok())
                    .unwrap_or(first);
                ServiceMatch::Ports {
                    protocol,
                    first,
                    last,
                    source,
                }
            }
            Some(PortValue::Name(name)) => ServiceMatch::Named {
                protocol,
                name: name.clone(),
                source,
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

/// The ruleset of the documents in `yaml` for `local`, for unit tests
/// anywhere in the crate; panics on a document that does not decode.
#[cfg(test)]
pub(crate) fn compile_yaml(yaml: &str, local: &LocalNode) -> Ruleset {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    compile(&Snapshot { objects }, local)
}

#[cfg(test)]
mod tests;
