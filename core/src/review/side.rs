//! One side of a review: a snapshot compiled for every Node it names, as
//! each Node's agent would compile it, and the decision of a flow across
//! the cluster — the source's egress by the ruleset of the Node it runs
//! on, the destination's ingress by its own Node's, combined as
//! [`Decision::of`] combines them. Every verdict comes from
//! [`Ruleset::classify`]; nothing here matches a rule.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::compile::{compile, LocalNode};
use crate::fqdn::FqdnLookup;
use crate::model::{Direction, L7Protocol, Object, Snapshot};
use crate::packet::flow::{Flow, Verdict};
use crate::ruleset::{Decision, DirectionDecision, Outcome, PolicyRef, RuleRef, Ruleset};

/// A Node of a side and the ruleset its agent would enforce.
pub(crate) struct Host {
    pub name: String,
    pub ruleset: Ruleset,
}

/// An endpoint of the inventory, by name: what `get matrix` groups by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointInfo {
    pub addresses: Vec<IpAddr>,
    /// `None` for a Node.
    pub namespace: Option<String>,
    pub labels: crate::model::Labels,
}

/// One side of a review (the policies before or after a change, or the
/// running agent's): its snapshot compiled for every Node.
pub struct Side {
    /// The default Node first: the one the side was described for, where
    /// Pods without `nodeName` run.
    pub(crate) hosts: Vec<Host>,
    /// Which host enforces for an address.
    pub(crate) host_of: HashMap<IpAddr, usize>,
    /// Every endpoint of the inventory by name (`namespace/name`,
    /// `node:NAME`).
    pub(crate) endpoints: BTreeMap<String, EndpointInfo>,
}

/// How a side decides a flow, as the review reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Verdicts {
    pub verdict: Verdict,
    /// When allowed subject to L7 rules: each deciding rule's
    /// `l7Protocols` (every request must satisfy each entry).
    pub l7: Vec<Arc<[L7Protocol]>>,
    /// The deciding rule, `isolated by …`, or `None` when no policy
    /// decides (allowed).
    pub rule: Option<String>,
}

impl Verdicts {
    /// Whether two sides decide alike: same verdict, same L7 constraints
    /// (the deciding rule may differ).
    pub fn same_effect(&self, other: &Verdicts) -> bool {
        self.verdict == other.verdict && self.l7 == other.l7
    }
}

impl Side {
    /// Compiles `snapshot` for `local` (the default Node: Pods without
    /// `nodeName` run there, and its labels and addresses are the local
    /// Node's) and for every other Node the inventory names (Node objects,
    /// Pods' `nodeName`, ExternalEntities' `externalNode`).
    pub fn compile(snapshot: &Snapshot, local: &LocalNode) -> Side {
        let mut names: BTreeSet<String> = BTreeSet::new();
        for object in snapshot.iter() {
            let name = match object {
                Object::Node(node) => Some(node.metadata.name.as_str()),
                Object::Pod(pod) => pod.spec.node_name.as_deref(),
                Object::ExternalEntity(ee) => ee.spec.external_node.as_deref(),
                _ => None,
            };
            names.extend(name.filter(|n| !n.is_empty()).map(str::to_string));
        }
        names.remove(&local.name);
        let scheduled;
        let snapshot = if names.is_empty() {
            snapshot
        } else {
            // With several Nodes, a Pod without `nodeName` runs on the
            // default one only (each agent would enforce it otherwise).
            let mut copy = snapshot.clone();
            for sourced in &mut copy.objects {
                if let Object::Pod(pod) = Arc::make_mut(&mut sourced.object) {
                    if pod.spec.node_name.as_deref().is_none_or(str::is_empty) {
                        pod.spec.node_name = Some(local.name.clone());
                    }
                }
            }
            scheduled = copy;
            &scheduled
        };
        let mut hosts = vec![Host {
            name: local.name.clone(),
            ruleset: compile(snapshot, local),
        }];
        for name in names {
            let node = LocalNode {
                name: name.clone(),
                ..LocalNode::default()
            };
            hosts.push(Host {
                name,
                ruleset: compile(snapshot, &node),
            });
        }
        let mut host_of = HashMap::new();
        for (i, host) in hosts.iter().enumerate() {
            for ip in host.ruleset.endpoint_addresses() {
                host_of.entry(ip).or_insert(i);
            }
        }
        let endpoints = endpoints(snapshot, &hosts);
        Side {
            hosts,
            host_of,
            endpoints,
        }
    }

    /// Every endpoint of the inventory by name.
    pub fn endpoints(&self) -> &BTreeMap<String, EndpointInfo> {
        &self.endpoints
    }

    /// The ruleset enforcing for `ip`, if any Node enforces for it.
    pub(crate) fn ruleset_of(&self, ip: IpAddr) -> Option<(usize, &Ruleset)> {
        let &host = self.host_of.get(&ip)?;
        Some((host, &self.hosts[host].ruleset))
    }

    /// Every ruleset of the side.
    pub(crate) fn rulesets(&self) -> impl Iterator<Item = &Ruleset> {
        self.hosts.iter().map(|h| &h.ruleset)
    }

