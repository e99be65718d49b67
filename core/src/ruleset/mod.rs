//! The compiled, immutable policy of a node ([`Ruleset`]) and the questions
//! asked of it: which endpoints and addresses it enforces, which FQDN
//! selectors it needs, and how a flow is decided ([`Ruleset::classify`]).
//! The compiler hands it resolved rules and lists; this module never
//! resolves a selector, and it does no I/O and reads no clock.

mod classify;
mod facts;
mod index;
mod rule;
mod ties;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use crate::fqdn::FqdnPattern;
use crate::model::PortProtocol;
use crate::selection::{AddressSet, NamedPorts, Names, Selection};

pub use classify::{
    Consulted, DecidedBy, Decision, DirectionDecision, DryRunCause, DryRunChange, DryRunOutcome,
    Miss, NoMatch, Outcome,
};
pub(crate) use index::RuleLists;
use index::{build_tables, EndpointTable};
pub(crate) use rule::{Block, CompiledRule, FieldRange, PeerMatch, ServiceMatch};
pub use rule::{PolicyKind, PolicyRef, RuleRef};
pub use ties::Tie;

/// What the datapath must send to userspace: new connections from or to
/// these addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Enforced {
    /// Some rule applies to the local Node's inbound traffic.
    pub node_ingress: bool,
    /// Some rule applies to the local Node's outbound traffic.
    pub node_egress: bool,
    /// Addresses of local Pods that some enforced rule or isolation
    /// applies to (either direction).
    pub endpoints: Vec<IpAddr>,
    /// Addresses of local Pods that only dry-run policies apply to: their
    /// connections are sent to a worker for the dry-run outcome, but the
    /// kernel accepts them when no worker reads the queue, whatever the
    /// fail mode, as it would without those policies.
    pub dry_run_endpoints: Vec<IpAddr>,
    /// The kernel verdict cache of the ruleset, when verdicts are cached.
    #[serde(skip)]
    pub verdict_cache: Option<VerdictCache>,
    /// The address ranges the local Node's endpoints get their addresses
    /// from: its `podCIDRs`, on a Docker host the container networks'
    /// subnets.
    pub ranges: Vec<IpNet>,
    /// The addresses in `ranges` the inventory knows: every local Pod's
    /// (enforced or not) and the Node's own. Any other address in them
    /// belongs to an endpoint the inventory does not know yet.
    pub known: Vec<IpAddr>,
    /// The Node's ports published for enforced endpoints (`hostPort`,
    /// Docker's `-p`): a connection to one that reaches the Node (a
    /// userland proxy relays it) is decided as one to the endpoint.
    pub published: Vec<(PortProtocol, u16)>,
    /// The same for endpoints only dry-run policies apply to (a port in
    /// `published` is not here): sent to a worker as their addresses are.
    pub dry_run_published: Vec<(PortProtocol, u16)>,
}

impl Enforced {
    /// Whether `ip` is in [`Enforced::ranges`] and not
    /// [`Enforced::known`]: an address of a local endpoint the inventory
    /// does not know yet.
    pub fn is_unknown(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(&ip)) && !self.known.contains(&ip)
    }
}

/// A port of a local endpoint published on the Node: a connection to the
/// Node's `host` port (on `address`, or on any Node address) is one to
/// the endpoint's `container` port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Published {
    pub(crate) protocol: PortProtocol,
    pub(crate) host: u16,
    pub(crate) address: Option<IpAddr>,
    pub(crate) endpoint: u32,
    pub(crate) container: u16,
}

/// The kernel verdict cache of one ruleset: the generation naming its sets
/// (a digest of what the ruleset was compiled from, so any policy or
/// inventory change leaves every verdict of the previous ruleset behind),
/// and the sets' entry timeout and bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerdictCache {
    /// 40 bits; the sets are `tollgate-vc-<10 hex digits>-…`.
    pub generation: u64,
    pub timeout_secs: u32,
    pub max_entries: u32,
    /// Whether the kernel answers from the sets; `false` while a change
    /// bridges two generations (the sets stay, nothing is answered).
    pub lookup: bool,
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

