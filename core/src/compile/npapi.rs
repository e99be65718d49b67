//! The network-policy-api kinds (AdminNetworkPolicy,
//! BaselineAdminNetworkPolicy, `v1alpha2` ClusterNetworkPolicy): the
//! subject resolved to local Pods, peers to addresses (`namespaces`,
//! `pods`, `nodes` — the Nodes' addresses —, `networks` as blocks,
//! `domainNames` as FQDN selectors learned by DNS snooping), ports and
//! named ports to match entries, and each rule appended to the list of the
//! Pods it applies to: the Antrea Tiers' list for the Admin tier (where the
//! compiler's order puts it), the baseline list for the Baseline tier.
//! Never orders policies itself (`priority.rs` does: it hands them over a
//! group sharing a priority at a time), never decides a flow.

use std::collections::BTreeMap;
use std::sync::Arc;

use litemap::LiteMap;

use crate::fqdn::FqdnPattern;
use crate::model::{
    parse_cidr, Direction, LabelSelector, NamespaceMatch, NpKind, NpPeer, NpPolicy, NpPortMatch,
    NpTier, PortProtocol,
};
use crate::ruleset::ServiceMatch;
use crate::ruleset::{
    Block, CompiledRule, Endpoint, PeerMatch, PolicyKind, PolicyRef, PolicySummary, RuleRef,
};
use crate::selection::{NamespaceScope, Selection};

use super::inventory::PodIdx;
use super::k8s::K8S_LOGGING_ANNOTATION;
use super::priority::interleave;
use super::{Compiler, List, Target};

/// The policy kind an [`NpKind`] is reported as.
pub(super) fn policy_kind(kind: NpKind) -> PolicyKind {
    match kind {
        NpKind::AdminNetworkPolicy => PolicyKind::AdminNetworkPolicy,
        NpKind::BaselineAdminNetworkPolicy => PolicyKind::BaselineAdminNetworkPolicy,
        NpKind::ClusterNetworkPolicy => PolicyKind::ClusterNetworkPolicy,
    }
}

/// The name a rule is reported under: its own, else `ingress[N]` /
/// `egress[N]` (the API generates none).
fn rule_name(name: Option<&str>, direction: Direction, index: usize) -> String {
    match name.filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => format!("{}[{index}]", direction.as_str().to_ascii_lowercase()),
    }
}

/// The Antrea Tier priority an Admin-tier ClusterNetworkPolicy is
/// evaluated at; the other kinds have none (they sit outside the Tiers).
fn tier_priority(policy: &NpPolicy<'_>) -> Option<i32> {
    (policy.kind == NpKind::ClusterNetworkPolicy && policy.tier == NpTier::Admin)
        .then_some(crate::model::CNP_ADMIN_TIER_PRIORITY)
}

/// What every rule of one policy shares while the rules of its group are
/// added.
struct NpState {
    reference: PolicyRef,
    /// The subject's local endpoints.
    subject: Vec<u32>,
    /// Whether the policy's rules are audited.
    logged: bool,
}