    /// The decision on `flow` across the cluster, with the K8s policies
    /// isolating each side (egress, ingress) for reporting.
    fn decision(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> (Decision, [Vec<PolicyRef>; 2]) {
        let src = self.ruleset_of(flow.src);
        let dst = self.ruleset_of(flow.dst);
        match (src, dst) {
            (Some((a, from)), Some((b, to))) if a != b => {
                let egress = from.classify(flow, fqdn);
                let ingress = to.classify(flow, fqdn);
                let isolated = [
                    from.isolating(flow)[0].to_vec(),
                    to.isolating(flow)[1].to_vec(),
                ];
                let key_only = egress.key_only && ingress.key_only;
                (
                    Decision::of(egress.egress, ingress.ingress, key_only),
                    isolated,
                )
            }
            (Some((_, one)), _) | (None, Some((_, one))) => {
                let [e, i] = one.isolating(flow);
                (one.classify(flow, fqdn), [e.to_vec(), i.to_vec()])
            }
            (None, None) => (
                self.hosts[0].ruleset.classify(flow, fqdn),
                [Vec::new(), Vec::new()],
            ),
        }
    }

    /// How the side decides `flow`: verdict, L7 constraints and the
    /// deciding rule.
    pub fn decide(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Verdicts {
        let (decision, isolated) = self.decision(flow, fqdn);
        let deciding = decision.deciding();
        let isolated_by = match deciding.direction {
            Direction::Egress => &isolated[0],
            Direction::Ingress => &isolated[1],
        };
        Verdicts {
            verdict: decision.verdict,
            rule: describe(deciding, isolated_by),
            l7: decision.l7,
        }
    }

    /// How one direction of `flow` is decided: by the ruleset of the Node
    /// enforcing for its source (egress) or destination (ingress).
    pub(crate) fn direction(
        &self,
        flow: &Flow,
        fqdn: &dyn FqdnLookup,
        direction: Direction,
    ) -> (Verdict, Option<Arc<[L7Protocol]>>) {
        let owner = match direction {
            Direction::Egress => flow.src,
            Direction::Ingress => flow.dst,
        };
        let Some((_, ruleset)) = self.ruleset_of(owner) else {
            return (Verdict::Allow, None);
        };
        let decision = ruleset.classify(flow, fqdn);
        let d = match direction {
            Direction::Egress => &decision.egress,
            Direction::Ingress => &decision.ingress,
        };
        let l7 = d.rule().filter(|r| !r.l7.is_empty()).map(|r| r.l7.clone());
        (d.verdict(), l7)
    }
}

/// `Kind:namespace/name rule NAME (tier T)`; a Kubernetes rule, which has
/// no name, by its direction and position (`ingress[0]`).
pub fn rule_text(rule: &RuleRef) -> String {
    let name = rule.name.clone().unwrap_or_else(|| {
        format!(
            "{}[{}]",
            rule.direction.as_str().to_ascii_lowercase(),
            rule.index
        )
    });
    match &rule.tier {
        Some(tier) => format!("{} rule {name} (tier {tier})", rule.policy),
        None => format!("{} rule {name}", rule.policy),
    }
}

/// What decided one direction, for the report; `None` when no policy did.
fn describe(d: &DirectionDecision, isolated_by: &[PolicyRef]) -> Option<String> {
    let passed = d
        .passed_by
        .as_ref()
        .map(|pass| format!("passed by {}", rule_text(pass)));
    match &d.outcome {
        Outcome::Rule { rule } => Some(rule_text(rule)),
        Outcome::K8sDefaultDeny => Some(format!(
            "isolated by {}",
            isolated_by
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Outcome::NodeToLocalPod => Some("the Node to its own Pod (always allowed)".to_string()),
        Outcome::NotEnforced | Outcome::NoRuleMatched => {
            passed.map(|p| format!("{p}; no rule below matched"))
        }
    }
}

/// The inventory's endpoints by name, with the addresses the rulesets
/// give them (a Node's as its own ruleset knows them: configured
/// addresses and ExternalEntity interfaces included).
fn endpoints(snapshot: &Snapshot, hosts: &[Host]) -> BTreeMap<String, EndpointInfo> {
    let mut out: BTreeMap<String, EndpointInfo> = BTreeMap::new();
    for (name, ips) in hosts[0].ruleset.inventory_names() {
        out.entry(name.to_string()).or_default().addresses = ips.to_vec();
    }
    for host in hosts {
        let key = format!("node:{}", host.name);
        if let Some(ips) = host.ruleset.addresses_of(&key) {
            out.entry(key).or_default().addresses = ips.to_vec();
        }
    }
    for object in snapshot.iter() {
        let (key, namespace, labels) = match object {
            Object::Pod(pod) => (
                format!("{}/{}", pod.namespace(), pod.metadata.name),
                Some(pod.namespace().to_string()),
                &pod.metadata.labels,
            ),
            Object::ExternalEntity(ee) => (
                format!("{}/{}", ee.namespace(), ee.metadata.name),
                Some(ee.namespace().to_string()),
                &ee.metadata.labels,
            ),
            Object::Node(node) => (
                format!("node:{}", node.metadata.name),
                None,
                &node.metadata.labels,
            ),
            _ => continue,
        };
        if let Some(info) = out.get_mut(&key) {
            info.namespace = namespace;
            info.labels = labels.clone();
        }
    }
    out
}