/// One line of `tollgate get policies` (`-o json` spells it camelCase, as
/// kubectl does).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySummary {
    pub policy: PolicyRef,
    pub tier: Option<String>,
    pub tier_priority: Option<i32>,
    pub priority: Option<f64>,
    pub rules: usize,
    /// Names of the rules, ingress then egress, given or generated as
    /// Antrea generates them; empty for Kubernetes NetworkPolicies.
    #[serde(default)]
    pub rule_names: Vec<String>,
    /// Endpoints on this node the policy applies to.
    pub applied_to: Vec<String>,
    /// The policy is in dry-run ([`crate::model::DRY_RUN_ANNOTATION`]):
    /// evaluated, never enforced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// What the compiler resolved, for [`Ruleset::new`] to index. Rule ids
/// are positions in `rules`, endpoint ids positions in `endpoints`.
pub(crate) struct Parts<'a> {
    pub(crate) rules: Vec<CompiledRule>,
    /// Endpoints this node enforces for; the first is the local Node.
    pub(crate) endpoints: Vec<Endpoint>,
    /// Per endpoint, its ingress and egress rule lists.
    pub(crate) lists: Vec<[RuleLists; 2]>,
    /// Per endpoint, ingress then egress: the enforced Kubernetes
    /// NetworkPolicies that isolate it.
    pub(crate) isolated_by: Vec<[Vec<PolicyRef>; 2]>,
    /// The same for dry-run Kubernetes NetworkPolicies.
    pub(crate) dry_run_isolated_by: Vec<[Vec<Arc<PolicyRef>>; 2]>,
    /// Endpoint ids with their addresses. An address listed for two
    /// endpoints belongs to the later one.
    pub(crate) addresses: Vec<(u32, &'a [IpAddr])>,
    /// Named container ports of every Pod in the inventory, by address.
    pub(crate) named_ports: NamedPorts,
    /// Every endpoint of the inventory by name (`namespace/name` of a Pod
    /// or ExternalEntity, `node:name` of a Node) with its addresses.
    pub(crate) names: Names,
    /// Every distinct FQDN selector, indexed by [`PeerMatch::fqdns`].
    pub(crate) fqdn_patterns: Vec<FqdnPattern>,
    /// In effective-priority order.
    pub(crate) policies: Vec<Arc<PolicySummary>>,
    /// Namespaces whose Kubernetes NetworkPolicies are audited.
    pub(crate) logged_namespaces: BTreeSet<String>,
    /// The local Node's Pod address ranges and the addresses in them the
    /// inventory knows (see [`Enforced::ranges`]).
    pub(crate) ranges: Vec<IpNet>,
    pub(crate) known: Vec<IpAddr>,
    /// Ports of local endpoints published on the Node.
    pub(crate) published: Vec<Published>,
}

/// The endpoint id of the local Node (see [`Parts::endpoints`]).
const LOCAL_NODE: u32 = 0;

/// The compiled, immutable policy of a node. Cheap to share (`Arc`) and
/// swap; classification never blocks.
#[derive(Clone, Debug, Default)]
pub struct Ruleset {
    rules: Vec<CompiledRule>,
    endpoints: Vec<Endpoint>,
    endpoint_by_ip: HashMap<IpAddr, u32>,
    endpoint_tables: Vec<u32>,
    /// Shared with the ruleset a patch makes where no rule changed.
    tables: Vec<Arc<EndpointTable>>,
    /// Per endpoint, ingress then egress: the rule lists `tables` index.
    lists: Vec<[RuleLists; 2]>,
    /// Per endpoint, ingress then egress: the isolating K8s policies,
    /// enforced ones, then dry-run ones.
    isolated_by: Vec<[Vec<PolicyRef>; 2]>,
    dry_run_isolated_by: Vec<[Vec<Arc<PolicyRef>>; 2]>,
    local_node_endpoint: u32,
    /// Named container ports of every Pod in the inventory, by address.
    named_ports: NamedPorts,
    /// Every endpoint of the inventory by name, with its addresses.
    names: Names,
    fqdn_patterns: Vec<FqdnPattern>,
    enforced: Enforced,
    /// Shared: the summary of a policy placed on no local endpoint is the
    /// same object from one assembly to the next.
    policies: Vec<Arc<PolicySummary>>,
    /// Namespaces whose Kubernetes NetworkPolicies are audited.
    logged_namespaces: BTreeSet<String>,
    /// Ports of local endpoints published on the Node, with each
    /// endpoint's addresses.
    published: Vec<(Published, Vec<IpAddr>)>,
}