impl Compiler<'_> {
    /// Adds `group`, policies of one kind and tier that share a priority,
    /// in name order, their rules interleaved by index ([`interleave`]),
    /// as Antrea orders the rules it translates them into.
    pub(super) fn add_np_policies(&mut self, group: &[NpPolicy<'_>]) {
        let states: Vec<NpState> = group
            .iter()
            .map(|policy| NpState {
                reference: PolicyRef {
                    kind: policy_kind(policy.kind),
                    namespace: None,
                    name: policy.name.to_string(),
                },
                subject: self
                    .np_subject_pods(policy)
                    .into_iter()
                    .filter_map(|p| self.endpoint_of_target.get(&Target::Pod(p)).copied())
                    .collect(),
                // No field turns on audit logging in this API: the
                // annotation Antrea reads on Namespaces for K8s
                // NetworkPolicies, here on the policy object itself.
                logged: policy
                    .metadata
                    .annotations
                    .get(K8S_LOGGING_ANNOTATION)
                    .is_some_and(|v| v == "true"),
            })
            .collect();
        let counts: Vec<[usize; 2]> = group
            .iter()
            .map(|p| {
                [
                    p.rules(Direction::Ingress).len(),
                    p.rules(Direction::Egress).len(),
                ]
            })
            .collect();
        for (at, direction, index) in interleave(&counts) {
            self.add_np_rule(&group[at], &states[at], direction, index);
        }
        for (policy, state) in group.iter().zip(states) {
            let rule_names: Vec<String> = [Direction::Ingress, Direction::Egress]
                .into_iter()
                .flat_map(|direction| {
                    policy
                        .rules(direction)
                        .iter()
                        .enumerate()
                        .map(move |(index, rule)| rule_name(rule.name, direction, index))
                })
                .collect();
            self.policies.push(Arc::new(PolicySummary {
                policy: state.reference,
                tier: Some(policy.tier.as_str().to_string()),
                tier_priority: tier_priority(policy),
                priority: policy.priority.map(f64::from),
                rules: rule_names.len(),
                rule_names,
                applied_to: state
                    .subject
                    .into_iter()
                    .map(|e| self.endpoints[e as usize].to_string())
                    .collect(),
                dry_run: policy.metadata.dry_run(),
            }));
        }
    }

    /// Adds rule `index` of `direction` of `policy` to the lists of its
    /// subject's endpoints.
    fn add_np_rule(
        &mut self,
        policy: &NpPolicy<'_>,
        state: &NpState,
        direction: Direction,
        index: usize,
    ) {
        let Some(rule) = policy.rules(direction).get(index) else {
            return;
        };
        let rank = self.next_rank();
        if state.subject.is_empty() {
            // Applies on other Nodes only (ranked all the same).
            return;
        }
        let reference = Arc::new(RuleRef {
            policy: state.reference.clone(),
            tier: Some(policy.tier.as_str().to_string()),
            tier_priority: tier_priority(policy),
            policy_priority: policy.priority.map(f64::from),
            name: Some(rule_name(rule.name, direction, index)),
            index,
            direction,
            action: rule.action.rule_action(),
            enable_logging: state.logged,
            log_label: None,
            rank,
            l7: Arc::new([]),
            dry_run: policy.metadata.dry_run(),
        });
        // One instance per subject Namespace when peers depend on it
        // (`sameLabels` / `notSameLabels`), else one for all; none without
        // a local subject (no names to learn then).
        let mut contexts: BTreeMap<Option<String>, Vec<u32>> = BTreeMap::new();
        let context_dependent = rule.peers.iter().any(NpPeer::depends_on_namespace);
        for &endpoint in &state.subject {
            let context = match &self.endpoints[endpoint as usize] {
                Endpoint::Pod { namespace, .. } if context_dependent => Some(namespace.clone()),
                _ => None,
            };
            contexts.entry(context).or_default().push(endpoint);
        }
        for (context, endpoints) in contexts {
            let peers = self.resolve_np_peers(rule.peers, context.as_deref());
            let id = self.append(CompiledRule {
                reference: reference.clone(),
                peers,
                services: np_services(rule.ports.as_deref()),
                node_ports: None,
            });
            let list = match policy.tier {
                NpTier::Admin => List::Tiered,
                NpTier::Baseline => List::Baseline,
            };
            for endpoint in endpoints {
                self.enlist(id, endpoint, direction, list);
            }
        }
    }

    /// The Pods a `subject` selects (never the Node: subjects are Pods).
    fn np_subject_pods(&self, policy: &NpPolicy<'_>) -> Vec<PodIdx> {
        let subject = policy.subject;
        match (&subject.namespaces, &subject.pods) {
            (Some(namespaces), _) => {
                let names = self.inv.namespaces_matching(namespaces);
                self.inv.pods_matching(None, Some(&names))
            }
            (None, Some(pods)) => {
                let names = self.inv.namespaces_matching(&pods.namespace_selector);
                self.inv
                    .pods_matching(Some(&pods.pod_selector), Some(&names))
            }
            (None, None) => Vec::new(),
        }
    }

    /// Resolves peers; `context` is the subject's Namespace, for
    /// `sameLabels` / `notSameLabels`.
    fn resolve_np_peers(&mut self, peers: &[NpPeer], context: Option<&str>) -> PeerMatch {
        let mut result = PeerMatch::default();
        for peer in peers {
            if let Some(networks) = &peer.networks {
                for cidr in networks.iter().filter_map(|c| parse_cidr(c)) {
                    result.blocks.push(Block::new(cidr, &[]));
                }
                continue;
            }
            if let Some(names) = &peer.domain_names {
                for name in names {
                    // `*.` is one or more whole labels: Antrea's `*`
                    // pattern means the same once the API's pattern has
                    // admitted the name (a `*` only as the first label).
                    let pattern = FqdnPattern::new(name);
                    let next = self.fqdn_patterns.len() as u32;
                    let id = *self.fqdn_patterns.entry(pattern).or_insert(next);
                    result.fqdns.push(id);
                }
                continue;
            }
            let context = context.filter(|_| peer.depends_on_namespace());
            let selection = match &peer.nodes {
                Some(nodes) => Some(Selection::Nodes(nodes.clone())),
                None => match peer.namespace_match() {
                    Some(Some(namespaces)) => {
                        self.np_namespaces(namespaces, context)
                            .map(|scope| Selection::Pods {
                                namespaces: scope,
                                pods: peer.pods.as_ref().map(|p| p.pod_selector.clone()),
                            })
                    }
                    _ => None, // refused by validation
                },
            };
            // A peer that selects nothing adds no address.
            if let Some(selection) = selection {
                self.add_selection(&mut result, selection);
            }
        }
        result
    }

    /// The Namespaces a peer selects, seen from the subject's Namespace
    /// `context` (none for a selector; `sameLabels` without a context or
    /// whose keys the context lacks selects nothing, `notSameLabels` then
    /// selects every Namespace).
    fn np_namespaces(
        &self,
        selection: NamespaceMatch<'_>,
        context: Option<&str>,
    ) -> Option<NamespaceScope> {
        let own = context.and_then(|ns| self.inv.namespace_labels(ns));
        let same = |keys: &[String]| -> Option<LabelSelector> {
            let own = own?;
            let pairs = keys
                .iter()
                .map(|k| Some((k.clone(), own.get(k)?.clone())))
                .collect::<Option<LiteMap<_, _>>>()?;
            Some(LabelSelector {
                match_labels: pairs,
                match_expressions: Vec::new(),
            })
        };
        match selection {
            NamespaceMatch::Selector(selector) => Some(NamespaceScope::Selector(selector.clone())),
            NamespaceMatch::SameLabels(keys) => same(keys).map(NamespaceScope::Selector),
            NamespaceMatch::NotSameLabels(keys) => match same(keys) {
                Some(s) => {
                    let excluded = self.inv.namespaces_matching(&s);
                    let all = self.inv.namespaces_matching(&LabelSelector::default());
                    Some(NamespaceScope::names(
                        all.into_iter().filter(|n| !excluded.contains(n)),
                    ))
                }
                None => Some(NamespaceScope::All),
            },
        }
    }
}

/// `ports` / `protocols` as match entries; `None` is every port of every
/// protocol. A named port has no protocol in this API: it matches the
/// destination Pod's port of that name in whichever protocol it declares.
fn np_services(ports: Option<&[NpPortMatch]>) -> Vec<ServiceMatch> {
    let mut services = Vec::new();
    for port in ports.unwrap_or_default() {
        match port {
            NpPortMatch::Ports {
                protocol,
                first,
                last,
            } => {
                let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                    continue; // refused by validation
                };
                services.push(ServiceMatch::Ports {
                    protocol: *protocol,
                    first,
                    last,
                    source: None,
                });
            }
            NpPortMatch::Named(name) => {
                for protocol in [PortProtocol::Tcp, PortProtocol::Udp, PortProtocol::Sctp] {
                    services.push(ServiceMatch::Named {
                        protocol,
                        name: name.clone(),
                        source: None,
                    });
                }
            }
            NpPortMatch::Empty => {}
        }
    }
    services
}