impl Ruleset {
    /// Indexes what the compiler resolved and works out what the datapath
    /// must enforce: the local Node's directions that have rules, and the
    /// addresses of the Pods that have any.
    pub(crate) fn new(parts: Parts<'_>) -> Ruleset {
        let (tables, endpoint_tables) = build_tables(&parts.lists, &parts.rules);
        let mut endpoint_by_ip = HashMap::new();
        let mut enforced = Enforced::default();
        let (mut pod_addresses, mut dry_run_addresses) = (BTreeSet::new(), BTreeSet::new());
        for &(endpoint, ips) in &parts.addresses {
            let table = &tables[endpoint_tables[endpoint as usize] as usize];
            if endpoint == LOCAL_NODE {
                enforced.node_ingress = !table.ingress.is_empty();
                enforced.node_egress = !table.egress.is_empty();
            } else if table.ingress.enforced || table.egress.enforced {
                pod_addresses.extend(ips.iter().copied());
            } else if !table.ingress.is_empty() || !table.egress.is_empty() {
                dry_run_addresses.extend(ips.iter().copied());
            }
            for ip in ips {
                endpoint_by_ip.insert(*ip, endpoint);
            }
        }
        enforced.endpoints = pod_addresses.into_iter().collect();
        enforced.dry_run_endpoints = dry_run_addresses.into_iter().collect();
        enforced.ranges = parts.ranges;
        enforced.known = parts.known;
        let addresses_of = |endpoint: u32| -> Vec<IpAddr> {
            parts
                .addresses
                .iter()
                .filter(|(e, _)| *e == endpoint)
                .flat_map(|(_, ips)| ips.iter().copied())
                .collect()
        };
        let mut published = Vec::new();
        for port in parts.published {
            let table = &tables[endpoint_tables[port.endpoint as usize] as usize];
            let key = (port.protocol, port.host);
            let list = if table.ingress.enforced || table.egress.enforced {
                &mut enforced.published
            } else {
                &mut enforced.dry_run_published
            };
            if (!table.ingress.is_empty() || !table.egress.is_empty()) && !list.contains(&key) {
                list.push(key);
            }
            let ips = addresses_of(port.endpoint);
            published.push((port, ips));
        }
        let enforced_ports = enforced.published.clone();
        enforced
            .dry_run_published
            .retain(|key| !enforced_ports.contains(key));
        for list in [&mut enforced.published, &mut enforced.dry_run_published] {
            list.sort_by_key(|(p, port)| (*port, *p as u8));
        }
        Ruleset {
            rules: parts.rules,
            endpoints: parts.endpoints,
            endpoint_by_ip,
            endpoint_tables,
            tables,
            lists: parts.lists,
            isolated_by: parts.isolated_by,
            dry_run_isolated_by: parts.dry_run_isolated_by,
            local_node_endpoint: LOCAL_NODE,
            named_ports: parts.named_ports,
            names: parts.names,
            fqdn_patterns: parts.fqdn_patterns,
            enforced,
            policies: parts.policies,
            logged_namespaces: parts.logged_namespaces,
            published,
        }
    }

    /// The ruleset with its verdicts cached in the kernel under `cache`
    /// (the agent stamps each ruleset it offers with its generation).
    pub fn with_verdict_cache(mut self, cache: VerdictCache) -> Ruleset {
        self.enforced.verdict_cache = Some(cache);
        self
    }

    /// This ruleset with the peer sets of `changed` selections replaced
    /// and the inventory's named ports and names: the rules that use them
    /// get the new sets and the index is built again; endpoints, lists and
    /// policies are the same.
    pub(crate) fn patched(
        &self,
        changed: &HashMap<Selection, Arc<AddressSet>>,
        named_ports: NamedPorts,
        names: Names,
    ) -> Ruleset {
        let rules: Vec<CompiledRule> = self
            .rules
            .iter()
            .map(|rule| {
                let mut rule = rule.clone();
                for (i, selection) in rule.peers.selections.iter().enumerate() {
                    if let Some(set) = changed.get(selection) {
                        rule.peers.addresses[i] = Arc::clone(set);
                    }
                }
                rule
            })
            .collect();
        // The lists are the same, so is each endpoint's table: only the
        // tables with a patched rule are built again.
        let patched: Vec<bool> = rules
            .iter()
            .map(|rule| {
                rule.peers
                    .selections
                    .iter()
                    .any(|s| changed.contains_key(s))
            })
            .collect();
        let mut lists_of: Vec<Option<&[RuleLists; 2]>> = vec![None; self.tables.len()];
        for (lists, &table) in self.lists.iter().zip(&self.endpoint_tables) {
            lists_of[table as usize].get_or_insert(lists);
        }
        let tables = self
            .tables
            .iter()
            .zip(lists_of)
            .map(|(table, lists)| match lists {
                Some(lists)
                    if lists
                        .iter()
                        .flat_map(RuleLists::rule_ids)
                        .any(|id| patched[id as usize]) =>
                {
                    Arc::new(EndpointTable::build(lists, &rules))
                }
                _ => Arc::clone(table),
            })
            .collect();
        Ruleset {
            rules,
            endpoints: self.endpoints.clone(),
            endpoint_by_ip: self.endpoint_by_ip.clone(),
            endpoint_tables: self.endpoint_tables.clone(),
            tables,
            lists: self.lists.clone(),
            isolated_by: self.isolated_by.clone(),
            dry_run_isolated_by: self.dry_run_isolated_by.clone(),
            local_node_endpoint: self.local_node_endpoint,
            named_ports,
            names,
            fqdn_patterns: self.fqdn_patterns.clone(),
            enforced: self.enforced.clone(),
            policies: self.policies.clone(),
            logged_namespaces: self.logged_namespaces.clone(),
            published: self.published.clone(),
        }
    }

    /// Whether the implicit default drop of a Kubernetes NetworkPolicy for
    /// `endpoint` is audited (its Namespace carries the annotation
    /// `networkpolicy.antrea.io/enable-logging: "true"`).
    pub fn logs_k8s_default_drop(&self, endpoint: &Endpoint) -> bool {
        match endpoint {
            Endpoint::Pod { namespace, .. } => self.logged_namespaces.contains(namespace),
            Endpoint::Node { .. } => false,
        }
    }

    pub fn enforced(&self) -> &Enforced {
        &self.enforced
    }

    /// Every distinct FQDN selector of every rule, in a stable order.
    pub fn fqdn_patterns(&self) -> &[FqdnPattern] {
        &self.fqdn_patterns
    }

    /// Every FQDN selector with each policy whose rules use it, as
    /// (`Kind:namespace/name` of the policy, selector) pairs, once each,
    /// by policy: whom resolving a name ahead serves.
    pub fn fqdn_owners(&self) -> Vec<(String, &FqdnPattern)> {
        let pairs: BTreeSet<(String, u32)> = self
            .rules
            .iter()
            .flat_map(|rule| {
                let owner = rule.reference.policy.to_string();
                rule.peers.fqdns.iter().map(move |&i| (owner.clone(), i))
            })
            .collect();
        pairs
            .into_iter()
            .filter_map(|(owner, i)| Some((owner, self.fqdn_patterns.get(i as usize)?)))
            .collect()
    }

    /// Policies sorted by effective priority (as `antctl get netpol
    /// --sort-by=effectivePriority`): Tier priority, policy priority, then
    /// Kubernetes NetworkPolicies before the baseline Tier.
    pub fn policies(&self) -> &[Arc<PolicySummary>] {
        &self.policies
    }

    /// [`Ruleset::policies`] as owned summaries, as `tollgate get
    /// policies` and the status socket hand them out.
    pub fn policy_summaries(&self) -> Vec<PolicySummary> {
        self.policies
            .iter()
            .map(|p| PolicySummary::clone(p))
            .collect()
    }

    /// Number of compiled rule instances (a rule applied to Namespaces with
    /// different `Self` contexts counts once per context).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// The reference of every compiled rule instance, in compilation order
    /// (a rule compiled for several `Self` contexts appears once each).
    pub fn rule_refs(&self) -> impl Iterator<Item = &RuleRef> {
        self.rules.iter().map(|rule| &*rule.reference)
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

    /// Addresses of the inventory endpoint `name`: `namespace/name` of a
    /// Pod or ExternalEntity, `node:name` of a Node.
    pub fn addresses_of(&self, name: &str) -> Option<&[IpAddr]> {
        self.names.addresses_of(name)
    }

    /// Every endpoint name of the inventory, as [`Ruleset::addresses_of`]
    /// takes them.
    pub fn endpoint_names(&self) -> impl Iterator<Item = &str> {
        self.names.keys()
    }

    /// The inventory endpoint an address belongs to, by name.
    pub fn name_of(&self, ip: IpAddr) -> Option<&str> {
        self.names.name_of(ip)
    }

    /// The FQDN selectors of the egress rules applied to the endpoint at
    /// `position` in [`Ruleset::endpoints`], in evaluation order, once each.
    pub fn egress_fqdn_patterns(&self, position: usize) -> Vec<&FqdnPattern> {
        let Some(&table) = self.endpoint_tables.get(position) else {
            return Vec::new();
        };
        let egress = &self.tables[table as usize].egress;
        let lists = [
            Some(&egress.antrea),
            egress.k8s.as_ref(),
            Some(&egress.baseline),
        ];
        let mut patterns: Vec<&FqdnPattern> = Vec::new();
        for id in lists.into_iter().flatten().flat_map(|list| list.rules()) {
            for &i in &self.rules[*id as usize].peers.fqdns {
                let pattern = &self.fqdn_patterns[i as usize];
                if !patterns.contains(&pattern) {
                    patterns.push(pattern);
                }
            }
        }
        patterns
    }

    /// The port a container of the Pod at `ip` names `name` for `protocol`.
    pub fn named_port(&self, ip: IpAddr, name: &str, protocol: PortProtocol) -> Option<u16> {
        self.named_ports.get(ip, name, protocol)
    }
}

#[cfg(test)]
impl Ruleset {
    /// Every rule's peer selections with their sets.
    pub(crate) fn peer_sets(&self) -> impl Iterator<Item = (&Selection, &Arc<AddressSet>)> {
        self.rules
            .iter()
            .flat_map(|r| r.peers.selections.iter().zip(&r.peers.addresses))
    }

    /// Everything the ruleset decides by, in a stable text form: two
    /// rulesets with the same fingerprint decide every flow alike.
    pub(crate) fn fingerprint(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for rule in &self.rules {
            let mut sets: Vec<String> = rule
                .peers
                .addresses
                .iter()
                .zip(&rule.peers.selections)
                .map(|(set, selection)| {
                    let ips: Vec<IpAddr> = set.iter().collect();
                    format!("{selection:?}={ips:?}")
                })
                .collect();
            sets.sort();
            writeln!(
                out,
                "rule {:?} any={} sets={sets:?} blocks={:?} fqdns={:?} services={:?} svc={:?} np={:?}",
                rule.reference,
                rule.peers.any,
                rule.peers.blocks,
                rule.peers.fqdns,
                rule.peers.services,
                rule.services,
                rule.node_ports
            )
            .unwrap();
        }
        writeln!(out, "endpoints {:?}", self.endpoints).unwrap();
        writeln!(out, "lists {:?}", self.lists).unwrap();
        for (endpoint, &table) in self.endpoint_tables.iter().enumerate() {
            let table = self.tables[table as usize].fingerprint();
            writeln!(out, "table {endpoint} {table}").unwrap();
        }
        writeln!(out, "isolated {:?}", self.isolated_by).unwrap();
        writeln!(out, "dry-run isolated {:?}", self.dry_run_isolated_by).unwrap();
        writeln!(out, "published {:?}", self.published).unwrap();
        let by_ip: std::collections::BTreeMap<_, _> = self.endpoint_by_ip.iter().collect();
        writeln!(out, "by_ip {by_ip:?}").unwrap();
        writeln!(out, "enforced {:?}", self.enforced).unwrap();
        writeln!(out, "policies {:?}", self.policies).unwrap();
        writeln!(out, "logged {:?}", self.logged_namespaces).unwrap();
        writeln!(out, "fqdn {:?}", self.fqdn_patterns).unwrap();
        writeln!(out, "names {}", self.names.fingerprint()).unwrap();
        writeln!(out, "ports {}", self.named_ports.fingerprint()).unwrap();
        out
    }
}
